"""How ``trainer_speed.py --profile`` prints its profile, and ``gpu_check.py``'s report shows it
(standard library only: the report's process imports no torch)."""

from __future__ import annotations


def profile_lines(profiled: dict) -> list[str]:
    """The profile as the benchmark prints it (and gpu_check.py's report shows it)."""
    busy = profiled["device_busy_ms_per_step"]
    lines = [f"profiled {profiled['steps']} steps: {profiled['wall_ms_per_step']:.1f} ms wall a "
             f"step (profiled), device busy "
             + (f"{busy:.1f} ms a step, {profiled['kernels_per_step']:,.0f} kernel launches a step"
                if busy is not None else "n/a (no CUDA)")]
    if profiled["top_kernels"]:
        lines += ["", "| kernel | ms a step | launches a step |", "|---|---|---|"]
    lines += [f"| `{_short(row['name'])}` | {row['ms_per_step']:.2f} | "
              f"{row['launches_per_step']:,.0f} |" for row in profiled["top_kernels"]]
    lines += ["", "| host operation | own ms a step | calls a step |", "|---|---|---|"]
    lines += [f"| `{_short(row['name'])}` | {row['self_ms_per_step']:.2f} | "
              f"{row['calls_per_step']:,.0f} |" for row in profiled["top_host_ops"]]
    return lines


def _short(name: str, width: int = 90) -> str:
    return name if len(name) <= width else name[: width - 3] + "..."
