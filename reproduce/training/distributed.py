"""torch.distributed set-up from the environment that submitit or torchrun export
(RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT): NCCL when every rank of
a node has a GPU of its own, gloo otherwise (CPUs, or several ranks sharing one GPU in tests)."""

from __future__ import annotations

import math
import os
import re
from contextlib import contextmanager
from datetime import timedelta
from typing import Iterator

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from reproduce.errors import ConfigError, ReproduceError

# How long a rank waits for the others, in a collective or to join the group, before it gives up.
TIMEOUT_VARIABLE = "REPRODUCE_COLLECTIVE_TIMEOUT_SECONDS"
DEFAULT_TIMEOUT_SECONDS = 300.0


def backend() -> str:
    ranks_on_this_node = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    one_gpu_each = torch.cuda.is_available() and ranks_on_this_node <= torch.cuda.device_count()
    return "nccl" if one_gpu_each else "gloo"


def initialise() -> None:
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not dist.is_initialized():
        dist.init_process_group(backend(), timeout=collective_timeout())


def collective_timeout() -> timedelta:
    """torch's default (30 minutes) would keep a job's GPUs waiting that long on a peer that hung
    or vanished without closing its connections (a node lost). Five minutes is well above the
    longest wait of a healthy rank: the others wait while rank 0 alone writes a checkpoint and
    logs to MLflow (whose HTTP calls give up within seconds: reproduce.tracking.store).
    ``$REPRODUCE_COLLECTIVE_TIMEOUT_SECONDS`` sets another."""
    value = os.environ.get(TIMEOUT_VARIABLE)
    if value is None:
        return timedelta(seconds=DEFAULT_TIMEOUT_SECONDS)
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise ConfigError(f"{TIMEOUT_VARIABLE}={value!r}: not a positive number of seconds")
    return timedelta(seconds=seconds)


class PeerLostError(ReproduceError):
    """A collective failed: another rank of the job ended (killed, out of memory) or stopped
    answering. The job ends; its last checkpoint resumes it, rerun or requeued."""


# gloo's message, "[<source>/gloo/transport/...] Connection closed by peer ...", without the
# source file and the advice that follows it.
_GLOO_TRANSPORT = re.compile(r"gloo/transport/\S*\] (.*?)(?:\. This is typically.*)?$", re.DOTALL)


@contextmanager
def peer_loss_named() -> Iterator[None]:
    """A collective that fails because a peer is gone becomes a one-line :class:`PeerLostError`
    (torch raises gloo's transport errors as bare RuntimeErrors, with a page of traceback)."""
    try:
        yield
    except RuntimeError as error:
        cause = _lost_peer(error)
        if cause is None or world_size() == 1:
            raise
        raise PeerLostError(
            f"rank {rank()} of {world_size()}: another rank of this job ended or stopped "
            f"answering ({cause}); the job stops here, and rerun or requeued it resumes from its "
            f"last checkpoint (the other ranks' logs say why theirs ended)") from error


def _lost_peer(error: RuntimeError) -> str | None:
    """What gloo says of the lost peer ("Connection reset by peer", "Timed out waiting 300000ms
    for recv operation to complete"), or None for another error."""
    found = _GLOO_TRANSPORT.search(str(error))
    return None if found is None else found.group(1).strip()


def shutdown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def world_size() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0"))


def device() -> torch.device:
    if torch.cuda.is_available():  # ranks share GPUs round-robin where there are fewer GPUs
        index = local_rank() % torch.cuda.device_count()
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    return torch.device("cpu")


def all_reduce_sum(tensor: torch.Tensor) -> None:
    if dist.is_initialized():
        dist.all_reduce(tensor)


def data_parallel(model: torch.nn.Module) -> DistributedDataParallel | None:
    """The model wrapped for data parallelism across ranks (None with a single process).

    DistributedDataParallel all-reduces gradients in buckets while the backward pass runs.
    """
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return None
    parameters_device = next(model.parameters()).device
    device_ids = [parameters_device.index] if parameters_device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=device_ids)
