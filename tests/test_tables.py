"""Tables rendered from a results folder where some variants have not finished."""

import json
from pathlib import Path

import pandas as pd
import pytest

from reproduce.config import load_experiment
from reproduce.tables.render import render_tables

ROOT = Path(__file__).resolve().parents[1]


def _write(path: Path, payload) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload))


@pytest.fixture
def results(tmp_path):
    base = tmp_path / "tiny" / "base"
    _write(base / "train/summary.json", {"parameters": 2_000_000, "source_tokens": 1000,
                                          "target_tokens": 1500, "gpu_hours": 2.0, "steps": 600})
    _write(base / "bleu.json", {
        "dev": {"sacrebleu": 60.0, "tokenized_bleu": 61.5, "perplexity": 1.5},
        "test": {"sacrebleu": 62.0, "tokenized_bleu": 63.25, "perplexity": 1.4},
    })
    (base / "train/metrics.jsonl").write_text(
        '{"step": 100, "dev_loss": 1.0, "dev_perplexity": 2.718}\n'
        '{"step": 100, "train_loss": 2.0, "lr": 0.001, "tokens_per_second": 5.0}\n'
        '{"step": 200, "dev_loss": 0.5, "dev_perplexity": 1.648}\n'
    )
    _write(tmp_path / "tiny" / "A_h1" / "train/summary.json", {"parameters": 1_500_000})
    return tmp_path


def test_table3_puts_our_numbers_beside_the_papers_and_marks_what_is_missing(results, tmp_path):
    experiment = load_experiment(ROOT / "configs/tiny.yaml")
    written = render_tables(experiment, results, tmp_path / "tables")
    assert {path.name for path in written} == {"table2.md", "table2.csv", "table3.md", "table3.csv",
                                               "bleu_vs_parameters.png", "dev_perplexity.png"}
    table = pd.read_csv(tmp_path / "tables/table3.csv").set_index("variant")
    assert list(table.index) == ["base", "A_h1", "D_ls0", "E_learned", "big"]
    assert table.loc["base", "PPL (dev)"] == 1.5 and table.loc["base", "paper PPL"] == 4.92
    assert table.loc["base", "BLEU (dev)"] == 61.5 and table.loc["base", "paper BLEU"] == 25.8
    assert table.loc["base", "params x10^6"] == 2.0
    assert table.loc["A_h1", "params x10^6"] == 1.5 and pd.isna(table.loc["A_h1", "BLEU (dev)"])
    assert table.loc["A_h1", "paper BLEU"] == 24.9 and table.loc["A_h1", "h"] == 1
    assert table.loc["big", "paper params x10^6"] == 213
    markdown = (tmp_path / "tables/table3.md").read_text()
    assert markdown.startswith("# Table 3 — tiny") and "—" in markdown.split("\n|")[4]  # the A_h1 row


def test_table2_computes_the_difference_and_the_training_cost(results, tmp_path):
    experiment = load_experiment(ROOT / "configs/tiny.yaml")
    render_tables(experiment, results, tmp_path / "tables")
    table = pd.read_csv(tmp_path / "tables/table2.csv").set_index("model")
    base = table.loc["Transformer (base model)"]
    assert base["BLEU (tokenized)"] == 63.25 and base["paper BLEU"] == 27.3
    assert base["BLEU - paper"] == pytest.approx(63.25 - 27.3)
    assert base["FLOPs (GPU-hours x rate)"] == pytest.approx(2.0 * 3600 * 9.5e12)
    assert base["FLOPs (6 N D)"] == pytest.approx(6 * 2_000_000 * 2500)
    assert base["paper FLOPs"] == pytest.approx(3.3e18)
    assert table.loc["Transformer (big)", "status"] == "pending"
    assert table.loc["ConvS2S", "status"] == "cited, not reproduced"
    assert table.loc["ConvS2S", "paper BLEU"] == 25.16


def test_plots_are_written_even_with_nothing_finished(tmp_path):
    experiment = load_experiment(ROOT / "configs/wmt14_en_de.yaml")
    render_tables(experiment, tmp_path / "empty", tmp_path / "tables")
    for name in ("bleu_vs_parameters.png", "dev_perplexity.png"):
        data = (tmp_path / "tables" / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000
    table = pd.read_csv(tmp_path / "tables/table3.csv")
    assert len(table) == 20 and table["BLEU (dev)"].isna().all()
