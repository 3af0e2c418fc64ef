"""MLflow tracking: one experiment per dataset, one run per model variant.

The store is ``MLFLOW_TRACKING_URI`` when set, else an embedded SQLite file beside the results
(``sqlite:///<results>/mlflow.db``). Training opens the variant's run (or resumes the one recorded
beside its checkpoints after a requeue); decoding, scoring and the tables re-open it by its tags.
Only rank 0 ever calls into this module.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Iterator

import mlflow
from mlflow.tracking import MlflowClient

if TYPE_CHECKING:
    from reproduce.config import ResolvedVariant

RUN_ID_FILE = "mlflow_run_id"


def tracking_uri(results_dir: Path) -> str:
    """``MLFLOW_TRACKING_URI`` if set, else the SQLite store inside ``results_dir``."""
    configured = os.environ.get("MLFLOW_TRACKING_URI")
    if configured:
        return configured
    return f"sqlite:///{(results_dir / 'mlflow.db').resolve()}"


def initialise_store(results_dir: Path) -> str:
    """Create the store (and run its schema migrations) once, before parallel jobs use it."""
    uri = tracking_uri(results_dir)
    results_dir.mkdir(parents=True, exist_ok=True)
    mlflow.set_tracking_uri(uri)
    MlflowClient().search_experiments(max_results=1)
    return uri


def git_commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"],
            capture_output=True, text=True, check=True, cwd=Path(__file__).parent,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


class VariantRun:
    """The MLflow run of one (dataset, variant); a thin layer that retries a locked SQLite store."""

    def __init__(self, client: MlflowClient, run_id: str):
        self.client = client
        self.run_id = run_id

    def log_params(self, params: dict[str, Any]) -> None:
        existing = self.client.get_run(self.run_id).data.params
        fresh = {key: str(value) for key, value in params.items() if key not in existing}
        if fresh:
            self._retry(lambda: self.client.log_batch(
                self.run_id, params=[mlflow.entities.Param(k, v) for k, v in fresh.items()]
            ))

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        now = int(time.time() * 1000)
        entries = [
            mlflow.entities.Metric(key, float(value), now, step)
            for key, value in metrics.items()
            if isinstance(value, (int, float))
        ]
        self._retry(lambda: self.client.log_batch(self.run_id, metrics=entries))

    def log_artifact(self, path: Path, folder: str | None = None) -> None:
        self._retry(lambda: self.client.log_artifact(self.run_id, str(path), folder))

    def set_tags(self, tags: dict[str, str]) -> None:
        for key, value in tags.items():
            self._retry(lambda: self.client.set_tag(self.run_id, key, value))

    def finish(self) -> None:
        self._retry(lambda: self.client.set_terminated(self.run_id, "FINISHED"))

    @staticmethod
    def _retry(call, attempts: int = 8) -> None:
        for attempt in range(attempts):
            try:
                call()
                return
            except Exception as error:  # SQLite "database is locked" under parallel jobs
                if "locked" not in str(error) or attempt == attempts - 1:
                    raise
                time.sleep(0.2 * 2**attempt)


def _client(results_dir: Path) -> MlflowClient:
    return MlflowClient(tracking_uri=tracking_uri(results_dir))


def _experiment_id(client: MlflowClient, dataset: str, results_dir: Path) -> str:
    experiment = client.get_experiment_by_name(dataset)
    if experiment is not None:
        return experiment.experiment_id
    # The embedded store keeps artifacts beside it (MLflow's default is ./mlruns in the working
    # directory); a tracking server decides for itself.
    artifacts = None
    if not os.environ.get("MLFLOW_TRACKING_URI"):
        artifacts = (results_dir / "mlartifacts").resolve().as_uri()
    try:
        return client.create_experiment(dataset, artifact_location=artifacts)
    except mlflow.exceptions.MlflowException:  # created meanwhile by a parallel job
        return client.get_experiment_by_name(dataset).experiment_id


def start_variant_run(
    results_dir: Path, dataset: str, variant: str, table3_row: str | None, run_id_dir: Path
) -> VariantRun:
    """The training run of a variant: resumed if ``run_id_dir`` records one, else a new one."""
    client = _client(results_dir)
    recorded = run_id_dir / RUN_ID_FILE
    if recorded.exists():
        run_id = recorded.read_text().strip()
        try:
            client.update_run(run_id, status="RUNNING")
            return VariantRun(client, run_id)
        except mlflow.exceptions.MlflowException:
            pass  # recorded in another store (MLFLOW_TRACKING_URI changed): start a new run
    run = client.create_run(
        _experiment_id(client, dataset, results_dir),
        run_name=variant,
        tags={
            "dataset": dataset,
            "variant": variant,
            "table3_row": table3_row or "",
            "git_commit": git_commit(),
        },
    )
    run_id_dir.mkdir(parents=True, exist_ok=True)
    recorded.write_text(run.info.run_id)
    return VariantRun(client, run.info.run_id)


def find_variant_run(results_dir: Path, dataset: str, variant: str) -> VariantRun | None:
    """The newest run of (dataset, variant), or None when it was never trained with tracking."""
    client = _client(results_dir)
    experiment = client.get_experiment_by_name(dataset)
    if experiment is None:
        return None
    runs = client.search_runs(
        [experiment.experiment_id],
        filter_string=f"tags.variant = '{variant}'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    return VariantRun(client, runs[0].info.run_id) if runs else None


@contextmanager
def tables_run(results_dir: Path, dataset: str) -> Iterator[VariantRun]:
    """The run named 'tables' of the dataset's experiment (reused), holding the rendered tables."""
    client = _client(results_dir)
    experiment_id = _experiment_id(client, dataset, results_dir)
    existing = client.search_runs([experiment_id], filter_string="tags.kind = 'tables'")
    if existing:
        run_id = existing[0].info.run_id
    else:
        run_id = client.create_run(
            experiment_id, run_name="tables", tags={"dataset": dataset, "kind": "tables"}
        ).info.run_id
    tracked = VariantRun(client, run_id)
    tracked.set_tags({"git_commit": git_commit()})
    yield tracked
    tracked.finish()


def flat_params(variant: "ResolvedVariant", dataset: str) -> dict[str, Any]:
    """A variant's resolved hyper-parameters as MLflow params: ``model.d_model``, ``training.steps``..."""
    params: dict[str, Any] = {"dataset": dataset, "variant": variant.name}
    for section in ("model", "training", "decoding", "resources"):
        _flatten(getattr(variant, section).model_dump(), section, params)
    return params


def _flatten(values: dict[str, Any], prefix: str, into: dict[str, Any]) -> None:
    for key, value in values.items():
        if isinstance(value, dict):
            _flatten(value, f"{prefix}.{key}", into)
        else:
            into[f"{prefix}.{key}"] = value
