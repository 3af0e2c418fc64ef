"""Paired bootstrap significance on constructed systems whose difference is known, and the tables
that print it."""

import random
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sacrebleu.metrics import BLEU
from sacrebleu.significance import PairedTest

from reproduce.scoring.significance import (
    _corpus_bleu, _resampled_differences, _sentence_statistics, paired_bootstrap,
)
from reproduce.tables.comparisons import compared_files
from reproduce.tables.render import render_tables
from tests.test_tables import make_experiment, scores, write_json

WORDS = "lo la lu un una zebu nivu ketie mimas dosaant kazaavant bobiat sevaa rodaia".split()


def _references(count: int = 300, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 14))) + "."
            for _ in range(count)]


def _spoil(sentence: str, rng: random.Random) -> str:
    """A wrong translation of the same length: every word replaced."""
    return " ".join(rng.choice(WORDS) for _ in sentence.split()) + "."


@pytest.fixture(scope="module")
def systems() -> dict[str, list[str]]:
    """A baseline right on half the sentences; 'better' right on 15 more of them (a small,
    consistent gain); 'perfect' right on all."""
    references = _references()
    rng = random.Random(1)
    wrong = set(rng.sample(range(len(references)), len(references) // 2))
    baseline = [_spoil(line, rng) if index in wrong else line
                for index, line in enumerate(references)]
    fixed = set(rng.sample(sorted(wrong), 15))
    better = [references[index] if index in fixed else line for index, line in enumerate(baseline)]
    return {"references": references, "baseline": baseline, "better": better,
            "perfect": list(references)}


def test_identical_outputs_differ_by_nothing_and_are_not_significant(systems):
    result = paired_bootstrap(systems["baseline"], systems["baseline"], systems["references"])
    assert result.difference == 0.0
    assert result.p_value == pytest.approx(1.0)  # sacreBLEU alone would say 1/1001
    assert result.interval[0] <= 0.0 <= result.interval[1]
    assert not result.significant


def test_a_clearly_better_system_is_significant_with_an_interval_above_zero(systems):
    result = paired_bootstrap(systems["perfect"], systems["baseline"], systems["references"])
    assert result.system_bleu == pytest.approx(100.0)
    assert result.difference == pytest.approx(100.0 - result.baseline_bleu)
    assert result.p_value < 0.01 and result.significant
    assert 0.0 < result.interval[0] < result.difference < result.interval[1]


def test_a_small_consistent_gain_is_found_because_the_resamples_are_paired(systems):
    """Scored on independent resamples, each system's BLEU varies by more than the gain; scored
    on the same resampled sentences, the gain is all that differs."""
    result = paired_bootstrap(systems["better"], systems["baseline"], systems["references"])
    assert 0.0 < result.interval[0] < result.difference < result.interval[1]
    assert result.p_value < 0.01
    # The same resamples drawn independently for each system: the gain drowns in the spread.
    bleu, references = BLEU(), systems["references"]
    rng = np.random.default_rng(12345)
    better_stats = _sentence_statistics(bleu, systems["better"], references)
    baseline_stats = _sentence_statistics(bleu, systems["baseline"], references)
    unpaired = [_corpus_bleu(bleu, better_stats[rng.choice(300, 300)].sum(axis=0))
                - _corpus_bleu(bleu, baseline_stats[rng.choice(300, 300)].sum(axis=0))
                for _ in range(1000)]
    assert np.percentile(unpaired, 2.5) < 0.0 < result.interval[0]


def test_swapping_the_systems_flips_the_difference_and_keeps_the_p_value(systems):
    forward = paired_bootstrap(systems["better"], systems["baseline"], systems["references"])
    backward = paired_bootstrap(systems["baseline"], systems["better"], systems["references"])
    assert backward.difference == pytest.approx(-forward.difference)
    assert backward.interval == pytest.approx((-forward.interval[1], -forward.interval[0]))
    assert backward.p_value == forward.p_value


def test_the_p_value_is_sacrebleus_and_the_interval_comes_from_the_same_resamples(systems):
    result = paired_bootstrap(systems["better"], systems["baseline"], systems["references"])
    _, sacre = PairedTest([("baseline", systems["baseline"]), ("system", systems["better"])],
                          {"BLEU": BLEU()}, [systems["references"]], test_type="bs",
                          n_samples=1000)()
    assert result.p_value == sacre["BLEU"][1].p_value
    assert result.system_bleu == sacre["BLEU"][1].score
    assert "bs:1000" in result.signature and "seed:12345" in result.signature
    # The interval's resampled differences are sacreBLEU's: its p-value, recomputed from them
    # with its rule (centred absolute differences beyond the observed one), is the same.
    differences = np.abs(_resampled_differences(systems["better"], systems["baseline"],
                                                systems["references"], 1000, 12345))
    beyond = np.sum(differences - differences.mean() > abs(result.difference))
    assert (beyond + 1) / 1001 == pytest.approx(result.p_value)


def test_a_seed_gives_the_same_answer_every_time(systems):
    first = paired_bootstrap(systems["better"], systems["baseline"], systems["references"])
    assert paired_bootstrap(systems["better"], systems["baseline"], systems["references"]) == first


def test_systems_of_different_lengths_are_refused(systems):
    with pytest.raises(ValueError, match="one hypothesis per reference"):
        paired_bootstrap(systems["better"][:-1], systems["baseline"], systems["references"])


def _write_outputs(results: Path, variant: str, split: str, weights: str, lines: list[str]) -> None:
    path = results / "toy" / variant / "translations" / f"{split}.{weights}.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines))


@pytest.fixture
def tested_results(tmp_path, systems) -> Path:
    """base, A_h1 and E_learned decoded on dev (last weights), base, big and rnn on test
    (averaged): A_h1 as good as base, E_learned perfect; big perfect, rnn worse than base."""
    results = tmp_path / "results"
    for split in ("dev", "test"):
        (results / "toy/data").mkdir(parents=True, exist_ok=True)
        (results / f"toy/data/{split}.ref").write_text(
            "".join(line + "\n" for line in systems["references"]))
    for variant in ("base", "A_h1", "E_learned", "big", "rnn"):
        write_json(results / "toy" / variant / "bleu.json",
                   {"dev": scores(50.0, 50.0, 2.0), "test": scores(50.0, 50.0, 2.0)})
    _write_outputs(results, "base", "dev", "last", systems["better"])
    _write_outputs(results, "A_h1", "dev", "last", systems["better"])
    _write_outputs(results, "E_learned", "dev", "last", systems["perfect"])
    _write_outputs(results, "base", "test", "averaged", systems["better"])
    _write_outputs(results, "big", "test", "averaged", systems["perfect"])
    _write_outputs(results, "rnn", "test", "averaged", systems["baseline"])
    return results


def test_table3_shows_each_rows_difference_interval_and_significance(tested_results, tmp_path):
    experiment = make_experiment(table2={"base": "base", "big": "big", "rnn": "rnn"},
                                 more_variants={"rnn": {"model": {"architecture": "rnn"}}})
    render_tables(experiment, tested_results, tmp_path / "tables")
    table = pd.read_csv(tmp_path / "tables/table3.csv").set_index("variant")
    assert pd.isna(table.loc["base", "ΔsacreBLEU vs base"])  # the base is not tested against itself
    assert table.loc["A_h1", "ΔsacreBLEU vs base"] == 0.0 and table.loc["A_h1", "p vs base"] == 1.0
    assert pd.isna(table.loc["A_h1", "p < 0.05"])  # not marked
    assert table.loc["E_learned", "ΔsacreBLEU vs base"] > 0
    assert table.loc["E_learned", "p < 0.05"] == "*"
    assert pd.isna(table.loc["big", "ΔsacreBLEU vs base"])  # big has no dev translations yet
    markdown = (tmp_path / "tables/table3.md").read_text()
    e_row = next(line for line in markdown.splitlines() if line.startswith("| E "))
    low, high = paired_bootstrap(systems_of(tested_results, "E_learned"),
                                 systems_of(tested_results, "base"),
                                 systems_of(tested_results, "data")).interval
    assert f"[{low:+.2f}, {high:+.2f}]" in e_row and "| 0.000999 " in e_row and "| * " in e_row
    assert "paired bootstrap" in markdown.split("Notes:")[1]


def systems_of(results: Path, variant: str) -> list[str]:
    path = (results / "toy/data/dev.ref" if variant == "data"
            else results / "toy" / variant / "translations/dev.last.txt")
    return path.read_text().splitlines()


def test_table2_tests_each_transformer_against_the_rnn_and_big_against_base(tested_results,
                                                                            tmp_path):
    experiment = make_experiment(table2={"base": "base", "big": "big", "rnn": "rnn"},
                                 more_variants={"rnn": {"model": {"architecture": "rnn"}}})
    render_tables(experiment, tested_results, tmp_path / "tables")
    table = pd.read_csv(tmp_path / "tables/table2.csv").set_index("status")
    base, big, rnn = (table.loc[f"ours: {name}"] for name in ("base", "big", "rnn"))
    assert base["ΔsacreBLEU vs rnn"] > 0 and base["p vs rnn"] < 0.01
    assert big["ΔsacreBLEU vs rnn"] > big["ΔsacreBLEU vs base"] > 0
    assert big["Δ 95% CI vs base"].startswith("[+")
    assert pd.isna(base["ΔsacreBLEU vs base"]) and pd.isna(rnn["ΔsacreBLEU vs rnn"])
    notes = (tmp_path / "tables/table2.md").read_text().split("Notes:")[1]
    assert "base against rnn, big against rnn, big against base" in notes


def test_the_tables_rule_is_told_every_file_the_tests_read(tmp_path):
    experiment = make_experiment(table2={"base": "base", "big": "big", "rnn": "rnn"},
                                 more_variants={"rnn": {"model": {"architecture": "rnn"}}})
    files = compared_files(experiment, "res")
    assert files == [
        "res/toy/A_h1/translations/dev.last.txt", "res/toy/base/translations/dev.last.txt",
        "res/toy/data/dev.ref", "res/toy/E_learned/translations/dev.last.txt",
        "res/toy/big/translations/dev.last.txt",
        "res/toy/base/translations/test.averaged.txt", "res/toy/rnn/translations/test.averaged.txt",
        "res/toy/data/test.ref", "res/toy/big/translations/test.averaged.txt",
    ]
