"""A cut-short or corrupt archive (a download without a declared sha256, a full disk) is one
error naming the archive, and leaves no partial member behind."""

import gzip
import io
import tarfile
import zipfile

import pytest

from reproduce.data.archives import extract_member, matching_members
from reproduce.errors import DataError, ReproduceError

LINES = "".join(f"sentence number {index} of the corpus\n" for index in range(20_000)).encode()


def _tgz(path):
    with tarfile.open(path, "w:gz") as bundle:
        for name in ("corpus/train.en", "corpus/train.de"):
            info = tarfile.TarInfo(name)
            info.size = len(LINES)
            bundle.addfile(info, io.BytesIO(LINES))
    return path


def _cut_in_half(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def test_a_whole_archive_extracts(tmp_path):
    out = extract_member(_tgz(tmp_path / "c.tgz"), "corpus/train.de", tmp_path / "train.de")
    assert out.read_bytes() == LINES


@pytest.mark.parametrize("member", ["corpus/train.en", "corpus/train.de"])
def test_a_cut_short_tgz_names_the_archive_and_leaves_no_partial_member(tmp_path, member):
    archive = _cut_in_half(_tgz(tmp_path / "c.tgz"))
    with pytest.raises(DataError) as caught:
        extract_member(archive, member, tmp_path / "out")
    message = str(caught.value)
    assert message.startswith(f"{archive}: damaged or cut short") and "\n" not in message
    assert isinstance(caught.value, ReproduceError)
    assert not (tmp_path / "out").exists()


def test_a_cut_short_tgz_fails_the_same_when_its_members_are_listed(tmp_path):
    archive = _cut_in_half(_tgz(tmp_path / "c.tgz"))
    with pytest.raises(DataError, match="while listing its members"):
        matching_members(archive, "corpus/*.en")


def test_a_cut_short_gz_file_and_a_corrupt_zip_member(tmp_path):
    gz = tmp_path / "train.en.gz"
    gz.write_bytes(gzip.compress(LINES)[:5000])
    with pytest.raises(DataError, match="damaged or cut short"):
        extract_member(gz, None, tmp_path / "plain")
    bundle = tmp_path / "c.zip"
    with zipfile.ZipFile(bundle, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("train.en", LINES)
    data = bytearray(bundle.read_bytes())
    data[200:400] = bytes(200)  # inside the compressed member, before the directory
    bundle.write_bytes(bytes(data))
    with pytest.raises(DataError, match="damaged or cut short"):
        extract_member(bundle, "train.en", tmp_path / "zipped")


def test_a_gz_file_cut_short_mid_copy_leaves_no_partial_output(tmp_path):
    """The cut is found only after some text was already copied out: the partial copy is
    removed, so that nothing later takes it for the whole file."""
    gz = tmp_path / "train.en.gz"
    gz.write_bytes(gzip.compress(LINES)[:5000])
    with pytest.raises(DataError, match="damaged or cut short"):
        extract_member(gz, None, tmp_path / "plain")
    assert not (tmp_path / "plain").exists()
