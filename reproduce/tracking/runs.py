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
when the run finishes. Only rank 0 ever calls into this module.

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
import subprocess
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

import mlflow
from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient

from reproduce.files import read_records, write_text_whole
from reproduce.tracking.store import (
    artifact_root, embedded_uri, fail_fast_over_http, is_server, lies_elsewhere, local_artifacts,
    open_sqlite_store, prepare_store, redact, redact_credentials_in_logs, tracking_uri,
)
from reproduce.tracking.view import (
    VIEW_STATE_TAG, key_results_view_state, score_metric, summary_metric,
)

if TYPE_CHECKING:
    from mlflow.entities import DatasetInput

    from reproduce.config import DataConfig, ResolvedVariant

log = logging.getLogger(__name__)

RUN_ID_FILE = "mlflow_run_id"
# MLflow 3's value for classic model training (its UI's ExperimentKind.CUSTOM_MODEL_DEVELOPMENT).
EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}
# While the store is unreachable, calls are attempted again after this many seconds, not on
# every step: a lost server must not slow training down.
RETRY_AFTER_SECONDS = 30.0
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
    (this one was moved or copied: :mod:`reproduce.tracking.store`) logs no artifact."""

    def __init__(self, client: MlflowClient, run_id: str, metrics_file: Path | None = None,
                 artifacts_in: Path | None = None):
        self.client = client
        self.run_id = run_id
        self.metrics_file = metrics_file
        self.artifacts_in = artifacts_in
        self.outage_since: float | None = None
        self._last_attempt = 0.0
        self._system_metrics = None
        self._artifact_uri: str | None = None

    # -- logging ---------------------------------------------------------------------------------
    def log_params(self, params: dict[str, Any]) -> None:
        def log_new() -> None:
            existing = self.client.get_run(self.run_id).data.params
            fresh = [Param(key, str(value)) for key, value in params.items() if key not in existing]
            if fresh:
                self.client.log_batch(self.run_id, params=fresh)
        self._call("logging params", log_new)

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        now = int(time.time() * 1000)
        entries = [Metric(key, float(value), now, step) for key, value in metrics.items()
                   if isinstance(value, (int, float)) and not isinstance(value, bool)]
        self._call("logging metrics", lambda: self.client.log_batch(self.run_id, metrics=entries))

    def log_artifact(self, path: Path, folder: str | None = None) -> None:
        """Store ``path`` as an artifact, unless MLflow would write it outside this results
        folder (:meth:`artifacts_elsewhere`): then it is left out, logged at INFO (the store's
        warning on opening said why)."""
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

    def log_datasets(self, inputs: list["DatasetInput"]) -> None:
        self._call("logging datasets", lambda: self.client.log_inputs(self.run_id, datasets=inputs))

    def set_tags(self, tags: dict[str, str]) -> None:
        def set_all() -> None:
            for key, value in tags.items():
                self.client.set_tag(self.run_id, key, value)
        self._call("setting tags", set_all)

    def log_summary(self, summary: dict[str, Any], artifacts: list[Path]) -> None:
        """A finished training's summary: counts as params, results as ``summary/<name>``
        metrics at step 0 (one value each, not a curve: :mod:`reproduce.tracking.view`), files
        as artifacts."""
        self.log_params({key: summary[key] for key in SUMMARY_PARAMS if key in summary})
        self.log_metrics({summary_metric(key): value for key, value in summary.items()
                          if key not in _NOT_METRICS}, step=0)
        for path in artifacts:
            self.log_artifact(path, "train")

    def log_scores(self, split: str, checkpoint: str, scores: dict[str, float]) -> None:
        """A split's scores of a checkpoint (``last``, ``averaged``), as
        ``<split>_<checkpoint>_<name>`` metrics at step 0: one value each, not a curve."""
        self.log_metrics({score_metric(split, checkpoint, name): value
                          for name, value in scores.items()}, step=0)

    def replay_metrics(self, last_chance: bool = False) -> int:
        """Log the lines of ``metrics.jsonl`` whose (metric, step) the run lacks; their count.
        ``last_chance``: try even within an outage's back-off (the run is ending)."""
        if self.metrics_file is None or not self.metrics_file.exists():
            return 0
        recorded = read_records(self.metrics_file)
        keys = {key for entry in recorded for key in entry if key != "step"}
        missing: list[Metric] = []

        def find_missing() -> None:
            now = int(time.time() * 1000)
            for key in sorted(keys):
                logged = {metric.step
                          for metric in self.client.get_metric_history(self.run_id, key)}
                missing.extend(Metric(key, float(entry[key]), now, entry["step"])
                               for entry in recorded
                               if key in entry and entry["step"] not in logged)
            for start in range(0, len(missing), _BATCH):
                self.client.log_batch(self.run_id, metrics=missing[start:start + _BATCH])

        replayed = self._call("replaying metrics.jsonl", find_missing, last_chance)
        return len(missing) if replayed else 0

    # -- life cycle ------------------------------------------------------------------------------
    def start_system_metrics(self, tracking: str) -> None:
        """CPU, memory, disk, network (and GPU utilisation and memory with pynvml) every 10 s."""
        from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

        try:
            self._system_metrics = SystemMetricsMonitor(self.run_id, resume_logging=True,
                                                        tracking_uri=tracking)
            self._system_metrics.start()
        except Exception as error:  # a store that went away between two calls
            log.warning("MLflow system metrics not recorded: %s", _first_line(error))
            self._system_metrics = None

    def finish(self, status: str = "FINISHED") -> None:
        """End the run as FINISHED, FAILED or KILLED, after replaying what the store missed: a
        last attempt at both even within an outage's back-off, as nothing comes after it."""
        if self._system_metrics is not None:
            self._system_metrics.finish()
            self._system_metrics = None
        self.replay_metrics(last_chance=True)
        if not self._call(f"marking the run {status}",
                          lambda: self.client.set_terminated(self.run_id, status),
                          last_chance=True):
            log.warning("MLflow run %s could not be marked %s; it shows its last status",
                        self.run_id, status)

    def _call(self, what: str, action: Callable[[], None], last_chance: bool = False) -> bool:
        """Run ``action``; on failure warn (once per outage) and return False instead of raising.
        Within an outage, calls wait ``RETRY_AFTER_SECONDS`` between attempts (a training must not
        stall on a dead store), but for a ``last_chance``."""
        if (self.outage_since is not None and not last_chance
                and time.monotonic() - self._last_attempt < RETRY_AFTER_SECONDS):
            return False
        self._last_attempt = time.monotonic()
        try:
            _retry_while_locked(action)
        except Exception as error:
            if self.outage_since is None:
                self.outage_since = time.monotonic()
                kept = (f"; metrics stay in {self.metrics_file} and are replayed"
                        if self.metrics_file else "")
                log.warning("MLflow: %s failed (%s); going on without tracking%s "
                            "when the store is back",
                            what, _first_line(error), kept)
            return False
        if self.outage_since is not None:
            log.warning("MLflow: the store answers again after %.0f s",
                        time.monotonic() - self.outage_since)
            self.outage_since = None
            self.replay_metrics()
        return True


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
    a new one."""
    client = _client(results_dir)
    recorded = run_id_dir / RUN_ID_FILE
    if recorded.exists():
        run_id = recorded.read_text().strip()
        try:
            client.update_run(run_id, status="RUNNING")
            return VariantRun(client, run_id, metrics_file, _artifacts_in(results_dir))
        except mlflow.exceptions.MlflowException:
            pass  # recorded in another store (MLFLOW_TRACKING_URI changed): start a new run
    run = client.create_run(
        _experiment_id(client, dataset, results_dir),
        run_name=run_name(variant, seed),
        tags={**_run_tags(dataset, variant, seed, "train"), "table3_row": table3_row or ""},
    )
    write_text_whole(recorded, run.info.run_id)  # its folder made
    return VariantRun(client, run.info.run_id, metrics_file, _artifacts_in(results_dir))


def start_training_run(
    results_dir: Path, dataset: str, variant: "ResolvedVariant", output_dir: Path,
    data: "DataConfig | None" = None, world_size: int = 1,
) -> VariantRun:
    """A variant's run, ready for training: params, dataset inputs and system metrics logged."""
    from reproduce.tracking.datasets import dataset_inputs

    fail_fast_over_http()  # in a submitit job too, whose environment may not carry the launcher's
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
