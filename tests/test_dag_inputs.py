"""Each job's declared inputs are every file it reads: a results tree of the real DAG (outputs
made by `snakemake --touch`, in the DAG's order, on stand-in files), then the files that jobs once
read without declaring them (the checkpoint list that `average` reads, the summaries and live
metrics log that the tables read) are changed one at a time, and a real dry run must plan exactly
the jobs that read them, and no others. (A deleted intermediate file replans nothing whose
outputs are up to date, by Snakemake's design, as for temp() files; deleting the live log shows
that no job needs it.) A grep of the rules then finds no `params:`
that stands for a file a job reads. Then the files each job of a WMT14 training's chain reads
(a forced dry run: each split there has a download of its own), and the steps that an edited
setting replans, after data steps and a short training really ran (params are recorded only
then)."""

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from reproduce.data.download import file_name
from reproduce.experiment_file import load_experiment
from reproduce.tables.outputs import TABLE_FILES
from tests.project_copy import copy_workflow
from tests.test_bad_input_config import _set
from tests.test_cluster_faults import _workflow

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
VARIANTS = ["base", "A_h1"]
SEEDS = {"base": [1, 2], "A_h1": [1]}  # base trained twice: a change to one seed spares the other
BASE = "results/tiny/base/seed-1"
# What follows a variant's training in `all`, and what follows its averaged model.
AFTER_AVERAGING = {"average": 1, "evaluate": 1, "summarize_variant": 1,
                   "final_tables": 1, "all": 1}
TABLES_ONLY = {"final_tables": 1, "all": 1}
AFTER_SCORING = {"summarize_variant": 1, "final_tables": 1, "all": 1}
# Every training of the tree, and what follows it.
AFTER_TRAINING = {"train": 3, "average": 3, "evaluate": 3, "summarize_variant": 3,
                  "final_tables": 1, "all": 1}
AFTER_DECODING = {"evaluate": 1, "summarize_variant": 1, "final_tables": 1, "all": 1}


def _snakemake(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    result = subprocess.run([SNAKEMAKE, "--cores", "1", "--configfile=pipeline.yaml", *args],
                            cwd=workdir, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def _dry_run(workdir: Path, *targets: str) -> tuple[dict[str, int], str]:
    """Rule -> job count of a dry run of ``targets`` (``all`` if none; {} when there is nothing
    to do), and its output."""
    stdout = _snakemake(workdir, "--dry-run", *(targets or ["all"])).stdout
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


def _planned(workdir: Path, *targets: str) -> dict[str, int]:
    return _dry_run(workdir, *targets)[0]


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
    # mtimes in the DAG's order, and every job's params recorded (rerun triggers)
    _snakemake(workdir, "--touch", "--forceall", "all")
    assert _planned(workdir) == {}
    return workdir


class _Changed:
    """Change (a line appended, a newer mtime: Snakemake skips a newer file whose checksum it
    recorded unchanged), rewrite (the same size, a newer mtime) or delete (moved aside) one file,
    and put it back afterwards."""

    def __init__(self, path: Path, how: str):
        self.path, self.how = path, how

    def __enter__(self):
        self.content = self.path.read_bytes()
        self.times = os.stat(self.path).st_atime_ns, os.stat(self.path).st_mtime_ns
        if self.how in ("change", "rewrite"):
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
    ("train/final.pt", "change", AFTER_DECODING),  # dev decoded with the last weights
    ("averaged.pt", "change", AFTER_DECODING),  # and test with the averaged ones
    ("train/summary.json", "change", TABLES_ONLY),  # the tables' parameters, FLOPs and curves
    ("bleu.json", "change", TABLES_ONLY),
    ("translations/dev.last.txt", "change", TABLES_ONLY),  # Table 3's significance tests
    ("scores/dev.last.json", "change", AFTER_SCORING),  # bleu.json's dev half...
    ("scores/test.averaged.json", "change", AFTER_SCORING),  # ...and its test half
    ("train/metrics.jsonl", "change", {}),  # the live log: no finished job reads it...
    ("train/metrics.jsonl", "delete", {}),  # ...nor needs it (an undeclared input would be missing)
])
def test_a_changed_file_replans_exactly_the_jobs_that_read_it(tree, relative, how, expected):
    with _Changed(tree / BASE / relative, how):
        planned, stdout = _dry_run(tree)
    assert planned == expected
    assert "variant=A_h1" not in stdout  # the other variant is left alone
    assert "seed=2" not in stdout  # and so is the base's other training


