"""Where runs are recorded: the MLflow store, checked before training and created only once.

The store is ``MLFLOW_TRACKING_URI`` when set (a tracking server, the setting for Slurm: many jobs
writing one SQLite file on a shared filesystem is unsafe), else an embedded SQLite file beside the
results (``sqlite:///<results>/mlflow.db``). :func:`prepare_store` runs before any training: a
server must answer ``/health`` within a few seconds, and an embedded store is created (its schema
migrated) by one process at a time under a file lock, so parallel jobs on a new store never race in
MLflow's migrations. Credentials in the URI (``user:password@``) never reach a message.
"""

from __future__ import annotations

import base64
import fcntl
import logging
import os
import re
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

from reproduce.config import ConfigError

SERVER_CHECK_SECONDS = 5.0

# MLflow's HTTP client retries a failed request 7 times with back-off (about 4 minutes) and waits
# 120 s for an answer; a training process asks for less, so that a lost server costs seconds.
FAST_FAILING_HTTP = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}

_CREDENTIALS = re.compile(r"(?<=://)[^/@\s]+@")


class TrackingUnavailable(ConfigError):
    """The configured tracking store cannot be reached or created."""


def redact(text: str) -> str:
    """``text`` with the credentials of every URL in it (``scheme://user:password@``) masked."""
    return _CREDENTIALS.sub("***@", text)


class RedactCredentials(logging.Filter):
    """A logging filter that masks URL credentials in every record passing a handler."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = redact(message)
        if masked != message:
            record.msg, record.args = masked, None
        return True


def redact_credentials_in_logs() -> None:
    """Mask URL credentials in whatever the root logger's handlers write (MLflow's warnings too)."""
    for handler in logging.getLogger().handlers:
        if not any(isinstance(existing, RedactCredentials) for existing in handler.filters):
            handler.addFilter(RedactCredentials())


def tracking_uri(results_dir: Path) -> str:
    """``MLFLOW_TRACKING_URI`` if set, else the SQLite store inside ``results_dir``."""
    configured = os.environ.get("MLFLOW_TRACKING_URI")
    if configured:
        return configured
    return f"sqlite:///{(results_dir / 'mlflow.db').resolve()}"


def is_server(uri: str) -> bool:
    return uri.startswith(("http://", "https://"))


def prepare_store(results_dir: Path, timeout: float = SERVER_CHECK_SECONDS) -> str:
    """Check the tracking server, or create the embedded store, before expensive work starts."""
    uri = tracking_uri(results_dir)
    fail_fast_over_http()
    if is_server(uri):
        check_server(uri, timeout)
    elif uri.startswith("sqlite:///"):
        create_sqlite_store(uri)
    return uri


def fail_fast_over_http() -> None:
    """Shorten MLflow's HTTP timeout and retries in this process (and its children), unless set."""
    for name, value in FAST_FAILING_HTTP.items():
        os.environ.setdefault(name, value)


def check_server(uri: str, timeout: float = SERVER_CHECK_SECONDS) -> None:
    """Raise :class:`TrackingUnavailable` (one line, no credentials) unless ``uri/health`` answers."""
    parts = urlsplit(uri)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    health = urlunsplit((parts.scheme, host, parts.path.rstrip("/") + "/health", "", ""))
    request = urllib.request.Request(health)
    if parts.username:
        token = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
        request.add_header("Authorization", "Basic " + base64.b64encode(token).decode())
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            response.read()
    except urllib.error.HTTPError as error:
        reason = f"HTTP {error.code} from /health"
    except (OSError, ValueError) as error:
        reason = str(getattr(error, "reason", None) or error) or type(error).__name__
    else:
        return
    raise TrackingUnavailable(
        f"MLFLOW_TRACKING_URI={redact(uri)}: no MLflow tracking server answers within {timeout:g} s"
        f" ({redact(reason)}); start one (scripts/mlflow-server.sh start) or unset"
        " MLFLOW_TRACKING_URI to use the embedded SQLite store"
    )


def create_sqlite_store(uri: str) -> None:
    """Create the SQLite store and migrate its schema, one process at a time (an fcntl lock)."""
    from mlflow.tracking import MlflowClient

    database = Path(uri[len("sqlite:///"):])
    try:
        database.parent.mkdir(parents=True, exist_ok=True)
        lock = database.with_name(database.name + ".lock").open("a")
    except OSError as error:
        raise TrackingUnavailable(
            f"MLflow store {database}: cannot create it ({error.strerror or error})"
        ) from error
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            MlflowClient(uri).search_experiments(max_results=1)
        except Exception as error:
            raise TrackingUnavailable(f"MLflow store {database}: {redact(str(error))}") from error
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
