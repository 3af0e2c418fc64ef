"""Downloads against a local HTTP server: clean, resumed, retried, corrupted, mirrored."""

import hashlib

import pytest

from reproduce.config import Source
from reproduce.data.archives import MissingMemberError, extract_member
from reproduce.data.download import DownloadError, download_source
from tests.corpus_archives import wmt_like_members, write_tgz
from tests.local_http_server import serving


@pytest.fixture
def archive(tmp_path):
    path = write_tgz(tmp_path / "served" / "training-parallel-europarl-v7.tgz", wmt_like_members())
    return path, hashlib.sha256(path.read_bytes()).hexdigest()


def _source(url, sha256=None):
    return Source(name="europarl_v7", url=url, sha256=sha256,
                  source_member="training/europarl-v7.de-en.en", target_member="training/europarl-v7.de-en.de")


def test_a_clean_download_is_verified_and_then_reused(archive, tmp_path):
    path, digest = archive
    with serving(path.parent) as (url, server):
        source = _source(f"{url}/{path.name}", digest)
        got = download_source(source, tmp_path / "downloads")
        assert got.read_bytes() == path.read_bytes()
        download_source(source, tmp_path / "downloads")
    assert len(server.seen) == 1  # the second call found the verified file


def test_an_interrupted_download_resumes_with_a_range_request(archive, tmp_path):
    path, digest = archive
    with serving(path.parent, truncate_first=True) as (url, server):
        got = download_source(_source(f"{url}/{path.name}", digest), tmp_path / "d", backoff_seconds=0.01)
    assert got.read_bytes() == path.read_bytes()
    assert server.seen[0]["range"] is None
    assert server.seen[1]["range"] == f"bytes={path.stat().st_size // 2}-"


def test_transient_server_errors_are_retried(archive, tmp_path):
    path, digest = archive
    with serving(path.parent, fail_first=2) as (url, server):
        got = download_source(_source(f"{url}/{path.name}", digest), tmp_path / "d", backoff_seconds=0.01)
    assert got.read_bytes() == path.read_bytes() and len(server.seen) == 3


def test_a_missing_file_fails_at_once_naming_the_url(archive, tmp_path):
    path, _ = archive
    with serving(path.parent) as (url, server):
        with pytest.raises(DownloadError, match=r"nothere\.tgz: HTTP 404"):
            download_source(_source(f"{url}/nothere.tgz"), tmp_path / "d", backoff_seconds=0.01)
    assert len(server.seen) == 1


def test_a_checksum_mismatch_names_both_hashes_and_keeps_the_file_aside(archive, tmp_path):
    path, digest = archive
    wrong = "0" * 64
    with serving(path.parent) as (url, server):
        with pytest.raises(DownloadError) as error:
            download_source(_source(f"{url}/{path.name}", wrong), tmp_path / "d")
        message = str(error.value)
        assert wrong in message and digest in message and path.name in message
        assert (tmp_path / "d" / f"{path.name}.corrupt").exists()
        assert not (tmp_path / "d" / path.name).exists()
        # The corrupt file is never reused: the next attempt downloads again.
        with pytest.raises(DownloadError):
            download_source(_source(f"{url}/{path.name}", wrong), tmp_path / "d")
    assert len(server.seen) == 2


def test_a_mirror_folder_serves_offline_clusters(archive, tmp_path):
    path, digest = archive
    source = _source(f"http://127.0.0.1:9/{path.name}", digest)  # nothing listens there
    got = download_source(source, tmp_path / "d", mirror_dir=path.parent)
    assert got.read_bytes() == path.read_bytes()


def test_file_urls_go_through_the_same_verification(archive, tmp_path):
    path, digest = archive
    got = download_source(_source(f"file://{path}", digest), tmp_path / "d")
    assert got.read_bytes() == path.read_bytes()
    with pytest.raises(DownloadError, match="sha256 mismatch"):
        download_source(_source(f"file://{path}", "f" * 64), tmp_path / "e")


def test_a_missing_member_is_named(archive, tmp_path):
    path, _ = archive
    with pytest.raises(MissingMemberError, match=r"no member 'training/commoncrawl\.de-en\.en'"):
        extract_member(path, "training/commoncrawl.de-en.en", tmp_path / "out")