def test_every_trainings_summary_and_scores_are_read_by_the_tables(tree):
    """Not only the first training's: the other seed's and the other variant's summary and
    scores, changed, replan the tables too."""
    for training in ("results/tiny/base/seed-2", "results/tiny/A_h1/seed-1"):
        for relative in ("train/summary.json", "bleu.json"):
            with _Changed(tree / training / relative, "change"):
                assert _planned(tree) == TABLES_ONLY, (training, relative)


SPLITS = ("train", "dev", "test")


def _wmt14_en_de_splits_planned(workdir: Path, *experiments: str) -> str:
    """The printed dry run of EN-DE's prepared splits in a pipeline of ``experiments``."""
    pipeline = yaml.safe_load((ROOT / "configs/pipelines/paper.yaml").read_text())
    (workdir / "pipeline.yaml").write_text(yaml.safe_dump(pipeline | {"experiments": [
        f"configs/{name}.yaml" for name in experiments]}))
    return _snakemake(workdir, "--dry-run", "--printshellcmds",
                      *(f"results/wmt14_en_de/data/{split}.src" for split in SPLITS)).stdout


def test_an_experiment_added_to_the_pipeline_changes_no_download_of_the_others(tmp_path):
    """EN-FR shares five archives with EN-DE, each downloaded once, for the first experiment
    that lists it: EN-FR added to a pipeline of EN-DE leaves every download job of EN-DE as it
    was (its params changed, Snakemake would download it again, and remake all that follows)."""
    workdir = copy_workflow(tmp_path)
    commands = [sorted(re.findall(r"^Shell command: python -m reproduce download .*$", stdout,
                                  re.MULTILINE))
                for stdout in (_wmt14_en_de_splits_planned(workdir, "wmt14_en_de"),
                               _wmt14_en_de_splits_planned(workdir, "wmt14_en_de",
                                                           "wmt14_en_fr"))]
    assert len(commands[0]) == 5 and commands[1] == commands[0], commands


@pytest.mark.parametrize("split", ["train", "dev"])
def test_a_re_encoded_split_replans_every_training(tree, split):
    """Training reads the encoded train split and the dev split it reports its dev loss on:
    either one made again (its directory's newer timestamp) plans every training again."""
    with _Changed(tree / f"results/tiny/encoded/{split}/.snakemake_timestamp", "change"):
        assert _planned(tree) == AFTER_TRAINING


@contextmanager
def _experiment_edited(tree: Path, edit):
    """The tree's experiment file with ``edit`` applied to its parsed content, then restored."""
    experiment_file = tree / "configs/tiny.yaml"
    original = experiment_file.read_text()
    edited = yaml.safe_load(original)
    edit(edited)
    try:
        experiment_file.write_text(yaml.safe_dump(edited, sort_keys=False))
        yield
    finally:
        experiment_file.write_text(original)


def test_raised_steps_replan_that_variants_trainings_alone(tree):
    """training.steps is not among the settings the weights depend on (a longer run continues
    from its last checkpoint): raised for one variant, both of its trainings are planned again,
    with what follows them, and neither is stale; the other variant is left alone."""
    with _experiment_edited(tree, lambda raw: raw["variants"]["base"]["training"].update(
            steps=400)):
        planned, stdout = _dry_run(tree)
    assert planned == {"train": 2, "average": 2, "evaluate": 2, "summarize_variant": 2,
                       "final_tables": 1, "all": 1}
    assert "variant=A_h1" not in stdout and "Stale:" not in stdout


