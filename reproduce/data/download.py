"""Downloads that survive interruptions: streamed, resumed with HTTP Range, retried with backoff,
verified against sha256, and renamed into place only when complete.

Partial data lives in ``<name>.part``; a file whose checksum does not match is moved aside to
``<name>.corrupt`` and never reused. ``file:`` URLs (``file:///abs`` or ``file:relative``) go
through the same copy-and-verify path, so the tiny corpus exercises the code WMT14 uses.
"""

from __future__ import annotations

import hashlib
import http.client
import logging
import shutil
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from tqdm import tqdm

from reproduce.config import Source

log = logging.getLogger(__name__)

CHUNK_BYTES = 1 << 20
LOG_EVERY_BYTES = 256 << 20


class DownloadError(RuntimeError):
    """A download failed for good (after retries) or its content is not what was declared."""


def file_name(url: str) -> str:
    """The local name of a download: the URL's last path component."""
    return url.rstrip("/").rsplit("/", 1)[-1].removeprefix("file:")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for chunk in iter(lambda: stream.read(CHUNK_BYTES), b""):
            digest.update(chunk)
    return digest.hexdigest()


def download_source(
    source: Source,
    download_dir: Path,
    mirror_dir: Path | None = None,
    attempts: int = 5,
    backoff_seconds: float = 2.0,
) -> Path:
    """Fetch ``source.url`` into ``download_dir`` (or take it from ``mirror_dir``) and verify it."""
    download_dir.mkdir(parents=True, exist_ok=True)
    target = download_dir / file_name(source.url)
    if target.exists() and _verified(target, source):
        log.info("%s: already downloaded", target)
        return target
    partial = target.with_name(target.name + ".part")
    mirrored = mirror_dir / target.name if mirror_dir is not None else None
    if mirrored is not None and mirrored.exists():
        log.info("%s: copying from mirror %s", target, mirrored)
        shutil.copyfile(mirrored, partial)
    elif source.url.startswith("file:"):
        shutil.copyfile(_local_path(source.url), partial)
    else:
        _fetch_with_retries(source.url, partial, attempts, backoff_seconds)
    if not _verified(partial, source):
        corrupt = target.with_name(target.name + ".corrupt")
        partial.replace(corrupt)
        raise DownloadError(
            f"{source.url}: sha256 mismatch for {target}: expected {source.sha256}, "
            f"got {sha256_of(corrupt)}; the file was moved aside to {corrupt}"
        )
    partial.replace(target)
    return target


def _local_path(url: str) -> Path:
    path = Path(url.removeprefix("file://") if url.startswith("file://") else url.removeprefix("file:"))
    if not path.exists():
        raise DownloadError(f"{url}: no such file {path.resolve()}")
    return path


def _verified(path: Path, source: Source) -> bool:
    return source.sha256 is None or sha256_of(path) == source.sha256


def _fetch_with_retries(url: str, partial: Path, attempts: int, backoff_seconds: float) -> None:
    for attempt in range(1, attempts + 1):
        try:
            _fetch(url, partial)
            return
        except (urllib.error.URLError, http.client.HTTPException, OSError, _Truncated) as error:
            if isinstance(error, urllib.error.HTTPError) and error.code < 500 and error.code != 429:
                raise DownloadError(f"{url}: HTTP {error.code} {error.reason}") from None
            if attempt == attempts:
                raise DownloadError(f"{url}: failed after {attempts} attempts: {error}") from None
            delay = backoff_seconds * 2 ** (attempt - 1)
            log.warning("%s: %s; retrying in %.1f s (attempt %d/%d)", url, error, delay, attempt, attempts)
            time.sleep(delay)


class _Truncated(Exception):
    """The server closed the connection before sending the announced length."""


def _fetch(url: str, partial: Path) -> None:
    """One attempt: continue ``partial`` from its current size when the server allows it."""
    offset = partial.stat().st_size if partial.exists() else 0
    request = urllib.request.Request(url, headers={"Range": f"bytes={offset}-"} if offset else {})
    try:
        response = urllib.request.urlopen(request, timeout=60)
    except urllib.error.HTTPError as error:
        if error.code == 416 and offset:  # already complete
            return
        raise
    with response:
        if offset and response.status != 206:
            offset = 0  # the server ignored the Range header: start again
        length = response.headers.get("Content-Length")
        expected = offset + int(length) if length is not None else None
        with partial.open("ab" if offset else "wb") as stream, _progress(url, expected, offset) as bar:
            received = offset
            for chunk in iter(lambda: response.read(CHUNK_BYTES), b""):
                stream.write(chunk)
                received += len(chunk)
                bar.update(len(chunk))
                if bar.disable and received // LOG_EVERY_BYTES != (received - len(chunk)) // LOG_EVERY_BYTES:
                    log.info("%s: %d MiB", url, received >> 20)
    if expected is not None and received < expected:
        raise _Truncated(f"received {received} of {expected} bytes")


def _progress(url: str, total: int | None, initial: int) -> tqdm:
    return tqdm(
        total=total, initial=initial, unit="B", unit_scale=True, desc=file_name(url),
        disable=not sys.stderr.isatty(),
    )
