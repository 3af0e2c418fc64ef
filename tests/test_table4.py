"""Table 4 (parsing) rendered from a hand-made results folder: our row among the paper's."""

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from reproduce.config import Experiment
from reproduce.provenance import trained_settings
from reproduce.tables.outputs import TABLE_FILES
from reproduce.tables.paper import paper_table4
from reproduce.tables.render import render_tables
from reproduce.tables.table4 import build_table4


def make_parsing_experiment(table4: dict, base: dict | None = None) -> Experiment:
    source = {"name": "trees", "url": "file:trees.tgz", "format": "ptb", "source_member": "t.mrg"}
    return Experiment.model_validate({
        "name": "toy_parsing", "task": "parsing", "source_lang": "en", "target_lang": "tree",
        "data": {"train": [source], "dev": [source], "test": [source]},
        "bpe": {"vocab_size": 500},
        "model": {"layers": 2, "d_model": 64, "d_ff": 256, "heads": 4, "d_k": 16, "d_v": 16},
        "training": {"steps": 600, "checkpoints": {"every_steps": 100, "keep_last": 5},
                     "average_last": 5},
        "decoding": {"beam_size": 21, "length_penalty": 0.3, "max_length_offset": 300},
        "tables": {"table4": table4},
        "variants": {"base": base or {}, "wide": {"model": {"d_model": 128}}},
    })


def settings_of(experiment: Experiment, variant: str) -> dict:
    """What training records in a summary: the settings it was trained with."""
    return trained_settings(experiment.variant(variant), experiment)


def write_json(path: Path, payload) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload))


@pytest.fixture
def results(tmp_path) -> Path:
    """base: scored; wide: trained, not scored."""
    root = tmp_path / "results" / "toy_parsing"
    experiment = make_parsing_experiment({"wsj_only": "base"})  # the settings of every test's
    write_json(root / "base/seed-1/train/summary.json", {"parameters": 2_500_000,
                                                  "settings": settings_of(experiment, "base")})
    write_json(root / "base/seed-1/f1.json", {
        "dev": {"f1": 88.0, "perplexity": 1.5},
        "test": {"f1": 89.25, "exact_match": 31.0, "repaired_sentences": 7, "perplexity": 1.6},
    })
    write_json(root / "wide/seed-1/train/summary.json", {"parameters": 9_000_000,
                                                  "settings": settings_of(experiment, "wide")})
    return tmp_path / "results"


def test_our_row_takes_the_papers_transformer_row_of_its_setting(results):
    table = build_table4(make_parsing_experiment({"wsj_only": "base"}), results)
    paper = paper_table4()
    assert list(table["parser"]) == list(paper["parser"])  # the paper's rows, in its order
    ours = table[table["status"] == "ours: base"]
    assert len(ours) == 1
    row = ours.iloc[0]
    assert (row["parser"], row["training"]) == ("Transformer (4 layers)",
                                                "WSJ only, discriminative")
    assert (row["F1 (test)"], row["paper F1"], row["F1 (dev)"]) == (89.25, 91.3, 88.0)
    assert row["F1 - paper"] == pytest.approx(89.25 - 91.3)
    assert (row["exact match (test)"], row["repaired sentences (test)"]) == (31.0, 7)
    assert row["params x10^6"] == pytest.approx(2.5)
    # The semi-supervised Transformer row stays the paper's, as every other parser.
    cited = table[table["status"] == "cited, not reproduced"]
    assert len(cited) == len(paper) - 1
    semi = cited[(cited["parser"] == "Transformer (4 layers)")].iloc[0]
    assert (semi["training"], semi["paper F1"]) == ("semi-supervised", 92.7)
    assert pd.isna(semi["F1 (test)"])


def test_an_unscored_variant_shows_its_status_and_no_numbers(results):
    table = build_table4(make_parsing_experiment({"semi_supervised": "wide"}), results)
    row = table[table["status"].str.contains("wide")].iloc[0]
    assert row["status"] == "pending: trained, not scored (wide)"
    assert row["training"] == "semi-supervised" and row["paper F1"] == 92.7
    assert pd.isna(row["F1 (test)"]) and pd.isna(row["F1 - paper"])


def test_render_writes_table4_and_the_dev_curve_for_a_parsing_experiment(results, tmp_path):
    out = tmp_path / "tables"
    written = render_tables(make_parsing_experiment({"wsj_only": "base"}), results, out)
    assert sorted(path.name for path in written) == sorted(TABLE_FILES["parsing"])
    markdown = (out / "table4.md").read_text()
    assert re.search(r"\| Transformer \(4 layers\) +\| WSJ only, discriminative +\| ours: base",
                     markdown)
    assert "89.25" in markdown and "91.30" in markdown and "—" in markdown
    assert "COLLINS.prm" in markdown
    assert pd.read_csv(out / "table4.csv").shape[0] == len(paper_table4())
    assert not (out / "table2.md").exists()


def test_the_parsing_scores_page_gives_each_metric_of_each_split(results, tmp_path):
    """The scores page is where a parsing run's per-seed numbers are read: each column must hold
    its own metric (exact match is not F1) of its own split."""
    render_tables(make_parsing_experiment({"wsj_only": "base"}), results, tmp_path / "tables")
    base = pd.read_csv(tmp_path / "tables/scores.csv").set_index("variant").loc["base"]
    assert (base["F1 (dev)"], base["F1 (test)"]) == (88.0, 89.25)
    assert pd.isna(base["exact match (dev)"]) and base["exact match (test)"] == 31.0
    assert (base["PPL (dev)"], base["PPL (test)"]) == (1.5, 1.6)


def test_our_row_over_seeds_is_ours_once_any_seed_is_scored(tmp_path):
    """Seeds finish in any order: with seed 2 of seeds 1 and 2 scored, the row is ours with seed
    2's F1 (``1 of 2``), not pending because seed 1 is; with both, F1 is their mean."""
    experiment = make_parsing_experiment({"wsj_only": "base"}, {"training": {"seed": [1, 2]}})
    root = tmp_path / "results" / "toy_parsing" / "base"
    for seed in (1, 2):
        settings = trained_settings(experiment.variant("base", seed), experiment)
        write_json(root / f"seed-{seed}/train/summary.json",
                   {"parameters": 2_500_000, "settings": settings})
    write_json(root / "seed-2/f1.json", {"dev": {"f1": 88.0}, "test": {"f1": 90.0}})
    row = build_table4(experiment, tmp_path / "results").set_index("status").loc["ours: base"]
    assert (row["seeds"], row["F1 (test)"]) == ("1 of 2", 90.0)
    write_json(root / "seed-1/f1.json", {"dev": {"f1": 86.0}, "test": {"f1": 89.0}})
    row = build_table4(experiment, tmp_path / "results").set_index("status").loc["ours: base"]
    assert (row["seeds"], row["F1 (test)"], row["F1 (dev)"]) == ("2", 89.5, 87.0)
    assert row["F1 - paper"] == pytest.approx(89.5 - 91.3)
