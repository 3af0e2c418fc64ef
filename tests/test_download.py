"""Downloads against a local HTTP server: clean, resumed, retried, corrupted, mirrored, and
complete or absent whatever the server does (no length, a bad 206, a changed file)."""

import hashlib
import logging

import pytest

from reproduce.config import Source
from reproduce.data.archives import extract_member
from reproduce.data.download import DownloadError, download_source, file_name
from reproduce.errors import MissingInputError
from tests.corpus_archives import wmt_like_members, write_tgz
from tests.local_http_server import serving


@pytest.fixture
def archive(tmp_path):
    path = write_tgz(tmp_path / "served" / "training-parallel-europarl-v7.tgz", wmt_like_members())
    return path, hashlib.sha256(path.read_bytes()).hexdigest()


def _source(url, sha256=None):
    return Source(name="europarl_v7", url=url, sha256=sha256,
                  source_member="training/europarl-v7.de-en.en",
                  target_member="training/europarl-v7.de-en.de")


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
        got = download_source(_source(f"{url}/{path.name}", digest), tmp_path / "d",
                              backoff_seconds=0.01)
    assert got.read_bytes() == path.read_bytes()
    assert server.seen[0]["range"] is None
    assert server.seen[1]["range"] == f"bytes={path.stat().st_size // 2}-"
    assert server.seen[1]["if_range"] is not None  # resumes only the version it started


def test_transient_server_errors_are_retried(archive, tmp_path):
    path, digest = archive
    with serving(path.parent, fail_first=2) as (url, server):
        got = download_source(_source(f"{url}/{path.name}", digest), tmp_path / "d",
                              backoff_seconds=0.01)
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
        name = file_name(_source(f"{url}/{path.name}", wrong))
        assert (tmp_path / "d" / f"{name}.corrupt").exists()
        assert not (tmp_path / "d" / name).exists()
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
    with pytest.raises(MissingInputError, match=r"no member 'training/commoncrawl\.de-en\.en'"):
        extract_member(path, "training/commoncrawl.de-en.en", tmp_path / "out")


def _files(folder):
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_a_body_without_length_and_without_checksum_is_refused_and_nothing_kept(archive, tmp_path):
    path, _ = archive
    with serving(path.parent, no_length=True) as (url, server):
        with pytest.raises(DownloadError, match=r"no Content-Length.*declares no sha256"):
            download_source(_source(f"{url}/{path.name}"), tmp_path / "d")
    assert _files(tmp_path / "d") == []


def test_a_body_without_length_is_accepted_when_its_checksum_passes(archive, tmp_path):
    path, digest = archive
    with serving(path.parent, no_length=True) as (url, server):
        got = download_source(_source(f"{url}/{path.name}", digest), tmp_path / "d")
    assert got.read_bytes() == path.read_bytes()


def test_a_short_body_is_never_accepted(archive, tmp_path):
    path, _ = archive
    with serving(path.parent, truncate_first=True) as (url, server):
        with pytest.raises(DownloadError, match=r"received \d+ of \d+ bytes"):
            download_source(_source(f"{url}/{path.name}"), tmp_path / "d", attempts=1)
    assert file_name(_source(f"{url}/{path.name}")) not in _files(tmp_path / "d")


def test_a_206_that_does_not_continue_the_part_restarts_from_zero(archive, tmp_path):
    path, _ = archive
    with serving(path.parent, truncate_first=True, bad_range_start=True) as (url, server):
        got = download_source(_source(f"{url}/{path.name}"), tmp_path / "d", backoff_seconds=0.01)
    assert got.read_bytes() == path.read_bytes()  # not half + whole
    assert [seen["range"] is None for seen in server.seen] == [True, False, True]


def test_a_part_of_a_changed_file_is_not_resumed(archive, tmp_path):
    path, _ = archive
    with serving(path.parent) as (url, server):
        source = _source(f"{url}/{path.name}")
        partial = tmp_path / "d" / (file_name(source) + ".part")
        partial.parent.mkdir()
        partial.write_bytes(b"bytes of an older version")
        (tmp_path / "d" / (partial.name + ".validator")).write_text('"older-version"')
        got = download_source(source, tmp_path / "d")
        assert server.seen[0]["if_range"] == '"older-version"'  # the server sent the file whole
        assert got.read_bytes() == path.read_bytes()
        partial.write_bytes(b"a part without a validator")
        got.unlink()
        download_source(source, tmp_path / "d")
        assert server.seen[1]["range"] is None  # unidentified: restarted, not resumed
    assert _files(tmp_path / "d") == [file_name(source)]


def test_sources_whose_urls_end_alike_never_share_a_download(tmp_path):
    first = write_tgz(tmp_path / "served/wmt13/dev.tgz", {"a": "first\n"})
    second = write_tgz(tmp_path / "served/wmt14/dev.tgz", {"a": "second\n"})
    with serving(tmp_path / "served") as (url, server):
        got = [download_source(_source(f"{url}/{year}/dev.tgz",
                                       hashlib.sha256(archive.read_bytes()).hexdigest()),
                               tmp_path / "d")
               for year, archive in (("wmt13", first), ("wmt14", second))]
    assert (got[0] != got[1] and got[0].name.startswith("dev.tgz.")
            and got[1].name.startswith("dev.tgz."))
    assert [g.read_bytes() for g in got] == [first.read_bytes(), second.read_bytes()]
    # The same URL with another declared checksum is another download too.
    assert (file_name(_source("https://x/dev.tgz", "0" * 64))
            != file_name(_source("https://x/dev.tgz", "1" * 64)))


def test_query_strings_reach_neither_file_names_nor_logs(archive, tmp_path, caplog):
    path, digest = archive
    caplog.set_level(logging.DEBUG)
    with serving(path.parent, fail_first=1) as (url, server):
        got = download_source(_source(f"{url}/{path.name}?token=SECRET", digest), tmp_path / "d",
                              backoff_seconds=0.01)
        with pytest.raises(DownloadError) as error:
            download_source(_source(f"{url}/nothere.tgz?token=SECRET"), tmp_path / "d")
    assert server.seen[-1]["path"].endswith("?token=SECRET")  # the server got it
    assert got.read_bytes() == path.read_bytes()
    assert "?" not in got.name and "SECRET" not in got.name
    assert "nothere.tgz" in str(error.value) and "SECRET" not in str(error.value)
    assert "retrying" in caplog.text and "SECRET" not in caplog.text


def test_a_source_without_checksum_is_warned_about_once(archive, tmp_path, caplog):
    path, _ = archive
    source = _source(f"file://{path}")
    download_source(source, tmp_path / "d")
    download_source(source, tmp_path / "d")
    assert caplog.text.count("declares no sha256") == 1


def test_wmt14_sources_use_https():
    from reproduce.experiment_file import load_experiment
    from tests.test_config import ROOT
    for name in ("wmt14_en_de", "wmt14_en_fr"):
        data = load_experiment(ROOT / f"configs/{name}.yaml").data
        assert all(source.url.startswith("https://")
                   for source in data.train + data.dev + data.test)
