"""Where training runs: in this process, in local processes, or as a Slurm job, through submitit.

``inline`` trains in the calling process (one rank). ``local`` starts ``tasks`` processes with
submitit's local executor, on the GPUs the calling process sees (:func:`local_gpus`); ``slurm``
submits one job as the profile's :class:`~reproduce.training.slurm_request.SlurmRequest` asks,
one task per GPU. Every task reads its rank from :class:`submitit.JobEnvironment`, exports the
torch.distributed variables with :class:`submitit.helpers.TorchDistributedEnvironment`, and
trains; rank 0 alone writes files and logs to MLflow. On Slurm, a job that reaches its time
limit or is preempted receives a signal, and submitit requeues it (:class:`TrainingTask` is
``Checkpointable``): the requeued job resumes from the latest checkpoint on disk. The calling
process waits for the job to finish, so Snakemake sees a single training job.

Rank 0 holds the variant's lock (:mod:`reproduce.training.variant_lock`) for the whole run. A
stop request ends the run after the current step with a checkpoint
(:mod:`reproduce.training.interruption`): inline, SIGTERM, SIGINT and SIGHUP, and the death of
the job that started the trainer, after which the process exits with 128 + the signal; under
submitit, its pre-timeout signal, after which submitit's own handler requeues the job (at most
the request's ``max_requeues`` times after a time limit), and SIGTERM (Slurm ending the job:
``scancel``, preemption), after which it exits as inline, and with the local executor the death
of the launcher or of the job that started it (a Slurm job is Slurm's: it outlives a killed
Snakemake).
With every launcher, so does the stop request of the Snakemake that started the training
(:func:`reproduce.training.interruption.relay_stop_signals`); a submitted job stopped so, not
requeued, fails the launcher (:class:`TrainingStopped`). The MLflow run is then marked KILLED.
With the local launcher, the executor's processes ignore the terminal's SIGINT and SIGHUP
(Ctrl-C signals the whole foreground group); the launcher, told to stop by SIGTERM, SIGINT or
SIGHUP, sends its ranks SIGTERM through the controller and waits for their checkpoint.
A rank that dies ends the others' next collective, at once where its connections close, else
after :func:`reproduce.training.distributed.collective_timeout`
(:class:`reproduce.training.distributed.PeerLostError`).

A job that refuses to train (an expected error: settings that changed, a model too large, a loss
that diverged) reports it to the launcher as the same one line it prints when run inline, not as
submitit's traceback: each task writes its error's class and message to a JSON file beside
submitit's (:func:`_record_refusal`), which the launcher reads back (:func:`_recorded_refusal`).
submitit itself hands back only the formatted traceback text.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import submitit
import torch

from reproduce.config import Experiment, ResolvedVariant
from reproduce.data.encoded import EncodedCorpus
from reproduce.errors import ConfigError, ReproduceError, UsageError
from reproduce.files import write_text_whole
from reproduce.training import distributed
from reproduce.training.checkpoints import set_aside
from reproduce.training.interruption import (STOP_SIGNALS, Interruption, WatchedProcess,
                                             process_to_stop_with, stop_request_path)
from reproduce.training.preflight import check_decodable, check_fits, check_not_empty
from reproduce.training.slurm_request import SlurmRequest
from reproduce.training.assembly import build_trainer
from reproduce.training.variant_lock import VariantLock

log = logging.getLogger(__name__)

Launcher = Literal["inline", "local", "slurm"]


@dataclass
class TrainingTask(submitit.helpers.Checkpointable):
    """One variant's training; pickled by submitit and re-run as is after a requeue."""

    experiment: Experiment
    variant: ResolvedVariant
    train_dir: Path
    dev_dir: Path
    output_dir: Path
    results_dir: Path
    threads: int = 1
    stop_after_steps: int | None = None
    # The processes on this host it dies with: the job's owner, and the local launcher.
    stop_with: tuple[WatchedProcess, ...] = ()
    stop_request: Path | None = None  # the file whose creation asks it to stop

    def __call__(self) -> dict | None:
        if _inside_submitit():
            logging.basicConfig(level=logging.INFO,
                                format="%(asctime)s %(name)s %(levelname)s %(message)s")
            submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
        torch.set_num_threads(self.threads)
        distributed.initialise()
        try:
            with distributed.peer_loss_named():
                if distributed.rank() != 0:
                    return self._train(Interruption())
                with VariantLock(self.output_dir), self._interruption() as interruption:
                    return self._train(interruption)
        except ReproduceError as error:
            if _inside_submitit():
                _record_refusal(self.output_dir / "submitit", error)
            raise
        finally:
            distributed.shutdown()

    def _interruption(self):
        """Inline: SIGTERM, SIGINT, SIGHUP (:data:`STOP_SIGNALS`) and the parents' death stop
        the run; under submitit, its pre-timeout signal and SIGTERM, which Slurm sends a job it
        ends (``scancel``, preemption, a requeue) KillWait seconds before SIGKILL. Either way, so
        do the end of the job's owner and its stop request, where known."""
        if _inside_submitit():
            return Interruption().watching((_pre_timeout_signal(), signal.SIGTERM),
                                           parents=False, owners=self.stop_with,
                                           request=self.stop_request)
        return Interruption().watching(STOP_SIGNALS, parents=True, owners=self.stop_with,
                                       request=self.stop_request)

    def _train(self, interruption: Interruption) -> dict | None:
        run = None
        vocab_size = EncodedCorpus.open(self.train_dir).vocab_size
        check_fits(self.variant.model, vocab_size, distributed.device(), self.variant.name)
        if distributed.rank() == 0:
            from reproduce.tracking import start_training_run

            run = start_training_run(self.results_dir, self.experiment.name, self.variant,
                                     self.output_dir, self.experiment.data,
                                     world_size=distributed.world_size())
        try:
            trainer = build_trainer(self.variant, self.experiment, self.train_dir, self.dev_dir,
                                    self.output_dir, on_metrics=run.log_metrics if run else None,
                                    interruption=interruption)
            if run is not None:
                run.log_params({"parameters": trainer.model.num_parameters()})
            summary = trainer.run(stop_after_steps=self.stop_after_steps)
        except BaseException as error:
            if run is not None:  # interrupted (Ctrl-C) or crashed
                interrupted = isinstance(error, (KeyboardInterrupt, SystemExit))
                run.finish("KILLED" if interrupted else "FAILED")
            raise
        if run is not None:
            if summary is not None:
                run.log_summary(summary, [trainer.records.summary_path,
                                          trainer.records.metrics_path])
            run.finish("FINISHED" if summary is not None else "KILLED")  # KILLED: stopped early
        if summary is None and interruption.reason is not None:
            _exit_interrupted(interruption, trainer.step)
        return summary


