"""Downloads end: an overall deadline and a minimum rate (data.download), against a local server
that trickles its bodies; and a URL's credentials reach no error, whatever the failure."""

import base64
import logging
import os
import subprocess
import sys

import pytest
import yaml

from reproduce.config import DownloadLimits
from reproduce.experiment_file import load_experiment
from reproduce.provenance import trained_settings
from reproduce.data.download import DownloadError, download_source, file_name
from tests.local_http_server import serving
from tests.test_download import _source, archive  # noqa: F401 (archive: a fixture)
from tests.training_fixtures import ROOT

SECRET = "planted-secret"
# Limits a test reaches in a fraction of a second; no minimum rate, or no practical deadline.
SLOW_IS_100_BYTES_A_SECOND = DownloadLimits(deadline_minutes=10, min_rate_bytes_per_second=100,
                                            min_rate_window_seconds=0.3)
DEADLINE_OF_A_SECOND = DownloadLimits(deadline_minutes=1 / 60, min_rate_bytes_per_second=0)


def _failure(source, folder, **options) -> str:
    """The one-line message of the DownloadError that ``download_source`` raises."""
    with pytest.raises(DownloadError) as raised:
        download_source(source, folder, backoff_seconds=0.01, **options)
    message = str(raised.value)
    assert "\n" not in message
    return message


def test_a_trickling_server_is_given_up_below_the_minimum_rate(archive, tmp_path):  # noqa: F811 (archive: the imported fixture)
    path, digest = archive
    with serving(path.parent, trickle=0.05) as (url, server):
        source = _source(f"{url}/{path.name}", digest)
        message = _failure(source, tmp_path / "d", attempts=2, limits=SLOW_IS_100_BYTES_A_SECOND)
    assert message.startswith(f"{url}/{path.name}: failed after 2 attempts: ")
    assert "slower than 100 bytes/s over 0.3 s (data.download.min_rate_bytes_per_second" in message
    assert len(server.seen) == 2  # each attempt given up, then the second resumed the first
    assert server.seen[1]["range"] is not None
    assert not (tmp_path / "d" / file_name(source)).exists()


def test_a_server_that_falls_silent_is_given_up_after_one_window(archive, tmp_path):  # noqa: F811 (archive: the imported fixture)
    path, digest = archive
    with serving(path.parent, trickle=30) as (url, _):  # one byte, then 30 s of silence
        message = _failure(_source(f"{url}/{path.name}", digest), tmp_path / "d", attempts=1,
                           limits=SLOW_IS_100_BYTES_A_SECOND)
    assert "slower than 100 bytes/s over 0.3 s" in message


def test_a_download_past_its_deadline_stops_and_its_part_is_resumed_later(archive, tmp_path):  # noqa: F811 (archive: the imported fixture)
    """A trickle fast enough for any minimum rate still ends at the deadline; the bytes received
    stay in the .part, never the downloaded file, and the next run resumes them."""
    path, digest = archive
    with serving(path.parent, trickle=0.01) as (url, server):  # 500 bytes: 5 s at least
        source = _source(f"{url}/{path.name}", digest)
        message = _failure(source, tmp_path / "d", limits=DEADLINE_OF_A_SECOND)
        target = tmp_path / "d" / file_name(source)
        partial = target.with_name(target.name + ".part")
        assert message.startswith(f"{url}/{path.name}: not complete within 0.0166667 minutes"
                                  " (data.download.deadline_minutes); ")
        assert f"kept in {partial}" in message
        assert not target.exists() and 0 < partial.stat().st_size < path.stat().st_size
        kept = partial.stat().st_size
        server.trickle = 0
        got = download_source(source, tmp_path / "d")
    assert got == target and got.read_bytes() == path.read_bytes()
    assert server.seen[-1]["range"] == f"bytes={kept}-"


def test_the_download_limits_are_read_from_the_experiment_file(archive, tmp_path):  # noqa: F811 (archive: the imported fixture)
    """``reproduce download`` as the download rule runs it: the deadline of the experiment's
    data.download stops it with one line, the URL named without its credentials."""
    path, digest = archive
    raw = yaml.safe_load((ROOT / "configs/tiny.yaml").read_text())
    with serving(path.parent, trickle=0.01) as (url, server):
        raw["data"]["train"][0] |= {"url": url.replace("http://", f"http://user:{SECRET}@")
                                    + f"/{path.name}", "sha256": digest}
        raw["data"]["download"] = {"deadline_minutes": 0.01, "min_rate_bytes_per_second": 0}
        (tmp_path / "slow.yaml").write_text(yaml.safe_dump(raw))
        result = subprocess.run(
            [sys.executable, "-m", "reproduce", "download", "--experiment",
             str(tmp_path / "slow.yaml"), "--split", "train", "--source", "tiny_train",
             "--out-dir", str(tmp_path / "downloads")],
            capture_output=True, text=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert result.returncode != 0 and result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"reproduce download: error: {url}/{path.name}: not complete"
                                    " within 0.01 minutes (data.download.deadline_minutes); ")
    assert SECRET not in result.stdout + result.stderr and server.seen


def test_download_limits_are_no_part_of_what_a_training_depends_on():
    experiment = load_experiment(ROOT / "configs/tiny.yaml")
    data = experiment.data.model_copy(update={"download": DEADLINE_OF_A_SECOND})
    other = experiment.model_copy(update={"data": data})
    variant = experiment.variant("base")
    assert other.data.download != experiment.data.download
    assert trained_settings(variant, other) == trained_settings(variant, experiment)


