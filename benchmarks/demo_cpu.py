"""CPU seconds of a pipeline run, by rule, and the wall time that they make on a few cores alone.

On a shared machine wall times say nothing, but a job's CPU seconds (user + system) barely depend
on the other load, so they estimate what the run takes alone: jobs are put on ``--cores`` cores
in the DAG's order (data -> BPE -> encoding -> trainings, the longest first, as the train rule's
priority orders them -> averaging -> evaluation -> tables), each taking its CPU seconds, and
Snakemake's own process shares the cores throughout. Reads the log that
``cpu_accounting/sitecustomize.py`` writes (run the pipeline as that file says), then:

    .venv/bin/python benchmarks/demo_cpu.py cpu.jsonl [--cores 2]
"""

from __future__ import annotations

import argparse
import heapq
import json
import re
from collections import defaultdict
from pathlib import Path

TRAINING = re.compile(r"results/([^/]+)/([^/]+)/seed-(\d+)")


def jobs_of(log: Path) -> tuple[list[dict], float]:
    """The jobs (rule, training, CPU seconds) and Snakemake's own CPU seconds. The train
    rule's script, which starts the trainer, counts in each training's job (its mean)."""
    jobs, snakemake, wrappers = [], 0.0, []
    for line in log.read_text().splitlines():
        record = json.loads(line)
        argv, cpu = record["argv"], record["cpu"]
        if argv[0].endswith("snakemake"):
            snakemake += cpu
        elif ".snakemake/scripts/" in argv[0]:
            wrappers.append(cpu)
        elif argv[0].endswith("reproduce/__main__.py") and len(argv) > 1:
            text = " ".join(argv)
            training = TRAINING.search(text)
            jobs.append({"rule": argv[1], "cpu": cpu,
                         "training": training.groups() if training else None,
                         "dataset": _dataset(argv)})
    wrapper = sum(wrappers) / len(wrappers) if wrappers else 0.0  # alike, one a training
    for job in jobs:
        if job["rule"] == "train":
            job["cpu"] += wrapper
    return jobs, snakemake


def _dataset(argv: list[str]) -> str | None:
    for flag in ("--dataset", "--out", "--out-dir", "--model-prefix", "--source"):
        if flag in argv:
            found = re.search(r"results/([^/]+)/", argv[argv.index(flag) + 1])
            if found:
                return found.group(1)
    return None


def makespan(jobs: list[dict], cores: int) -> float:
    """List scheduling of the DAG on ``cores`` cores: trainings first, the longest first."""
    done: dict[tuple, float] = {}  # a job's key -> when it finished
    by_key = {}
    for number, job in enumerate(jobs):
        by_key[_key(job, number)] = job

    def ready(key, job) -> list[tuple] | None:
        """The keys this job waits for (None: not all known yet)."""
        rule, dataset = job["rule"], job["dataset"]
        same_data = [k for k in by_key if k[1] == dataset]
        if rule == "prepare":
            needs = []
        elif rule in ("train-bpe", "references"):
            needs = [k for k in same_data if k[0] == "prepare"]
        elif rule == "encode":
            needs = [k for k in same_data if k[0] == "train-bpe"]
        elif rule == "train":
            needs = [k for k in same_data if k[0] == "encode"]
        elif rule == "average":
            needs = [("train", dataset, job["training"])]
        elif rule == "evaluate":
            needs = [("average", dataset, job["training"])]
            needs += [k for k in same_data if k[0] == "references"]
        elif rule == "summarize":
            needs = [("evaluate", dataset, job["training"])]
        elif rule == "tables":
            needs = [k for k in same_data if k[0] == "summarize"]
        else:
            needs = []
        return needs

    waiting = {key: ready(key, job) for key, job in by_key.items()}
    running: list[tuple[float, tuple]] = []
    now, free = 0.0, cores
    while waiting or running:
        startable = [key for key, needs in waiting.items() if all(n in done for n in needs)]
        startable.sort(key=lambda k: (k[0] != "train", -by_key[k]["cpu"]))
        while free and startable:
            key = startable.pop(0)
            del waiting[key]
            heapq.heappush(running, (now + by_key[key]["cpu"], key))
            free -= 1
        if not running:
            raise SystemExit(f"cannot schedule: {sorted(waiting)[:3]} wait for jobs not logged")
        now, key = heapq.heappop(running)
        done[key] = now
        free += 1
    return now


def _key(job: dict, number: int) -> tuple:
    if job["rule"] in ("train", "average", "evaluate", "summarize"):
        return (job["rule"], job["dataset"], job["training"])
    return (job["rule"], job["dataset"], number)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", type=Path, help="the JSON lines of cpu_accounting/sitecustomize.py")
    parser.add_argument("--cores", type=int, default=2)
    args = parser.parse_args()
    jobs, snakemake = jobs_of(args.log)
    by_rule = defaultdict(list)
    for job in jobs:
        by_rule[job["rule"]].append(job["cpu"])
    print("| rule | jobs | CPU s | CPU s a job (min-max) |\n|---|--:|--:|--|")
    for rule, seconds in sorted(by_rule.items(), key=lambda item: -sum(item[1])):
        print(f"| {rule} | {len(seconds)} | {sum(seconds):.0f} | "
              f"{min(seconds):.1f}-{max(seconds):.1f} |")
    total = sum(job["cpu"] for job in jobs)
    print(f"| Snakemake itself | 1 | {snakemake:.0f} | |")
    print(f"\njobs {total:.0f} CPU s, with Snakemake's {total + snakemake:.0f}")
    for job in sorted((j for j in jobs if j["rule"] == "train"), key=lambda j: -j["cpu"]):
        print(f"  train {'/'.join(job['training'])}: {job['cpu']:.1f} CPU s")
    jobs = [job for job in jobs if job["dataset"] is not None or job["rule"] == "init-tracking"]
    span = makespan([job for job in jobs if job["rule"] != "init-tracking"], args.cores)
    first = sum(job["cpu"] for job in jobs if job["rule"] == "init-tracking")
    share = snakemake / args.cores
    print(f"\nestimated wall time alone on {args.cores} cores: {first + span + share:.0f} s "
          f"(start-up {first:.0f} s, jobs {span:.0f} s, Snakemake's share {share:.0f} s)")


if __name__ == "__main__":
    main()
