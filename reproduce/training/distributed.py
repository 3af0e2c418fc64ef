"""torch.distributed set-up from the environment that submitit or torchrun export
(RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT): NCCL on GPUs, gloo on CPUs."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist


def initialise() -> None:
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")


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
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank())
        return torch.device("cuda", local_rank())
    return torch.device("cpu")


def all_reduce_sum(tensor: torch.Tensor) -> None:
    if dist.is_initialized():
        dist.all_reduce(tensor)


def all_reduce_gradients(parameters: list[torch.nn.Parameter]) -> None:
    """Sum gradients over ranks in one flat buffer (one collective per step)."""
    if not dist.is_initialized():
        return
    grads = [p.grad for p in parameters]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()
