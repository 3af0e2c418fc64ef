"""Tables 2 and 3 rendered from a hand-made results folder where some variants have not finished."""

import json
from io import StringIO
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import pytest

from reproduce.config import Experiment
from reproduce.errors import DataError, MissingInputError
from reproduce.experiment_file import load_experiment
from reproduce.provenance import trained_settings
from reproduce.tables import paper
from reproduce.tables.paper import paper_table2, paper_table3
from reproduce.tables.plots import bleu_vs_parameters_figure, dev_perplexity_figure
from reproduce.tables.render import render_tables
from reproduce.gpu_peak_rates import peak_rate
from reproduce.tables.outputs import TABLE_FILES
from reproduce.tables.results import SeededResults, VariantResults, read_training
from reproduce.tables.table2 import build_table2
from reproduce.tables.table3 import build_table3

ROOT = Path(__file__).resolve().parents[1]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def make_experiment(pair: str = "en_de", table2: dict | None = None,
                    more_variants: dict | None = None) -> Experiment:
    source = {"name": "corpus", "url": "file:corpus.tgz", "format": "tsv"}
    return Experiment.model_validate({
        "name": "toy",
        "source_lang": "en",
        "target_lang": "de",
        "data": {"train": [source], "dev": [source], "test": [source]},
        "bpe": {"vocab_size": 500},
        "model": {"layers": 2, "d_model": 64, "d_ff": 256, "heads": 4, "d_k": 16, "d_v": 16},
        "training": {"steps": 600, "checkpoints": {"every_steps": 100, "keep_last": 5},
                     "average_last": 5},
        "tables": {"table2": {"base": "base", "big": "big"} if table2 is None else table2,
                   "paper_language_pair": pair},
        "variants": {
            "base": {"table3_row": "base"},
            "A_h1": {"table3_row": "A", "model": {"heads": 1, "d_k": 64, "d_v": 64}},
            "warmup_probe": {"training": {"warmup_steps": 10}},  # not in Table 3
            "E_learned": {"table3_row": "E", "model": {"positional": "learned"}},
            "big": {"table3_row": "big", "model": {"d_model": 128, "dropout": 0.3},
                    "training": {"steps": 900, "checkpoints": {"every_steps": 45, "keep_last": 20},
                                 "average_last": 20}},
        } | (more_variants or {}),
    })


def recorded(experiment: Experiment, variant: str) -> dict:
    """What training records in a summary beside its figures: the settings it was trained with
    (a summary without them is shown as "settings not recorded")."""
    return {"settings": trained_settings(experiment.variant(variant), experiment)}


def write_json(path: Path, payload) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload))


def scores(tokenized: float, sacre: float, perplexity: float) -> dict:
    return {"tokenized_bleu": tokenized, "sacrebleu": sacre, "perplexity": perplexity,
            "sacrebleu_signature": "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0"}


@pytest.fixture
def results(tmp_path) -> Path:
    """base: finished; A_h1: trained, not scored; E_learned: training; big: not started."""
    base = tmp_path / "results" / "toy" / "base" / "seed-1"
    write_json(base / "train/summary.json", recorded(make_experiment(), "base") | {
        "parameters": 2_000_000, "source_tokens": 1000, "target_tokens": 1500,
        "training_flops": 7_250_000_000, "gpu_hours": 2.0, "steps": 600, "world_size": 2,
        "device": "NVIDIA H100",
        "dev_curve": [{"step": 100, "dev_loss": 2.0, "dev_perplexity": 7.389},
                      {"step": 200, "dev_loss": 1.8, "dev_perplexity": 6.05}]})
    write_json(base / "bleu.json", {"dataset": "toy", "variant": "base",
                                    "dev": scores(21.5, 20.0, 6.25),
                                    "test": scores(23.25, 22.0, 5.5)})
    (base / "train/metrics.jsonl").write_text(
        '{"step": 100, "train_loss": 2.0, "lr": 0.001, "tokens_per_second": 5.0}\n'
        '{"step": 100, "dev_loss": 2.0, "dev_perplexity": 7.389}\n'
        '{"step": 200, "dev_loss": 1.8, "dev_perplexity": 6.05}\n'
    )
    a_h1 = tmp_path / "results" / "toy" / "A_h1" / "seed-1"
    write_json(a_h1 / "train/summary.json", recorded(make_experiment(), "A_h1") | {
        "parameters": 1_500_000, "source_tokens": 800, "target_tokens": 900, "gpu_hours": 0.0,
        "training_flops": 3_100_000_000,
        "world_size": 1, "device": "cpu"})
    learned = tmp_path / "results" / "toy" / "E_learned" / "seed-1" / "train/metrics.jsonl"
    learned.parent.mkdir(parents=True)
    learned.write_text('{"step": 100, "dev_loss": 2.2, "dev_perplexity": 9.03}\n{"step": 2')
    return tmp_path / "results"


