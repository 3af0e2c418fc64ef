"""Downloads that are complete or absent: streamed, resumed with HTTP Range, retried with backoff,
verified against their length and sha256, and renamed into place only when verified.

* A body is accepted only when its length is known and reached (``Content-Length``, or the total
  of a ``206``'s ``Content-Range``), or, where the server sends no length, when the declared
  sha256 matches; without either the download is refused.
* A download resumes only with ``If-Range`` set to the validator (``ETag`` or
  ``Last-Modified``) its first response carried, kept in ``<name>.part.validator``, so a file
  changed on the server since comes back whole instead of being appended to the old start; and
  the ``206`` must start exactly where the ``.part`` ends, else the download restarts from zero.
* Each download is keyed by its source (the full URL and the declared sha256), so two sources
  whose URLs end in the same file name never share a file, and a file is verified against the
  checksum of the source that asked for it.
* Query strings (``?token=...``) and credentials never reach file names, logs or errors;
  credentials in the URL (``user:password@``) are sent as Basic authentication.
* A download ends: within ``data.download.deadline_minutes`` (retries included), else it stops
  with one line and keeps its ``.part`` for the next run to resume; and an attempt that averages
  less than ``data.download.min_rate_bytes_per_second`` over ``min_rate_window_seconds`` is
  retried, so that a server trickling bytes cannot hold it (:class:`_Pace`).

Partial data lives in ``<name>.part``; a file whose checksum does not match is moved aside to
``<name>.corrupt`` and never reused. ``file:`` URLs (``file:///abs`` or ``file:relative``) go
through the same copy-and-verify path, so the tiny corpus exercises the code WMT14 uses.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import http.client
import logging
import re
import shutil
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from tqdm import tqdm

from reproduce.config import DownloadLimits, Source, url_file_name
from reproduce.errors import ReproduceError, UnwritableOutputError

log = logging.getLogger(__name__)

CHUNK_BYTES = 1 << 20
LOG_EVERY_BYTES = 256 << 20
READ_TIMEOUT_SECONDS = 60.0  # the longest wait for one read, whatever the rate window
_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+)$")
_unchecked_sources: set[str] = set()


class DownloadError(ReproduceError):
    """A download failed for good (after retries) or its content is not what was declared."""


def display_url(url: str) -> str:
    """``url`` without its query, fragment and credentials: what may appear in logs and errors."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urllib.parse.urlunsplit((parts.scheme, host, parts.path, "", ""))


def file_name(source: Source) -> str:
    """The local name of ``source``'s download: ``<url file name>.<12 hex digits>``, the digits
    keyed by what names the file's content (:meth:`reproduce.config.Source.identity`): its
    declared sha256, else its full URL. Distinct files never share a name, and a pinned file
    whose URL moves keeps its download."""
    key = hashlib.sha256((source.sha256 or source.url).encode()).hexdigest()[:12]
    return f"{url_file_name(source.url)}.{key}"


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
    limits: DownloadLimits = DownloadLimits(),  # noqa: B008 (frozen: one shared default is safe)
) -> Path:
    """Fetch ``source.url`` into ``download_dir`` (or take it from ``mirror_dir``) and verify it,
    within ``limits``."""
    shown = display_url(source.url)
    if source.sha256 is None and source.url not in _unchecked_sources:
        _unchecked_sources.add(source.url)
        log.warning("source %r (%s) declares no sha256: only its length can be verified",
                    source.name, shown)
    download_dir.mkdir(parents=True, exist_ok=True)
    target = download_dir / file_name(source)
    if target.exists() and _verified(target, source):
        log.info("%s: already downloaded", target)
        return target
    partial = target.with_name(target.name + ".part")
    mirrored = mirror_dir / url_file_name(source.url) if mirror_dir is not None else None
    length_known = True
    if mirrored is not None and mirrored.exists():
        log.info("%s: copying from mirror %s", target, mirrored)
        _copy(mirrored, partial, target)
    elif source.url.startswith("file:"):
        _copy(_local_path(source.url), partial, target)
    else:
        length_known = _fetch_with_retries(source.url, partial, attempts, backoff_seconds,
                                           _Pace(limits))
    if not length_known and source.sha256 is None:
        _discard(partial)
        raise DownloadError(
            f"{shown}: the server sent no Content-Length and source {source.name!r} declares no "
            f"sha256, so the download cannot be verified complete; declare its sha256"
        )
    if not _verified(partial, source):
        corrupt = target.with_name(target.name + ".corrupt")
        partial.replace(corrupt)
        _validator_path(partial).unlink(missing_ok=True)
        raise DownloadError(
            f"{shown}: sha256 mismatch for {target}: expected {source.sha256}, "
            f"got {sha256_of(corrupt)}; the file was moved aside to {corrupt}"
        )
    partial.replace(target)
    _validator_path(partial).unlink(missing_ok=True)
    return target


