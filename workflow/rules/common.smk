"""Experiments (validated at start-up), wildcard constraints and path helpers shared by the rules."""

import json
import os
import shlex
import sys
from pathlib import Path

from snakemake.logging import logger
from snakemake_interface_executor_plugins.settings import DeploymentMethod

from reproduce.config import ConfigError
from reproduce.data.download import file_name as download_name
from reproduce.files import read_json
from reproduce.model.flops import model_flops
from reproduce.errors import ReproduceError
from reproduce.experiment_file import load_experiment, read_yaml
from reproduce.provenance import (
    refuse_stale_training,
    stale_training_message,
    trained_settings,
    training_digest,
    training_steps,
)
from reproduce.tables.comparisons import compared_files
from reproduce.tables.outputs import SCORES_FILE, TABLE_FILES


def _refuse_duplicate_keys_in_pipeline_config(paths):
    """Snakemake reads the pipeline config keeping the last of a key given twice; re-reading its
    YAML files (a few lines each) with the experiment files' loader refuses that instead. A JSON
    config file is left to Snakemake: YAML refuses the tabs that JSON may be indented with."""
    for path in paths:
        if os.path.splitext(path)[1] not in (".yaml", ".yml"):
            continue
        try:
            read_yaml(path)
        except ConfigError as error:
            sys.exit(f"Invalid pipeline configuration: {error}")


def _load_experiments(paths):
    """Experiments by name; two files of one name would otherwise leave one out of the DAG."""
    experiments = {}
    for path in paths:
        try:
            experiment = load_experiment(path)
        except ConfigError as error:
            sys.exit(f"Invalid experiment configuration: {error}")
        if experiment.name in experiments:
            sys.exit(
                f"Invalid experiment configuration: {experiments[experiment.name][0]} and "
                f"{path} are both named {experiment.name!r}; give each experiment its own name"
            )
        experiments[experiment.name] = (path, experiment)
    return experiments


_refuse_duplicate_keys_in_pipeline_config(workflow.configfiles)
_LOADED = _load_experiments(config["experiments"])
EXPERIMENTS = {name: experiment for name, (_, experiment) in _LOADED.items()}
EXPERIMENT_FILES = {name: path for name, (path, _) in _LOADED.items()}
RESULTS = config["results"]
CONDA_ENV = "../envs/reproduce.yaml"  # relative to workflow/rules/, where every rule lives


def _run_the_projects_python():
    """Jobs run `python -m reproduce ...`. Under `--sdm conda`, `python` is the rule's env's;
    otherwise the interpreter running Snakemake (the project's .venv) is put first on the jobs'
    PATH. A shell prefix, not a rule parameter, so that another path to the interpreter (a moved
    or copied project, another .venv) does not make Snakemake plan finished jobs again."""
    if DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method:
        return
    interpreter_dir = shlex.quote(os.path.dirname(sys.executable))
    shell.prefix(f'set -euo pipefail; export PATH={interpreter_dir}:"$PATH"; ')


_run_the_projects_python()


def _datasets_of(task):
    """A regex of the datasets whose experiment has this task (one that never matches if none)."""
    names = [name for name, experiment in EXPERIMENTS.items() if experiment.task == task]
    return "|".join(names) or "(?!)"


TRANSLATION_DATASETS = _datasets_of("translation")
PARSING_DATASETS = _datasets_of("parsing")


wildcard_constraints:
    dataset="|".join(EXPERIMENTS),
    scores_summary="bleu|f1",
    variant=r"[A-Za-z0-9_]+",
    seed=r"\d+",
    split="train|dev|test",
    evaluated_split="dev|test",


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


def seed_dir(dataset, variant, seed):
    """One training of a variant (training.seed may list several) and all that follows from it:
    checkpoints, averaged weights, translations, scores."""
    return f"{RESULTS}/{dataset}/{variant}/seed-{seed}"


# seed_dir's pattern, with wildcards: the folder of every rule's files about one training
SEED_DIR = seed_dir("{dataset}", "{variant}", "{seed}")
# what `evaluate` writes in that folder and `summarize_variant` reads
EVALUATED_SCORES = {"dev": "scores/dev.last.json", "test": "scores/test.averaged.json"}


def trainings(dataset):
    """(variant, seed) of every training the experiment asks for, in the file's order."""
    experiment = EXPERIMENTS[dataset]
    return [
        (variant, seed) for variant in experiment.variants for seed in experiment.seeds(variant)
    ]


def _finished_training(dataset, variant, seed):
    """(folder, its summary or None, the settings the experiment file gives now). An int seed:
    a wildcard's string, or one the experiment lists; one it does not list is refused here."""
    experiment = EXPERIMENTS[dataset]
    folder = Path(seed_dir(dataset, variant, seed))
    try:
        summary = read_json(folder / "train/summary.json")
    except (FileNotFoundError, ReproduceError):  # none, or damaged: for the tables to name
        summary = None
    if not isinstance(summary, dict):
        summary = None
    return folder, summary, trained_settings(experiment.variant(variant, int(seed)), experiment)


