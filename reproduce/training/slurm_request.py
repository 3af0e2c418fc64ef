"""What a training job asks Slurm for: the ``train`` rule's resources, set in the Snakemake profile.

Experiment files hold the science; every Slurm setting lives in the profile (``slurm/config.yaml``),
training's too: ``default-resources`` for what every job shares (account, QoS, constraint) and
``set-resources: train`` for the training request. The names are those of
snakemake-executor-plugin-slurm, so that a key means the same for training (submitted by submitit,
which requeues it at its time limit) as for every other job (submitted by the plugin). Each
field's description says what it asks for (``reproduce settings slurm`` prints them).
"""

from __future__ import annotations

import shlex

from pydantic import Field, ValidationError, model_validator

from reproduce.config import ConfigError, Strict, describe_validation_error

PROFILE_HINT = "the profile's set-resources: train or default-resources (slurm/config.yaml)"


class SlurmRequest(Strict):
    """Training's request, from the ``train`` rule's resources (``parse_request``)."""

    slurm_partition: str | None = Field(
        default=None, description="Partition (--partition); unset: the cluster's default.")
    slurm_account: str | None = Field(default=None, description="Account (--account).")
    qos: str | None = Field(default=None, description="Quality of service (--qos).")
    constraint: str | None = Field(
        default=None, description="Node features (--constraint), e.g. `a100|h100`.")
    nodes: int = Field(default=1, gt=0, description="Nodes of the job.")
    gpu: int = Field(
        default=0, ge=0,
        description="GPUs of the whole job, spread evenly over its nodes; one rank per GPU.")
    tasks_per_node: int | None = Field(
        default=None, gt=0,
        description="Ranks per node, for jobs without GPUs (CPU training, the test cluster); "
                    "unset: one per GPU, or 1 without GPUs. With GPUs it can only be their "
                    "number a node.")
    cpus_per_task: int = Field(default=4, gt=0, description="CPUs per rank.")
    mem_mb: int | None = Field(default=None, gt=0, description="Memory per node, MB.")
    runtime: int = Field(
        default=24 * 60, gt=0,
        description="Time limit, minutes; the job is requeued there and resumes.")
    slurm_extra: str = Field(
        default="",
        description="Further sbatch long options, e.g. `--reservation=paper --exclusive`.")
    max_requeues: int = Field(
        default=30, ge=0,
        description="Requeues after a time limit (preemptions are not counted); a week-long run "
                    "under a 24-hour limit needs at least 6.")
    requeue_signal_seconds: int = Field(
        default=120, gt=0,
        description="How long before the time limit Slurm signals the job to checkpoint.")

    @model_validator(mode="after")
    def _one_rank_per_gpu(self) -> "SlurmRequest":
        if self.gpu % self.nodes:
            raise ConfigError(f"gpu ({self.gpu}) must be a multiple of nodes ({self.nodes}): "
                              "every node runs the same number of ranks")
        if self.gpu and self.tasks_per_node not in (None, self.gpus_per_node):
            raise ConfigError(f"tasks_per_node ({self.tasks_per_node}) with gpu ({self.gpu}) on "
                              f"{self.nodes} node(s): a job with GPUs runs one rank per GPU, "
                              f"{self.gpus_per_node} a node; leave tasks_per_node unset")
        return self

    @property
    def gpus_per_node(self) -> int:
        return self.gpu // self.nodes

    @property
    def ranks(self) -> int:
        """One rank per GPU; without GPUs, ``tasks_per_node`` ranks (default 1) per node."""
        return self.nodes * (self.tasks_per_node or max(1, self.gpus_per_node))

    def submitit_parameters(self, name: str) -> dict:
        """The request as :class:`submitit.AutoExecutor` parameters (its ``slurm_`` names)."""
        optional = {"slurm_partition": self.slurm_partition, "slurm_account": self.slurm_account,
                    "slurm_qos": self.qos, "slurm_constraint": self.constraint,
                    "slurm_mem": None if self.mem_mb is None else f"{self.mem_mb}M",
                    "gpus_per_node": self.gpus_per_node or None}
        return {
            "name": name,
            "nodes": self.nodes,
            "tasks_per_node": self.ranks // self.nodes,
            "cpus_per_task": self.cpus_per_task,
            "timeout_min": self.runtime,
            "slurm_signal_delay_s": self.requeue_signal_seconds,
            **{key: value for key, value in optional.items() if value is not None},
            **({"slurm_additional_parameters": extra} if (extra := self.extra_options()) else {}),
        }

    def extra_options(self) -> dict[str, str | bool]:
        """``slurm_extra``'s ``--name=value`` and ``--flag`` options as submitit's
        ``slurm_additional_parameters`` (which writes each back as ``#SBATCH --name=value``)."""
        options: dict[str, str | bool] = {}
        for token in shlex.split(self.slurm_extra):
            name, has_value, value = token.partition("=")
            if not name.startswith("--") or len(name) < 3:
                raise ConfigError(f"slurm_extra ({PROFILE_HINT}): {token!r} is not an sbatch long "
                                  "option; write --name=value or --flag")
            options[name[2:].replace("-", "_")] = value if has_value else True
        return options


def parse_request(assignments: list[str]) -> SlurmRequest:
    """A request from ``name=value`` pairs (the rule's resources); errors name the resource."""
    values: dict[str, str] = {}
    for assignment in assignments:
        name, has_value, value = assignment.partition("=")
        if not has_value:
            raise ConfigError(f"--slurm {assignment!r}: expected name=value")
        values[name] = value
    try:
        request = SlurmRequest.model_validate(values)
    except ValidationError as error:
        raise ConfigError(f"training's Slurm request ({PROFILE_HINT}): "
                          f"{describe_validation_error(error)}") from None
    request.extra_options()  # a malformed slurm_extra fails here, before anything is submitted
    return request
