"""Where training runs: in this process, in local processes, or as a Slurm job, through submitit.

``inline`` trains in the calling process (one rank). ``local`` starts ``tasks`` processes with
submitit's local executor; ``slurm`` submits one job with one task per GPU (over
``resources.nodes`` nodes). Every task reads its rank from :class:`submitit.JobEnvironment`,
exports the torch.distributed variables with
:class:`submitit.helpers.TorchDistributedEnvironment`, and trains; rank 0 alone writes files and
logs to MLflow. On Slurm, a job that reaches its time limit or is preempted receives a signal,
and submitit requeues it (:class:`TrainingTask` is ``Checkpointable``): the requeued job resumes
from the latest checkpoint on disk. The calling process waits for the job to finish, so
Snakemake sees a single training job.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import submitit
import torch

from reproduce.config import DataConfig, Experiment, ResolvedVariant
from reproduce.training import distributed
from reproduce.training.trainer import Trainer

log = logging.getLogger(__name__)

Launcher = Literal["inline", "local", "slurm"]


@dataclass
class TrainingTask(submitit.helpers.Checkpointable):
    """One variant's training; pickled by submitit and re-run as is after a requeue."""

    dataset: str
    variant: ResolvedVariant
    train_dir: Path
    dev_dir: Path
    output_dir: Path
    results_dir: Path
    threads: int = 1
    stop_after_steps: int | None = None
    data: DataConfig | None = None  # the corpora, logged as the run's dataset inputs

    def __call__(self) -> dict | None:
        if _inside_submitit():
            logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
            submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
        torch.set_num_threads(self.threads)
        distributed.initialise()
        try:
            return self._train()
        finally:
            distributed.shutdown()

    def _train(self) -> dict | None:
        run = None
        if distributed.rank() == 0:
            from reproduce.tracking import start_training_run

            run = start_training_run(self.results_dir, self.dataset, self.variant, self.output_dir,
                                     self.data, world_size=distributed.world_size())
        try:
            trainer = Trainer(self.variant, self.dataset, self.train_dir, self.dev_dir, self.output_dir,
                              on_metrics=run.log_metrics if run else None)
            if run is not None:
                run.log_params({"parameters": trainer.model.num_parameters()})
            summary = trainer.run(stop_after_steps=self.stop_after_steps)
        except BaseException as error:
            if run is not None:  # interrupted (signal, requeue, Ctrl-C) or crashed
                run.finish("KILLED" if isinstance(error, (KeyboardInterrupt, SystemExit)) else "FAILED")
            raise
        if run is not None:
            if summary is not None:
                run.log_summary(summary, [trainer.train_dir / "summary.json", trainer.metrics_path])
            run.finish("FINISHED" if summary is not None else "KILLED")  # KILLED: stopped early
        return summary


def _inside_submitit() -> bool:
    try:
        submitit.JobEnvironment()
    except RuntimeError:
        return False
    return True


def launch_training(
    experiment: Experiment,
    variant: ResolvedVariant,
    train_dir: Path,
    dev_dir: Path,
    output_dir: Path,
    results_dir: Path,
    launcher: Launcher = "inline",
    tasks: int = 1,
    threads: int = 1,
    stop_after_steps: int | None = None,
) -> dict | None:
    from reproduce.tracking import prepare_store

    prepare_store(results_dir)  # fails in seconds, before training, when the store is unreachable
    task = TrainingTask(experiment.name, variant, train_dir.resolve(), dev_dir.resolve(),
                        output_dir.resolve(), results_dir.resolve(), threads, stop_after_steps,
                        experiment.data)
    if launcher == "inline":
        return task()
    executor = submitit.AutoExecutor(folder=output_dir / "submitit", cluster=launcher)
    resources = variant.resources
    if launcher == "local":
        executor.update_parameters(tasks_per_node=tasks, timeout_min=resources.time_minutes)
    else:
        gpus_per_node = resources.gpus // resources.nodes
        executor.update_parameters(
            nodes=resources.nodes,
            tasks_per_node=resources.tasks_per_node or max(1, gpus_per_node),
            cpus_per_task=resources.cpus_per_gpu, mem_gb=resources.mem_gb,
            timeout_min=resources.time_minutes, slurm_partition=resources.partition,
            slurm_signal_delay_s=resources.requeue_signal_seconds,
            name=f"train-{experiment.name}-{variant.name}",
            **({"gpus_per_node": gpus_per_node} if gpus_per_node else {}),
        )
    job = executor.submit(task)
    log.info("submitted %s job %s; logs: %s", launcher, job.job_id, job.paths.stdout)
    try:
        results = job.results()
    except Exception as error:
        raise RuntimeError(
            f"training job {job.job_id} failed; see {job.paths.stderr} and {job.paths.stdout}: {error}"
        ) from error
    return results[0]