def test_table3_puts_our_numbers_beside_the_papers(results, tmp_path):
    render_tables(make_experiment(), results, tmp_path / "tables")
    table = pd.read_csv(tmp_path / "tables/table3.csv").set_index("variant")
    assert list(table.index) == ["base", "A_h1", "E_learned", "big"]  # config order, Table 3 only
    assert list(table["row"]) == ["base", "A", "E", "big"]
    base = table.loc["base"]
    assert (base["PPL (dev)"], base["paper PPL"]) == (6.25, 4.92)
    assert (base["BLEU (dev)"], base["paper BLEU"], base["sacreBLEU (dev)"]) == (21.5, 25.8, 20.0)
    assert (base["params x10^6"], base["paper params x10^6"]) == (2.0, 65)
    assert base["status"] == "scored"
    # Hyper-parameters are the resolved variant's, not the paper's.
    assert (table.loc["A_h1", "h"], table.loc["A_h1", "d_k"], table.loc["A_h1", "N"]) == (1, 64, 2)
    assert table.loc["big", "d_model"] == 128 and table.loc["big", "P_drop"] == 0.3
    assert table.loc["big", "train steps"] == 900 and table.loc["base", "train steps"] == 600
    assert table.loc["E_learned", "positional"] == "learned"
    assert table.loc["base", "positional"] == "sinusoidal"


def test_a_variant_trained_with_since_edited_settings_shows_stale_not_its_old_scores(results,
                                                                                     tmp_path):
    """Its summary records the settings it was trained with: after an edit of the experiment
    file, the tables show it stale (naming the edit) instead of the old model's numbers beside
    the new settings; with the settings it has now, the same files read as scored."""
    from reproduce.provenance import trained_settings

    experiment = make_experiment()
    summary_path = results / "toy/base/seed-1/train/summary.json"
    summary = json.loads(summary_path.read_text())
    settings = trained_settings(experiment.variant("base"), experiment)
    write_json(summary_path, summary | {"settings": settings | {"model.dropout": 0.3}})
    render_tables(experiment, results, tmp_path / "stale")
    base = pd.read_csv(tmp_path / "stale/table3.csv").set_index("variant").loc["base"]
    assert base["status"] == "stale: trained with other settings (model.dropout: 0.3 -> 0.1)"
    assert (pd.isna(base["BLEU (dev)"]) and pd.isna(base["PPL (dev)"])
            and pd.isna(base["params x10^6"]))
    assert base["P_drop"] == 0.1  # the settings shown are the experiment file's
    table2 = pd.read_csv(tmp_path / "stale/table2.csv")
    ours = table2[table2["model"] == "Transformer (base model)"].iloc[0]
    assert ours["status"].startswith("stale") and pd.isna(ours["BLEU (tokenized)"])

    write_json(summary_path, summary | {"settings": settings})
    render_tables(experiment, results, tmp_path / "current")
    base = pd.read_csv(tmp_path / "current/table3.csv").set_index("variant").loc["base"]
    assert base["status"] == "scored" and base["BLEU (dev)"] == 21.5


def test_table3_leaves_missing_results_empty_but_keeps_the_papers_numbers(results, tmp_path):
    render_tables(make_experiment(), results, tmp_path / "tables")
    table = pd.read_csv(tmp_path / "tables/table3.csv").set_index("variant")
    a_h1 = table.loc["A_h1"]
    assert a_h1["params x10^6"] == 1.5 and a_h1["status"] == "pending: trained, not scored"
    assert pd.isna(a_h1["BLEU (dev)"]) and pd.isna(a_h1["PPL (dev)"])
    assert (a_h1["paper BLEU"], a_h1["paper PPL"]) == (24.9, 5.29)
    assert pd.isna(a_h1["paper params x10^6"])  # the paper prints none for row (A)
    assert table.loc["E_learned", "status"] == "pending: training"
    assert table.loc["big", "status"] == "pending: not started"
    assert pd.isna(table.loc["big", "params x10^6"]) and table.loc["big", "paper BLEU"] == 26.4


