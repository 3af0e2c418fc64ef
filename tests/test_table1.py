"""Table 1: the analytic rows as the paper prints them, FLOPs counted while the layers run equal
to their exact formulas, and the files the `reproduce table1` command writes."""

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from reproduce.cli import main
from reproduce.model.attention import band_mask
from reproduce.tables import table1
from reproduce.tables.table1 import ANALYTIC, band_entries, measure_table1
from tests.project_copy import copy_workflow

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_analytic_rows_are_the_papers():
    rows = ANALYTIC.set_index("Layer Type")
    assert rows.loc["Self-Attention"].tolist() == ["O(n^2 · d)", "O(1)", "O(1)"]
    assert rows.loc["Recurrent"].tolist() == ["O(n · d^2)", "O(n)", "O(n)"]
    assert rows.loc["Convolutional"].tolist() == ["O(k · n · d^2)", "O(1)", "O(log_k(n))"]
    assert rows.loc["Self-Attention (restricted)"].tolist() == ["O(r · n · d)", "O(1)", "O(n/r)"]


@pytest.fixture(scope="module")
def measured() -> pd.DataFrame:
    return measure_table1(lengths=[4, 16], d=16, kernel=3, radius=2, min_run_time=0.01)


def test_counted_flops_equal_the_exact_formulas(measured):
    rows = measured.set_index(["layer", "n"])
    n, d = 16, 16
    assert rows.loc[("Self-Attention", n), "FLOPs counted"] == 8 * n * d * d + 4 * n * n * d
    assert rows.loc[("Recurrent", n), "FLOPs counted"] == 4 * n * d * d
    assert rows.loc[("Convolutional", n), "FLOPs counted"] == 2 * 3 * n * d * d
    exact = measured[measured["layer"] != "Self-Attention (restricted)"]
    assert (exact["FLOPs counted"] == exact["FLOPs formula"]).all()
    # The band mask runs the dense computation; the band alone is what the formula counts.
    restricted = rows.loc[("Self-Attention (restricted)", n)]
    assert restricted["FLOPs counted"] == rows.loc[("Self-Attention", n), "FLOPs counted"]
    assert restricted["FLOPs formula"] == 8 * n * d * d + 4 * band_entries(n, 2) * d
    assert (measured["wall ms"] > 0).all()


def test_wall_time_is_reported_in_milliseconds(monkeypatch):
    """The column is "wall ms" and the timer gives seconds: a forward pass of 0.25 s must read
    250. Wall time is not reproducible, so the timer's answer is fixed here."""
    monkeypatch.setattr(table1, "wall_seconds", lambda layer, x, threads, min_run_time: 0.25)
    measured = measure_table1(lengths=[4], d=16, kernel=3, radius=1)
    assert measured["wall ms"].tolist() == [250.0] * 4


@pytest.mark.parametrize(("n", "radius"), [(1, 0), (5, 1), (9, 2), (16, 2), (3, 7)])
def test_band_entries_count_the_models_band_mask(n, radius):
    assert band_entries(n, radius) == int(band_mask(n, n, radius, causal=False).sum())


def test_the_command_writes_markdown_csv_and_plot(tmp_path):
    main(["table1", "--out-dir", str(tmp_path), "--lengths", "4,8", "--d-model", "16",
          "--min-run-time", "0.01"])
    markdown = (tmp_path / "table1.md").read_text()
    assert markdown.startswith("# Table 1 — complexity per layer, analytic and measured")
    assert "| Self-Attention (restricted) | O(r · n · d)" in markdown
    table = pd.read_csv(tmp_path / "table1.csv")
    assert len(table) == 8 and set(table["n"]) == {4, 8}
    assert (tmp_path / "table1.png").read_bytes().startswith(PNG_MAGIC)


def test_the_table1_rule_declares_the_files_the_command_writes(tmp_path):
    """No test runs the `table1` target (it times layers up to n = 1024, d = 512): its planned
    command, run on small sizes, must write every output the rule declares, or the target fails
    after all that timing."""
    copy_workflow(tmp_path)
    planned = subprocess.run(
        [str(Path(sys.executable).with_name("snakemake")), "-n", "-p", "table1"], cwd=tmp_path,
        capture_output=True, text=True, timeout=300)
    assert planned.returncode == 0, planned.stderr[-3000:]
    outputs = re.search(r"^    output: (.*)$", planned.stdout, re.MULTILINE)[1].split(", ")
    command = shlex.split(re.search(r"^Shell command: (.*)$", planned.stdout, re.MULTILINE)[1])
    out_dir = command[command.index("--out-dir") + 1]
    main(["table1", "--out-dir", str(tmp_path / out_dir), "--lengths", "4", "--d-model", "16",
          "--min-run-time", "0.01"])
    assert len(outputs) == 3 and all(
        (tmp_path / output).stat().st_size > 0 for output in outputs), outputs


@pytest.mark.parametrize(("lengths", "message"), [
    ("4,-1", "argument --lengths: 4,-1: expected positive sequence lengths"),
    ("4,x", "argument --lengths: '4,x': expected comma-separated integers"),
])
def test_bad_lengths_are_usage_errors_of_the_option_before_measuring(tmp_path, capsys, lengths,
                                                                      message):
    with pytest.raises(SystemExit) as exit:
        main(["table1", "--out-dir", str(tmp_path / "t1"), "--lengths", lengths])
    assert exit.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        f"reproduce table1: error: {message} (see reproduce table1 --help)"]
    assert not (tmp_path / "t1").exists()


@pytest.mark.parametrize(("arguments", "message"), [
    (["--d-model", "20"], "--d-model 20: expected a positive multiple of 8"),
    (["--kernel", "4"], "--kernel 4 must be odd and positive"),
])
def test_bad_arguments_are_one_line_errors_before_measuring(tmp_path, arguments, message):
    with pytest.raises(SystemExit, match=message):
        main(["table1", "--out-dir", str(tmp_path / "t1")] + arguments)
    assert not (tmp_path / "t1").exists()
