"""MLflow runs: one experiment per dataset with one run per training (a variant with one of its
seeds, named ``<variant> seed <n>`` and tagged ``variant`` and ``seed``), and beside it an
experiment ``<dataset> tables`` with the one run that holds the rendered tables.

Experiments are tagged as model training (``mlflow.experimentKind``); a dataset's experiment also
carries the view of its key results (:mod:`reproduce.tracking.view`). The tables have an
experiment of their own so that the runs table of the variants, and its charts and compare view,
list the variants alone. Runs carry MLflow's system tags (source, commit, user, run name) and a
``kind`` tag, ``variant`` or ``tables``. A ``kind`` tag, not a parent run per pipeline
invocation: Snakemake runs every stage in its own process (on Slurm, on
other nodes, and training again after each requeue), and a variant's run outlives the invocation
that started it (its BLEU is logged by later ones), so there is no invocation-wide run to hang it
under.

Logging never costs a training: a failed call warns once per outage and returns; the training
metrics stay in ``metrics.jsonl`` and are replayed into the run when the store answers again and
when the run finishes. A training's run is opened when the store first answers (a server slow or
down when the training starts), and recorded again as a new run, from what it was given and
``metrics.jsonl``, when the store lost it during the training (:class:`VariantRun`). Only rank 0
ever calls into this module.

The store is a sink: the stages after training (score, attention, tables) write their result
files first and log afterwards (:func:`log_best_effort`), what they log coming from their own
inputs and outputs. A store that is unreachable, deleted or another one changes no result file;
the stage says so in one warning line. A score finds the variant's run by its tags, and starts
one so tagged when there is none (a deleted store, a training run elsewhere), so that it
needs nothing from the training's run.
"""

from __future__ import annotations

import getpass
import logging
import math
import subprocess
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

import mlflow
from mlflow.entities import DatasetInput, Metric, Param
from mlflow.tracking import MlflowClient

from reproduce.files import read_records, write_text_whole
from reproduce.tracking.store import (
    artifact_root, configure_client, embedded_uri, found_silent, is_server, lies_elsewhere,
    local_artifacts, open_sqlite_store, prepare_store, redact, redact_credentials_in_logs,
    tracking_uri,
)
from reproduce.tracking.view import (
    VIEW_STATE_TAG, key_results_view_state, score_metric, summary_metric,
)

if TYPE_CHECKING:
    from reproduce.config import DataConfig, ResolvedVariant

log = logging.getLogger(__name__)

RUN_ID_FILE = "mlflow_run_id"
# MLflow 3's value for classic model training (its UI's ExperimentKind.CUSTOM_MODEL_DEVELOPMENT).
EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}
# While the store is unreachable, calls are attempted again after this many seconds, not on
# every step: a lost server must not slow training down.
RETRY_AFTER_SECONDS = 30.0
MAX_RETRY_AFTER_SECONDS = 480.0
# The summary's values that describe the run rather than its results (``steps`` is already the
# param ``training.steps``): logged as params, never also as metrics.
SUMMARY_PARAMS = ("parameters", "world_size", "device", "precision")
_NOT_METRICS = (*SUMMARY_PARAMS, "steps")
_BATCH = 1000  # MLflow's limit of metrics per log_batch call


def git_commit() -> str | None:
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"],
            capture_output=True, text=True, check=True, cwd=Path(__file__).parent,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def system_tags(command: str, run_name: str) -> dict[str, str]:
    """MLflow's own tags, which fill the UI's Source, Version and User columns."""
    tags = {"mlflow.runName": run_name, "mlflow.source.type": "LOCAL",
            "mlflow.source.name": f"python -m reproduce {command}"}
    commit = git_commit()
    if commit:
        tags["mlflow.source.git.commit"] = commit
    try:
        tags["mlflow.user"] = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry and no $USER in some containers
        pass
    return tags