def test_an_edited_bpe_setting_makes_the_splits_again_but_deletes_no_training(tree):
    """The BPE settings shape every training's weights: edited, every finished training is
    stale, warned of and left as it is, while the sentencepiece model and the encoded splits are
    made again. Its inputs made again, a training or its evaluation would be planned again, and
    Snakemake would delete its outputs before the trainer refuses its checkpoints (the decoder
    its other pieces); a stale one's are not."""
    with _experiment_edited(tree, lambda raw: raw["bpe"].update(vocab_size=500)):
        planned, stdout = _dry_run(tree)
    assert planned["train_bpe"] == 1 and planned["encode"] == 3, planned
    assert not {"train", "average", "evaluate", "summarize_variant"} & planned.keys(), planned
    stale = [line for line in stdout.splitlines() if line.startswith("Stale: ")]
    assert len(stale) == 3 and all("bpe.vocab_size: 600 -> 500" in line for line in stale)


def test_an_edited_source_replans_its_split_and_edited_cleaning_every_split(tree):
    """A split's preparation depends on its own sources and the cleaning: an edited test source
    replans the test split's preparation and what follows it (no training: test data are no
    setting the weights depend on); edited cleaning replans every split's, and the trainings,
    stale, are left as they are."""
    def test_source(raw):
        raw["data"]["test"][0]["source_member"] = "test/other.src.sgm"

    with _experiment_edited(tree, test_source):
        planned, stdout = _dry_run(tree)
    assert planned == {"prepare": 1, "references": 1, "encode": 1, "evaluate": 3,
                       "summarize_variant": 3, "final_tables": 1, "all": 1}, planned
    assert "split=test" in stdout and "split=dev" not in stdout and "Stale:" not in stdout
    with _experiment_edited(tree, lambda raw: raw["data"]["cleaning"].update(max_tokens=200)):
        planned = _planned(tree)
    assert planned.get("prepare") == 3 and "train" not in planned, planned


