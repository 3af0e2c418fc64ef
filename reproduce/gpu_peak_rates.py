"""Peak arithmetic rates of the GPUs a run may have trained on: for Table 2's paper-style cost,
(bf16) for the model FLOPs utilisation of training (:mod:`reproduce.model.flops`), and (at
``decoding.precision``) for the share of the peak that beam search's benchmark reaches.

The paper (Table 2, footnote 5) estimates training FLOPs as training time x number of GPUs x "an
estimate of the sustained single-precision floating-point capacity of each GPU": 9.5 TFLOPS for
its P100s. We multiply by the rate of the GPU that actually ran (``torch.cuda.get_device_name``,
recorded in ``train/summary.json``), at the precision it trained in:

* ``fp32``: the plain FP32 (non-tensor-core) peak; PyTorch leaves TF32 matmuls off by default;
* ``bf16``: the dense BF16 tensor-core peak (without 2:4 sparsity);
* ``fp16``: the dense FP16 tensor-core peak (the V100's, which has no BF16 units; from the A100
  on, the same as BF16's). The P100 has no tensor cores, and no fp16 entry here;
* ``tf32``: the dense TF32 tensor-core peak (fp32 tensors whose products round their inputs to
  TF32, as ``decoding.precision: tf32`` asks; from the A100 on, half the BF16 peak).

Figures are NVIDIA's datasheet peaks (SXM parts unless the device name says PCIe); the P100 keeps
the paper's 9.5e12. A GPU or precision not listed here gets no estimate ("—" in the table).
"""

from __future__ import annotations

from typing import NamedTuple


class PeakRate(NamedTuple):
    gpu: str
    precision: str
    flops_per_second: float


# (substring of the device name, label, {precision: peak FLOP/s}); the first match wins, so the
# more specific names come first. V100 and P100 have no BF16 units: no bf16 entry.
_PEAK_RATES: list[tuple[str, str, dict[str, float]]] = [
    ("P100", "P100 (the paper's figure)", {"fp32": 9.5e12}),
    ("V100-PCIE", "V100 PCIe", {"fp32": 14.0e12, "fp16": 112e12}),
    ("V100", "V100 SXM2", {"fp32": 15.7e12, "fp16": 125e12}),
    ("A100", "A100", {"fp32": 19.5e12, "tf32": 156e12, "bf16": 312e12, "fp16": 312e12}),
    ("H100 PCIe", "H100 PCIe", {"fp32": 51e12, "tf32": 378e12, "bf16": 756e12, "fp16": 756e12}),
    ("H100 NVL", "H100 NVL", {"fp32": 60e12, "tf32": 417.5e12, "bf16": 835e12,
                              "fp16": 835e12}),
    ("H100", "H100 SXM", {"fp32": 67e12, "tf32": 494.5e12, "bf16": 989e12, "fp16": 989e12}),
    ("H200 NVL", "H200 NVL", {"fp32": 60e12, "tf32": 417.5e12, "bf16": 835e12,
                              "fp16": 835e12}),
    ("H200", "H200 SXM", {"fp32": 67e12, "tf32": 494.5e12, "bf16": 989e12, "fp16": 989e12}),
]


def peak_rate(device: str | None, precision: str) -> PeakRate | None:
    """The peak rate of ``device`` (a CUDA device name) at ``precision``; None when unknown."""
    if not device:
        return None
    for pattern, label, rates in _PEAK_RATES:
        if pattern.lower() in device.lower():
            rate = rates.get(precision)
            return None if rate is None else PeakRate(label, precision, rate)
    return None
