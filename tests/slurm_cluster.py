"""The local single-node Slurm of scripts/local-slurm.sh, for the Slurm tests."""

import os
import shutil
import subprocess

import pytest


def require_local_slurm() -> None:
    """Skip (with the reason) when no local Slurm answers; on CI with REQUIRE_SLURM=1, fail."""
    reason = None
    if shutil.which("sinfo") is None:
        reason = "Slurm is not installed (run scripts/local-slurm.sh start as root)"
    else:
        state = subprocess.run(["sinfo", "--noheader", "--format=%t"], capture_output=True, text=True)
        if state.returncode != 0 or not state.stdout.strip().startswith(("idle", "mix", "alloc")):
            reason = f"no idle Slurm node (sinfo: {state.stdout.strip() or state.stderr.strip()})"
    if reason is None:
        return
    if os.environ.get("REQUIRE_SLURM") == "1":
        pytest.fail(f"REQUIRE_SLURM=1 but {reason}")
    pytest.skip(reason)
