"""Table 4's path through the real Snakemake DAG: the embedded tiny treebank, as shipped
(configs/tiny_parsing.yaml), from the archive to Table 4."""

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from reproduce.files import read_lines
from reproduce.parsing.evalb import bracket_scores
from reproduce.parsing.trees import Tree, leaves, read_trees
from tests.project_copy import copy_workflow

SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))

pytestmark = pytest.mark.slow


def _snakemake(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [SNAKEMAKE, "--cores", "2", "--configfile=pipeline.yaml", *args],
        cwd=workdir, capture_output=True, text=True, timeout=1200,
    )


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory) -> Path:
    workdir = copy_workflow(tmp_path_factory.mktemp("parsing"))
    pipeline = {"experiments": ["configs/tiny_parsing.yaml"], "results": "results",
                "training": {"launcher": "inline", "tasks": 1, "threads": 1}}
    (workdir / "pipeline.yaml").write_text(yaml.safe_dump(pipeline))
    result = _snakemake(workdir, "all")
    assert result.returncode == 0, result.stderr[-5000:]
    return workdir


def _flat_tree_f1(data: Path) -> float:
    """F1 of the trivial parse: one S over every word of each test sentence."""
    gold = read_trees((data / "test.ref").read_text(), "test.ref")
    flat = [Tree("S", tuple(Tree("XX", (word,)) for word in line.split()))
            for line in read_lines(data / "test.src")]
    return bracket_scores(gold, flat)["f1"]


def test_table4_shows_our_f1_far_above_a_flat_parse(pipeline):
    results = pipeline / "results/tiny_parsing"
    scores = json.loads((results / "base/seed-1/f1.json").read_text())
    baseline = _flat_tree_f1(results / "data")
    assert scores["test"]["sentences"] == scores["dev"]["sentences"] == 300
    assert scores["test"]["f1"] > baseline + 30, (scores["test"]["f1"], baseline)
    assert 0 <= scores["test"]["repaired_sentences"] <= 300
    assert sum(scores["test"]["repairs"].values()) >= scores["test"]["repaired_sentences"]
    table = (results / "tables/table4.md").read_text()
    assert f"{scores['test']['f1']:.2f}" in table and "91.30" in table
    assert not (results / "tables/table2.md").exists()


def test_the_scored_trees_are_well_formed_over_the_test_words(pipeline):
    results = pipeline / "results/tiny_parsing"
    trees = read_trees((results / "base/seed-1/scores/test.averaged.trees").read_text(), "trees")
    sentences = read_lines(results / "data/test.src")
    assert len(trees) == len(sentences)
    for tree, sentence in zip(trees, sentences, strict=True):
        assert leaves(tree) == sentence.split()


def test_mlflow_holds_the_parsing_run_with_its_f1(pipeline):
    with sqlite3.connect(pipeline / "results/mlflow.db") as store:
        keys = {row[0] for row in store.execute(
            "SELECT DISTINCT metrics.key FROM metrics JOIN tags ON tags.run_uuid = metrics.run_uuid"
            " WHERE tags.key = 'variant' AND tags.value = 'base'")}
    assert {"train_loss", "dev_perplexity", "test_averaged_f1", "dev_last_f1",
            "test_averaged_repaired_sentences"} <= keys


def test_asking_a_parsing_variant_for_bleu_names_its_f1_file(pipeline):
    result = _snakemake(pipeline, "--dry-run", "results/tiny_parsing/base/seed-1/bleu.json")
    assert result.returncode != 0
    assert ("tiny_parsing is a parsing experiment: its variants are summarised in "
            "results/tiny_parsing/base/seed-1/f1.json") in result.stdout + result.stderr