class VariantRun:
    """One MLflow run; every call retries a locked SQLite store and survives an unreachable one.

    ``artifacts_in``: the embedded store's artifact folder (``<results>/mlartifacts``), where this
    run's artifacts must go; a run whose recorded artifact location is another results folder's
    (this one was moved or copied: :mod:`reproduce.tracking.store`) logs no artifact.

    ``opener`` (a training's run, :class:`RunOpener`): the run is opened by it at the first call
    the store answers, which is later than the training's start when the server is slow or down
    then; and opened again when the store has lost it (its SQLite file removed during the
    training, the store replaced), as a new run. Everything given to the run is kept (params,
    tags, datasets, single values, artifacts; the step metrics are in ``metrics.jsonl``), and a
    run just opened, or a store answering again after an outage, gets what it lacks of it
    (:meth:`_catch_up`): nothing of a training is lost to its store."""

    def __init__(self, client: MlflowClient | None, run_id: str | None,
                 metrics_file: Path | None = None, artifacts_in: Path | None = None,
                 opener: RunOpener | None = None):
        self.client = client
        self.run_id = run_id
        self.metrics_file = metrics_file
        self.artifacts_in = artifacts_in
        self.opener = opener
        self.outage_since: float | None = None
        self._failures = 0  # attempts failed in a row (the back-off doubles with each)
        self._last_attempt = 0.0
        self._behind = False  # the store may lack something given to the run
        self._system_metrics = None
        self._system_metrics_uri: str | None = None
        self._artifact_uri: str | None = None
        # What the run was given, besides the step metrics of metrics.jsonl.
        self._params: dict[str, str] = {}
        self._tags: dict[str, str] = {}
        self._datasets: list[DatasetInput] = []
        self._values: dict[str, float] = {}  # single values (step 0): the summary, the scores
        self._last_steps: dict[str, int] = {}  # step metric -> the last step the run holds
        self._artifacts: dict[tuple[str | None, str], Path] = {}  # (folder, name) -> file

    # -- opening ---------------------------------------------------------------------------------
    def open(self) -> None:
        """Open the run now (a warning and a later attempt when the store does not answer)."""
        self._call("opening the run", lambda: None)

    def wait_for_store(self, silent_since: float) -> None:
        """Open the run no sooner than the back-off after ``silent_since``, when the store was
        found silent (:func:`reproduce.tracking.store.found_silent`), which has been warned of."""
        self.outage_since = self._last_attempt = silent_since
        self._failures, self._behind = 1, True

    # -- logging ---------------------------------------------------------------------------------
    def log_params(self, params: dict[str, Any]) -> None:
        given = {key: str(value) for key, value in params.items()}
        self._params |= {key: value for key, value in given.items() if key not in self._params}
        self._call("logging params", lambda: self._log_params(given))

    def _log_params(self, params: dict[str, str]) -> None:
        """The ``params`` that the run lacks (MLflow refuses another value for a logged one)."""
        existing = self.client.get_run(self.run_id).data.params
        fresh = [Param(key, value) for key, value in params.items() if key not in existing]
        if fresh:
            self.client.log_batch(self.run_id, params=fresh)

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        now = int(time.time() * 1000)
        entries = [Metric(key, float(value), now, step) for key, value in metrics.items()
                   if _is_number(value)]
        self._call("logging metrics", lambda: self._log_new_steps(entries))

    def _log_new_steps(self, entries: list[Metric]) -> None:
        """The ``entries`` past the last step the run holds of their metric. A resumed training
        trains again the steps after its checkpoint, which the run was given before the kill
        (``metrics.jsonl`` drops them:
        :meth:`reproduce.training.run_records.RunRecords.keep_until`); MLflow deletes no point,
        so the run keeps the first value of such a step, which an eager resume computes again
        bit for bit."""
        fresh = [entry for entry in entries if entry.step > self._last_step(entry.key)]
        if fresh:
            self.client.log_batch(self.run_id, metrics=fresh)
        for entry in fresh:
            self._last_steps[entry.key] = max(self._last_steps[entry.key], entry.step)

    def _last_step(self, key: str) -> int:
        """The last step of ``key`` in the run (-1 for none), read once for each run."""
        if key not in self._last_steps:
            self._last_steps[key] = max(
                (metric.step for metric in self.client.get_metric_history(self.run_id, key)),
                default=-1)
        return self._last_steps[key]

    def log_values(self, values: dict[str, Any]) -> None:
        """Single values, as metrics at step 0 (one value each, not a curve:
        :mod:`reproduce.tracking.view`); kept, as they are in no ``metrics.jsonl``."""
        numbers = {key: float(value) for key, value in values.items() if _is_number(value)}
        self._values |= numbers
        self._call("logging metrics", lambda: self._log_values(numbers))

    def _log_values(self, values: dict[str, float]) -> None:
        """The ``values`` that the run does not show (as its latest), at step 0."""
        shown = self.client.get_run(self.run_id).data.metrics
        now = int(time.time() * 1000)
        entries = [Metric(key, value, now, 0) for key, value in values.items()
                   if not _same(shown.get(key), value)]
        if entries:
            self.client.log_batch(self.run_id, metrics=entries)

    def log_artifact(self, path: Path, folder: str | None = None) -> None:
        """Store ``path`` as an artifact, unless MLflow would write it outside this results
        folder (:meth:`artifacts_elsewhere`): then it is left out, logged at INFO (the store's
        warning on opening said why)."""
        self._artifacts[folder, path.name] = path
        elsewhere = self.artifacts_elsewhere()
        if elsewhere:
            log.info("MLflow: %s not stored as an artifact of run %s: MLflow would write it to"
                     " %s, outside this results folder (moved or copied)",
                     path.name, self.run_id, elsewhere)
            return
        self._call(f"storing {path.name}",
                   lambda: self.client.log_artifact(self.run_id, str(path), folder))

    def artifacts_elsewhere(self) -> str | None:
        """The run's artifact URI when it lies in another results folder than ``artifacts_in``
        (MLflow records it as an absolute path when the run is created, and its client has no
        call to change it), else None; None too when the run cannot be read now (the logging
        call that follows meets the same outage and reports it)."""
        if self.artifacts_in is None:
            return None
        if self._artifact_uri is None:
            try:
                self._artifact_uri = self.client.get_run(self.run_id).info.artifact_uri
            except Exception:
                return None
        return self._artifact_uri if lies_elsewhere(self._artifact_uri, self.artifacts_in) else None

    def log_datasets(self, inputs: list[DatasetInput]) -> None:
        self._datasets.extend(inputs)
        self._call("logging datasets", lambda: self.client.log_inputs(self.run_id, datasets=inputs))

    def set_tags(self, tags: dict[str, str]) -> None:
        self._tags |= tags

        def set_all() -> None:
            for key, value in tags.items():
                self.client.set_tag(self.run_id, key, value)
        self._call("setting tags", set_all)

    def log_summary(self, summary: dict[str, Any], artifacts: list[Path]) -> None:
        """A finished training's summary: counts as params, results as ``summary/<name>``
        single values, files as artifacts."""
        self.log_params({key: summary[key] for key in SUMMARY_PARAMS if key in summary})
        self.log_values({summary_metric(key): value for key, value in summary.items()
                         if key not in _NOT_METRICS})
        for path in artifacts:
            self.log_artifact(path, "train")

    def log_scores(self, split: str, checkpoint: str, scores: dict[str, float]) -> None:
        """A split's scores of a checkpoint (``last``, ``averaged``), as
        ``<split>_<checkpoint>_<name>`` single values."""
        self.log_values({score_metric(split, checkpoint, name): value
                         for name, value in scores.items()})

    def replay_metrics(self) -> int:
        """Log the lines of ``metrics.jsonl`` whose (metric, step) the run lacks; their count."""
        replayed: list[int] = []
        if not self._call("replaying metrics.jsonl", lambda: replayed.append(self._replay())):
            return 0
        return replayed[0]

    def _replay(self) -> int:
        """Log the lines of ``metrics.jsonl`` whose (metric, step) the run lacks; their count."""
        if self.metrics_file is None or not self.metrics_file.exists():
            return 0
        recorded = read_records(self.metrics_file)
        keys = {key for entry in recorded for key in entry if key != "step"}
        now = int(time.time() * 1000)
        missing: list[Metric] = []
        held: dict[str, int] = {}  # metric -> the last step the run holds once this is logged
        for key in sorted(keys):
            logged = {metric.step for metric in self.client.get_metric_history(self.run_id, key)}
            missing.extend(Metric(key, float(entry[key]), now, entry["step"])
                           for entry in recorded if key in entry and entry["step"] not in logged)
            held[key] = max(logged | {entry["step"] for entry in recorded if key in entry})
        for start in range(0, len(missing), _BATCH):
            self.client.log_batch(self.run_id, metrics=missing[start:start + _BATCH])
        self._last_steps |= held
        return len(missing)

    def _catch_up(self) -> None:
        """Log what the run lacks of what it was given (:meth:`__init__`) and of
        ``metrics.jsonl``: after an outage, and to a run just opened (again)."""
        run = self.client.get_run(self.run_id)
        params = [Param(key, value) for key, value in self._params.items()
                  if key not in run.data.params]
        now = int(time.time() * 1000)
        values = [Metric(key, value, now, 0) for key, value in self._values.items()
                  if not _same(run.data.metrics.get(key), value)]
        if params or values:
            self.client.log_batch(self.run_id, metrics=values, params=params)
        for key, value in self._tags.items():
            if run.data.tags.get(key) != value:
                self.client.set_tag(self.run_id, key, value)
        if self._datasets and not run.inputs.dataset_inputs:
            self.client.log_inputs(self.run_id, datasets=self._datasets)
        self._replay()
        self._store_missing_artifacts()
        self._behind = False

    def _store_missing_artifacts(self) -> None:
        if not self._artifacts or self.artifacts_elsewhere():
            return
        stored: dict[str | None, set[str]] = {}
        for (folder, name), path in self._artifacts.items():
            if folder not in stored:
                stored[folder] = {Path(item.path).name
                                  for item in self.client.list_artifacts(self.run_id, folder)}
            if name not in stored[folder] and path.exists():
                self.client.log_artifact(self.run_id, str(path), folder)

    # -- life cycle ------------------------------------------------------------------------------
    def start_system_metrics(self, tracking: str) -> None:
        """CPU, memory, disk, network (and GPU utilisation and memory with pynvml) every 10 s,
        from when the run is open."""
        self._system_metrics_uri = tracking
        if self.run_id is not None:
            self._start_system_metrics()

    def _start_system_metrics(self) -> None:
        from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

        try:
            self._system_metrics = SystemMetricsMonitor(self.run_id, resume_logging=True,
                                                        tracking_uri=self._system_metrics_uri)
            self._system_metrics.start()
        except Exception as error:  # a store that went away between two calls
            log.warning("MLflow system metrics not recorded: %s", _first_line(error))
            self._system_metrics = None

    def _stop_system_metrics(self) -> None:
        if self._system_metrics is not None:
            self._system_metrics.finish()
            self._system_metrics = None

    def finish(self, status: str = "FINISHED") -> None:
        """End the run as FINISHED, FAILED or KILLED, after it caught up with what the store
        missed: a last attempt even within an outage's back-off, as nothing comes after it; one,
        so that a store that does not answer costs the end of a training (a stop signal's grace
        period before Slurm requeues the job) one timeout, not two."""
        self._stop_system_metrics()
        self._system_metrics_uri = None  # none started for a run opened now, as it ends
        if (self._call("logging what the store missed", self._catch_up, last_chance=True)
                and self._call(f"marking the run {status}",
                               lambda: self.client.set_terminated(self.run_id, status),
                               last_chance=True)):
            return
        if self.run_id is None:
            log.warning("MLflow: the store did not answer during the training; no run of it is"
                        " recorded (%s keeps its metrics)", self.metrics_file)
        else:
            log.warning("MLflow run %s could not be marked %s; it shows its last status",
                        self.run_id, status)

    def _call(self, what: str, action: Callable[[], None], last_chance: bool = False) -> bool:
        """Run ``action`` (:meth:`_attempt`); on failure warn (once per outage) and return False
        instead of raising. Within an outage, calls wait :meth:`_back_off` between attempts (a
        training must not stall on a dead store), but for a ``last_chance``."""
        if (self.outage_since is not None and not last_chance
                and time.monotonic() - self._last_attempt < self._back_off()):
            return False
        try:
            self._attempt(action)
        except Exception as error:
            self._behind = True
            self._failures += 1
            self._last_attempt = time.monotonic()
            if self.outage_since is None:
                self.outage_since = self._last_attempt
                kept = (f"; metrics stay in {self.metrics_file} and are replayed"
                        if self.metrics_file else "")
                log.warning("MLflow: %s failed (%s); going on without tracking%s "
                            "when the store is back",
                            what, _first_line(error), kept)
            return False
        self._failures = 0
        if self.outage_since is not None:
            log.warning("MLflow: the store answers again after %.0f s",
                        time.monotonic() - self.outage_since)
            self.outage_since = None
        return True

    def _back_off(self) -> float:
        """Seconds from a failed attempt to the next: ``RETRY_AFTER_SECONDS``, doubled with each
        further failure up to ``MAX_RETRY_AFTER_SECONDS``. An attempt on a server that accepts
        connections and never answers takes MLflow's timeout and retry (about 20 s with
        :data:`~reproduce.tracking.store.FAST_FAILING_HTTP`), which a long outage must not cost
        the training every half minute."""
        return min(RETRY_AFTER_SECONDS * 2 ** max(self._failures - 1, 0), MAX_RETRY_AFTER_SECONDS)

    def _attempt(self, action: Callable[[], None]) -> None:
        """``action``, in the run opened first if it is not yet, or its SQLite store was removed
        (:meth:`RunOpener.store_removed`). A failing action is tried once more in the run opened
        again where the store may have lost it (:meth:`RunOpener.may_have_lost`). The run then
        catches up (:meth:`_catch_up`) when it may lack something: after a failure, or opened
        anew."""
        if self.run_id is None or (self.opener is not None and self.opener.store_removed()):
            self._open()
        try:
            _retry_while_locked(action)
        except Exception as error:
            if self.opener is None or not self.opener.may_have_lost(error):
                raise
            self._open()
            _retry_while_locked(action)
        if self._behind:
            self._catch_up()

    def _open(self) -> None:
        """Open the run with the opener; a run other than the one this was (a new run in a
        store that lost it, or the first) is behind, and its system metrics start."""
        client, run_id = self.opener.open()
        lost, self.client = self.run_id, client
        if run_id == lost:
            return
        self._last_steps.clear()
        if lost is not None:
            log.warning("MLflow: run %s is not in the store any more (removed or replaced); the"
                        " training is recorded again as run %s, from what it logged and %s",
                        lost, run_id, self.metrics_file)
        self.run_id, self._artifact_uri, self._behind = run_id, None, True
        if self._system_metrics_uri is not None:
            self._stop_system_metrics()
            self._start_system_metrics()