def test_table3_markdown_marks_missing_cells(results, tmp_path):
    render_tables(make_experiment(), results, tmp_path / "tables")
    lines = (tmp_path / "tables/table3.md").read_text().splitlines()
    assert lines[0] == "# Table 3 — toy: variations on the base model"
    assert lines[2].startswith("Measured: toy (en→de) dev split, last checkpoint")
    header = [cell.strip() for cell in lines[4].strip("|").split("|")]
    rows = {cells[1]: dict(zip(header, cells, strict=True)) for cells in
            ([cell.strip() for cell in line.strip("|").split("|")] for line in lines[6:10])}
    assert rows["base"]["BLEU (dev)"] == "21.50" and rows["base"]["paper BLEU"] == "25.80"
    assert rows["base"]["params x10^6"] == "2" and rows["base"]["P_drop"] == "0.1"
    assert rows["A_h1"]["BLEU (dev)"] == "—" and rows["A_h1"]["paper params x10^6"] == "—"
    assert rows["big"]["PPL (dev)"] == "—" and rows["big"]["paper PPL"] == "4.33"
    assert "(shared 500-piece vocabulary)" in "\n".join(lines)  # bpe.vocab_size


def test_table2_computes_the_difference_and_the_training_cost(results, tmp_path):
    render_tables(make_experiment(), results, tmp_path / "tables")
    table = pd.read_csv(tmp_path / "tables/table2.csv").set_index("model")
    base = table.loc["Transformer (base model)"]
    assert (base["BLEU (tokenized)"], base["sacreBLEU"], base["paper BLEU"]) == (23.25, 22.0, 27.3)
    assert base["BLEU - paper"] == pytest.approx(23.25 - 27.3)
    assert base["GPU-hours"] == 2.0 and base["device"] == "2 x NVIDIA H100"
    # The toy trains in fp32: the H100's FP32 peak, not the paper's P100 rate.
    assert base["rate basis"] == "H100 SXM, fp32 peak" and base["peak FLOPs/s per GPU"] == 67e12
    assert base["FLOPs (GPU-hours x rate)"] == pytest.approx(2.0 * 3600 * 67e12)
    assert base["FLOPs (exact count)"] == 7_250_000_000  # summary.json's training_flops
    assert base["paper FLOPs"] == pytest.approx(3.3e18)
    big = table.loc["Transformer (big)"]
    assert big["status"] == "pending: not started (big)"
    assert pd.isna(big["BLEU (tokenized)"]) and pd.isna(big["BLEU - paper"])
    assert (big["paper BLEU"], big["paper FLOPs"]) == (28.4, 2.3e19)


def test_table2_lists_the_cited_systems_after_ours(results, tmp_path):
    render_tables(make_experiment(), results, tmp_path / "tables")
    table = pd.read_csv(tmp_path / "tables/table2.csv")
    assert list(table["model"][:2]) == ["Transformer (base model)", "Transformer (big)"]
    cited = table[table["status"] == "cited, not reproduced"].set_index("model")
    # Every system with an EN-DE number; Deep-Att + PosUnk (EN-FR only) is left out.
    assert list(cited.index) == ["ByteNet", "GNMT + RL", "ConvS2S", "MoE", "GNMT + RL Ensemble",
                                 "ConvS2S Ensemble"]
    assert (cited.loc["ConvS2S", "paper BLEU"], cited.loc["ConvS2S", "paper FLOPs"]) == \
        (25.16, 9.6e18)
    assert cited["BLEU (tokenized)"].isna().all() and cited["GPU-hours"].isna().all()
    markdown = (tmp_path / "tables/table2.md").read_text()
    assert markdown.startswith("# Table 2 — toy: BLEU and training cost\n\nMeasured: toy (en→de)"
                               " test split, averaged checkpoint (base = base: last 5, big = big:"
                               " last 20)")
    notes = markdown.split("Notes:")[1]
    assert "| Transformer (big)" in markdown
    assert "FLOPs (exact count)" in notes and "tok:13a" in notes
    assert "6 x params" not in markdown and "recurrent baseline" not in notes  # no rnn mapped