def test_a_variants_summary_keeps_its_dev_and_test_scores_apart(tree):
    """bleu.json, really made from scores that differ: its dev entry holds the last weights' dev
    scores (Table 3) and its test entry the averaged weights' test scores (Table 2)."""
    folder = tree / BASE
    scores = {split: {"split": split, "sacrebleu": bleu} for split, bleu in (("dev", 1.0),
                                                                            ("test", 2.0))}
    with (_Changed(folder / "scores/dev.last.json", "change"),
          _Changed(folder / "scores/test.averaged.json", "change"),
          _Changed(folder / "bleu.json", "change")):
        (folder / "scores/dev.last.json").write_text(json.dumps(scores["dev"]))
        (folder / "scores/test.averaged.json").write_text(json.dumps(scores["test"]))
        _snakemake(tree, "--allowed-rules", "summarize_variant", "--", f"{BASE}/bleu.json")
        summary = json.loads((folder / "bleu.json").read_text())
    assert (summary["dev"], summary["test"]) == (scores["dev"], scores["test"])


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
                          ("bleu.json", "change"), ("bleu.json", "rewrite")):
        with _Changed(tree / BASE / relative, how):
            assert _planned(tree, "tables") == {"tables": 1}, relative
    assert _planned(tree, "tables") == {}
    with _Changed(tree / BASE / "train/summary.json", "delete"):  # a training under way...
        _snakemake(tree, "tables")
        assert _planned(tree, "tables") == {}
        with _Changed(tree / BASE / "train/metrics.jsonl", "change"):  # ...logs another step
            assert _planned(tree, "tables") == {"tables": 1}


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
    "stale": "the names of the trainings the tables mark stale (their summaries are inputs)",
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
    ``final.pt`` or ``checkpoints.json`` (a training's outputs but the summary, which records
    its settings), the plan stops with the same message before Snakemake deletes anything."""
    folder = tree / "results/tiny" / variant / "seed-1"
    before = {path: path.read_bytes() for path in folder.rglob("*") if path.is_file()}
    jobs, output = _dry_run(tree)
    assert "train" not in jobs and "average" not in jobs, jobs
    stale = [line for line in output.splitlines() if line.startswith("Stale: ")]
    assert len(stale) == 1 and f"results/tiny/{variant}/seed-1" in stale[0], output[-3000:]
    assert all(text in stale[0] for text in (*named, f"move {folder.relative_to(tree)} aside")), \
        stale
    assert {path: path.read_bytes() for path in folder.rglob("*") if path.is_file()} == before

    for name in ("final.pt", "checkpoints.json"):
        missing = folder / "train" / name
        missing.rename(folder / f"{name}.kept")
        try:
            result = subprocess.run([SNAKEMAKE, "--cores", "1", "--configfile=pipeline.yaml",
                                     "--dry-run", str(missing.relative_to(tree))],
                                    cwd=tree, capture_output=True, text=True, timeout=600)
            assert result.returncode != 0, name
            assert "StaleTrainingError" in result.stdout + result.stderr, name
            assert all(text in result.stdout + result.stderr for text in named)
        finally:
            (folder / f"{name}.kept").rename(missing)


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
    def moved(raw):
        for split in SPLITS:
            for source in raw["data"][split]:
                assert source["sha256"]
                source["url"] = "https://mirror.example.org/wmt/tiny_corpus.tgz?signature=2"

    with _experiment_edited(tree, moved):
        jobs, output = _dry_run(tree)
    assert jobs == {} and "Stale: " not in output, output[-3000:]


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


# -- each job reads its own split and weights -----------------------------------------------------
PAPER = "results/wmt14_en_de"  # each split its own download, unlike the tiny corpus's one archive
TRAINED = f"{PAPER}/base/seed-1"


@pytest.fixture(scope="module")
def paper_jobs(tmp_path_factory) -> dict[tuple[str, str], dict]:
    """(rule, split or variant) -> the job's declared inputs and its command's options (option ->
    its values in order), from a forced dry run of one WMT14 EN-DE training's chain and figures,
    and of the big model's averaging (its own number of checkpoints)."""
    workdir = copy_workflow(tmp_path_factory.mktemp("paper"))
    shutil.copy(ROOT / "configs/pipelines/paper.yaml", workdir / "pipeline.yaml")
    stdout = _snakemake(workdir, "--dry-run", "--forceall", "--printshellcmds", "--",
                        f"{TRAINED}/figures", f"{TRAINED}/bleu.json",
                        f"{PAPER}/big/seed-1/averaged.pt").stdout
    jobs = {}
    for block in re.split(r"\n(?=rule \w+:)", stdout)[1:]:
        fields = dict(re.findall(r"^    (\w+): (.*)$", block, re.MULTILINE))
        wildcards = dict(pair.split("=") for pair in fields.get("wildcards", "").split(", ")
                         if pair)
        command = shlex.split(re.search(r"^Shell command: (.*)$", block, re.MULTILINE)[1])
        options: dict[str, list[str]] = {}
        for option, value in zip(command, command[1:], strict=False):
            if option.startswith("--"):
                options.setdefault(option, []).append(value)
        named = ("split", "evaluated_split", "variant", "filename")
        key = next((wildcards[name] for name in named if name in wildcards), "")
        jobs[block.split(":")[0].removeprefix("rule "), key] = {
            "input": set(fields["input"].split(", ")) if "input" in fields else set(),
            "options": options}
    return jobs


def _downloads(split: str) -> set[str]:
    experiment = load_experiment(ROOT / "configs/wmt14_en_de.yaml")
    return {f"results/downloads/{file_name(source)}" for source in getattr(experiment.data, split)}


@pytest.mark.parametrize("split", ["train", "dev", "test"])
def test_each_split_is_downloaded_prepared_referenced_and_encoded_from_its_own_files(paper_jobs,
                                                                                     split):
    """A step given another split's files (or no declared input for a file it reads) runs
    without an error on the tiny corpus, whose splits share one archive, and gives wrong data."""
    data = f"{PAPER}/data/{split}"
    experiment = load_experiment(ROOT / "configs/wmt14_en_de.yaml")
    for source in getattr(experiment.data, split):
        download = paper_jobs["download", file_name(source)]["options"]
        assert (download["--split"], download["--source"]) == ([split], [source.name])
    prepare = paper_jobs["prepare", split]
    assert prepare["input"] == _downloads(split) and prepare["options"]["--split"] == [split]
    encode = paper_jobs["encode", split]
    assert encode["input"] == {f"{PAPER}/bpe/spm.model", f"{data}.src", f"{data}.tgt"}
    assert (encode["options"]["--source"], encode["options"]["--target"],
            encode["options"]["--out-dir"]) == ([f"{data}.src"], [f"{data}.tgt"],
                                                [f"{PAPER}/encoded/{split}"])
    if split != "train":  # the references BLEU is scored against, from the released files
        references = paper_jobs["references", split]
        assert references["input"] == _downloads(split) | {f"{data}.src"}
        assert references["options"]["--split"] == [split]
        assert references["options"]["--out"] == [f"{data}.ref"]