# MLflow's error codes for a run that the store does not hold (RESOURCE_DOES_NOT_EXIST), or holds
# deleted (INVALID_PARAMETER_VALUE: it must be active to log to it).
RUN_GONE = ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE")


@dataclass
class RunOpener:
    """Opens a training's run: the one recorded in ``run_id_dir`` if the store holds it
    (resumed), else a new one, recorded there; the SQLite store created first (again, if its
    file was removed)."""

    results_dir: Path
    dataset: str
    variant: str
    seed: int
    table3_row: str | None
    run_id_dir: Path

    def open(self) -> tuple[MlflowClient, str]:
        client = _client(self.results_dir)
        recorded = self.run_id_dir / RUN_ID_FILE
        if recorded.exists():
            run_id = recorded.read_text().strip()
            try:
                client.update_run(run_id, status="RUNNING")
                return client, run_id
            except mlflow.exceptions.MlflowException as error:
                if error.error_code not in RUN_GONE:
                    raise
                # Another store (MLFLOW_TRACKING_URI changed), one removed since, or the run
                # deleted: a new run.
        run = client.create_run(
            _experiment_id(client, self.dataset, self.results_dir),
            run_name=run_name(self.variant, self.seed),
            tags={**_run_tags(self.dataset, self.variant, self.seed, "train"),
                  "table3_row": self.table3_row or ""},
        )
        write_text_whole(recorded, run.info.run_id)  # its folder made
        return client, run.info.run_id

    def store_removed(self) -> bool:
        """Whether the store is a SQLite file that is gone: removed during the training. It is
        created again before the next call, which would create an empty file and fail in it."""
        uri = tracking_uri(self.results_dir)
        return uri.startswith("sqlite:///") and not Path(uri[len("sqlite:///"):]).exists()

    def may_have_lost(self, error: Exception) -> bool:
        """Whether the run may be gone from the store after ``error``: the store answers
        without it, or the store is a SQLite file (a removed one fails every call, and opening
        it again costs little)."""
        return (not is_server(tracking_uri(self.results_dir))
                or getattr(error, "error_code", None) in RUN_GONE)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _same(shown: float | None, value: float) -> bool:
    """Whether a run shows ``value`` as its latest (``nan`` shows as itself)."""
    return shown is not None and (shown == value or (math.isnan(shown) and math.isnan(value)))


