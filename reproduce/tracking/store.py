"""Where runs are recorded: the MLflow store, checked before training and created only once.

The store is ``MLFLOW_TRACKING_URI`` when set (a tracking server, the setting for Slurm: many jobs
writing one SQLite file on a shared filesystem is unsafe), else an embedded SQLite file beside the
results (``sqlite:///<results>/mlflow.db``). :func:`prepare_store` runs before any training: a
URI that cannot work (an unknown scheme, no host) is refused, and so is a server that refuses a
read-only API call (``/health`` would not do: MLflow answers it whatever the Host header, and
refuses API calls from a host name it does not allow). A server that does not answer within a few
seconds is refused where the answer is needed now (``mlflow-address``), and is one warning before a
training (``wait_for_server``): a loaded server is slow exactly when a sweep's jobs start, and the
run is opened when it answers (:class:`reproduce.tracking.runs.VariantRun`). An embedded store is
created (its schema migrated) by one process at a time under a file lock, so parallel jobs on a
new store never race in MLflow's migrations, and created again the same way when it was removed
during a run. Credentials in the URI (``user:password@``) never reach a message. Everything here
goes through MLflow's client and store classes; no SQL is run against its store.

The embedded store keeps its artifacts in ``<results>/mlartifacts``. A limitation of MLflow, not
worked around: it records an experiment's and a run's artifact location as an absolute URI
(a relative one is resolved against the working directory when the experiment is created), and
its public interface has no call that changes it. So after the results folder is moved or copied,
MLflow (its UI, ``download_artifacts``) looks for the artifacts logged before at the old place,
although their files moved with the folder (``<results>/mlartifacts/<run id>/artifacts/``).
:func:`open_sqlite_store` says so in one warning per process (:func:`artifacts_elsewhere`), and
the runs of those experiments log no more artifacts from the new place
(:meth:`reproduce.tracking.runs.VariantRun.log_artifact`): MLflow would write them to the old
folder, or into the original of a copy. Everything else of the store (runs, params, metrics, tags)
moves with it. A symbolic link from the old results folder to the new one makes the recorded
locations valid again. A tracking server started by ``scripts/mlflow-server.sh`` has no such
limit: it records ``mlflow-artifacts:`` URIs, relative to its ``--artifacts-destination``, so its
folder can move as long as the server is started again from the new place.
"""

from __future__ import annotations

import base64
import fcntl
import logging
import os
import re
import time
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
# A pooled SQLite connection keeps the file it opened: after the store is removed, its reads see
# the removed file and its writes fail ("attempt to write a readonly database") until the process
# ends. A connection per session opens the file that is there, so a removed store is noticed and
# can be created again.
SQLITE_CONNECTION_PER_SESSION = {"MLFLOW_SQLALCHEMYSTORE_POOLCLASS": "NullPool"}

_CREDENTIALS = re.compile(r"(?<=://)[^/@\s]+@")
# MLflow's switch for the "View run <name> at: <tracking URI>/..." line it prints as a run ends.
SUPPRESS_RUN_URL = "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"

ARTIFACTS = "mlartifacts"  # a local store's artifacts: <results>/mlartifacts

log = logging.getLogger(__name__)


def redact(text: str) -> str:
    """``text`` with the credentials of every URL in it (``scheme://user:password@``) masked."""
    return _CREDENTIALS.sub("***@", text)


