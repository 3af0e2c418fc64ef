"""Each job's declared inputs are every file it reads: a results tree of the real DAG (outputs
made by `snakemake --touch`, in the DAG's order, on stand-in files), then the files that jobs once
read without declaring them (the checkpoint list that `average` reads, the summaries and live
metrics log that the tables read) are changed one at a time, and a real dry run must plan exactly
the jobs that read them, and no others. (A deleted intermediate file replans nothing whose
outputs are up to date, by Snakemake's design, as for temp() files; deleting the live log shows
that no job needs it.) A grep of the rules then finds no `params:`
that stands for a file a job reads."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from reproduce.tables.outputs import TABLE_FILES
from tests.project_copy import copy_workflow

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
VARIANTS = ["base", "A_h1"]
SEEDS = {"base": [1, 2], "A_h1": [1]}  # base trained twice: a change to one seed spares the other
BASE = "results/tiny/base/seed-1"
# What follows a variant's training in `all`, and what follows its averaged model.
AFTER_AVERAGING = {"average": 1, "evaluate": 1, "summarize_variant": 1,
                   "final_tables": 1, "all": 1}
TABLES_ONLY = {"final_tables": 1, "all": 1}


def _snakemake(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    result = subprocess.run([SNAKEMAKE, "--cores", "1", "--configfile=pipeline.yaml", *args],
                            cwd=workdir, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def _dry_run(workdir: Path, target: str = "all") -> tuple[dict[str, int], str]:
    """Rule -> job count of a dry run ({} when there is nothing to do), and its output."""
    stdout = _snakemake(workdir, "--dry-run", target).stdout
    lines = stdout.splitlines()
    if "Job stats:" not in lines:
        return {}, stdout
    jobs = {}
    for line in lines[lines.index("Job stats:") + 3:]:
        name, count = line.split()
        if name == "total":
            return jobs, stdout
        jobs[name] = int(count)
    raise AssertionError("no total line in the job stats")


def _planned(workdir: Path, target: str = "all") -> dict[str, int]:
    return _dry_run(workdir, target)[0]


def _stand_in(path: Path) -> str:
    """A stand-in output; a summary records the settings it was trained with, as training's do
    (one without them is stale: reproduce.provenance)."""
    if path.name == "summary.json":
        from reproduce.experiment_file import load_experiment
        from reproduce.provenance import trained_settings

        experiment = load_experiment(path.parents[5] / "configs/tiny.yaml")
        seed = int(path.parents[1].name.removeprefix("seed-"))
        variant = experiment.variant(path.parents[2].name, seed)
        return json.dumps({"settings": trained_settings(variant, experiment)}) + "\n"
    return "{}\n" if path.suffix == ".json" else "stand-in\n"


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """The translation DAG of two variants, every output a stand-in, all up to date."""
    workdir = copy_workflow(tmp_path_factory.mktemp("dag"))
    experiment = yaml.safe_load((ROOT / "configs/tiny.yaml").read_text())
    experiment["variants"] = {name: experiment["variants"][name] for name in VARIANTS}
    for name, seeds in SEEDS.items():
        experiment["variants"][name]["training"] = {"seed": seeds}
    experiment["tables"]["table2"] = {"base": "base"}
    (workdir / "configs/tiny.yaml").write_text(yaml.safe_dump(experiment, sort_keys=False))
    pipeline = yaml.safe_load((ROOT / "configs/pipelines/tiny.yaml").read_text())
    (workdir / "pipeline.yaml").write_text(
        yaml.safe_dump(pipeline | {"experiments": ["configs/tiny.yaml"]}))
    summary = _snakemake(workdir, "--summary", "all").stdout.splitlines()
    rows = [line.split("\t") for line in summary[summary.index(next(
        line for line in summary if line.startswith("output_file"))) + 1:] if "\t" in line]
    for output, _, rule, *_ in rows:
        path = workdir / output
        if rule == "encode":  # directory() outputs
            path.mkdir(parents=True, exist_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(_stand_in(path))
    for variant, seeds in SEEDS.items():  # training's own state, no job's declared output
        for seed in seeds:
            (workdir / f"results/tiny/{variant}/seed-{seed}/train/metrics.jsonl").write_text(
                '{"step": 1}\n')
    _snakemake(workdir, "--touch", "all")  # mtimes in the DAG's order
    assert _planned(workdir) == {}
    return workdir


class _Changed:
    """Change (a line appended, a newer mtime: Snakemake skips a newer file whose checksum it
    recorded unchanged) or delete (moved aside) one file, and put it back afterwards."""

    def __init__(self, path: Path, how: str):
        self.path, self.how = path, how

    def __enter__(self):
        self.content = self.path.read_bytes()
        self.times = os.stat(self.path).st_atime_ns, os.stat(self.path).st_mtime_ns
        if self.how == "change":
            self.path.write_bytes(self.content + b"changed\n")
            os.utime(self.path, ns=(self.times[0], self.times[1] + 10**10))
        else:
            shutil.move(self.path, self.path.with_name(self.path.name + ".aside"))

    def __exit__(self, *exc):
        if self.how == "delete":
            shutil.move(self.path.with_name(self.path.name + ".aside"), self.path)
        self.path.write_bytes(self.content)
        os.utime(self.path, ns=self.times)


@pytest.mark.parametrize("relative, how, expected", [
    ("train/checkpoints.json", "change", AFTER_AVERAGING),  # average reads the list it names
    ("train/summary.json", "change", TABLES_ONLY),  # the tables' parameters, FLOPs and curves
    ("bleu.json", "change", TABLES_ONLY),
    ("train/metrics.jsonl", "change", {}),  # the live log: no finished job reads it...
    ("train/metrics.jsonl", "delete", {}),  # ...nor needs it (an undeclared input would be missing)
])
def test_a_changed_file_replans_exactly_the_jobs_that_read_it(tree, relative, how, expected):
    with _Changed(tree / BASE / relative, how):
        planned, stdout = _dry_run(tree)
    assert planned == expected
    assert "variant=A_h1" not in stdout  # the other variant is left alone
    assert "seed=2" not in stdout  # and so is the base's other training


def test_a_seed_added_later_plans_that_seeds_jobs_alone(tree):
    """training.seed's list grown from [1, 2] to [1, 2, 3]: the new training, its averaging,
    decoding, scoring and summary, then the tables; the two trained seeds are not replanned."""
    experiment_file = tree / "configs/tiny.yaml"
    original = experiment_file.read_text()
    edited = yaml.safe_load(original)
    edited["variants"]["base"]["training"]["seed"] = [1, 2, 3]
    try:
        experiment_file.write_text(yaml.safe_dump(edited, sort_keys=False))
        planned, stdout = _dry_run(tree)
    finally:
        experiment_file.write_text(original)
    assert planned == {"train": 1, "average": 1, "evaluate": 1,
                       "summarize_variant": 1, "final_tables": 1, "all": 1}
    assert "results/tiny/base/seed-3/train/final.pt" in stdout
    assert not re.search(r"seed=[12]\b", stdout)
    assert "Stale:" not in stdout  # each training is checked against its own seed's settings


def test_a_dry_run_plans_one_training_per_listed_seed(tree):
    """One variant with training.seed: [1, 2, 3]: three trainings, each in its own folder."""
    experiment = yaml.safe_load((ROOT / "configs/tiny.yaml").read_text())
    experiment["name"] = "seeded"
    experiment["training"]["seed"] = [1, 2, 3]
    experiment["variants"] = {"base": experiment["variants"]["base"]}
    experiment["tables"]["table2"] = {"base": "base"}
    (tree / "configs/seeded.yaml").write_text(yaml.safe_dump(experiment, sort_keys=False))
    pipeline = yaml.safe_load((tree / "pipeline.yaml").read_text())
    (tree / "seeded.yaml").write_text(
        yaml.safe_dump(pipeline | {"experiments": ["configs/seeded.yaml"]}))
    stdout = subprocess.run(
        [SNAKEMAKE, "--cores", "1", "--configfile=seeded.yaml", "--dry-run", "all"],
        cwd=tree, capture_output=True, text=True, timeout=600, check=True).stdout
    trainings = re.findall(r"output: (results/seeded/base/seed-\d+)/train/final\.pt", stdout)
    assert sorted(trainings) == [f"results/seeded/base/seed-{seed}" for seed in (1, 2, 3)]
    jobs = stdout.split("Job stats:")[1]
    assert re.search(r"^train\s+3$", jobs, re.MULTILINE), jobs


def test_the_tables_snapshot_is_retaken_when_what_it_reads_changes_and_never_trains(tree):
    _snakemake(tree, "tables")  # really run (--touch records no params): renders the stand-ins
    assert all((tree / "results/tiny/tables_so_far" / name).stat().st_size
               for name in TABLE_FILES["translation"])
    assert _planned(tree, "tables") == {}
    for relative, how in (("train/summary.json", "change"), ("train/summary.json", "delete"),
                          ("bleu.json", "change")):
        with _Changed(tree / BASE / relative, how):
            assert _planned(tree, "tables") == {"tables": 1}, relative
    assert _planned(tree, "tables") == {}


# -- no params for files read ---------------------------------------------------------------------
# Every `params:` entry of the rules, and why it is not a file that the job reads.
NOT_FILES_READ = {
    "experiment": "the experiment file: what a job depends on in it reaches it as params "
                  "(fingerprint, settings, decoding), so that an edit replans only those jobs",
    "out_dir": "a folder the job writes (train: the variant's folder, whose checkpoints are its "
               "own state, resumed from; the list that `average` reads is a declared output)",
    "results": "the results root, for the MLflow store: a sink, never read for a result",
    "launcher": "a setting", "tasks": "a setting", "fingerprint": "a setting",
    "steps": "a setting", "last": "a setting", "settings": "settings", "decoding": "settings",
    "sentences": "line numbers", "split": "a name", "source": "a source's name",
    "downloads": "the folder of the downloads that are declared inputs",
    "model_prefix": "the prefix of the outputs",
    "render": "the tables snapshot's commands",
    "sources_state": "sizes and times of what the snapshot reads, which must not be inputs: "
                     "Snakemake would build them, and the snapshot never trains",
}


def _params_of_rules() -> dict[str, list[str]]:
    names: dict[str, list[str]] = {}
    for path in sorted((ROOT / "workflow/rules").glob("*.smk")):
        rule = None
        in_params = False
        for line in path.read_text().splitlines():
            if match := re.match(r"^(?:rule|use rule) (\w+)", line):
                rule, in_params = match.group(1), False
            elif re.match(r"^    \w+:", line):
                in_params = line.strip() == "params:"
            elif in_params and (match := re.match(r"^        (\w+)=", line)):
                names.setdefault(match.group(1), []).append(f"{path.name}:{rule}")
    return names


def test_no_rule_passes_a_file_it_reads_as_a_param():
    params = _params_of_rules()
    assert "experiment" in params and "render" in params  # the grep finds them at all
    unexplained = {name: rules for name, rules in params.items() if name not in NOT_FILES_READ}
    assert unexplained == {}, "a param that may be a file read: declare it as an input"


def _assert_left_stale(tree: Path, variant: str, *named: str) -> None:
    """The plan of ``all`` warns once that ``variant`` is stale, naming ``named``, replans
    neither its training nor its averaging and changes no file of it; asked for its missing
    ``final.pt``, the plan stops with the same message before Snakemake deletes anything."""
    folder = tree / "results/tiny" / variant / "seed-1"
    before = {path: path.read_bytes() for path in folder.rglob("*") if path.is_file()}
    jobs, output = _dry_run(tree)
    assert "train" not in jobs and "average" not in jobs, jobs
    stale = [line for line in output.splitlines() if line.startswith("Stale: ")]
    assert len(stale) == 1 and f"results/tiny/{variant}/seed-1" in stale[0], output[-3000:]
    assert all(text in stale[0] for text in (*named, f"move {folder.relative_to(tree)} aside")), \
        stale
    assert {path: path.read_bytes() for path in folder.rglob("*") if path.is_file()} == before

    final = folder / "train/final.pt"
    final.rename(folder / "final.pt.kept")
    try:
        result = subprocess.run([SNAKEMAKE, "--cores", "1", "--configfile=pipeline.yaml",
                                 "--dry-run", f"results/tiny/{variant}/seed-1/train/final.pt"],
                                cwd=tree, capture_output=True, text=True, timeout=600)
        assert result.returncode != 0
        assert "StaleTrainingError" in result.stdout + result.stderr
        assert all(text in result.stdout + result.stderr for text in named)
    finally:
        (folder / "final.pt.kept").rename(final)


def test_a_finished_variant_of_since_edited_settings_is_left_as_it_is_and_named_stale(tree):
    """An edit of a finished variant's settings would replan its training, and Snakemake would
    delete the training's outputs before the trainer refuses the old checkpoints. The training
    job is refused while Snakemake plans instead: with its outputs there, it drops out of the
    plan (nothing after it is replanned), the workflow warns once, naming the edit, and nothing
    in the variant's folder changes; asked for an output it lacks, the plan stops with that
    message."""
    from reproduce.experiment_file import load_experiment
    from reproduce.provenance import trained_settings

    experiment_file = tree / "configs/tiny.yaml"
    original_experiment = experiment_file.read_text()
    experiment = load_experiment(experiment_file)
    summary = tree / "results/tiny/A_h1/seed-1/train/summary.json"
    original_summary = summary.read_text()
    try:
        settings = trained_settings(experiment.variant("A_h1"), experiment)
        summary.write_text(json.dumps({"settings": settings}))  # as training writes it
        edited = yaml.safe_load(original_experiment)
        edited["variants"]["A_h1"].setdefault("model", {})["dropout"] = 0.3
        experiment_file.write_text(yaml.safe_dump(edited, sort_keys=False))
        _assert_left_stale(tree, "A_h1", "model.dropout: 0.1 -> 0.3")
    finally:
        experiment_file.write_text(original_experiment)
        summary.write_text(original_summary)


def test_a_pinned_corpus_at_another_url_replans_nothing(tree):
    """Its sha256 names its bytes: a corpus moved to a mirror, served over https or signed anew
    is the same data, so neither its download, its preparation nor the trainings on it are
    replanned, and none is called stale."""
    experiment_file = tree / "configs/tiny.yaml"
    original = experiment_file.read_text()
    try:
        edited = yaml.safe_load(original)
        for split in ("train", "dev", "test"):
            for source in edited["data"][split]:
                assert source["sha256"]
                source["url"] = "https://mirror.example.org/wmt/tiny_corpus.tgz?signature=2"
        experiment_file.write_text(yaml.safe_dump(edited, sort_keys=False))
        jobs, output = _dry_run(tree)
        assert jobs == {} and "Stale: " not in output, output[-3000:]
    finally:
        experiment_file.write_text(original)


def test_a_summary_without_settings_is_warned_of_once_and_left_as_it_is(tree):
    """A summary that records no settings (written by hand, or cut short) cannot tell whether
    the experiment file was edited since it trained: every setting counts as changed, and the
    variant is treated as a stale one is. (The tables side is tests/test_bad_input.py's
    tables-summary-without-settings.)"""
    summary = tree / "results/tiny/A_h1/seed-1/train/summary.json"
    original = summary.read_text()
    try:
        summary.write_text(json.dumps({"dataset": "tiny", "variant": "A_h1", "steps": 600,
                                       "parameters": 123}))
        _assert_left_stale(tree, "A_h1", "model.d_model: '(absent)' -> 64")
    finally:
        summary.write_text(original)
