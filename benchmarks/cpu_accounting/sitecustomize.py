"""Every Python process started with this folder on PYTHONPATH and ``DEMO_CPU_LOG`` set appends,
at exit, one JSON line to that file: its command line and its own CPU seconds (user + system, all
of its threads; children count in their own lines). Snakemake's ``benchmark:`` samples a job's
processes every 30 s once it has run 15 s, so it misses up to 30 s at a job's end; this misses
nothing. What ``demo_cpu.py`` reads:

    DEMO_CPU_LOG=$PWD/cpu.jsonl PYTHONPATH=$PWD:$PWD/benchmarks/cpu_accounting \\
        .venv/bin/snakemake --cores 2 all
"""

import atexit
import json
import os
import resource
import sys
import time

_LOG = os.environ.get("DEMO_CPU_LOG")


def _record() -> None:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    line = {"argv": sys.argv, "cpu": usage.ru_utime + usage.ru_stime, "end": time.time()}
    with open(_LOG, "a") as log:
        log.write(json.dumps(line) + "\n")


if _LOG:
    atexit.register(_record)
