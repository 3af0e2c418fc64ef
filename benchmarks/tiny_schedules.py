"""Dev losses of tiny trainings under other settings: how the demo's schedule was chosen.

Each SPEC is ``variant:seed:JSON``, the JSON overriding the variant's ``training`` and ``model``
settings of ``--experiment`` (``configs/tiny.yaml``; the parser's: ``configs/tiny_parsing.yaml``
with ``--encoded results/tiny_parsing/encoded``); the trainings run two at a time on one thread
each (as the demo's jobs do), on the encoded splits of a demo run, and each prints its wall time
and its dev losses (every 50 steps unless the JSON sets ``eval_every_steps``):

    .venv/bin/python benchmarks/tiny_schedules.py --encoded results/tiny/encoded \\
        'base:1:{"training": {"steps": 400, "lr_scale": 0.7}}' \\
        'big:1:{"training": {"steps": 400, "lr_scale": 0.7}, "model": {"dropout": 0.1}}'
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from multiprocessing import Pool
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EVERY = 50  # steps between dev losses


def train(job: tuple[str, Path, Path]) -> str:
    """One training of a SPEC, in a process of its own (one thread): its dev losses and time."""
    import torch

    from reproduce.config import deep_merge
    from reproduce.experiment_file import load_experiment
    from reproduce.training.assembly import build_trainer

    spec, encoded, experiment_file = job
    torch.set_num_threads(1)
    name, seed, overrides = spec.split(":", 2)
    overrides = deep_merge({"training": {"eval_every_steps": EVERY, "log_every_steps": EVERY}},
                           json.loads(overrides))
    experiment = load_experiment(experiment_file)
    # merged into the variant's own overrides, then resolved and checked as the file's are
    declared = experiment.variants[name]
    edited = declared.model_copy(update={
        section: deep_merge(getattr(declared, section), values)
        for section, values in overrides.items()})
    experiment = experiment.model_copy(update={"variants": experiment.variants | {name: edited}})
    variant = experiment.variant(name, int(seed))
    with tempfile.TemporaryDirectory() as scratch:
        trainer = build_trainer(variant, experiment, encoded / "train", encoded / "dev",
                                Path(scratch) / "run")
        started = time.perf_counter()
        trainer.run()
        seconds = time.perf_counter() - started
        records = [json.loads(line) for line in trainer.records.metrics_path.open()]
    losses = [f"{record['dev_loss']:.2f}" for record in records if "dev_loss" in record]
    return f"{spec}  {seconds:.0f} s  dev losses: {', '.join(losses)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--encoded", type=Path, default=ROOT / "results/tiny/encoded",
                        help="the demo's encoded splits (train, dev)")
    parser.add_argument("--experiment", type=Path, default=ROOT / "configs/tiny.yaml",
                        help="the experiment file whose variants the SPECs edit")
    parser.add_argument("specs", nargs="+", metavar="SPEC")
    args = parser.parse_args()
    with Pool(2) as pool:
        for line in pool.imap(train, [(spec, args.encoded, args.experiment)
                                          for spec in args.specs]):
            print(line, flush=True)


if __name__ == "__main__":
    main()
