#!/usr/bin/env bash
# Headless Chromium for the tests of the pages the project makes (the Snakemake report, the
# MLflow UI): Debian's package, installed when missing and this shell may (root or sudo).
# Playwright, which drives it, comes with the test tools (scripts/install.sh).
set -euo pipefail
if command -v chromium >/dev/null; then
  exit 0
fi
if [ "$(id -u)" = 0 ]; then
  sudo=""
elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
  sudo="sudo"
else
  echo "install-browser.sh: chromium is missing and this user cannot install packages; the" \
       "browser tests will say so and skip" >&2
  exit 1
fi
if ! command -v apt-get >/dev/null; then
  echo "install-browser.sh: no apt-get here; install Chromium as /usr/bin/chromium (or set CHROMIUM)" >&2
  exit 1
fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends chromium >/dev/null
command -v chromium
