"""The train rule's job: ``python -m reproduce train`` for one variant, logged to the rule's log.

A script rather than a shell command because only a script sees the job's resources by name,
those the profile sets for every job (``default-resources``: account, QoS...) included; with the
``slurm`` launcher they are the training job's Slurm request (``--slurm name=value``, see
reproduce/training/slurm_request.py), so a dry run's ``resources:`` line is what gets submitted.

The trainer is told which process started the job (``$REPRODUCE_STOP_WITH``): this wrapper
outlives a Snakemake killed with -9, waiting on the trainer, so the trainer's watch of its own
parent would not see it (reproduce/training/interruption.py). A stop signal sent to this
wrapper (with Snakemake's whole process group, by Ctrl-C or ``kill -- -<pgid>``) is passed on to
the trainer, and the wrapper waits for it to save its checkpoint: dying at once, it would let
Snakemake report the job over while the trainer still writes.
"""

import os
import shlex
import signal
import subprocess
import sys

from reproduce.training.interruption import STOP_SIGNALS, stop_with_environment
from reproduce.training.slurm_request import SlurmRequest

job = snakemake  # noqa: F821 (defined by Snakemake for scripts)


def train_command() -> list[str]:
    command = [
        sys.executable, "-m", "reproduce", "train",
        "--experiment", job.params.experiment, "--variant", job.wildcards.variant,
        "--seed", job.wildcards.seed,
        "--train-data", job.input.train, "--dev-data", job.input.dev,
        "--test-data", job.input.test,
        "--out-dir", job.params.out_dir, "--results", job.params.results,
        "--launcher", job.params.launcher, "--tasks", str(job.params.tasks),
        "--threads", str(job.threads),
    ]
    if job.params.launcher == "slurm":
        for name in SlurmRequest.model_fields:
            if name in job.resources.keys():
                command += ["--slurm", f"{name}={job.resources[name]}"]
    return command


with open(job.log[0], "w") as log:
    command = train_command()
    print(shlex.join(command), file=log, flush=True)
    environment = os.environ | stop_with_environment()
    trainer = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=environment)
    for signum in STOP_SIGNALS:
        signal.signal(signum, lambda signum, frame: trainer.send_signal(signum))
    sys.exit(trainer.wait())
