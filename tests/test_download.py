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
        assert _files(tmp_path / "d") == [f"{name}.corrupt"]  # no .part, no stale validator
        # The corrupt file is never reused: the next attempt downloads again.
        with pytest.raises(DownloadError):
            download_source(_source(f"{url}/{path.name}", wrong), tmp_path / "d")
    assert len(server.seen) == 2


def test_a_pinned_file_keeps_its_download_when_its_url_moves():
    """Its sha256 names its bytes: another host or a new signature reuses the verified file. An
    unpinned file's URL is all that names it, query string included (it may select the
    content), and two sources of one URL but other digests never share a file."""
    pinned = "a" * 64
    assert (file_name(_source("https://www.statmt.org/wmt13/corpus.tgz", pinned))
            == file_name(_source("https://mirror.example.org/corpus.tgz?sig=2", pinned)))
    assert (file_name(_source("https://www.statmt.org/wmt13/corpus.tgz", pinned))
            != file_name(_source("https://www.statmt.org/wmt13/corpus.tgz", "b" * 64)))
    assert (file_name(_source("https://example.org/corpus.tgz?lang=de"))
            != file_name(_source("https://example.org/corpus.tgz?lang=fr")))
    assert (file_name(_source("https://example.org/corpus.tgz"))
            != file_name(_source("https://example.org/corpus.tgz", pinned)))


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


def test_a_downloaded_file_that_no_longer_matches_its_checksum_is_fetched_again(archive, tmp_path):
    """A file already in place is reused only once it verifies: one damaged since (a disk error,
    an edit) must never be handed on as the verified download."""
    path, digest = archive
    source = _source(f"file://{path}", digest)
    target = tmp_path / "d" / file_name(source)
    target.parent.mkdir()
    target.write_bytes(b"damaged since it was downloaded")
    got = download_source(source, tmp_path / "d")
    assert got == target and got.read_bytes() == path.read_bytes()


@pytest.mark.parametrize("status", [429, 500])
def test_too_many_requests_and_every_server_error_are_retried(archive, tmp_path, status):
    """429 (rate limited) and every 5xx, 500 as 503, are transient: mirrors answer them under
    load, and the download must wait and try again, not fail the pipeline."""
    path, digest = archive
    with serving(path.parent, fail_first=1, fail_status=status) as (url, server):
        got = download_source(_source(f"{url}/{path.name}", digest), tmp_path / "d",
                              backoff_seconds=0.01)
    assert got.read_bytes() == path.read_bytes() and len(server.seen) == 2


def _interrupted(path, url, folder):
    """Leave ``folder`` with the ``.part`` (half the file) and validator of a cut-off download."""
    with pytest.raises(DownloadError, match=r"received \d+ of \d+ bytes"):
        download_source(_source(f"{url}/{path.name}"), folder, attempts=1)
    return folder / (file_name(_source(f"{url}/{path.name}")) + ".part")


def test_a_part_that_already_holds_the_whole_file_is_taken_without_downloading_again(archive,
                                                                                     tmp_path):
    """A resume of a complete ``.part`` is answered 416 with the file's size: the ``.part`` is
    the file when, and only when, its size is that size."""
    path, _ = archive
    with serving(path.parent, truncate_first=True) as (url, server):
        partial = _interrupted(path, url, tmp_path / "d")
        partial.write_bytes(path.read_bytes())
        got = download_source(_source(f"{url}/{path.name}"), tmp_path / "d")
    assert got.read_bytes() == path.read_bytes()
    assert server.seen[-1]["range"] == f"bytes={path.stat().st_size}-" and len(server.seen) == 2


def test_a_part_longer_than_the_file_is_discarded_and_the_file_fetched_whole(archive, tmp_path):
    """A 416 whose size is not the ``.part``'s says the ``.part`` is not the file: taking it
    for whole would hand on a file with bytes that are not the server's (no checksum declared
    to catch it)."""
    path, _ = archive
    with serving(path.parent, truncate_first=True) as (url, server):
        partial = _interrupted(path, url, tmp_path / "d")
        partial.write_bytes(path.read_bytes() + b"bytes past the end")
        got = download_source(_source(f"{url}/{path.name}"), tmp_path / "d", backoff_seconds=0.01)
    assert got.read_bytes() == path.read_bytes()
    size = path.stat().st_size
    assert [seen["range"] for seen in server.seen] == [None, f"bytes={size + 18}-", None]


def test_a_server_without_etag_is_resumed_on_its_last_modified_date(archive, tmp_path):
    """``Last-Modified`` is the validator of servers that send no ``ETag``: kept, it lets an
    interrupted download resume instead of starting over."""
    path, _ = archive
    with serving(path.parent, truncate_first=True, last_modified_only=True) as (url, server):
        got = download_source(_source(f"{url}/{path.name}"), tmp_path / "d", backoff_seconds=0.01)
    assert got.read_bytes() == path.read_bytes()
    assert server.seen[1]["range"] == f"bytes={path.stat().st_size // 2}-"
    assert server.seen[1]["if_range"].endswith(" GMT")


def test_relative_file_urls_are_read_from_the_working_folder(archive, tmp_path, monkeypatch):
    """``file:configs/data/...``, as the tiny experiments name their corpora, is a path relative
    to the folder the pipeline runs in, copied and verified as any download."""
    path, digest = archive
    monkeypatch.chdir(path.parent.parent)
    got = download_source(_source(f"file:{path.parent.name}/{path.name}", digest), tmp_path / "d")
    assert got.read_bytes() == path.read_bytes()
    with pytest.raises(DownloadError, match=r"file:served/nothere\.tgz: no such file "):
        download_source(_source("file:served/nothere.tgz", digest), tmp_path / "d")