def _first_line(error: Exception) -> str:
    """The first line of an error's message, credentials masked (MLflow's can be long)."""
    lines = redact(str(error)).splitlines()
    return lines[0] if lines else type(error).__name__


def _retry_while_locked(call: Callable[[], None], attempts: int = 8) -> None:
    for attempt in range(attempts):
        try:
            call()
            return
        except Exception as error:  # SQLite "database is locked" under parallel jobs
            if "locked" not in str(error) or attempt == attempts - 1:
                raise
            time.sleep(0.2 * 2**attempt)


def _client(results_dir: Path) -> MlflowClient:
    """A client of the store, created first when it is a SQLite one (commands such as
    ``attention`` log without :func:`~reproduce.tracking.store.prepare_store`)."""
    open_sqlite_store(results_dir)
    return MlflowClient(tracking_uri=tracking_uri(results_dir))


def _artifacts_in(results_dir: Path) -> Path | None:
    """Where the runs of the embedded store keep artifacts (``VariantRun.artifacts_in``); None
    for a store named by MLFLOW_TRACKING_URI, which decides for itself."""
    if tracking_uri(results_dir) == embedded_uri(results_dir):
        return local_artifacts(results_dir)
    return None


def _experiment_id(client: MlflowClient, dataset: str, results_dir: Path) -> str:
    """The dataset's experiment, its variants' runs shown by the key-results view."""
    return _tagged_experiment(client, dataset, results_dir,
                              EXPERIMENT_KIND | {VIEW_STATE_TAG: key_results_view_state()})


