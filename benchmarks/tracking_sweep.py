"""The tracking server under a whole Table 3 sweep: every variant of both WMT experiments (24
trainings) logging at once to one server started by ``scripts/mlflow-server.sh``.

Each client is a process of its own, as a Slurm job is, and logs through the project's tracking
code what a training logs (:func:`reproduce.tracking.start_training_run`, then
:meth:`VariantRun.log_metrics` with the trainer's keys every ``log_every_steps``, the dev loss
every ``eval_every_steps``, MLflow's system metrics, and at the end the summary, its files as
artifacts and ``finish``), writing the same ``metrics.jsonl`` the trainer writes. Time is
accelerated: a training of ``--steps-per-second`` steps/s (default 10, an 8-GPU node of today;
the paper's 8 P100s made 2.5) runs ``--speedup`` times faster, system metrics included
(sampled every 10 s / speedup). ``--speedup 1`` is a sweep's real rate.

Every HTTP request the clients make is timed: requests/s from the first request to the last,
p50/p99 latency, errors (no answer, or a status of 400 or more, but the answers the tracking
code expects when two trainings make their dataset's experiment at once). Then every record of
every ``metrics.jsonl`` is looked up in the store: ``lost in flight`` counts the values a
client's live logging did not leave there (what ``finish`` would replay), ``lost`` those still
missing after ``finish``.

    .venv/bin/python benchmarks/tracking_sweep.py --clients 24 --speedup 100 --log-calls 200
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import multiprocessing
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = ("configs/wmt14_en_de.yaml", "configs/wmt14_en_fr.yaml")
SYSTEM_METRICS_SECONDS = 10.0  # MLflow's sampling interval, as trainings run it


def sweep_variants() -> list[tuple[str, str]]:
    """(experiment file, variant) of every variant a Table 3 sweep trains, both datasets."""
    from reproduce.experiment_file import load_experiment

    return [(path, name) for path in EXPERIMENTS
            for name in load_experiment(ROOT / path).variants]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def server(command: str, folder: Path, port: int) -> str:
    """Run ``scripts/mlflow-server.sh command`` for the server of ``folder``; its stdout."""
    environment = os.environ | {"MLFLOW_SERVER_DIR": str(folder), "MLFLOW_SERVER_PORT": str(port),
                                "MLFLOW_SERVER_HOST": "127.0.0.1"}
    result = subprocess.run(["bash", str(ROOT / "scripts/mlflow-server.sh"), command],
                            env=environment, capture_output=True, text=True, check=True)
    return result.stdout


def timed_requests(calls: list, uri: str) -> None:
    """Record (path, status, seconds, wall-clock start) of every HTTP request this process sends
    to the server of ``uri``; status 0 is no answer. Wraps requests' adapter, under every MLflow
    client call, retries included (MLflow's requests elsewhere, a version check, are left out)."""
    from requests.adapters import HTTPAdapter

    send = HTTPAdapter.send

    def timed(self, request, *args, **kwargs):
        start, began = time.perf_counter(), time.time()
        status = 0
        try:
            response = send(self, request, *args, **kwargs)
            status = response.status_code
            return response
        finally:
            if request.url.startswith(uri):
                calls.append((request.path_url.split("?")[0], status,
                              time.perf_counter() - start, began))

    HTTPAdapter.send = timed


def client(experiment_file: str, variant_name: str, uri: str, folder: str, log_calls: int | None,
           seconds_per_log: float, speedup: float, result_file: str) -> None:
    """One training's logging, paced at ``seconds_per_log`` between metric records, its system
    metrics ``speedup`` times as often as a training's."""
    os.environ["MLFLOW_TRACKING_URI"] = uri
    os.environ["MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL"] = str(SYSTEM_METRICS_SECONDS / speedup)
    from reproduce.experiment_file import load_experiment
    from reproduce.tracking import start_training_run

    calls: list = []
    timed_requests(calls, uri)
    warnings = _count_warnings()
    experiment = load_experiment(ROOT / experiment_file)
    variant = experiment.variant(variant_name)
    output = Path(folder)
    run = start_training_run(output / "results", experiment.name, variant, output)
    training = variant.training
    logs = training.steps // training.log_every_steps
    metrics_file = output / "train" / "metrics.jsonl"
    metrics_file.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with metrics_file.open("a") as records:
        for number in range(1, min(logs, log_calls or logs) + 1):
            time.sleep(max(0.0, start + number * seconds_per_log - time.monotonic()))
            step = number * training.log_every_steps
            for metrics in _training_metrics(step, training.eval_every_steps):
                records.write(json.dumps({"step": step, **metrics}) + "\n")
                records.flush()
                run.log_metrics(metrics, step)
    logging_seconds = time.monotonic() - start
    summary = output / "train" / "summary.json"
    summary.write_text(json.dumps({"steps": step, "parameters": 1, "wall_seconds": 1.0}))
    run.log_summary(json.loads(summary.read_text()), [summary, metrics_file])
    replayed = run.replay_metrics()
    run.finish()
    Path(result_file).write_text(json.dumps({
        "run_id": run.run_id, "metrics_file": str(metrics_file), "calls": calls,
        "replayed": replayed, "warnings": warnings.count, "logging_seconds": logging_seconds,
    }))


class _WarningCount(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1


def _count_warnings() -> _WarningCount:
    """The warnings of the project's tracking code (an outage, a failed call) in this process."""
    handler = _WarningCount()
    logging.getLogger("reproduce.tracking").addHandler(handler)
    return handler


def _training_metrics(step: int, eval_every_steps: int) -> list[dict]:
    """The records the trainer writes at ``step``: its progress metrics, and the dev loss where
    evaluation is due (the same keys as :meth:`Trainer._log_progress` and its evaluation)."""
    rates = {"target_tokens_per_second": 61234.5 + step, "tokens_per_second": 120456.0 + step,
             "steps_per_second": 2.45, "model_tflops_per_second": 98.7, "mfu": 0.31}
    records = [{"train_loss": 10.0 / math.log(step + 2), "lr": 1e-3 / math.sqrt(step),
                "grad_norm": 1.0 + 1.0 / step, **rates}]
    if step % eval_every_steps == 0:
        records.append({"dev_loss": 5.0 / math.log(step + 2)})
    return records


def lost_values(uri: str, result: dict) -> int:
    """Metric values of the client's ``metrics.jsonl`` that the store does not hold at their
    step."""
    from mlflow import MlflowClient

    from reproduce.files import read_records

    store = MlflowClient(uri)
    records = read_records(Path(result["metrics_file"]))
    keys = {key for record in records for key in record if key != "step"}
    lost = 0
    for key in keys:
        held = {(metric.step, metric.value) for metric in store.get_metric_history(result["run_id"],
                                                                                   key)}
        lost += sum(1 for record in records
                    if key in record and (record["step"], float(record[key])) not in held)
    return lost


def _values(metrics_file: Path) -> int:
    """The metric values of a ``metrics.jsonl``: one per key of each record, its step aside."""
    from reproduce.files import read_records

    return sum(len(record) - 1 for record in read_records(metrics_file))


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(share * len(ordered)) - 1)] if ordered else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=24,
                        help="concurrent trainings (default 24: the sweep's variants)")
    parser.add_argument("--steps-per-second", type=float, default=10.0,
                        help="a real training's steps per second")
    parser.add_argument("--speedup", type=float, default=100.0,
                        help="how many times faster than real time the clients log")
    parser.add_argument("--log-calls", type=int,
                        help="metric records per client (default: all of the variant's steps)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()

    variants = sweep_variants()
    chosen = [variants[index % len(variants)] for index in range(args.clients)]
    from reproduce.experiment_file import load_experiment

    log_every = {path: load_experiment(ROOT / path).training.log_every_steps
                 for path in EXPERIMENTS}
    with tempfile.TemporaryDirectory(prefix="tracking-sweep-") as scratch:
        folder, port = Path(scratch), free_port()
        uri = server("start", folder / "server", port).strip().rsplit("=", 1)[-1]
        try:
            figures = _sweep(chosen, uri, folder, args, log_every)
        finally:
            server("stop", folder / "server", port)
    _print(figures, args)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


def _sweep(chosen: list[tuple[str, str]], uri: str, folder: Path, args: argparse.Namespace,
           log_every: dict[str, int]) -> dict:
    context = multiprocessing.get_context("spawn")
    processes = []
    for index, (path, name) in enumerate(chosen):
        seconds_per_log = log_every[path] / args.steps_per_second / args.speedup
        process = context.Process(target=client, args=(
            path, name, uri, str(folder / f"client{index}"), args.log_calls, seconds_per_log,
            args.speedup, str(folder / f"client{index}.json")))
        process.start()
        processes.append(process)
    started = time.monotonic()
    for process in processes:
        process.join()
    seconds = time.monotonic() - started
    failed = [index for index, process in enumerate(processes) if process.exitcode != 0]
    results = [json.loads((folder / f"client{index}.json").read_text())
               for index in range(len(chosen)) if index not in failed]
    calls = [call for result in results for call in result["calls"]]
    latencies = [seconds for _, _, seconds, _ in calls]
    span = max((began + seconds for _, _, seconds, began in calls), default=1.0) - min(
        (began for _, _, _, began in calls), default=0.0)
    return {
        "clients": len(chosen), "failed_clients": len(failed), "speedup": args.speedup,
        "steps_per_second": args.steps_per_second, "seconds": seconds,
        "logging_seconds": max((result["logging_seconds"] for result in results), default=0.0),
        "requests": len(calls), "requests_per_second": len(calls) / span,
        "p50_ms": 1000 * percentile(latencies, 0.50), "p99_ms": 1000 * percentile(latencies, 0.99),
        "max_ms": 1000 * max(latencies, default=0.0),
        "errors": sum(1 for path, status, _, _ in calls if _failed(path, status)),
        "errors_by_request": _errors_by_request(calls),
        "warnings": sum(result["warnings"] for result in results),
        "values": sum(_values(Path(result["metrics_file"])) for result in results),
        "lost_in_flight": sum(result["replayed"] for result in results),
        "lost": sum(lost_values(uri, result) for result in results),
    }


EXPECTED_REFUSALS = {
    # MLflow's answer for an experiment not made yet: the first training of a dataset makes it.
    ("/experiments/get-by-name", 404),
    # Two first trainings of a dataset making its experiment at once: the loser takes the
    # winner's (reproduce.tracking.runs._tagged_experiment).
    ("/experiments/create", 400),
}


def _failed(path: str, status: int) -> bool:
    """No answer, or an error status but the answers the tracking code expects."""
    return (status == 0 or status >= 400) and not any(
        path.endswith(end) and status == expected for end, expected in EXPECTED_REFUSALS)


def _errors_by_request(calls: list) -> dict[str, int]:
    """How many failed answers of each (path, status)."""
    errors: dict[str, int] = {}
    for path, status, _, _ in calls:
        if _failed(path, status):
            key = f"{path} {status or 'no answer'}"
            errors[key] = errors.get(key, 0) + 1
    return errors


def _print(figures: dict, args: argparse.Namespace) -> None:
    print(f"# tracking server under a sweep ({platform.node()}, {os.cpu_count()} CPUs, "
          f"Python {sys.version.split()[0]})")
    print(f"{figures['clients']} clients ({figures['failed_clients']} failed), "
          f"{args.steps_per_second:g} steps/s per training, {args.speedup:g} times real time")
    print("| requests | seconds | requests/s | p50 ms | p99 ms | max ms | errors | warnings | "
          "metric values | lost in flight | lost |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    print(f"| {figures['requests']} | {figures['seconds']:.1f} | "
          f"{figures['requests_per_second']:.1f} | {figures['p50_ms']:.1f} | "
          f"{figures['p99_ms']:.1f} | {figures['max_ms']:.1f} | {figures['errors']} | "
          f"{figures['warnings']} | {figures['values']} | {figures['lost_in_flight']} | "
          f"{figures['lost']} |")
    for request, count in sorted(figures["errors_by_request"].items()):
        print(f"error: {count} x {request}")


if __name__ == "__main__":
    main()