class RedactCredentials(logging.Filter):
    """A logging filter that masks URL credentials in every record passing a handler, in its
    message and in the traceback it carries (formatted here, so the handler prints the masked
    text)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = redact(message)
        if masked != message:
            record.msg, record.args = masked, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True


def redact_credentials_in_logs() -> None:
    """Keep the credentials of ``MLFLOW_TRACKING_URI`` out of what this process writes; called
    before any tracking (:func:`prepare_store`, and a training's run in its own process).

    Three paths reach the output: the root logger's handlers (the project's records); MLflow's
    loggers, which do not propagate to the root (importing MLflow gives them a handler of their
    own) and name the URI in their warnings, such as the system-metrics monitor's during an
    outage; and MLflow's ``View run ... at: <URI>/...`` line as a run ends, which it writes with
    ``sys.stdout.write``, out of any logging filter's reach. The first two get
    :class:`RedactCredentials` on their handlers. The third is switched off with MLflow's
    documented setting ``MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT`` rather than by wrapping
    ``sys.stdout``, which every other writer shares; only when the URI carries credentials (a
    masked link would not open anyway; without credentials the line is harmless and useful).
    Child processes (submitit jobs, DDP ranks) inherit the setting."""
    import mlflow  # noqa: F401  (creates the handler of MLflow's loggers, filtered below)

    if _CREDENTIALS.search(os.environ.get("MLFLOW_TRACKING_URI", "")):
        os.environ[SUPPRESS_RUN_URL] = "true"
    for name in ("", "mlflow"):  # the root logger, and MLflow's, which does not propagate to it
        for handler in logging.getLogger(name).handlers:
            if not any(isinstance(existing, RedactCredentials) for existing in handler.filters):
                handler.addFilter(RedactCredentials())


def tracking_uri(results_dir: Path) -> str:
    """``MLFLOW_TRACKING_URI`` if set, else the SQLite store inside ``results_dir``."""
    return os.environ.get("MLFLOW_TRACKING_URI") or embedded_uri(results_dir)


def embedded_uri(results_dir: Path) -> str:
    """The embedded store: a SQLite file inside ``results_dir``, which moves with it."""
    return f"sqlite:///{(results_dir / 'mlflow.db').resolve()}"


def artifact_root(results_dir: Path) -> str:
    """Where a local store keeps artifacts: ``<results>/mlartifacts``, as a file URI."""
    return (results_dir / ARTIFACTS).resolve().as_uri()


def is_server(uri: str) -> bool:
    return uri.startswith(("http://", "https://"))


def prepare_store(results_dir: Path, timeout: float = SERVER_CHECK_SECONDS,
                  wait_for_server: bool = False) -> str:
    """Check the tracking server, or create the embedded store, before expensive work starts.

    A server that does not answer within ``timeout`` is refused, unless ``wait_for_server`` (a
    training, ``init-tracking``): then it gets one warning, and the training's run is opened when
    the server answers, its metrics kept in ``train/metrics.jsonl`` meanwhile."""
    uri = tracking_uri(results_dir)
    check_scheme(uri)
    redact_credentials_in_logs()
    configure_client(uri)
    if is_server(uri):
        silence = server_silence(uri, timeout)
        if silence is not None:
            unanswered = (f"MLFLOW_TRACKING_URI={redact(uri)}: no MLflow tracking server answers"
                          f" within {timeout:g} s ({silence})")
            if not wait_for_server:
                raise ConfigError(f"{unanswered}; start one (scripts/mlflow-server.sh start) or"
                                  " unset MLFLOW_TRACKING_URI to use the embedded SQLite store")
            _SILENT[uri] = time.monotonic()
            log.warning("%s; training goes on, keeping its metrics in its train/metrics.jsonl,"
                        " and logs its run to the server when it answers", unanswered)
    else:
        open_sqlite_store(results_dir)
    return uri


_SILENT: dict[str, float] = {}  # server URI -> when this process found it silent


def found_silent(uri: str) -> float | None:
    """When :func:`prepare_store` found the server ``uri`` silent in this process (its
    ``time.monotonic()``), or None: a training started right after it waits before asking
    again, so that a silent server costs it neither a second timeout nor a second warning."""
    return _SILENT.get(uri)


# The schemes of MLflow's tracking stores (mlflow.tracking._tracking_service.utils; a database
# scheme may name its driver, postgresql+psycopg2); "" is a plain path, a file store.
MLFLOW_SCHEMES = ("", "file", "http", "https", "sqlite", "postgresql", "mysql", "mssql",
                  "databricks", "databricks-uc", "uc")


def check_scheme(uri: str) -> None:
    """Refuse a tracking URI that MLflow cannot open, before any work: MLflow itself refuses it
    only when the first run is opened, in a paragraph, or (``sqlite:///`` naming no file) in a
    traceback."""
    scheme = urlsplit(uri).scheme.split("+")[0]
    if scheme not in MLFLOW_SCHEMES:
        raise ConfigError(
            f"MLFLOW_TRACKING_URI={redact(uri)}: MLflow has no store of scheme {scheme!r} (known: "
            f"{', '.join(name for name in MLFLOW_SCHEMES if name)}); unset it to use the "
            f"embedded SQLite store")
    if scheme == "sqlite" and not uri.removeprefix("sqlite:").strip("/"):
        raise ConfigError(f"MLFLOW_TRACKING_URI={uri}: names no database file "
                          "(sqlite:////absolute/path/mlflow.db)")
    if is_server(uri):
        check_server_address(uri)


def check_server_address(uri: str) -> None:
    """Refuse a server URI without a host or with a port that is not a number: no wait makes it
    answer."""
    parts = urlsplit(uri)
    try:
        port = parts.port
    except ValueError:
        port = -1
    if not parts.hostname or port == -1:
        raise ConfigError(f"MLFLOW_TRACKING_URI={redact(uri)}: not a server address"
                          " (http://host:port, e.g. as scripts/mlflow-server.sh start prints it)")


def open_sqlite_store(results_dir: Path) -> None:
    """Create the SQLite store if the tracking URI names one. When it is the embedded store of a
    results folder that was moved or copied, warn (once per process) that MLflow looks for the
    artifacts logged before at the old place (the module's docstring); a store that
    MLFLOW_TRACKING_URI names may be shared by several results folders, so its artifact locations
    are nobody's to judge."""
    uri = tracking_uri(results_dir)
    if uri.startswith("sqlite:///"):
        create_sqlite_store(uri)
    if uri == embedded_uri(results_dir):
        warn_of_artifacts_elsewhere(uri, results_dir)


def configure_client(uri: str) -> None:
    """Set MLflow's client up in this process (and its children), unless set: HTTP calls that
    fail fast, and for a SQLite store a connection per session
    (:data:`SQLITE_CONNECTION_PER_SESSION`), which holds for a store first opened after this."""
    fail_fast_over_http()
    if uri.startswith("sqlite:"):
        for name, value in SQLITE_CONNECTION_PER_SESSION.items():
            os.environ.setdefault(name, value)


def fail_fast_over_http() -> None:
    """Shorten MLflow's HTTP timeout and retries in this process (and its children), unless set."""
    for name, value in FAST_FAILING_HTTP.items():
        os.environ.setdefault(name, value)


def server_silence(uri: str, timeout: float = SERVER_CHECK_SECONDS) -> str | None:
    """Why the server does not answer a read-only API call within ``timeout`` (``timed out``,
    ``Connection refused``, ``HTTP 503``...), or None when it answers. Raise
    :class:`ConfigError` (one line, no credentials) when it answers with a refusal: not
    ``/health``, which MLflow answers whatever the Host header, while it refuses every API call
    (403) from a host name it does not allow. A server error (5xx: a proxy in front of a loaded
    server) is silence, not a refusal."""
    parts = urlsplit(uri)
    host = host_header(parts)
    path = parts.path.rstrip("/") + CHECK_PATH
    request = urllib.request.Request(urlunsplit((parts.scheme, host, path, CHECK_QUERY, "")))
    if parts.username:
        token = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
        request.add_header("Authorization", "Basic " + base64.b64encode(token).decode())
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            response.read()
    except urllib.error.HTTPError as error:
        if error.code >= 500:
            return f"HTTP {error.code}"
        raise ConfigError(_refusal(uri, host, error)) from None
    except OSError as error:
        return redact(str(getattr(error, "reason", None) or error) or type(error).__name__)
    return None


def host_header(parts: SplitResult) -> str:
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
    """Create the SQLite store and migrate its schema, one process at a time (an fcntl lock);
    again after its file was removed."""
    from mlflow.store.tracking import DEFAULT_LOCAL_FILE_AND_ARTIFACT_PATH
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
    from mlflow.tracking import MlflowClient

    database = Path(uri[len("sqlite:///"):])
    try:
        database.parent.mkdir(parents=True, exist_ok=True)
        lock = database.with_name(database.name + ".lock").open("a")
    except OSError as error:
        raise ConfigError(
            f"MLflow store {database}: cannot create it ({error.strerror or error})"
        ) from error
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            # MLflow's client keeps one store object per URI, which creates the schema only when
            # it is made: a store object made here creates it again in a file removed since.
            SqlAlchemyStore(uri, DEFAULT_LOCAL_FILE_AND_ARTIFACT_PATH)
            MlflowClient(uri).search_experiments(max_results=1)
        except Exception as error:
            raise ConfigError(f"MLflow store {database}: {redact(str(error))}") from error
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def local_artifacts(results_dir: Path) -> Path:
    """The folder of the embedded store's artifacts, symbolic links resolved."""
    return (results_dir / ARTIFACTS).resolve()


def lies_elsewhere(location: str, artifacts: Path) -> bool:
    """Whether the artifact URI ``location`` is a local one inside another results folder's
    ``mlartifacts`` than ``artifacts``: the folder was moved or copied since it was recorded.
    Symbolic links are followed (one from the old place to the new one makes it valid again);
    locations of other schemes, and local ones outside any ``mlartifacts`` (MLflow's own
    ``Default`` experiment's ``./mlruns``), are not judged."""
    parts = urlsplit(location)
    if parts.scheme not in ("", "file"):
        return False
    path = Path(unquote(parts.path)).resolve()
    return ARTIFACTS in path.parts and not path.is_relative_to(artifacts)


def artifacts_elsewhere(uri: str, results_dir: Path) -> dict[str, list[str]]:
    """By artifact location, the names of the store's experiments whose artifacts are recorded
    in another results folder's ``mlartifacts`` (:func:`lies_elsewhere`), read through MLflow's
    client."""
    from mlflow.entities import ViewType
    from mlflow.tracking import MlflowClient

    artifacts = local_artifacts(results_dir)
    found: dict[str, list[str]] = {}
    for experiment in MlflowClient(uri).search_experiments(view_type=ViewType.ALL):
        location = experiment.artifact_location or ""
        if lies_elsewhere(location, artifacts):
            found.setdefault(location, []).append(experiment.name)
    return found


_WARNED: set[tuple[str, str]] = set()  # (store, location) already warned about in this process


def warn_of_artifacts_elsewhere(uri: str, results_dir: Path) -> None:
    """One warning per process and location for the experiments whose artifacts MLflow looks for
    in another results folder (this one was moved or copied; the module's docstring)."""
    try:
        elsewhere = artifacts_elsewhere(uri, results_dir)
    except Exception as error:  # reading the store failed: whatever uses it next will say so
        log.debug("MLflow store %s: artifact locations not read (%s)", uri, error)
        return
    for location, names in sorted(elsewhere.items()):
        if (uri, location) in _WARNED:
            continue
        _WARNED.add((uri, location))
        log.warning(
            "MLflow store %s: the artifacts of %d experiment(s) (%s) are recorded under %s,"
            " outside this results folder (moved or copied): MLflow keeps artifact locations"
            " as absolute paths and has no call to change them, so its UI and download_artifacts"
            " look there, while the files logged before are in %s; no artifact is logged to"
            " their runs from here (a symbolic link from the old results folder to this one"
            " makes the locations valid again)",
            uri.removeprefix("sqlite:///"), len(names), ", ".join(sorted(names)), location,
            local_artifacts(results_dir))
