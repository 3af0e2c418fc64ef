"""Every random generator a training draws from (torch's CPU and CUDA generators, numpy's and
Python's global ones), captured into a checkpoint and restored from it, so that a resumed run
draws what an uninterrupted one would have. The states are tensors and plain values only:
checkpoints are loaded with ``torch.load(weights_only=True)``, which builds nothing else."""

from __future__ import annotations

import logging
import random

import numpy as np
import torch

log = logging.getLogger(__name__)


def capture() -> dict:
    """Every generator's state as tensors and plain values."""
    name, keys, position, has_gauss, cached_gaussian = np.random.get_state()
    version, python_state, gauss_next = random.getstate()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "numpy": {"name": name, "keys": torch.from_numpy(keys.astype(np.int64)),
                  "position": int(position), "has_gauss": int(has_gauss),
                  "cached_gaussian": float(cached_gaussian)},
        "python": {"version": version, "state": list(python_state), "gauss_next": gauss_next},
    }


def restore(states: dict) -> None:
    """Set every generator to ``states`` (:func:`capture`'s, loaded on the CPU)."""
    torch.set_rng_state(states["torch"])  # a CPU ByteTensor: checkpoints are loaded on the CPU
    if states["cuda"] and torch.cuda.is_available():
        if len(states["cuda"]) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(states["cuda"])
        else:
            log.warning("checkpoint holds %d CUDA RNG states, this machine has %d devices: not "
                        "restored", len(states["cuda"]), torch.cuda.device_count())
    numpy = states["numpy"]
    np.random.set_state((numpy["name"], numpy["keys"].numpy().astype(np.uint32), numpy["position"],
                         numpy["has_gauss"], numpy["cached_gaussian"]))
    python = states["python"]
    random.setstate((python["version"], tuple(python["state"]), python["gauss_next"]))