def _pre_timeout_signal() -> int:
    return getattr(signal, "SIG" + submitit.JobEnvironment.USR_SIG)


def _exit_interrupted(interruption: Interruption, step: int) -> None:
    """After the stop checkpoint: under submitit, hand the pre-timeout signal to submitit's
    handler (requeue; a no-op on ranks > 0), or return None for a stop request; inline, and
    under submitit on SIGTERM, exit with 128 + the signal. The job's end is then Slurm's to tell
    (no result is written): cancelled, it fails the launcher; requeued, it is waited for."""
    log.warning("training stopped at step %d (%s); its checkpoint resumes it", step,
                interruption.reason)
    if _inside_submitit() and interruption.signal != signal.SIGTERM:
        interruption.pass_on()
        return
    raise SystemExit(128 + (interruption.signal or signal.SIGTERM))


class TrainingStopped(ReproduceError):
    """A submitted training job stopped before its last step and was not requeued: asked to by
    the Snakemake that started it, or that Snakemake is gone. Its checkpoint resumes it."""


class TrainingJobRefused(ReproduceError):
    """A submitted training job stopped on an expected error; its message is the task's own
    line, the job and its log named after it; ``kind`` is the task's error class."""

    def __init__(self, message: str, kind: str):
        super().__init__(message)
        self.kind = kind


def _refusal_path(folder: Path, job_id: str, rank: int) -> Path:
    return folder / f"{job_id}_{rank}_refusal.json"


def _record_refusal(folder: Path, error: ReproduceError) -> None:
    environment = submitit.JobEnvironment()
    write_text_whole(_refusal_path(folder, environment.job_id, environment.global_rank),
                     json.dumps({"error": type(error).__name__, "message": str(error)}))