def _warn_of_stale_variants():
    for dataset in EXPERIMENTS:
        for variant, seed in trainings(dataset):
            message = stale_training_message(*_finished_training(dataset, variant, seed))
            if message is not None:
                logger.warning(f"Stale: {message}")


_warn_of_stale_variants()


TRAINING_OUTPUTS = ("final.pt", "summary.json", "checkpoints.json")


def _trained(folder):
    return all((folder / "train" / name).exists() for name in TRAINING_OUTPUTS)


def _kept_stale(wildcards):
    """A stale training (reproduce.provenance) whose outputs are all there: left as it is."""
    folder, summary, settings = _finished_training(
        wildcards.dataset, wildcards.variant, wildcards.seed
    )
    return _trained(folder) and stale_training_message(folder, summary, settings) is not None


def made_by_data_steps(**patterns):
    """An input function of a training's job: ``patterns`` (files the data steps make, with the
    {dataset} wildcard), ancient for a stale training kept as it is (_kept_stale). Those files
    made again after an edited data or BPE setting then replan none of its jobs, whose outputs
    Snakemake would delete only for the trainer or the decoder to refuse the work: the model was
    trained with other settings (the tables mark it stale)."""

    def inputs(wildcards):
        paths = {
            name: pattern.format(dataset=wildcards.dataset) for name, pattern in patterns.items()
        }
        if _kept_stale(wildcards):
            return {name: ancient(path) for name, path in paths.items()}
        return paths

    return inputs


def training_inputs(wildcards):
    """The encoded train and dev splits (made_by_data_steps), and the test split, which training
    reads only to refuse a line too long to decode before it starts: ancient, so that a test set
    made again retrains nothing. A stale training missing some of its outputs is refused here,
    while Snakemake plans, before it would delete the others to rerun it (the trainer would
    refuse its checkpoints)."""
    folder, summary, settings = _finished_training(
        wildcards.dataset, wildcards.variant, wildcards.seed
    )
    if not _trained(folder):
        refuse_stale_training(folder, summary, settings)
    inputs = made_by_data_steps(
        train=f"{RESULTS}/{{dataset}}/encoded/train",
        dev=f"{RESULTS}/{{dataset}}/encoded/dev",
    )(wildcards)
    return inputs | {"test": ancient(f"{RESULTS}/{wildcards.dataset}/encoded/test")}


def stale_trainings(wildcards):
    """The dataset's finished trainings of other settings than the experiment's, which the
    tables mark stale: their params, so that the tables are rendered again when a training
    turns stale (an edited setting that replans none of its jobs) or current again."""
    return ", ".join(
        f"{variant}/seed-{seed}"
        for variant, seed in trainings(wildcards.dataset)
        if stale_training_message(*_finished_training(wildcards.dataset, variant, seed))
    )


def tracking_root(wildcards):
    """The results folder, which holds the MLflow store (mlflow.db) that every job logs to."""
    return RESULTS


def log_file(name):
    return f"{RESULTS}/logs/{name}.log"


def benchmark_file(name):
    """Wall time and memory of one job (Snakemake's `benchmark:`), to size `set-resources`."""
    return f"{RESULTS}/benchmarks/{name}.tsv"


def table_files(dataset):
    """Tables 2 and 3 and plots for translation; Table 4 and plots for parsing."""
    task = EXPERIMENTS[dataset].task
    return [f"{RESULTS}/{dataset}/tables/{name}" for name in TABLE_FILES[task]]


def scores_summary_file(dataset, variant, seed):
    """bleu.json (translation) or f1.json (parsing): one training's dev and test scores."""
    return f"{seed_dir(dataset, variant, seed)}/{SCORES_FILE[EXPERIMENTS[dataset].task]}"


def every_variant_scored(wildcards):
    """Every training's scores, and the translations and references that the tables'
    significance tests read (reproduce/tables/comparisons.py)."""
    return [
        scores_summary_file(wildcards.dataset, variant, seed)
        for variant, seed in trainings(wildcards.dataset)
    ] + compared_files(EXPERIMENTS[wildcards.dataset], RESULTS)


def every_variant_trained(wildcards):
    """train/summary.json of every training: the tables' parameter counts, FLOPs, GPU-hours and
    dev curves (reproduce/tables/results.py)."""
    return [
        f"{seed_dir(wildcards.dataset, variant, seed)}/train/summary.json"
        for variant, seed in trainings(wildcards.dataset)
    ]


def variant_scores(wildcards):
    """The dev (last weights) and test (averaged) scores summarised in bleu.json or f1.json."""
    expected = scores_summary_file(wildcards.dataset, wildcards.variant, wildcards.seed)
    if os.path.basename(expected) != f"{wildcards.scores_summary}.json":
        raise ValueError(
            f"{wildcards.dataset} is a {EXPERIMENTS[wildcards.dataset].task} experiment: "
            f"its variants are summarised in {expected}"
        )
    folder = seed_dir(wildcards.dataset, wildcards.variant, wildcards.seed)
    return {split: f"{folder}/{scores}" for split, scores in EVALUATED_SCORES.items()}