def test_table2_follows_the_paper_language_pair_and_the_variant_mapping(results, tmp_path):
    experiment = make_experiment(pair="en_fr", table2={"base": "A_h1"})
    render_tables(experiment, results, tmp_path / "tables")
    table = pd.read_csv(tmp_path / "tables/table2.csv").set_index("model")
    ours = table.loc["Transformer (base model)"]
    assert ours["paper BLEU"] == 38.1 and ours["status"] == "pending: trained, not scored (A_h1)"
    assert pd.isna(ours["FLOPs (GPU-hours x rate)"])  # a CPU run has no GPU time
    assert pd.isna(ours["rate basis"])  # ...and so no rate to look up, not an "unknown" GPU
    assert ours["FLOPs (exact count)"] == 3_100_000_000
    # big is not mapped: the paper's big row is cited like the other systems.
    assert table.loc["Transformer (big)", "status"] == "cited, not reproduced"
    assert table.loc["Deep-Att + PosUnk", "paper BLEU"] == 39.2
    # The paper's training cost of the same language pair (EN-FR), not EN-DE's.
    assert table.loc["ConvS2S", "paper FLOPs"] == 1.5e20
    assert table.loc["Deep-Att + PosUnk", "paper FLOPs"] == 1.0e20
    assert "ByteNet" not in table.index  # no EN-FR number


def test_table2_shows_our_rnn_row_beside_our_transformer_rows(results, tmp_path):
    experiment = make_experiment(
        table2={"base": "base", "big": "big", "rnn": "lstm"},
        more_variants={"lstm": {"model": {"architecture": "rnn", "rnn_attention": "additive"}}})
    lstm = results / "toy" / "lstm" / "seed-1"
    write_json(lstm / "train/summary.json", recorded(experiment, "lstm") | {
        "parameters": 900_000, "source_tokens": 700, "target_tokens": 750, "gpu_hours": 1.5,
        "training_flops": 4_400_000_000, "world_size": 1, "device": "NVIDIA H100"})
    write_json(lstm / "bleu.json", {"dataset": "toy", "variant": "lstm",
                                    "dev": scores(15.0, 14.0, 9.0),
                                    "test": scores(16.5, 15.5, 8.0)})
    render_tables(experiment, results, tmp_path / "tables")
    table = pd.read_csv(tmp_path / "tables/table2.csv")
    assert list(table["model"][:3]) == ["Transformer (base model)", "Transformer (big)",
                                        "LSTM encoder-decoder + attention (Luong et al. 2015)"]
    rnn = table.iloc[2]
    assert rnn["status"] == "ours: lstm" and rnn["BLEU (tokenized)"] == 16.5
    assert rnn["GPU-hours"] == 1.5 and rnn["FLOPs (exact count)"] == 4_400_000_000
    assert rnn["FLOPs (GPU-hours x rate)"] == pytest.approx(1.5 * 3600 * 67e12)
    assert (pd.isna(rnn["paper BLEU"]) and pd.isna(rnn["BLEU - paper"])
            and pd.isna(rnn["paper FLOPs"]))
    assert (table["status"] == "cited, not reproduced").sum() == 6  # the cited rows stay
    notes = (tmp_path / "tables/table2.md").read_text().split("Notes:")[1]
    assert ("(variant lstm): our recurrent baseline" in notes
            and "additive global attention" in notes)


def test_each_table_is_also_an_html_page_with_the_same_cells(results, tmp_path):
    """The report shows HTML inline: each table's page holds its heading, every column and the
    cells as the markdown shows them, the paper's numbers included."""
    render_tables(make_experiment(), results, tmp_path / "tables")
    page = (tmp_path / "tables/table3.html").read_text()
    shown = pd.read_html(StringIO(page))[0].set_index("variant")
    markdown = (tmp_path / "tables/table3.md").read_text()
    assert page.startswith("<!DOCTYPE html>") and "<h1>Table 3" in page
    columns = list(pd.read_csv(tmp_path / "tables/table3.csv").columns)
    assert ["variant", *shown.columns] == [columns[1], columns[0], *columns[2:]]
    assert (shown.loc["base", "BLEU (dev)"], shown.loc["base", "paper BLEU"]) == ("21.50", 25.8)
    assert shown.loc["big", "BLEU (dev)"] == "—" and "21.50" in markdown
    scores = pd.read_html(StringIO((tmp_path / "tables/scores.html").read_text()))[0]
    base = scores.set_index("variant").loc["base"]
    shown_scores = (base["sacreBLEU (dev)"], base["sacreBLEU (test)"], base["PPL (test)"])
    assert shown_scores == ("20.00", "22.00", "5.50")