def test_bpe_is_learned_from_the_training_data_alone(paper_jobs):
    train_bpe = paper_jobs["train_bpe", ""]
    data = f"{PAPER}/data/train"
    assert train_bpe["input"] == {f"{data}.src", f"{data}.tgt"}
    assert (train_bpe["options"]["--source"], train_bpe["options"]["--target"]) == (
        [f"{data}.src"], [f"{data}.tgt"])
    # training learns from train, is checked on dev, and reads test only for its lines' lengths
    # (refused before training if too long to decode: the command's --test-data)
    train = paper_jobs["train", "base"]
    assert train["input"] == {f"{PAPER}/encoded/{split}" for split in ("train", "dev", "test")}


def test_dev_is_scored_with_the_last_weights_and_test_with_the_averaged_ones(paper_jobs):
    """Table 3 reads dev with the last weights, Tables 2 and 4 test with the averaged ones
    (evaluate.smk); each split decoded, scored and summarised from its own files; each variant
    averages its own number of checkpoints (the big model its last 20); the figures draw the
    averaged model on its test translations."""
    evaluate = paper_jobs["evaluate", "base"]
    data, options = f"{PAPER}/data", evaluate["options"]
    weights = {"dev": f"{TRAINED}/train/final.pt", "test": f"{TRAINED}/averaged.pt"}
    named = {"dev": "dev.last", "test": "test.averaged"}
    assert options["--split"] == ["dev", "test"]
    assert options["--checkpoint-name"] == ["last", "averaged"]
    for option, files in {"--checkpoint": weights,
                          "--source": {split: f"{data}/{split}.src" for split in named},
                          "--reference": {split: f"{data}/{split}.ref" for split in named},
                          "--encoded": {split: f"{PAPER}/encoded/{split}" for split in named},
                          "--translations": {split: f"{TRAINED}/translations/{name}.txt"
                                             for split, name in named.items()},
                          "--out": {split: f"{TRAINED}/scores/{name}.json"
                                    for split, name in named.items()}}.items():
        assert options[option] == [files["dev"], files["test"]], option
        if option not in ("--translations", "--out"):
            assert set(options[option]) <= evaluate["input"], option
    assert len(evaluate["input"]) == 9  # the four per split, and the sentencepiece model
    summarize = paper_jobs["summarize_variant", "base"]["options"]
    assert (summarize["--dev"], summarize["--test"]) == ([f"{TRAINED}/scores/dev.last.json"],
                                                         [f"{TRAINED}/scores/test.averaged.json"])
    assert paper_jobs["average", "base"]["options"]["--last"] == ["5"]
    assert paper_jobs["average", "big"]["options"]["--last"] == ["20"]
    figures = paper_jobs["attention_figures", "base"]
    assert figures["input"] == {f"{TRAINED}/averaged.pt", f"{PAPER}/bpe/spm.model",
                                f"{data}/test.src", f"{TRAINED}/translations/test.averaged.txt"}
    assert (figures["options"]["--checkpoint"], figures["options"]["--source"],
            figures["options"]["--target"]) == (
        [f"{TRAINED}/averaged.pt"], [f"{data}/test.src"],
        [f"{TRAINED}/translations/test.averaged.txt"])


# -- an edited setting replans the data steps that read it ---------------------------------------
DATA_TARGETS = ("results/tiny/encoded/dev", "results/tiny/data/dev.ref",
                "results/tiny/data/test.ref")


@pytest.fixture(scope="module")
def data_steps(tmp_path_factory) -> Path:
    """The tiny experiment's data steps really run (seconds) up to the encoded dev split and
    both references, with the params they ran with recorded as a real run records them."""
    workdir = copy_workflow(tmp_path_factory.mktemp("data"))
    pipeline = yaml.safe_load((ROOT / "configs/pipelines/tiny.yaml").read_text())
    (workdir / "pipeline.yaml").write_text(
        yaml.safe_dump(pipeline | {"experiments": ["configs/tiny.yaml"]}))
    _snakemake(workdir, *DATA_TARGETS)
    assert _planned(workdir, *DATA_TARGETS) == {}
    return workdir