def tables_experiment(dataset: str) -> str:
    """The name of the experiment holding a dataset's tables run."""
    return f"{dataset} tables"


def _tagged_experiment(client: MlflowClient, name: str, results_dir: Path,
                       tags: dict[str, str]) -> str:
    """The experiment ``name``, created if new, with ``tags`` (set again where they differ: an
    experiment made by an earlier version)."""
    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        # The embedded store keeps artifacts beside it (MLflow's default is ./mlruns in the
        # working directory); a tracking server decides for itself.
        artifacts = None
        if not is_server(tracking_uri(results_dir)):
            artifacts = artifact_root(results_dir)
        try:
            client.create_experiment(name, artifact_location=artifacts, tags=tags)
        except mlflow.exceptions.MlflowException:  # created meanwhile by a parallel job
            pass
        experiment = client.get_experiment_by_name(name)
    for key, value in tags.items():
        if experiment.tags.get(key) != value:
            client.set_experiment_tag(experiment.experiment_id, key, value)
    return experiment.experiment_id


def run_name(variant: str, seed: int) -> str:
    """A training's run name: the variant and its seed, so that the runs of one variant's seeds
    sit side by side in the runs table (grouped by the ``variant`` tag, as the UI offers)."""
    return f"{variant} seed {seed}"


