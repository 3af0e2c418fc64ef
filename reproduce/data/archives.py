"""Reading the members a corpus needs out of tar, tgz, zip and gz archives, without unpacking the
rest (the WMT14 archives are several GB). A member whose name ends in ``.gz`` is decompressed on
the way out (e.g. giga-fren inside training-giga-fren.tar). A treebank's many files are named by
a glob (:func:`matching_members`). The embedded tiny corpora are written by
:func:`write_reproducible_tgz`."""

from __future__ import annotations

import fnmatch
import gzip
import io
import shutil
import tarfile
import zipfile
import zlib
from pathlib import Path
from typing import BinaryIO

from reproduce.errors import DataError, MissingInputError, UnwritableOutputError
from reproduce.files import is_failed_write, written_whole

# What the standard library raises on a cut-short or corrupted archive or compressed stream.
_DAMAGE = (EOFError, tarfile.TarError, zipfile.BadZipFile, gzip.BadGzipFile, zlib.error)


def extract_member(archive: Path, member: str | None, destination: Path) -> Path:
    """Copy ``member`` of ``archive`` (or the whole file when ``member`` is None) to
    ``destination``; a damaged archive leaves no partial ``destination`` behind."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    try:
        _copy_member(archive, member, destination)
    except _DAMAGE as error:
        destination.unlink(missing_ok=True)
        raise _damaged(archive, f"reading {member or 'it'}", error) from None
    return destination


def member_label(archive: Path, member: str | None) -> str:
    """How a file inside a download is named in errors (None: the download itself)."""
    return f"{archive} member {member}" if member is not None else str(archive)


def _damaged(archive: Path, doing: str, error: BaseException) -> DataError:
    reason = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    return DataError(f"{archive}: damaged or cut short ({reason}) while {doing}; "
                     "delete it so that it is downloaded again")


def _copy_member(archive: Path, member: str | None, destination: Path) -> None:
    with _open_member(archive, member) as stream:
        if member is not None and member.endswith(".gz"):
            stream = gzip.GzipFile(fileobj=stream)
        elif member is None and _is_gzip(archive) and not tarfile.is_tarfile(archive):
            stream = gzip.GzipFile(fileobj=stream)
        try:
            with destination.open("wb") as out:
                shutil.copyfileobj(stream, out, length=1 << 20)
        except _DAMAGE:
            raise
        except OSError as error:  # a write: a full disk
            if not is_failed_write(error):
                raise
            raise UnwritableOutputError(destination, error) from None


def _is_gzip(path: Path) -> bool:
    """Whether ``path`` starts with gzip's magic bytes: its name cannot tell, a download being
    named ``<url name>.<digits>`` (:func:`reproduce.data.download.file_name`)."""
    with path.open("rb") as stream:
        return stream.read(2) == b"\x1f\x8b"


def matching_members(archive: Path, pattern: str) -> list[str]:
    """The files of ``archive`` matching the glob ``pattern``, sorted; each ``*``, ``?`` or
    ``[...]`` matches within one folder. A pattern without them names one member as it is."""
    if not any(character in pattern for character in "*?["):
        return [pattern]
    try:
        names = _file_names(archive, pattern)
    except _DAMAGE as error:
        raise _damaged(archive, f"listing its members for {pattern!r}", error) from None
    matches = sorted(name for name in names if _matches(name, pattern))
    if not matches:
        raise MissingInputError(
            f"{archive}: no member matches {pattern!r}; it holds {len(names)} files, e.g. "
            f"{', '.join(names[:8])}"
        )
    return matches


def _matches(name: str, pattern: str) -> bool:
    parts, pattern_parts = name.split("/"), pattern.split("/")
    return len(parts) == len(pattern_parts) and all(
        fnmatch.fnmatchcase(part, pattern_part)
        for part, pattern_part in zip(parts, pattern_parts, strict=True)
    )


def _file_names(archive: Path, pattern: str) -> list[str]:
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as bundle:
            return [name for name in bundle.namelist() if not name.endswith("/")]
    if tarfile.is_tarfile(archive):
        with tarfile.open(archive, "r:*") as bundle:
            return [info.name for info in bundle.getmembers() if info.isfile()]
    raise MissingInputError(
        f"{archive}: not a tar or zip archive, so no member matches {pattern!r}"
        " (leave source_member empty for a plain file)"
    )


def _open_member(archive: Path, member: str | None) -> BinaryIO:
    if member is None:
        return archive.open("rb")
    if zipfile.is_zipfile(archive):
        bundle = zipfile.ZipFile(archive)
        names = bundle.namelist()
        if member not in names:
            raise _missing(archive, member, names)
        return bundle.open(member)
    if tarfile.is_tarfile(archive):
        bundle = tarfile.open(archive, "r:*")
        try:
            info = bundle.getmember(member)
        except KeyError:
            raise _missing(archive, member, bundle.getnames()) from None
        extracted = bundle.extractfile(info)
        if extracted is None:
            raise MissingInputError(f"{archive}: member {member!r} is not a regular file")
        return extracted
    raise MissingInputError(
        f"{archive}: not a tar or zip archive, so it has no member {member!r}"
        " (leave source_member/target_member empty for a plain file)"
    )


def _missing(archive: Path, member: str, names: list[str]) -> MissingInputError:
    files = [name for name in names if not name.endswith("/")]
    return MissingInputError(
        f"{archive}: no member {member!r}; it holds {len(files)} files, e.g. {', '.join(files[:8])}"
    )


def write_reproducible_tgz(path: Path, members: dict[str, str]) -> Path:
    """A byte-reproducible .tgz of ``members`` (name -> UTF-8 text): sorted members, fixed
    owners and times, gzip mtime 0."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as archive:
        for name in sorted(members):
            data = members[name].encode("utf-8")
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            archive.addfile(info, io.BytesIO(data))
    with (written_whole(path, "wb") as raw,
          gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as packed):
        packed.write(buffer.getvalue())
    return path