def _copy(origin: Path, partial: Path, target: Path) -> None:
    """Copy into ``partial``; a full disk names ``target`` (shutil's error names the file copied
    from)."""
    try:
        shutil.copyfile(origin, partial)
    except OSError as error:
        if error.errno not in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
            raise
        _discard(partial)
        raise UnwritableOutputError(target, error) from None


def _local_path(url: str) -> Path:
    path = Path(url.removeprefix("file://") if url.startswith("file://")
                else url.removeprefix("file:"))
    if not path.is_file():
        raise DownloadError(f"{url}: no such file {path.resolve()}")
    return path


def _verified(path: Path, source: Source) -> bool:
    return source.sha256 is None or sha256_of(path) == source.sha256


def _fetch_with_retries(url: str, partial: Path, attempts: int, backoff_seconds: float,
                        pace: _Pace) -> bool:
    """Fetch until complete; True when the body's length was known and reached."""
    shown = display_url(url)
    for attempt in range(1, attempts + 1):
        try:
            pace.check_deadline()
            return _fetch(url, partial, pace)
        except _PastDeadline as error:
            kept = partial.stat().st_size if partial.exists() else 0
            raise DownloadError(f"{shown}: {error}; {kept} bytes so far, kept in {partial} for"
                                " the next run to resume (never used unverified)") from None
        except (urllib.error.URLError, http.client.HTTPException, OSError, _Incomplete,
                _TooSlow) as error:
            reason = _describe(error)
            if isinstance(error, urllib.error.HTTPError) and error.code < 500 and error.code != 429:
                raise DownloadError(f"{shown}: HTTP {error.code} {error.reason}") from None
            if attempt == attempts:
                raise DownloadError(
                    f"{shown}: failed after {attempts} attempts: {reason}") from None
            delay = min(backoff_seconds * 2 ** (attempt - 1), pace.remaining())
            log.warning("%s: %s; retrying in %.1f s (attempt %d/%d)", shown, reason, delay, attempt,
                        attempts)
            time.sleep(delay)
    raise AssertionError("unreachable")


class _PastDeadline(Exception):
    """The download's overall deadline passed: not retried."""


class _TooSlow(Exception):
    """An attempt fell below the minimum rate: retried, resuming where it stopped."""


class _Pace:
    """The limits of one download (:class:`~reproduce.config.DownloadLimits`): its deadline, over
    all attempts, and the minimum rate of an attempt, the average since the window began, checked
    once a whole window has passed (as curl's ``--speed-limit``/``--speed-time``). A read waits
    at most one window and never past the deadline, so a silent server is caught as surely as
    one trickling bytes."""

    def __init__(self, limits: DownloadLimits):
        self.limits = limits
        self.deadline = time.monotonic() + limits.deadline_minutes * 60
        self.window_start, self.window_bytes = time.monotonic(), 0

    def remaining(self) -> float:
        return max(self.deadline - time.monotonic(), 0.0)

    def read_timeout(self) -> float:
        return max(min(READ_TIMEOUT_SECONDS, self.limits.min_rate_window_seconds,
                       self.remaining()), 0.01)

    def start_window(self, received: int) -> None:
        self.window_start, self.window_bytes = time.monotonic(), received

    def check_deadline(self) -> None:
        if self.remaining() == 0:
            raise _PastDeadline(f"not complete within {self.limits.deadline_minutes:g} minutes"
                                " (data.download.deadline_minutes)")

    def check(self, received: int) -> None:
        """Raise :class:`_PastDeadline` or :class:`_TooSlow` when ``received`` (the bytes of the
        file so far) says so; a window that kept the rate starts the next one."""
        self.check_deadline()
        elapsed = time.monotonic() - self.window_start
        if elapsed < self.limits.min_rate_window_seconds:
            return
        rate = self.limits.min_rate_bytes_per_second
        if received - self.window_bytes < rate * elapsed:
            raise _TooSlow(f"{received - self.window_bytes} bytes in {elapsed:.1f} s, slower"
                           f" than {rate} bytes/s over {self.limits.min_rate_window_seconds:g} s"
                           " (data.download.min_rate_bytes_per_second, min_rate_window_seconds)")
        self.start_window(received)


def _describe(error: BaseException) -> str:
    """An error's text with any URL in it reduced to :func:`display_url`."""
    return re.sub(r"[a-z][a-z0-9+.-]*://\S+", lambda match: display_url(match.group(0)), str(error))