def _run_tags(dataset: str, variant: str, seed: int, command: str) -> dict[str, str]:
    return {"dataset": dataset, "variant": variant, "seed": str(seed), "kind": "variant",
            **system_tags(command, run_name(variant, seed))}


def start_variant_run(
    results_dir: Path, dataset: str, variant: str, seed: int, table3_row: str | None,
    run_id_dir: Path, metrics_file: Path | None = None,
) -> VariantRun:
    """The run of a variant's training with ``seed``: resumed if ``run_id_dir`` records one, else
    a new one; opened now, or when the store answers (:class:`VariantRun`)."""
    run = VariantRun(None, None, metrics_file, _artifacts_in(results_dir),
                     RunOpener(results_dir, dataset, variant, seed, table3_row, run_id_dir))
    silent_since = found_silent(tracking_uri(results_dir))
    if silent_since is None:
        run.open()
    else:
        run.wait_for_store(silent_since)
    return run


def start_training_run(
    results_dir: Path, dataset: str, variant: "ResolvedVariant", output_dir: Path,
    data: "DataConfig | None" = None, world_size: int = 1,
) -> VariantRun:
    """A variant's run, ready for training: params, dataset inputs and system metrics logged."""
    from reproduce.tracking.datasets import dataset_inputs

    # In a submitit job too, whose environment may not carry the launcher's settings.
    configure_client(tracking_uri(results_dir))
    redact_credentials_in_logs()
    run = start_variant_run(results_dir, dataset, variant.name, variant.training.seed,
                            variant.table3_row, output_dir / "checkpoints",
                            metrics_file=output_dir / "train" / "metrics.jsonl")
    run.log_params(flat_params(variant, dataset) | {"world_size": world_size})
    run.set_tags({"mlflow.note.content": run_description(variant)})
    if data is not None:
        run.log_datasets(dataset_inputs(data, results_dir / dataset / "data"))
    run.start_system_metrics(tracking_uri(results_dir))
    return run


