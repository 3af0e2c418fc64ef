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
from typing import Any, Iterator
from contextlib import contextmanager

import mlflow
from mlflow.tracking import MlflowClient

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


def _experiment_id(client: MlflowClient, dataset: str) -> str:
    experiment = client.get_experiment_by_name(dataset)
    if experiment is not None:
        return experiment.experiment_id
    try:
        return client.create_experiment(dataset)
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
        client.update_run(run_id, status="RUNNING")
        return VariantRun(client, run_id)
    run = client.create_run(
        _experiment_id(client, dataset),
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
    """A run named 'tables' in the dataset's experiment, holding the rendered tables."""
    client = _client(results_dir)
    run = client.create_run(
        _experiment_id(client, dataset),
        run_name="tables",
        tags={"dataset": dataset, "kind": "tables", "git_commit": git_commit()},
    )
    tracked = VariantRun(client, run.info.run_id)
    yield tracked
    tracked.finish()