def _planned_after_edit(workdir: Path, edited: str, value: object, *targets: str,
                        ) -> tuple[dict[str, int], str]:
    """The dry run of ``targets`` with the experiment's ``edited`` set to ``value``."""
    with _experiment_edited(workdir, _set(edited, value)):
        return _dry_run(workdir, *targets)


@pytest.mark.parametrize("edited, value, expected", [
    ("data.cleaning.max_tokens", 200, {"prepare": 3, "train_bpe": 1, "encode": 1,
                                       "references": 2}),
    # the dev split alone: the other splits' data, and the BPE learned from train, stay
    ("data.dev.0.source_member", "test/newstest-tiny-src.src.sgm",
     {"prepare": 1, "encode": 1, "references": 1}),
    ("bpe.vocab_size", 500, {"train_bpe": 1, "encode": 1}),
    ("model.dropout", 0.3, {}),  # no data step reads it
])
def test_an_edited_setting_replans_the_data_steps_that_read_it(data_steps, edited, value,
                                                                expected):
    planned, stdout = _planned_after_edit(data_steps, edited, value, *DATA_TARGETS)
    assert planned == expected, stdout[-3000:]
    if "prepare" in expected and expected["prepare"] == 1:
        assert "split=dev" in stdout and "split=train" not in stdout and "split=test" not in stdout


AVERAGED = "results/tiny/base/seed-1/averaged.pt"


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """Six steps of a small model really trained, then averaged, by the train and average rules
    (seconds), so that Snakemake records the params they ran with."""
    workdir = _workflow(tmp_path_factory.mktemp("trained"), "inline", 1)
    experiment_file = workdir / "configs/tiny.yaml"
    experiment = yaml.safe_load(experiment_file.read_text())
    experiment["training"]["steps"] = 6
    experiment_file.write_text(yaml.safe_dump(experiment, sort_keys=False))
    _snakemake(workdir, "--allowed-rules", "train", "average", "--", AVERAGED)
    assert _planned(workdir, AVERAGED) == {}
    return workdir


@pytest.mark.parametrize("edited, value, expected", [
    ("training.steps", 9, {"train": 1, "average": 1}),  # continues the run, then averages anew
    ("training.average_last", 1, {"average": 1}),  # the same training, averaged otherwise
])
def test_an_edited_setting_replans_the_training_steps_that_read_it(trained, edited, value,
                                                                    expected):
    planned, stdout = _planned_after_edit(trained, edited, value, AVERAGED)
    assert planned == expected, stdout[-3000:]
    assert "Stale:" not in stdout


def test_raised_steps_leave_a_stale_training_as_it_is(trained):
    """Raising the steps of a training continues it (above), but a stale one's checkpoints are
    of other settings: replanned, Snakemake would delete its outputs for a job the trainer
    refuses. It is left as it is, as any other edit leaves it."""
    def stale_and_longer(raw):
        _set("model.dropout", 0.3)(raw)
        _set("training.steps", 9)(raw)

    with _experiment_edited(trained, stale_and_longer):
        planned, stdout = _dry_run(trained, AVERAGED)
    assert planned == {}, stdout[-3000:]
    assert "Stale:" in stdout and "model.dropout: 0.1 -> 0.3" in stdout


def test_the_trainer_learns_from_the_training_split_and_is_checked_on_dev(trained):
    """The train rule's wrapper (workflow/scripts/train.py) logs the command it ran first: dev
    given as training data, or train as dev data, would run without an error and skew the
    training or its dev curve (the tables' plot); the test split is given to be checked only."""
    command = shlex.split((trained / "results/logs/tiny/train_base_seed1.log").read_text()
                          .splitlines()[0])
    options = dict(zip(command[4::2], command[5::2], strict=True))
    assert command[1:4] == ["-m", "reproduce", "train"]
    assert options == options | {
        "--train-data": "results/tiny/encoded/train", "--dev-data": "results/tiny/encoded/dev",
        "--test-data": "results/tiny/encoded/test", "--variant": "base", "--seed": "1",
        "--out-dir": "results/tiny/base/seed-1", "--launcher": "inline"}