def find_variant_run(results_dir: Path, dataset: str, variant: str,
                     seed: int) -> VariantRun | None:
    """The newest run of (dataset, variant, seed), or None when it was never trained with
    tracking."""
    client = _client(results_dir)
    experiment = client.get_experiment_by_name(dataset)
    if experiment is None:
        return None
    runs = client.search_runs(
        [experiment.experiment_id],
        filter_string=f"tags.variant = '{variant}' and tags.seed = '{seed}'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    if not runs:
        return None
    return VariantRun(client, runs[0].info.run_id, artifacts_in=_artifacts_in(results_dir))


def variant_run_for(results_dir: Path, dataset: str, variant: str, seed: int,
                    command: str) -> VariantRun:
    """The newest run of (dataset, variant, seed), or a new run tagged so by ``command``."""
    found = find_variant_run(results_dir, dataset, variant, seed)
    if found is not None:
        return found
    client = _client(results_dir)
    run = client.create_run(
        _experiment_id(client, dataset, results_dir), run_name=run_name(variant, seed),
        tags=_run_tags(dataset, variant, seed, command),
    )
    client.set_terminated(run.info.run_id, "FINISHED")
    return VariantRun(client, run.info.run_id, artifacts_in=_artifacts_in(results_dir))


def log_best_effort(results_dir: Path, what: str, action: Callable[[], None]) -> bool:
    """Run ``action`` (logging ``what`` to the store), after a stage's results are on disk; any
    failure, an unreachable server included, is one warning line and never the stage's."""
    try:
        prepare_store(results_dir)
        action()
        return True
    except Exception as error:  # the store is a sink: nothing of the stage's result depends on it
        log.warning("MLflow: %s not logged (%s); the result files are written and complete "
                    "without it",
                    what, _first_line(error))
        return False


@contextmanager
def tables_run(results_dir: Path, dataset: str) -> Iterator[VariantRun]:
    """The run named 'tables' (reused) of the experiment ``<dataset> tables``, holding the
    rendered tables."""
    client = _client(results_dir)
    experiment_id = _tagged_experiment(client, tables_experiment(dataset), results_dir,
                                       EXPERIMENT_KIND)
    _delete_tables_runs_among_variants(client, dataset)
    existing = client.search_runs([experiment_id], filter_string="tags.kind = 'tables'")
    if existing:
        run_id = existing[0].info.run_id
        client.update_run(run_id, status="RUNNING")
    else:
        run_id = client.create_run(
            experiment_id, run_name="tables", tags={"dataset": dataset, "kind": "tables"}
        ).info.run_id
    tracked = VariantRun(client, run_id, artifacts_in=_artifacts_in(results_dir))
    tracked.set_tags(system_tags("tables", "tables"))
    try:
        yield tracked
    except BaseException:
        tracked.finish("FAILED")
        raise
    tracked.finish()


def _delete_tables_runs_among_variants(client: MlflowClient, dataset: str) -> None:
    """Delete the tables runs that an earlier version kept in the dataset's experiment, among
    the variants: the tables experiment holds them now. MLflow's deletion is soft (the UI lists
    deleted runs, and restores them)."""
    experiment = client.get_experiment_by_name(dataset)
    if experiment is None:
        return
    for run in client.search_runs([experiment.experiment_id], "tags.kind = 'tables'"):
        client.delete_run(run.info.run_id)
        log.warning("MLflow: the tables run %s of experiment %s deleted (restorable); the tables"
                    " are logged to the experiment '%s'", run.info.run_id, dataset,
                    tables_experiment(dataset))


def flat_params(variant: "ResolvedVariant", dataset: str) -> dict[str, Any]:
    """A variant's resolved hyper-parameters as MLflow params: ``model.d_model``,
    ``training.steps``..."""
    params: dict[str, Any] = {"dataset": dataset, "variant": variant.name}
    for section in ("model", "training", "decoding"):
        _flatten(getattr(variant, section).model_dump(), section, params)
    return params


def run_description(variant: "ResolvedVariant") -> str:
    """The run's description in the MLflow UI: its table row and what it changes."""
    row = f"Table 3 row {variant.table3_row}" if variant.table3_row else "not a Table 3 row"
    return (f"{variant.name} ({row}): "
            f"{variant.description or 'no description in the experiment file'}")


def _flatten(values: dict[str, Any], prefix: str, into: dict[str, Any]) -> None:
    for key, value in values.items():
        if isinstance(value, dict):
            _flatten(value, f"{prefix}.{key}", into)
        else:
            into[f"{prefix}.{key}"] = value