def _recorded_refusal(job: submitit.Job, folder: Path) -> TrainingJobRefused | None:
    """The lowest rank's recorded refusal of ``job``, consumed (a later job of the same id, as
    the local executor's process ids can repeat, must not find it), or None."""
    recorded = sorted(folder.glob(f"{job.job_id}_*_refusal.json"),
                      key=lambda path: int(path.name.split("_")[-2]))
    if not recorded:
        return None
    try:
        refusal = json.loads(recorded[0].read_text())
        message = f"{refusal['message']} (training job {job.job_id}; log: {job.paths.stderr})"
    except (OSError, ValueError, KeyError, TypeError):
        return None  # unreadable: the caller reports the job's failure with its logs instead
    for path in recorded:
        path.unlink(missing_ok=True)
    return TrainingJobRefused(message, str(refusal.get("error")))


def _inside_submitit() -> bool:
    try:
        submitit.JobEnvironment()
    except RuntimeError:
        return False
    return True


def _ranks(launcher: Launcher, tasks: int, request: SlurmRequest) -> int:
    return {"inline": 1, "local": tasks, "slurm": request.ranks}[launcher]


def _check_partition(variant: ResolvedVariant, ranks: int, launcher: Launcher) -> None:
    """Fail before anything is submitted if the ranks cannot share a step evenly."""
    micro_batches = variant.training.micro_batches_per_step
    if micro_batches % ranks:
        raise ConfigError(
            f"variant {variant.name}: training.micro_batches_per_step ({micro_batches}) is not a "
            f"multiple of the {ranks} ranks the {launcher} launcher would start; use a number of "
            f"ranks that divides it, or change micro_batches_per_step"
        )


def _check_slurm_commands(launcher: Launcher) -> None:
    """The slurm launcher submits with ``sbatch`` and starts the ranks with ``srun``: without
    them (not a Slurm login node) it fails here, before a restart sets the run aside, rather than
    in submitit's traceback."""
    if launcher != "slurm":
        return
    missing = [name for name in ("sbatch", "srun") if shutil.which(name) is None]
    if missing:
        raise UsageError(
            f"the slurm launcher needs {' and '.join(missing)} on the PATH, which this machine "
            "lacks: run from a Slurm login node, or use the local launcher (the pipeline config's "
            "training.launcher, or reproduce train --launcher local)"
        )


def local_gpus() -> dict:
    """The local executor's GPU parameters that hand its tasks the GPUs this process sees.

    submitit sets the tasks' ``CUDA_VISIBLE_DEVICES`` to its ``gpus_per_node`` first GPUs (none
    unless asked: the ranks would train on the CPU), numbered from 0 unless ``visible_gpus``
    names them. The ranks share what they get round-robin
    (:func:`reproduce.training.distributed.device`)."""
    if not torch.cuda.is_available():
        return {}
    count = torch.cuda.device_count()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return {"gpus_per_node": count}
    named = [name.strip() for name in visible.split(",")][:count]
    if not all(name.isdigit() for name in named):
        raise ConfigError(
            f"CUDA_VISIBLE_DEVICES={visible!r}: the local launcher hands GPUs to its processes by "
            f"index; name them by index (nvidia-smi -L lists them), or train inline or on Slurm")
    return {"gpus_per_node": count, "visible_gpus": [int(name) for name in named]}