class _Incomplete(Exception):
    """The connection ended before the announced length, or a resume did not fit the .part."""


def _fetch(url: str, partial: Path, pace: _Pace) -> bool:
    """One attempt: continue ``partial`` from its current size when the server allows it.

    Returns True when the body's total length was known (and reached), False when the server sent
    none; raises :class:`_Incomplete` when fewer bytes arrived than announced.
    """
    validator_path = _validator_path(partial)
    validator = validator_path.read_text() if validator_path.exists() else None
    offset = partial.stat().st_size if partial.exists() and validator else 0
    headers = {"Range": f"bytes={offset}-", "If-Range": validator} if offset else {}
    pace.start_window(offset)
    try:
        response = urllib.request.urlopen(_request(url, headers), timeout=pace.read_timeout())
    except urllib.error.HTTPError as error:
        if error.code == 416 and offset:
            if _total_of(error.headers.get("Content-Range")) == offset:
                return True  # the .part already holds the whole file
            _discard(partial)
            raise _Incomplete(f"range {offset}- not satisfiable; restarting from zero") from None
        raise
    with response:
        expected = _expected_total(response, offset, partial)
        if response.status != 206:
            offset = 0  # a whole body: first attempt, a changed file, or Range ignored
            _save_validator(response, validator_path)
        with (partial.open("ab" if offset else "wb") as stream,
              _progress(url, expected, offset) as bar):
            received = offset
            while chunk := _read(response, pace, received):
                stream.write(chunk)
                received += len(chunk)
                bar.update(len(chunk))
                crossed = received // LOG_EVERY_BYTES != (received - len(chunk)) // LOG_EVERY_BYTES
                if bar.disable and crossed:
                    log.info("%s: %d MiB", display_url(url), received >> 20)
                pace.check(received)
    if expected is not None and received != expected:
        raise _Incomplete(f"received {received} of {expected} bytes")
    return expected is not None


def _request(url: str, headers: dict[str, str]) -> urllib.request.Request:
    """A request for ``url`` whose credentials (``user:password@``), if any, travel as Basic
    authentication, not in the URL (urllib would take them for part of the host name), and are
    not repeated to another host on a redirect."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None:
        return urllib.request.Request(url, headers=headers)
    bare = parts._replace(netloc=parts.netloc.rpartition("@")[2])
    request = urllib.request.Request(urllib.parse.urlunsplit(bare), headers=headers)
    user, password = (urllib.parse.unquote(part or "") for part in (parts.username, parts.password))
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    request.add_unredirected_header("Authorization", f"Basic {token}")
    return request


def _read(response, pace: _Pace, received: int) -> bytes:
    """The next bytes of the body as soon as any arrive (``read(n)`` would wait for all ``n``,
    however slowly they trickle in); a read that times out is reported as the limit it broke."""
    try:
        return response.read1(CHUNK_BYTES)
    except TimeoutError:
        pace.check(received)
        raise


def _validator_path(partial: Path) -> Path:
    return partial.with_name(partial.name + ".validator")


def _save_validator(response, validator_path: Path) -> None:
    """Keep what identifies this version of the file, so that only it is ever resumed."""
    validator = response.headers.get("ETag") or response.headers.get("Last-Modified")
    if validator:
        validator_path.write_text(validator)
    else:
        validator_path.unlink(missing_ok=True)


def _discard(partial: Path) -> None:
    partial.unlink(missing_ok=True)
    _validator_path(partial).unlink(missing_ok=True)


def _expected_total(response, offset: int, partial: Path) -> int | None:
    """The file's total size as the response announces it (None when it announces none).

    A 206 must continue at ``offset``: one that starts elsewhere makes the download restart
    from zero.
    """
    length = response.headers.get("Content-Length")
    if response.status != 206:
        return int(length) if length is not None else None
    match = _CONTENT_RANGE.match(response.headers.get("Content-Range") or "")
    if match is None or int(match.group(1)) != offset or (
        length is not None and int(length) != int(match.group(2)) - int(match.group(1)) + 1
    ):
        _discard(partial)
        raise _Incomplete(
            f"resume at byte {offset} answered with Content-Range "
            f"{response.headers.get('Content-Range')!r}; restarting from zero"
        )
    return int(match.group(3))


def _total_of(content_range: str | None) -> int | None:
    match = re.match(r"^bytes \*/(\d+)$", content_range or "")
    return int(match.group(1)) if match else None


def _progress(url: str, total: int | None, initial: int) -> tqdm:
    return tqdm(
        total=total, initial=initial, unit="B", unit_scale=True, desc=url_file_name(url),
        disable=not sys.stderr.isatty(),
    )