# -- credentials in the URL ----------------------------------------------------------------------
def test_credentials_in_the_url_are_sent_as_basic_authentication(archive, tmp_path):  # noqa: F811 (archive: the imported fixture)
    path, digest = archive
    with serving(path.parent) as (url, server):
        source = _source(url.replace("http://", f"http://user:{SECRET}@") + f"/{path.name}", digest)
        got = download_source(source, tmp_path / "d")
    assert got.read_bytes() == path.read_bytes() and SECRET not in got.name
    token = base64.b64encode(f"user:{SECRET}".encode()).decode()
    assert [request["authorization"] for request in server.seen] == [f"Basic {token}"]


FAILURES = {  # serving() options, the served file's name, download_source options, the error
    "missing file": ({}, "nothere.tgz", {}, "HTTP 404"),
    "server errors": ({"fail_first": 5}, None, {"attempts": 2}, "failed after 2 attempts: "),
    "checksum": ({}, None, {"sha256": "0" * 64}, "sha256 mismatch"),
    "no length": ({"no_length": True}, None, {"sha256": None}, "sent no Content-Length"),
    "too slow": ({"trickle": 0.05}, None, {"attempts": 1, "limits": SLOW_IS_100_BYTES_A_SECOND},
                 "slower than 100 bytes/s"),
    "deadline": ({"trickle": 0.01}, None, {"limits": DEADLINE_OF_A_SECOND},
                 "not complete within"),
}


@pytest.mark.parametrize("failure", FAILURES)
def test_every_download_error_names_the_url_without_its_credentials(failure, archive, tmp_path,  # noqa: F811 (archive: the imported fixture)
                                                                      caplog):
    server_options, name, options, expected = FAILURES[failure]
    options = dict(options)
    path, digest = archive
    name = name or path.name
    sha256 = options.pop("sha256", digest)
    with serving(path.parent, **server_options) as (url, _):
        source = _source(url.replace("http://", f"http://user:{SECRET}@") + f"/{name}", sha256)
        with caplog.at_level(logging.INFO, logger="reproduce.data.download"):
            message = _failure(source, tmp_path / "d", **options)
    assert message.startswith(f"{url}/{name}: ") and expected in message
    assert SECRET not in message + caplog.text


def test_a_resumed_download_is_held_to_the_minimum_rate_from_its_first_new_byte(archive, tmp_path):  # noqa: F811 (archive: the imported fixture)
    """The rate counts the bytes this attempt received, not the ``.part`` it resumed: else a
    large ``.part`` would let a server that falls silent hold the download until its deadline."""
    path, digest = archive
    with serving(path.parent, truncate_first=True) as (url, server):
        source = _source(f"{url}/{path.name}", digest)
        _failure(source, tmp_path / "d", attempts=1)  # half the file kept in the .part
        kept = (tmp_path / "d" / (file_name(source) + ".part")).stat().st_size
        assert kept > 100 * 0.3  # more than a whole window's worth at the minimum rate
        server.trickle = 30  # one byte, then 30 s of silence
        message = _failure(source, tmp_path / "d", attempts=1, limits=SLOW_IS_100_BYTES_A_SECOND)
    assert server.seen[1]["range"] == f"bytes={kept}-"
    assert "slower than 100 bytes/s over 0.3 s" in message


def test_percent_encoded_credentials_are_sent_decoded(archive, tmp_path):  # noqa: F811 (archive: the imported fixture)
    """A URL can carry ``@``, ``:`` or ``/`` in a password only percent-encoded; the server must
    receive the password itself, or it refuses every attempt."""
    path, digest = archive
    with serving(path.parent) as (url, server):
        source = _source(url.replace("http://", "http://us%3Aer:p%40ss%2Fword@") + f"/{path.name}",
                         digest)
        download_source(source, tmp_path / "d")
    token = base64.b64encode(b"us:er:p@ss/word").decode()
    assert [request["authorization"] for request in server.seen] == [f"Basic {token}"]


def test_a_token_as_the_only_credential_is_sent_as_basic_authentication(archive, tmp_path):  # noqa: F811 (archive: the imported fixture)
    """``https://<token>@host/...`` names a user and no password: the token still travels as
    Basic authentication, never left in the URL where urllib takes it for part of the host."""
    path, digest = archive
    with serving(path.parent) as (url, server):
        got = download_source(_source(url.replace("http://", f"http://{SECRET}@") + f"/{path.name}",
                                      digest), tmp_path / "d")
    assert got.read_bytes() == path.read_bytes()
    token = base64.b64encode(f"{SECRET}:".encode()).decode()
    assert [request["authorization"] for request in server.seen] == [f"Basic {token}"]


def test_a_silent_server_is_given_up_by_the_rate_window_well_before_the_deadline(archive, tmp_path):  # noqa: F811 (archive: the imported fixture)
    """A read waits one rate window, not the minute a read may take at most: a server that
    falls silent fails the minimum rate long before the deadline would end the download."""
    path, digest = archive
    limits = DownloadLimits(deadline_minutes=10 / 60, min_rate_bytes_per_second=100,
                            min_rate_window_seconds=0.3)
    with serving(path.parent, trickle=120) as (url, _):  # one byte, then two minutes of silence
        message = _failure(_source(f"{url}/{path.name}", digest), tmp_path / "d", attempts=1,
                           limits=limits)
    assert "slower than 100 bytes/s over 0.3 s" in message and "not complete within" not in message
