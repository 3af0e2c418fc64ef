"""torch.distributed set-up from the environment that submitit or torchrun export
(RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT): NCCL when every rank of
a node has a GPU of its own, gloo otherwise (CPUs, or several ranks sharing one GPU in tests)."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def backend() -> str:
    ranks_on_this_node = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    one_gpu_each = torch.cuda.is_available() and ranks_on_this_node <= torch.cuda.device_count()
    return "nccl" if one_gpu_each else "gloo"


def initialise() -> None:
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not dist.is_initialized():
        dist.init_process_group(backend())


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
