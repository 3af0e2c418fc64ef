"""The bootstrap over seeds and sentences: by hand on made-up scores, against an independent
implementation and sacreBLEU's own paired test, on constructed systems whose difference is
known, and in the tables that print it."""

import random
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import sacrebleu
from sacrebleu.metrics import BLEU
from sacrebleu.significance import PairedTest

from reproduce.provenance import trained_settings
from reproduce.scoring.significance import (
    ALPHA, Comparison, _corpus_bleu, _percentile_interval, _seed_draws, _sentence_draws,
    _sentence_statistics, compare_translations, two_level_bootstrap,
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
    consistent gain), 'slightly_better' on 3 more; 'perfect' right on all."""
    references = _references()
    rng = random.Random(1)
    wrong = set(rng.sample(range(len(references)), len(references) // 2))
    baseline = [_spoil(line, rng) if index in wrong else line
                for index, line in enumerate(references)]
    fixed = set(rng.sample(sorted(wrong), 15))
    better = [references[index] if index in fixed else line for index, line in enumerate(baseline)]
    slightly = [references[index] if index in sorted(fixed)[:3] else line
                for index, line in enumerate(baseline)]
    return {"references": references, "baseline": baseline, "better": better,
            "slightly_better": slightly, "perfect": list(references)}


def _one_seed_each(systems: dict[str, list[str]], system: str, baseline: str):
    return compare_translations({1: systems[system]}, {1: systems[baseline]},
                                systems["references"])


def test_identical_outputs_differ_by_nothing_and_are_not_significant(systems):
    result = _one_seed_each(systems, "baseline", "baseline")
    assert result.difference == 0.0
    assert result.p_value == pytest.approx(1.0)  # sacreBLEU alone would say 1/1001
    assert result.interval[0] <= 0.0 <= result.interval[1]
    assert not result.significant


def test_a_clearly_better_system_is_significant_with_an_interval_above_zero(systems):
    result = _one_seed_each(systems, "perfect", "baseline")
    assert result.system_bleu == pytest.approx(100.0)
    assert result.difference == pytest.approx(100.0 - result.baseline_bleu)
    assert result.p_value < 0.01 and result.significant
    assert 0.0 < result.interval[0] < result.difference < result.interval[1]


def test_a_small_consistent_gain_is_found_because_the_resamples_are_paired(systems):
    """Scored on independent resamples, each system's BLEU varies by more than the gain; scored
    on the same resampled sentences, the gain is all that differs."""
    result = _one_seed_each(systems, "better", "baseline")
    assert 0.0 < result.interval[0] < result.difference < result.interval[1]
    assert result.p_value < 0.01
    # The same resamples drawn independently for each system: the gain drowns in the spread.
    references = systems["references"]
    rng = np.random.default_rng(12345)
    better_stats = _sentence_statistics(systems["better"], references)
    baseline_stats = _sentence_statistics(systems["baseline"], references)
    unpaired = [_corpus_bleu(better_stats[rng.choice(300, 300)].sum(axis=0))
                - _corpus_bleu(baseline_stats[rng.choice(300, 300)].sum(axis=0))
                for _ in range(1000)]
    assert np.percentile(unpaired, 2.5) < 0.0 < result.interval[0]


def test_swapping_the_systems_flips_the_difference_and_keeps_the_p_value(systems):
    forward = _one_seed_each(systems, "better", "baseline")
    backward = _one_seed_each(systems, "baseline", "better")
    assert backward.difference == pytest.approx(-forward.difference)
    assert backward.interval == pytest.approx((-forward.interval[1], -forward.interval[0]))
    assert backward.p_value == forward.p_value


def sacrebleus_paired_bootstrap(baseline, system, references, monkeypatch):
    """sacreBLEU's own paired bootstrap test (1,000 resamples, seed 12345, the one ours uses):
    its (baseline, system) results."""
    monkeypatch.setenv("SACREBLEU_SEED", "12345")
    _, sacre = PairedTest([("baseline", baseline), ("system", system)], {"BLEU": BLEU()},
                          [references], test_type="bs", n_samples=1000)()
    return sacre["BLEU"]


def test_with_one_seed_a_side_it_is_sacrebleus_paired_bootstrap(systems, monkeypatch):
    """sacreBLEU's test draws the same sentences from the same seed: its p-value is ours, on a
    difference small enough that the p-value is not the smallest one possible."""
    for system in ("slightly_better", "better"):
        result = compare_translations({1: systems[system]}, {1: systems["baseline"]},
                                      systems["references"])
        sacre_baseline, sacre_system = sacrebleus_paired_bootstrap(
            systems["baseline"], systems[system], systems["references"], monkeypatch)
        assert result.p_value == pytest.approx(sacre_system.p_value), system
        assert result.system_bleu == pytest.approx(sacre_system.score)
        assert result.baseline_bleu == pytest.approx(sacre_baseline.score)
        assert not result.covers_training
    assert 0.01 < compare_translations({1: systems["slightly_better"]}, {1: systems["baseline"]},
                                       systems["references"]).p_value < 1.0


def _points(*values: int) -> np.ndarray:
    """Made-up sentence statistics whose corpus score (:func:`_mean_points`) is their mean."""
    return np.array([[value, 1] for value in values])


def _mean_points(summed: np.ndarray) -> float:
    return summed[0] / summed[1]


def test_the_draws_are_those_the_hand_computations_below_use():
    """Seed 4, 2 replicates, 3 sentences: sentences [2, 2, 2] then [1, 2, 2]; seed positions
    [0, 1] then [0, 0] for the system (and the baseline, when paired), [1, 0] then [1, 0] for
    an unpaired baseline."""
    assert _sentence_draws(3, 2, seed=4).tolist() == [[2, 2, 2], [1, 2, 2]]
    paired = _seed_draws([1, 2], [1, 2], 2, seed=4)
    assert [draws.tolist() for draws in paired] == [[[0, 1], [0, 0]], [[0, 1], [0, 0]]]
    unpaired = _seed_draws([1, 2], [1, 3], 2, seed=4)
    assert [draws.tolist() for draws in unpaired] == [[[0, 1], [0, 0]], [[1, 0], [1, 0]]]


def test_each_side_draws_as_many_seeds_as_it_has():
    """Step 1 (Davison & Hinkley's top level): each replicate draws, with replacement, as many
    seeds as the side was trained with, from its own seeds: three against two here (unpaired),
    whose means then average 3 and 2 seeds."""
    system, baseline = _seed_draws([1, 2, 3], [1, 2], 200, seed=0)
    assert system.shape == (200, 3) and baseline.shape == (200, 2)
    assert set(system.ravel().tolist()) == {0, 1, 2} and set(baseline.ravel().tolist()) == {0, 1}


def test_paired_seeds_two_level_interval_by_hand():
    """System seed 1 scores sentences 1, 2, 3 and seed 2 3, 4, 8; the baseline's 0, 1, 1 and
    2, 2, 5. Observed: (2 + 5) / 2 - (2/3 + 3) / 2 = 5/3.
    Replicate 1, sentences [2, 2, 2], seeds 1 and 2 both sides: (3 + 8) / 2 - (1 + 5) / 2 = 2.5.
    Replicate 2, sentences [1, 2, 2], seed 1 twice both sides: 8/3 - 1 = 5/3.
    Interval with 2 replicates: the smallest and the largest, [5/3, 2.5]. p: the absolute
    differences centred on their mean are +-5/12, none beyond 5/3: (0 + 1) / (2 + 1)."""
    result = two_level_bootstrap({1: _points(1, 2, 3), 2: _points(3, 4, 8)},
                                 {1: _points(0, 1, 1), 2: _points(2, 2, 5)},
                                 _mean_points, resamples=2, seed=4)
    assert result.difference == pytest.approx(5 / 3)
    assert result.interval == pytest.approx((5 / 3, 2.5))
    assert result.p_value == pytest.approx(1 / 3)
    assert result.paired_seeds and result.covers_training


def test_unpaired_seeds_two_level_interval_by_hand():
    """The baseline trained with seeds 1 and 3 (0, 1, 1 and 2, 2, 5): its seeds are drawn apart
    from the system's. Replicate 1: (3 + 8) / 2 - (5 + 1) / 2 = 2.5; replicate 2, sentences
    [1, 2, 2], the system's seed 1 twice, the baseline's seeds 3 and 1: 8/3 - (4 + 1) / 2 = 1/6.
    Interval [1/6, 2.5]; observed 5/3 as before, p = 1/3 (centred differences +-7/6)."""
    result = two_level_bootstrap({1: _points(1, 2, 3), 2: _points(3, 4, 8)},
                                 {1: _points(0, 1, 1), 3: _points(2, 2, 5)},
                                 _mean_points, resamples=2, seed=4)
    assert result.difference == pytest.approx(5 / 3)
    assert result.interval == pytest.approx((1 / 6, 2.5))
    assert result.p_value == pytest.approx(1 / 3)
    assert not result.paired_seeds and result.covers_training


def test_a_side_scores_the_mean_of_its_drawn_seeds_not_their_median():
    """Three system seeds scoring 0, 3 and 12 on every sentence, one baseline seed scoring 1.
    Seed 0's one replicate draws the system's seeds at positions [1, 2, 2]: 3, 12, 12, whose
    mean is 9 (the median would be 12), so the difference is 9 - 1 = 8. Observed:
    (0 + 3 + 12) / 3 - 1 = 4."""
    assert _seed_draws([1, 2, 3], [1], 1, seed=0)[0].tolist() == [[1, 2, 2]]
    result = two_level_bootstrap({1: _points(0, 0), 2: _points(3, 3), 3: _points(12, 12)},
                                 {1: _points(1, 1)}, _mean_points, resamples=1, seed=0)
    assert result.interval == pytest.approx((8.0, 8.0))
    assert result.difference == pytest.approx(4.0)


def test_the_interval_takes_sacrebleus_n_over_40th_values_from_each_end():
    """1,000 replicates 0..999 (shuffled): 1000 // 40 = 25, so the 26th smallest and the 26th
    largest, 25 and 974: the half-width sacreBLEU's estimate_ci reports, 474.5."""
    samples = np.random.default_rng(0).permutation(np.arange(1000.0))
    assert _percentile_interval(samples) == (25.0, 974.0)
    assert sacrebleu.significance.estimate_ci(samples) == pytest.approx((499.5, 474.5))


def test_two_level_bootstrap_equals_a_plain_loop_over_sacrebleus_corpus_bleu(systems):
    """The same draws, scored the slow and obvious way: resampled hypothesis and reference lists
    through sacrebleu.corpus_bleu, seed by seed, the mean per side."""
    references = systems["references"]
    system = {1: systems["better"], 2: systems["slightly_better"]}
    baseline = {1: systems["baseline"], 3: systems["perfect"]}
    resamples, seed = 30, 7
    result = compare_translations(system, baseline, references, resamples=resamples, seed=seed)
    sentence_rng, seed_rng = np.random.default_rng(seed), np.random.default_rng((seed, 1))
    sentences = sentence_rng.choice(300, size=(resamples, 300))
    system_positions = seed_rng.choice(2, size=(resamples, 2))
    baseline_positions = seed_rng.choice(2, size=(resamples, 2))

    def mean_bleu(side: dict, positions, drawn) -> float:
        seeds = sorted(side)
        return np.mean([sacrebleu.corpus_bleu([side[seeds[at]][i] for i in drawn],
                                              [[references[i] for i in drawn]]).score
                        for at in positions])

    expected = sorted(mean_bleu(system, system_positions[r], sentences[r])
                      - mean_bleu(baseline, baseline_positions[r], sentences[r])
                      for r in range(resamples))
    assert result.interval == pytest.approx((expected[0], expected[-1]))  # 30 // 40 = 0
    observed = (np.mean([sacrebleu.corpus_bleu(side, [references]).score
                         for side in system.values()])
                - np.mean([sacrebleu.corpus_bleu(side, [references]).score
                           for side in baseline.values()]))
    assert result.difference == pytest.approx(observed)


def test_training_noise_widens_the_interval_that_sentences_alone_give(systems):
    """Two seeds of the system a few points apart: the interval over seeds and sentences is
    wider than the one over sentences of either seed alone."""
    references, baseline = systems["references"], {1: systems["baseline"], 2: systems["baseline"]}
    both = compare_translations({1: systems["better"], 2: systems["slightly_better"]}, baseline,
                                references)
    for seed, system in ((1, systems["better"]), (2, systems["slightly_better"])):
        alone = compare_translations({seed: system}, {seed: baseline[seed]}, references)
        assert both.interval[1] - both.interval[0] > alone.interval[1] - alone.interval[0]


def test_a_seed_gives_the_same_answer_every_time(systems):
    first = _one_seed_each(systems, "better", "baseline")
    assert _one_seed_each(systems, "better", "baseline") == first


def test_systems_of_different_lengths_are_refused(systems):
    with pytest.raises(ValueError, match="seed 1 has 299 hypotheses for 300 references"):
        compare_translations({1: systems["better"][:-1]}, {1: systems["baseline"]},
                             systems["references"])


def _write_outputs(results: Path, variant: str, split: str, weights: str, lines: list[str],
                   seed: int = 1) -> None:
    path = results / "toy" / variant / f"seed-{seed}" / "translations" / f"{split}.{weights}.txt"
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
        write_json(results / "toy" / variant / "seed-1" / "bleu.json",
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
    assert table.loc["E_learned", "p < 0.05"] == "* (1 seed: sentences only)"  # never bare
    assert table.loc["E_learned", "Δ CI covers"].startswith("sentences only")
    assert str(table.loc["E_learned", "seeds"]) == "1"
    assert pd.isna(table.loc["big", "ΔsacreBLEU vs base"])  # big has no dev translations yet
    markdown = (tmp_path / "tables/table3.md").read_text()
    e_row = next(line for line in markdown.splitlines() if line.startswith("| E "))
    low, high = compare_translations({1: systems_of(tested_results, "E_learned")},
                                     {1: systems_of(tested_results, "base")},
                                     systems_of(tested_results, "data")).interval
    assert f"[{low:+.2f}, {high:+.2f}]" in e_row and "| 0.000999 " in e_row
    assert "| * (1 seed: sentences only) |" in e_row
    notes = markdown.split("Notes:")[1]
    assert "paired bootstrap" in notes and "training randomness is not measured" in notes


def systems_of(results: Path, variant: str) -> list[str]:
    path = (results / "toy/data/dev.ref" if variant == "data"
            else results / "toy" / variant / "seed-1/translations/dev.last.txt")
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
        "res/toy/A_h1/seed-1/translations/dev.last.txt",
        "res/toy/base/seed-1/translations/dev.last.txt", "res/toy/data/dev.ref",
        "res/toy/E_learned/seed-1/translations/dev.last.txt",
        "res/toy/big/seed-1/translations/dev.last.txt",
        "res/toy/base/seed-1/translations/test.averaged.txt",
        "res/toy/rnn/seed-1/translations/test.averaged.txt", "res/toy/data/test.ref",
        "res/toy/big/seed-1/translations/test.averaged.txt",
    ]
    seeded = make_experiment(more_variants={"A_h1": {"table3_row": "A",
                                                     "training": {"seed": [1, 2]}}})
    assert {"res/toy/A_h1/seed-1/translations/dev.last.txt",
            "res/toy/A_h1/seed-2/translations/dev.last.txt"} <= set(compared_files(seeded, "res"))


def test_table3_over_seeds_gives_their_number_mean_spread_and_what_the_interval_covers(
        tested_results, systems, tmp_path):
    """base and A_h1 trained with seeds 1 and 2, E_learned with seed 1 only: A_h1's second seed
    scores lower; its comparison covers seeds and sentences, E_learned's sentences alone."""
    experiment = make_experiment(more_variants={
        "base": {"table3_row": "base", "training": {"seed": [1, 2]}},
        "A_h1": {"table3_row": "A", "model": {"heads": 1, "d_k": 64, "d_v": 64},
                 "training": {"seed": [1, 2]}},
        "E_learned": {"table3_row": "E", "model": {"positional": "learned"}}})
    for variant, sacre in (("base", 52.0), ("A_h1", 40.0)):
        write_json(tested_results / "toy" / variant / "seed-2" / "bleu.json",
                   {"dev": scores(sacre + 1, sacre, 2.0), "test": scores(sacre + 1, sacre, 2.0)})
    _write_outputs(tested_results, "base", "dev", "last", systems["better"], seed=2)
    _write_outputs(tested_results, "A_h1", "dev", "last", systems["baseline"], seed=2)
    render_tables(experiment, tested_results, tmp_path / "tables")
    table = pd.read_csv(tmp_path / "tables/table3.csv").set_index("variant")
    a_h1 = table.loc["A_h1"]
    assert (str(a_h1["seeds"]), a_h1["sacreBLEU (dev)"]) == ("2", 45.0)  # the mean of 50 and 40
    assert a_h1["sacreBLEU (dev) min–max"] == "40.00–50.00"
    assert a_h1["BLEU (dev) min–max"] == "41.00–50.00"
    assert a_h1["Δ CI covers"] == "seeds (2 vs 2, paired) and sentences"
    expected = compare_translations({1: systems["better"], 2: systems["baseline"]},
                                    {1: systems["better"], 2: systems["better"]},
                                    systems["references"])
    assert expected.difference < 0
    assert a_h1["ΔsacreBLEU vs base"] == pytest.approx(expected.difference)
    assert a_h1["Δ 95% CI"] == f"[{expected.interval[0]:+.2f}, {expected.interval[1]:+.2f}]"
    assert str(table.loc["E_learned", "seeds"]) == "1"
    assert table.loc["E_learned", "sacreBLEU (dev) min–max"] == "1 seed"
    assert table.loc["E_learned", "Δ CI covers"].startswith("sentences only")
    notes = (tmp_path / "tables/table3.md").read_text().split("Notes:")[1]
    assert "two-level bootstrap" in notes and "Davison & Hinkley" in notes
    assert "trained with one seed: E_learned" in notes
    scores_table = pd.read_csv(tmp_path / "tables/scores.csv")
    assert list(scores_table.loc[scores_table["variant"] == "A_h1", "seed"]) == [1, 2]


def test_seeds_of_unequal_number_are_an_unpaired_test_named_row_first(tested_results, systems,
                                                                      tmp_path):
    """A_h1 (perfect) trained with three seeds, base with two: the seed draws cannot be paired,
    and the note must say so and give the row's seed count before the compared row's (3 vs 2);
    a difference significant over seeds and sentences is marked with a bare ``*``."""
    experiment = make_experiment(more_variants={
        "base": {"table3_row": "base", "training": {"seed": [1, 2]}},
        "A_h1": {"table3_row": "A", "model": {"heads": 1, "d_k": 64, "d_v": 64},
                 "training": {"seed": [1, 2, 3]}}})
    for variant, seed in (("base", 2), ("A_h1", 1), ("A_h1", 2), ("A_h1", 3)):
        write_json(tested_results / "toy" / variant / f"seed-{seed}" / "bleu.json",
                   {"dev": scores(50.0, 50.0, 2.0), "test": scores(50.0, 50.0, 2.0)})
        _write_outputs(tested_results, variant, "dev", "last",
                       systems["perfect" if variant == "A_h1" else "better"], seed=seed)
    render_tables(experiment, tested_results, tmp_path / "tables")
    a_h1 = pd.read_csv(tmp_path / "tables/table3.csv").set_index("variant").loc["A_h1"]
    assert a_h1["Δ CI covers"] == "seeds (3 vs 2, unpaired) and sentences"
    assert a_h1["ΔsacreBLEU vs base"] > 0 and a_h1["p < 0.05"] == "*"


def test_a_stale_seeds_translations_are_left_out_of_the_test(tested_results, systems, tmp_path):
    """A seed trained with settings since edited is another model: its (worse) translations must
    not enter the difference, which is then that of the current seed alone against base."""
    experiment = make_experiment(more_variants={
        "A_h1": {"table3_row": "A", "model": {"heads": 1, "d_k": 64, "d_v": 64},
                 "training": {"seed": [1, 2]}}})
    stale = trained_settings(experiment.variant("A_h1", 2), experiment) | {"model.dropout": 0.3}
    write_json(tested_results / "toy/A_h1/seed-2/train/summary.json", {"settings": stale})
    _write_outputs(tested_results, "A_h1", "dev", "last", systems["baseline"], seed=2)
    render_tables(experiment, tested_results, tmp_path / "tables")
    a_h1 = pd.read_csv(tmp_path / "tables/table3.csv").set_index("variant").loc["A_h1"]
    assert a_h1["ΔsacreBLEU vs base"] == 0.0  # seed 1 translates as base does
    assert a_h1["Δ CI covers"].startswith("sentences only")


def test_a_pair_is_not_tested_while_the_references_are_missing(tested_results, tmp_path):
    """Rendering never waits for an input: without the dev references the Table 3 tests read
    ``—`` (and Table 2's, on the test split, are still computed)."""
    (tested_results / "toy/data/dev.ref").unlink()
    experiment = make_experiment(table2={"base": "base", "big": "big", "rnn": "rnn"},
                                 more_variants={"rnn": {"model": {"architecture": "rnn"}}})
    render_tables(experiment, tested_results, tmp_path / "tables")
    table3 = pd.read_csv(tmp_path / "tables/table3.csv").set_index("variant")
    assert table3["ΔsacreBLEU vs base"].isna().all()
    table2 = pd.read_csv(tmp_path / "tables/table2.csv").set_index("status")
    assert table2.loc["ours: base", "ΔsacreBLEU vs rnn"] > 0


def test_a_seed_decoded_but_not_yet_scored_stays_out_of_the_difference(tested_results, systems,
                                                                        tmp_path):
    """The tested difference is that of the row's sacreBLEU column, which averages the scored
    seeds: a seed whose translations are written but whose scores are not yet (a tables snapshot
    while the pipeline runs) is left out of both, until it is scored."""
    experiment = make_experiment(more_variants={
        "A_h1": {"table3_row": "A", "model": {"heads": 1, "d_k": 64, "d_v": 64},
                 "training": {"seed": [1, 2]}}})
    _write_outputs(tested_results, "A_h1", "dev", "last", systems["baseline"], seed=2)
    render_tables(experiment, tested_results, tmp_path / "tables")
    a_h1 = pd.read_csv(tmp_path / "tables/table3.csv").set_index("variant").loc["A_h1"]
    assert a_h1["seeds"] == "1 of 2"
    assert a_h1["ΔsacreBLEU vs base"] == 0.0  # seed 1 translates as base does
    write_json(tested_results / "toy/A_h1/seed-2/bleu.json",
               {"dev": scores(40.0, 40.0, 3.0), "test": scores(40.0, 40.0, 3.0)})
    render_tables(experiment, tested_results, tmp_path / "tables")
    a_h1 = pd.read_csv(tmp_path / "tables/table3.csv").set_index("variant").loc["A_h1"]
    assert a_h1["seeds"] == 2 and a_h1["ΔsacreBLEU vs base"] < 0  # seed 2 translates worse


def test_bootstrap_bleu_is_sacrebleus_corpus_bleu_with_brevity_and_smoothing():
    """The sentence statistics summed back into a corpus score are sacreBLEU's own corpus BLEU,
    also where the systems the fixture builds never go (their outputs are as long as the
    references and match 4-grams): hypotheses shorter than their references (brevity penalty
    exp(1 - r/c), which swapping the two lengths would drop) and no 4-gram match in the whole
    corpus (sacreBLEU's default ``exp`` smoothing, which unsmoothed BLEU would make 0), and
    cased ("The" is not "the"). The interval is checked replicate by replicate against
    resampled lists scored by sacrebleu.corpus_bleu, the draws being sacreBLEU's:
    default_rng(seed).choice(n, (R, n))."""
    references = ["the cat sat on the mat today .", "a dog barked at the old man .",
                  "it rained all day long here ."]
    system = ["The cat sat on a mat", "a dog barked", "it rained all day long"]
    baseline = ["cat sat on mat", "the dog barked at him", "rain all day"]
    for side in (system, baseline):
        expected = sacrebleu.corpus_bleu(side, [references])
        assert expected.sys_len < expected.ref_len
        assert 0.0 < expected.score < 100.0
    assert sacrebleu.corpus_bleu(baseline, [references]).counts[3] == 0  # smoothing decides
    resamples, seed = 20, 3
    result = compare_translations({1: system}, {1: baseline}, references, resamples=resamples,
                                  seed=seed)
    assert result.system_bleu == pytest.approx(sacrebleu.corpus_bleu(system, [references]).score)
    assert result.baseline_bleu == pytest.approx(
        sacrebleu.corpus_bleu(baseline, [references]).score)
    draws = np.random.default_rng(seed).choice(3, size=(resamples, 3))

    def bleu(side: list[str], drawn) -> float:
        return sacrebleu.corpus_bleu([side[i] for i in drawn],
                                     [[references[i] for i in drawn]]).score

    replicates = sorted(bleu(system, drawn) - bleu(baseline, drawn) for drawn in draws)
    assert result.interval == pytest.approx((replicates[0], replicates[-1]))  # 20 // 40 = 0


def test_a_difference_is_significant_below_p_005_only():
    """The conventional 95% level the tables mark (Koehn 2004 reports significance at 95%):
    p = 0.049 is significant, p = 0.05 is not."""
    common = {"system_bleu": 1.0, "baseline_bleu": 0.0, "difference": 1.0, "interval": (0.5, 1.5),
              "system_seeds": 1, "baseline_seeds": 1, "paired_seeds": True}
    assert Comparison(p_value=0.049, **common).significant
    assert not Comparison(p_value=0.05, **common).significant


def test_seeds_pair_by_number_whatever_order_they_are_given_in():
    """Seed n of one variant is paired with seed n of the other: the same result whichever order
    each mapping lists its seeds in (here the system's seeds in reverse)."""
    system = {1: _points(1, 2, 3), 2: _points(3, 4, 8)}
    baseline = {1: _points(0, 1, 1), 2: _points(2, 2, 5)}
    forward = two_level_bootstrap(system, baseline, _mean_points, resamples=2, seed=4)
    reversed_order = two_level_bootstrap({2: system[2], 1: system[1]}, baseline, _mean_points,
                                         resamples=2, seed=4)
    assert reversed_order == forward
    assert forward.paired_seeds


def test_a_system_that_wins_some_sentences_and_loses_others_gets_sacrebleus_p_value(
        systems, monkeypatch):
    """The paired test's rule (sacreBLEU's, after Moses' bootstrap-hypothesis-difference-
    significance.pl) counts the resamples whose absolute difference, centred on the mean absolute
    difference, exceeds the observed one: the absolute value matters when the resampled
    differences take both signs, which a system that only fixes sentences never gives. Here the
    system fixes 15 of the baseline's wrong sentences and spoils 12 of its right ones: the same
    p-value as sacreBLEU's paired bootstrap test (seed 12345, 1,000 resamples)."""
    references, baseline = systems["references"], systems["baseline"]
    rng = random.Random(2)
    right = [index for index, line in enumerate(baseline) if line == references[index]]
    spoiled = set(rng.sample(right, 12))
    mixed = [_spoil(line, rng) if index in spoiled else line
             for index, line in enumerate(systems["better"])]
    result = compare_translations({1: mixed}, {1: baseline}, references)
    _, sacre_system = sacrebleus_paired_bootstrap(baseline, mixed, references, monkeypatch)
    assert result.interval[0] < 0.0 < result.interval[1]  # resampled differences of both signs
    assert result.p_value == pytest.approx(sacre_system.p_value)
    assert result.p_value > ALPHA
