"""How ``trainer_speed.py`` and ``beam_speed.py`` print a profile (``--profile``), and
``gpu_check.py``'s report shows it (standard library only: the report's process imports no
torch)."""

from __future__ import annotations


def profile_lines(profiled: dict) -> list[str]:
    """The figures of ``trainer_speed.profile_runs``, a table of kernels (on a GPU) and one of
    host operations."""
    unit, busy = profiled["unit"], profiled["device_busy_ms"]
    lines = [f"profiled {profiled['runs']} x {unit}: {profiled['wall_ms']:.1f} ms wall a {unit} "
             f"(profiled), device busy "
             + (f"{busy:.1f} ms a {unit}, {profiled['kernel_launches']:,.0f} kernel launches a "
                f"{unit}" if busy is not None else "n/a (no CUDA)")]
    if profiled["top_kernels"]:
        lines += ["", f"| kernel | ms a {unit} | launches a {unit} |", "|---|---|---|"]
        lines += [f"| `{_short(row['name'])}` | {row['ms']:.2f} | {row['launches']:,.0f} |"
                  for row in profiled["top_kernels"]]
    lines += ["", f"| host operation | own ms a {unit} | calls a {unit} |", "|---|---|---|"]
    lines += [f"| `{_short(row['name'])}` | {row['self_ms']:.2f} | {row['calls']:,.0f} |"
              for row in profiled["top_host_ops"]]
    return lines


def _short(name: str, width: int = 90) -> str:
    return name if len(name) <= width else name[: width - 3] + "..."
