"""Headless Chromium (Debian's package) driven by Playwright, for the tests of pages that are the
product: the Snakemake report and the MLflow UI.

Without Chromium or Playwright the calling test skips, saying which is missing; in CI
(`CI=true` with `REQUIRE_BROWSER=1`, as `.ci/run` sets) it fails instead, so that a missing
browser cannot pass as skips. `scripts/install-browser.sh` installs Chromium.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
# As root and on a machine without a network: no sandbox, no background connections.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _missing() -> str | None:
    if shutil.which(CHROMIUM) is None:
        return f"no Chromium at {CHROMIUM} (bash scripts/install-browser.sh)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright is not installed (bash scripts/install.sh)"
    return None


@contextmanager
def browser_page() -> Iterator:
    """A Playwright page of a fresh headless Chromium."""
    reason = _missing()
    if reason is not None:
        if os.environ.get("CI") == "true" and os.environ.get("REQUIRE_BROWSER") == "1":
            pytest.fail(f"CI=true and REQUIRE_BROWSER=1, but {reason}")
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            yield browser.new_page()
        finally:
            browser.close()