def test_plots_are_written_with_partial_results(results, tmp_path):
    written = render_tables(make_experiment(), results, tmp_path / "tables")
    assert [path.name for path in written] == TABLE_FILES["translation"]
    for path in written:
        assert path.parent == tmp_path / "tables" and path.exists()
    for name in ("bleu_vs_parameters.png", "dev_perplexity.png"):
        data = (tmp_path / "tables" / name).read_bytes()
        assert data[:8] == PNG_MAGIC and len(data) > 1000
    assert not list((tmp_path / "tables").glob("*.tmp"))


def test_plots_show_what_has_finished_and_say_when_nothing_has(results, tmp_path):
    experiment = make_experiment()
    table3 = build_table3(experiment, results)
    axes = bleu_vs_parameters_figure(table3, "toy").axes[0]
    assert [text.get_text() for text in axes.texts] == ["base"]  # only base has BLEU and params
    assert axes.collections[0].get_offsets().tolist() == [[2.0, 21.5]]
    curves = {name: read_training(results, make_experiment(), name, 1)
              for name in experiment.variants}
    lines = dev_perplexity_figure(curves, "toy").axes[0].get_lines()
    assert [line.get_label() for line in lines] == ["base", "E_learned"]
    assert lines[0].get_xdata().tolist() == [100, 200]
    assert lines[0].get_ydata().tolist() == [7.389, 6.05]
    empty = build_table3(experiment, tmp_path / "empty")
    assert [text.get_text() for text in bleu_vs_parameters_figure(empty, "toy").axes[0].texts] == \
        ["no results yet"]
    nothing = {"base": read_training(tmp_path / "empty", make_experiment(), "base", 1)}
    assert [text.get_text() for text in dev_perplexity_figure(nothing, "toy").axes[0].texts] == \
        ["no results yet"]
    plt.close("all")


def test_everything_is_written_when_nothing_has_finished(tmp_path):
    render_tables(make_experiment(), tmp_path / "empty", tmp_path / "tables")
    for name in ("bleu_vs_parameters.png", "dev_perplexity.png"):
        data = (tmp_path / "tables" / name).read_bytes()
        assert data[:8] == PNG_MAGIC and len(data) > 1000
    table3 = pd.read_csv(tmp_path / "tables/table3.csv")
    assert len(table3) == 4 and table3["BLEU (dev)"].isna().all()
    assert table3["paper BLEU"].notna().all()


def test_dev_curve_keeps_the_last_record_of_a_step_logged_again_after_a_resume(results):
    # a training: its live log is read
    metrics = results / "toy/E_learned/seed-1/train/metrics.jsonl"
    again = '{"step": 100, "dev_loss": 1.9, "dev_perplexity": 6.7}\n'
    metrics.write_text('{"step": 100, "dev_loss": 2.2, "dev_perplexity": 9.03}\n'
                       '{"step": 200, "dev_loss": 1.8, "dev_perplexity": 6.05}\n' + again
                       + '{"step": 2')
    # The half-written last line is left out.
    curve = read_training(results, make_experiment(), "E_learned", 1).dev_curve
    assert [(row["step"], row["dev_perplexity"]) for row in curve] == [(100, 6.7), (200, 6.05)]


def test_a_finished_variants_curve_comes_from_its_summary_not_the_live_log(results):
    """The summary is what final_tables declares; metrics.jsonl is not among its inputs."""
    (results / "toy/base/seed-1/train/metrics.jsonl").unlink()
    curve = read_training(results, make_experiment(), "base", 1).dev_curve
    assert [(row["step"], row["dev_perplexity"]) for row in curve] == [(100, 7.389), (200, 6.05)]