def launch_training(
    experiment: Experiment,
    variant: ResolvedVariant,
    train_dir: Path,
    dev_dir: Path,
    output_dir: Path,
    results_dir: Path,
    launcher: Launcher = "inline",
    tasks: int = 1,
    slurm: SlurmRequest = SlurmRequest(),  # noqa: B008 (frozen: one shared default is safe)
    threads: int = 1,
    stop_after_steps: int | None = None,
    restart: bool = False,
    test_dir: Path | None = None,
) -> dict | None:
    """Train ``variant`` with ``launcher`` (``tasks`` local processes; one Slurm job as ``slurm``
    asks), its dev split (and ``test_dir``'s, if given) first checked for lines too long to
    decode; with ``restart``, its checkpoints and train/ are first moved aside
    (:func:`reproduce.training.checkpoints.set_aside`), so that training starts from step 0."""
    from reproduce.tracking import prepare_store

    _check_partition(variant, _ranks(launcher, tasks, slurm), launcher)
    _check_slurm_commands(launcher)
    # Refuses a URI that cannot work, in seconds, before training; a silent server is a warning.
    prepare_store(results_dir, wait_for_server=True)
    check_not_empty(train_dir, "train")
    check_decodable(check_not_empty(dev_dir, "dev"), dev_dir, "dev", variant)
    if test_dir is not None:
        check_decodable(check_not_empty(test_dir, "test"), test_dir, "test", variant)
    if restart:
        with VariantLock(output_dir):
            set_aside(output_dir)
    task = TrainingTask(experiment, variant, train_dir.resolve(), dev_dir.resolve(),
                        output_dir.resolve(), results_dir.resolve(), threads, stop_after_steps,
                        stop_with=_processes_to_stop_with(launcher),
                        stop_request=stop_request_path())
    if launcher == "inline":
        return task()
    distributed.collective_timeout()  # a malformed one fails here, not in every rank of the job
    if launcher == "local":
        executor = submitit.LocalExecutor(folder=output_dir / "submitit")
        executor.update_parameters(tasks_per_node=tasks, timeout_min=slurm.runtime, **local_gpus())
        with _deaf_to_the_terminal():
            job = executor.submit(task)
    else:
        # Requeues after a time limit, counted by submitit (the local executor ignores it).
        executor = submitit.AutoExecutor(folder=output_dir / "submitit", cluster=launcher,
                                         slurm_max_num_timeout=slurm.max_requeues)
        executor.update_parameters(**slurm.submitit_parameters(f"train-{experiment.name}-{variant.name}"))
        job = executor.submit(task)
    log.info("submitted %s job %s; logs: %s", launcher, job.job_id, job.paths.stdout)
    with _stops_sent_on(job) if launcher == "local" else nullcontext([]) as received:
        try:
            results = job.results()
        except Exception as error:
            refusal = _recorded_refusal(job, output_dir / "submitit")
            if refusal is not None:
                raise refusal from error
            if received:  # its ranks exited with 128 + SIGTERM, after their checkpoint
                raise _stopped_early(job) from error
            raise RuntimeError(
                f"training job {job.job_id} failed; see {job.paths.stderr} and "
                f"{job.paths.stdout}: {error}"
            ) from error
    if results[0] is None and stop_after_steps is None:  # stopped early, not as asked
        raise _stopped_early(job)
    return results[0]


def _processes_to_stop_with(launcher: Launcher) -> tuple[WatchedProcess, ...]:
    """The job's owner named by the train rule (a Slurm job is Slurm's: it outlives them), and
    with the local launcher, the launcher: killed with -9, it leaves the executor's controller
    and ranks behind, which nothing else would stop."""
    if launcher == "slurm":
        return ()
    launching = WatchedProcess.of(os.getpid()) if launcher == "local" else None
    return tuple(process for process in (process_to_stop_with(), launching)
                 if process is not None)


def _stopped_early(job: submitit.Job) -> TrainingStopped:
    return TrainingStopped(
        f"training job {job.job_id} stopped before its last step; its checkpoint resumes it "
        f"(log: {job.paths.stderr})")


@contextmanager
def _deaf_to_the_terminal() -> Iterator[None]:
    """Inside, SIGINT and SIGHUP are ignored, and so they stay in the local executor's controller
    and ranks started here (an ignored signal stays ignored across exec, and Python installs no
    KeyboardInterrupt over an ignored SIGINT). Ctrl-C, or the terminal closing, signals every
    process of the terminal's foreground group: the ranks would die mid-step, and the controller
    would kill them a second later whatever they were writing. The launcher stops them instead
    (:func:`_stops_sent_on`)."""
    with _handled((signal.SIGINT, signal.SIGHUP), signal.SIG_IGN):
        yield


@contextmanager
def _stops_sent_on(job: submitit.Job) -> Iterator[list[int]]:
    """While the launcher waits for a local job, a stop signal to it (:data:`STOP_SIGNALS`) goes
    on to the job's controller as SIGTERM, which the controller sends to every rank; each stops
    after its step with a checkpoint (:meth:`TrainingTask._interruption`), and the launcher waits
    for them to end. Yields the signals received."""
    received: list[int] = []

    def send_on(signum: int, frame) -> None:
        received.append(signum)
        if not job.done():
            os.kill(int(job.job_id), signal.SIGTERM)  # a local job's id is its controller's pid

    with _handled(STOP_SIGNALS, send_on):
        yield received


@contextmanager
def _handled(signums: tuple[int, ...], handler) -> Iterator[None]:
    """``handler`` for ``signums`` inside, the previous ones restored after. Only the main thread
    may set a handler: called from another thread (a library call), nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, handler) for signum in signums}
    try:
        yield
    finally:
        for signum, restored in previous.items():
            signal.signal(signum, restored)
