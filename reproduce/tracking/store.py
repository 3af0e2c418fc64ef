"""Where runs are recorded: the MLflow store, checked before training and created only once.

The store is ``MLFLOW_TRACKING_URI`` when set (a tracking server, the setting for Slurm: many jobs
writing one SQLite file on a shared filesystem is unsafe), else an embedded SQLite file beside the
results (``sqlite:///<results>/mlflow.db``). :func:`prepare_store` runs before any training: a
server must answer a read-only API call within a few seconds (``/health`` would not do: MLflow
answers it whatever the Host header, and refuses API calls from a host name it does not allow),
and an embedded store is created (its schema migrated) by one process at a time under a file lock,
so parallel jobs on a new store never race in MLflow's migrations. Credentials in the URI
(``user:password@``) never reach a message.
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
from urllib.parse import SplitResult, unquote, urlsplit, urlunsplit

from reproduce.config import ConfigError

SERVER_CHECK_SECONDS = 5.0
# The pre-flight request: read-only, and an API call, so subject to the server's Host check.
CHECK_PATH, CHECK_QUERY = "/api/2.0/mlflow/experiments/search", "max_results=1"
INVALID_HOST = "Invalid Host header"  # the start of MLflow's 403 answer to a host it does not allow

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
    """Raise :class:`TrackingUnavailable` (one line, no credentials) unless the server answers a
    read-only API call within ``timeout``: not ``/health``, which MLflow answers whatever the Host
    header, while it refuses every API call (403) from a host name it does not allow."""
    parts = urlsplit(uri)
    host = _host_header(parts)
    path = parts.path.rstrip("/") + CHECK_PATH
    request = urllib.request.Request(urlunsplit((parts.scheme, host, path, CHECK_QUERY, "")))
    if parts.username:
        token = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
        request.add_header("Authorization", "Basic " + base64.b64encode(token).decode())
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            response.read()
    except urllib.error.HTTPError as error:
        raise TrackingUnavailable(_refusal(uri, host, error)) from None
    except (OSError, ValueError) as error:
        reason = str(getattr(error, "reason", None) or error) or type(error).__name__
        raise TrackingUnavailable(
            f"MLFLOW_TRACKING_URI={redact(uri)}: no MLflow tracking server answers within"
            f" {timeout:g} s ({redact(reason)}); start one (scripts/mlflow-server.sh start) or"
            " unset MLFLOW_TRACKING_URI to use the embedded SQLite store"
        ) from None


def _host_header(parts: SplitResult) -> str:
    """The Host header a request to ``parts`` carries (``name:port``), without credentials."""
    name = parts.hostname or ""
    if ":" in name:  # an IPv6 address
        name = f"[{name}]"
    return f"{name}:{parts.port}" if parts.port else name


def _refusal(uri: str, host: str, error: urllib.error.HTTPError) -> str:
    """The one line for a server that answers the check with an error, naming the fix when it is
    MLflow's Host check: ``host`` must be among the server's allowed hosts."""
    lines = error.read(300).decode(errors="replace").strip().splitlines()
    answer = redact(f"HTTP {error.code}: {lines[0] if lines else error.reason}")
    refused = f"MLFLOW_TRACKING_URI={redact(uri)}: the MLflow server refuses API calls ({answer})"
    if INVALID_HOST not in answer:
        return f"{refused}; check the URI and its credentials, and the server's log"
    return (f"{refused}; start it with {host} among its allowed hosts:"
            f" MLFLOW_SERVER_ALLOWED_HOSTS={host} scripts/mlflow-server.sh start"
            f" (or mlflow server --allowed-hosts {host})")


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