def test_a_corrupt_results_file_is_named_in_the_error(results, tmp_path):
    (results / "toy/base/seed-1/bleu.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"toy/base/seed-1/bleu\.json: not valid JSON"):
        render_tables(make_experiment(), results, tmp_path / "tables")
    (results / "toy/base/seed-1/bleu.json").unlink()
    # training
    (results / "toy/E_learned/seed-1/train/metrics.jsonl").write_text('{"step": 1\n{"step": 2}\n')
    with pytest.raises(ValueError,
                       match=r"E_learned/seed-1/train/metrics\.jsonl:1: not a JSON line"):
        render_tables(make_experiment(), results, tmp_path / "tables")


def test_the_papers_numbers_are_as_printed():
    table2 = paper_table2().set_index("model")
    assert len(table2) == 10
    assert table2.loc["Transformer (big)", ["bleu_en_de", "bleu_en_fr"]].tolist() == [28.4, 41.8]
    assert table2.loc["MoE", "flops_en_fr"] == 1.2e20
    table3 = paper_table3()
    assert len(table3) == 20
    assert table3.loc["C_d1024", ["ppl_dev", "bleu_dev", "params_millions"]].tolist() == \
        [4.66, 26.0, 168]


def test_every_table3_variant_of_the_wmt14_en_de_config_matches_its_paper_row():
    """The paper's row of the same name, with blanks read as "same as base", must describe the
    variant's resolved hyper-parameters: the two are matched by name only."""
    experiment = load_experiment(ROOT / "configs/wmt14_en_de.yaml")
    paper = paper_table3()
    in_table3 = [name for name, spec in experiment.variants.items() if spec.table3_row]
    assert in_table3 == list(paper.index)
    base = paper.loc["base"]
    columns = {"N": "layers", "d_model": "d_model", "d_ff": "d_ff", "h": "heads", "d_k": "d_k",
               "d_v": "d_v", "P_drop": "dropout", "eps_ls": "label_smoothing",
               "positional": "positional"}
    for name in in_table3:
        row, variant = paper.loc[name], experiment.variant(name)
        assert row["row"] == variant.table3_row, name
        for column, field in columns.items():
            expected = row[column] if pd.notna(row[column]) else base[column]
            assert getattr(variant.model, field) == expected, (name, column)
        steps = row["train_steps"] if pd.notna(row["train_steps"]) else base["train_steps"]
        assert variant.training.steps == steps, name


@pytest.mark.parametrize(("device", "precision", "expected"), [
    ("Tesla P100-PCIE-16GB", "fp32", 9.5e12),  # the paper's figure
    ("Tesla V100-SXM2-32GB", "fp32", 15.7e12),
    ("Tesla V100-PCIE-16GB", "fp32", 14.0e12),
    ("Tesla V100-SXM2-32GB", "bf16", None),  # no BF16 units
    ("Tesla V100-SXM2-32GB", "fp16", 125e12),  # ...but FP16 tensor cores
    ("Tesla V100-PCIE-16GB", "fp16", 112e12),
    ("Tesla P100-PCIE-16GB", "fp16", None),  # no tensor cores
    ("NVIDIA A100-SXM4-80GB", "fp16", 312e12),
    ("NVIDIA A100-SXM4-80GB", "bf16", 312e12),
    ("NVIDIA H100 80GB HBM3", "bf16", 989e12),
    ("NVIDIA H100 PCIe", "fp32", 51e12),
    ("NVIDIA H200", "bf16", 989e12),
    ("NVIDIA GeForce RTX 4090", "bf16", None),
    (None, "fp32", None),
])
def test_peak_rate_of_the_gpu_that_ran(device, precision, expected):
    rate = peak_rate(device, precision)
    assert (rate.flops_per_second if rate else None) == expected


def _cost_row(tmp_path, device, precision="fp32", rate_override=None, ran_in=None) -> pd.Series:
    experiment = make_experiment()
    tables = experiment.tables.model_dump() | {"gpu_flops_per_second": rate_override}
    base = experiment.model_dump() | {"tables": tables}
    base["training"] = base["training"] | {"precision": precision}
    experiment = Experiment.model_validate(base)
    summary = tmp_path / "results/toy/base/seed-1/train/summary.json"
    write_json(summary, recorded(experiment, "base") | {
        "parameters": 10, "source_tokens": 1, "target_tokens": 1, "gpu_hours": 3.0,
        "world_size": 1, "device": device, **({"precision": ran_in} if ran_in else {})})
    return build_table2(experiment, tmp_path / "results").set_index("model").loc[
        "Transformer (base model)"]


def test_table2_rate_follows_the_precision_trained_in(tmp_path):
    row = _cost_row(tmp_path, "NVIDIA H100 80GB HBM3", precision="bf16")
    assert row["rate basis"] == "H100 SXM, bf16 peak"
    assert row["FLOPs (GPU-hours x rate)"] == pytest.approx(3.0 * 3600 * 989e12)


def test_table2_rate_follows_the_precision_the_run_recorded(tmp_path):
    """``auto`` is resolved by the GPU that ran: its summary says what it computed in."""
    row = _cost_row(tmp_path, "Tesla V100-SXM2-32GB", precision="auto", ran_in="fp16")
    assert row["rate basis"] == "V100 SXM2, fp16 peak"
    assert row["FLOPs (GPU-hours x rate)"] == pytest.approx(3.0 * 3600 * 125e12)


def test_table2_unknown_gpu_gets_no_paper_style_estimate(tmp_path):
    row = _cost_row(tmp_path, "NVIDIA GeForce RTX 4090", precision="bf16")
    assert row["rate basis"] == "unknown: NVIDIA GeForce RTX 4090, bf16"
    assert pd.isna(row["FLOPs (GPU-hours x rate)"]) and pd.isna(row["peak FLOPs/s per GPU"])


def test_table2_configured_rate_overrides_the_lookup(tmp_path):
    row = _cost_row(tmp_path, "NVIDIA GeForce RTX 4090", rate_override=9.5e12)
    assert row["rate basis"] == "tables.gpu_flops_per_second"
    assert row["FLOPs (GPU-hours x rate)"] == pytest.approx(3.0 * 3600 * 9.5e12)


def _seeded_summary(experiment: Experiment, variant: str, seed: int, **figures) -> dict:
    """A summary of ``variant``'s training with ``seed``: its settings (which name the seed)."""
    return {"settings": trained_settings(experiment.variant(variant, seed), experiment)} | figures


def test_tables_over_seeds_give_the_mean_and_spread_of_each_metric_on_their_own_split(tmp_path):
    """Table 2 reports the test split (averaged weights), Table 3 the dev split (last weights):
    each min–max column must be the spread of its own metric on its table's split, not the
    other split's or the other BLEU's. In Table 2 the device names each seed's GPU, and a
    summary that records no world size has no "N x" prefix."""
    experiment = make_experiment(more_variants={"base": {"table3_row": "base",
                                                         "training": {"seed": [1, 2]}}})
    root = tmp_path / "results/toy/base"
    trainings = ((1, "NVIDIA H100", scores(20.0, 19.0, 5.0), scores(10.0, 9.0, 6.0)),
                 (2, "NVIDIA A100-SXM4-80GB", scores(24.0, 22.0, 4.0), scores(30.0, 29.0, 3.0)))
    for seed, device, test, dev in trainings:
        write_json(root / f"seed-{seed}/train/summary.json", _seeded_summary(
            experiment, "base", seed, parameters=2_000_000, gpu_hours=float(seed), device=device))
        write_json(root / f"seed-{seed}/bleu.json", {"dev": dev, "test": test})
    row = build_table2(experiment, tmp_path / "results").set_index("model").loc[
        "Transformer (base model)"]
    assert (str(row["seeds"]), row["BLEU (tokenized)"], row["sacreBLEU"]) == ("2", 22.0, 20.5)
    assert row["BLEU (tokenized) min–max"] == "20.00–24.00"
    assert row["sacreBLEU min–max"] == "19.00–22.00"
    assert row["BLEU - paper"] == pytest.approx(22.0 - 27.3)
    assert row["GPU-hours"] == 1.5  # the mean cost of one training
    assert row["device"] == "NVIDIA H100; NVIDIA A100-SXM4-80GB"
    base = build_table3(experiment, tmp_path / "results").set_index("variant").loc["base"]
    assert (base["BLEU (dev)"], base["sacreBLEU (dev)"], base["PPL (dev)"]) == (20.0, 19.0, 4.5)
    assert base["BLEU (dev) min–max"] == "10.00–30.00"
    assert base["sacreBLEU (dev) min–max"] == "9.00–29.00"


def test_a_row_with_a_seed_still_missing_says_how_many_seeds_its_numbers_average(tmp_path):
    """While one of two seeds is scored the row's number is that seed's alone: the seeds column
    must say ``1 of 2`` (scored of planned) and the status must give each seed's state."""
    experiment = make_experiment(more_variants={"base": {"table3_row": "base",
                                                         "training": {"seed": [1, 2]}}})
    root = tmp_path / "results/toy/base"
    for seed in (1, 2):
        write_json(root / f"seed-{seed}/train/summary.json",
                   _seeded_summary(experiment, "base", seed, parameters=2_000_000))
    write_json(root / "seed-1/bleu.json", {"dev": scores(21.0, 20.0, 6.0),
                                           "test": scores(23.0, 22.0, 5.0)})
    base = build_table3(experiment, tmp_path / "results").set_index("variant").loc["base"]
    assert base["seeds"] == "1 of 2"
    assert base["status"] == "seed 1: scored; seed 2: pending: trained, not scored"
    assert (base["BLEU (dev)"], base["BLEU (dev) min–max"]) == (21.0, "1 seed")


def test_a_seed_whose_summary_lacks_a_figure_does_not_blank_the_others():
    """A summary written before a figure was recorded (None) must not hide the figure of the
    seeds that have it; a text value that differs between seeds is the first seed's."""
    older = VariantResults(summary={"device": "NVIDIA H100"}, scores=None, dev_curve=[])
    newer = VariantResults(summary={"device": "NVIDIA A100", "training_flops": 5e9},
                           scores=None, dev_curve=[])
    seeded = SeededResults({1: older, 2: newer})
    assert seeded.trained("training_flops") == 5e9
    assert seeded.trained("device") == "NVIDIA H100"


def test_table3_shows_each_variants_own_d_k_d_v_and_label_smoothing(results, tmp_path):
    """Rows (B) change d_k alone and (D) the label smoothing alone: each column must show its
    own hyper-parameter, not a neighbour that happens to be equal in the base model."""
    experiment = make_experiment(more_variants={
        "B_dk8": {"table3_row": "B", "model": {"d_k": 8}},
        "D_ls0": {"table3_row": "D", "model": {"label_smoothing": 0.0}}})
    table = build_table3(experiment, results).set_index("variant")
    assert (table.loc["B_dk8", "d_k"], table.loc["B_dk8", "d_v"]) == (8, 16)
    assert (table.loc["D_ls0", "eps_ls"], table.loc["D_ls0", "P_drop"]) == (0.0, 0.1)


def test_a_paper_numbers_file_with_other_columns_is_refused(tmp_path, monkeypatch):
    """The paper's numbers are read by column name into fixed table columns: a file whose
    columns are reordered or renamed would put its numbers under the wrong heading, so it is an
    error naming the file; a missing file says the installation lacks it."""
    monkeypatch.setattr(paper, "PAPER_NUMBERS", tmp_path)
    (tmp_path / "table4.csv").write_text("parser,f1,training\nTransformer (4 layers),91.3,WSJ\n")
    with pytest.raises(DataError, match=r"table4\.csv: expected columns \['parser', 'training'"):
        paper.paper_table4()
    with pytest.raises(MissingInputError, match=r"table2\.csv: the paper's numbers are missing"):
        paper.paper_table2()


def test_seeds_trained_on_other_gpus_each_count_at_their_own_gpus_rate(tmp_path):
    """Seeds of one row may land on other GPUs, in other numbers: the device names each (never
    "1.5 x" a GPU) and the paper-style estimate is the mean of each seed's GPU-hours times its
    own GPU's peak, not the mean GPU-hours times the first seed's."""
    experiment = make_experiment(more_variants={"base": {"training": {"seed": [1, 2]}}})
    root = tmp_path / "results/toy/base"
    for seed, world, device, hours in ((1, 1, "NVIDIA H100 80GB HBM3", 2.0),
                                       (2, 2, "NVIDIA A100-SXM4-80GB", 4.0)):
        write_json(root / f"seed-{seed}/train/summary.json", _seeded_summary(
            experiment, "base", seed, parameters=10, gpu_hours=hours, world_size=world,
            device=device, precision="bf16"))
    row = build_table2(experiment, tmp_path / "results").set_index("model").loc[
        "Transformer (base model)"]
    assert row["device"] == "1 x NVIDIA H100 80GB HBM3; 2 x NVIDIA A100-SXM4-80GB"
    assert row["rate basis"] == "H100 SXM, bf16 peak; A100, bf16 peak"
    assert pd.isna(row["peak FLOPs/s per GPU"])  # no one rate
    assert row["FLOPs (GPU-hours x rate)"] == pytest.approx(
        (2.0 * 3600 * 989e12 + 4.0 * 3600 * 312e12) / 2)
    assert row["GPU-hours"] == 3.0