def reported_table_file(name):
    """A table output marked for `snakemake --report`, under the table or plot it belongs to."""
    category = {
        "scores": "Scores per variant",
        "table2": "Table 2",
        "table3": "Table 3",
        "table4": "Table 4",
    }.get(name.split(".")[0], "Plots")
    return report(
        f"{RESULTS}/{{dataset}}/tables/{name}",
        category=category,
        subcategory="{dataset}",
        labels={"dataset": "{dataset}", "file": name},
    )


def snapshot_dir(dataset):
    """Where the `tables` target renders whatever has finished, beside (never over) the final
    tables, which final_tables makes from the inputs it declares."""
    return f"{RESULTS}/{dataset}/tables_so_far"


def snapshot_files():
    return [
        f"{snapshot_dir(dataset)}/{name}"
        for dataset, experiment in EXPERIMENTS.items()
        for name in TABLE_FILES[experiment.task]
    ]


def snapshot_sources_state(wildcards):
    """Size and modification time of each file that the `tables` target would read now (a
    training's summary and scores, or the live metrics log of one still training), so that the
    snapshot is retaken when one changes (rerun-triggers params). Not inputs, which Snakemake
    would build when missing or outdated, and the snapshot must never trigger training."""
    state = []
    for dataset in EXPERIMENTS:
        for variant, seed in trainings(dataset):
            summary = f"{seed_dir(dataset, variant, seed)}/train/summary.json"
            live_log = f"{seed_dir(dataset, variant, seed)}/train/metrics.jsonl"
            read = [summary, scores_summary_file(dataset, variant, seed)]
            if not os.path.exists(summary):
                read.append(live_log)
            for path in read:
                if os.path.exists(path):
                    stat = os.stat(path)
                    state.append([path, stat.st_size, stat.st_mtime_ns])
    return json.dumps(state)


def render_tables_command():
    """One `reproduce tables` call per experiment, each argument quoted for the shell."""
    return " && ".join(
        shlex.join(
            ["python", "-m", "reproduce", "tables", "--experiment", path]
            + ["--results", RESULTS, "--out-dir", snapshot_dir(dataset)]
        )
        for dataset, path in EXPERIMENT_FILES.items()
    )


def split_settings(dataset, split):
    data = EXPERIMENTS[dataset].data
    sources = [source.identity() for source in getattr(data, split)]
    return json.dumps(
        {"sources": sources, "cleaning": data.cleaning.model_dump(mode="json")}, sort_keys=True
    )


def training_fingerprint(wildcards):
    """Digest of what the weights of this training (a variant with one of its seeds) depend on,
    its seed included: a changed value replans this training and what follows it, and nothing
    else (rerun-triggers params); a seed added to the list plans that seed alone. A finished one
    whose settings were edited keeps the digest it was trained with (reproduce.provenance)."""
    _, summary, settings = _finished_training(wildcards.dataset, wildcards.variant, wildcards.seed)
    return training_digest(summary, settings)


def steps_param(wildcards):
    """The steps the experiment gives, or those a stale training was trained for: raised, the
    steps replan a training, which continues from its last checkpoint, but a stale one's
    checkpoints are of other settings (reproduce.provenance)."""
    _, summary, settings = _finished_training(wildcards.dataset, wildcards.variant, wildcards.seed)
    steps = EXPERIMENTS[wildcards.dataset].variant(wildcards.variant).training.steps
    return training_steps(summary, settings, steps)


def _training_work(dataset, variant, seed):
    """About a training's arithmetic (FLOPs per token, from the BPE's vocabulary size, times the
    tokens it trains on), to order the trainings by, not to count anything."""
    experiment = EXPERIMENTS[dataset]
    resolved = experiment.variant(variant, int(seed))
    flops = model_flops(resolved.model, experiment.bpe.vocab_size)
    per_token = flops.per_source_token() + flops.per_target_token()
    return per_token * resolved.training.tokens_per_step * resolved.training.steps


def _training_ranks():
    """Every training's rank by its work, 1 for the lightest."""
    work = sorted(
        (_training_work(dataset, variant, seed), dataset, variant, str(seed))
        for dataset in EXPERIMENTS
        for variant, seed in trainings(dataset)
    )
    return {key[1:]: rank for rank, key in enumerate(work, start=1)}


TRAINING_RANKS = _training_ranks()
# The data steps (seconds each) before any training: otherwise, once one experiment's data are
# encoded, its trainings would take every core while another experiment's data wait for them.
DATA_PRIORITY = len(TRAINING_RANKS) + 1


def training_priority(wildcards):
    """Trainings before every other job, the longest first: on a few cores the short jobs that
    follow them then fill the cores at the end, rather than one long training running alone
    after everything else has finished (longest-processing-time-first scheduling)."""
    return TRAINING_RANKS[(wildcards.dataset, wildcards.variant, wildcards.seed)]
