"""Experiments (validated at start-up), wildcard constraints and path helpers shared by the rules."""

import sys
from pathlib import Path

from reproduce.config import ConfigError, load_experiment
from reproduce.data.download import file_name as download_name


def _load_experiments(paths):
    experiments = {}
    for path in paths:
        try:
            experiment = load_experiment(path)
        except ConfigError as error:
            sys.exit(f"Invalid experiment configuration: {error}")
        experiments[experiment.name] = (path, experiment)
    return experiments


_LOADED = _load_experiments(config["experiments"])
EXPERIMENTS = {name: experiment for name, (_, experiment) in _LOADED.items()}
EXPERIMENT_FILES = {name: path for name, (path, _) in _LOADED.items()}
RESULTS = config["results"]
PYTHON = sys.executable
REPRODUCE = f"{PYTHON} -m reproduce"

wildcard_constraints:
    dataset="|".join(EXPERIMENTS),
    variant=r"[A-Za-z0-9_]+",
    split="train|dev|test",
    evaluated_split="dev|test",
    checkpoint="last|averaged",


def experiment_file(wildcards):
    return EXPERIMENT_FILES[wildcards.dataset]


def _downloads_by_name():
    by_name = {}
    for dataset, experiment in EXPERIMENTS.items():
        for split in ("train", "dev", "test"):
            for source in getattr(experiment.data, split):
                by_name.setdefault(download_name(source), (dataset, split, source))
    return by_name


DOWNLOADS = _downloads_by_name()


def split_downloads(wildcards):
    sources = getattr(EXPERIMENTS[wildcards.dataset].data, wildcards.split)
    return [f"{RESULTS}/downloads/{download_name(source)}" for source in sources]


def variant_dir(dataset, variant):
    return f"{RESULTS}/{dataset}/{variant}"


def table_files(dataset):
    return [f"{RESULTS}/{dataset}/tables/{name}" for name in TABLE_NAMES]


TABLE_NAMES = [
    "table2.md", "table2.csv", "table3.md", "table3.csv",
    "bleu_vs_parameters.png", "dev_perplexity.png",
]
