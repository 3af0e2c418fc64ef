"""The MLflow UI as a researcher opens it: the address that ``reproduce mlflow-address`` prints,
served by ``mlflow server`` from the embedded store (as ``mlflow ui`` serves it), in headless
Chromium.

The store is built with the project's own tracking functions and commands (variant runs with
params, curves, summary and scores; ``reproduce tables``); the values are synthetic, chosen to be
told apart.
"""

from __future__ import annotations

import io
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from reproduce.cli import main
from reproduce.experiment_file import load_experiment
from reproduce.tracking import flat_params, start_variant_run
from reproduce.tracking.view import KEY_RESULTS, SEED_COLUMN
from tests.mlflow_server import running_mlflow_server
from tests.training_fixtures import ROOT

# (variant, parameters, tokenized test BLEU of seed 1): the other values follow from the BLEU, and
# each seed's from seed 1's (:func:`_logged_values`).
VARIANTS = [("base", 412_345, 27.31), ("A_h1", 398_765, 24.06)]
SEEDS = (1, 2)
# The key results a translation experiment's runs carry, as the runs table's column ids.
SHOWN = [column for column in KEY_RESULTS if "_f1`" not in column]
PAGE_LOAD_MS = 60_000


def _logged_values(parameters: int, bleu: float, seed: int) -> dict[str, str]:
    """A variant's key results with ``seed``, by column id, as the runs table prints them: each
    seed's scores a point lower than the one before."""
    bleu -= seed - 1
    return {"metrics.`test_averaged_tokenized_bleu`": f"{bleu:.2f}",
            "metrics.`test_averaged_sacrebleu`": f"{bleu - 1:.2f}",
            "metrics.`dev_last_tokenized_bleu`": f"{bleu - 2:.2f}",
            "metrics.`dev_last_sacrebleu`": f"{bleu - 3:.2f}",
            "metrics.`dev_last_perplexity`": "5.5",
            "params.`parameters`": str(parameters),
            "metrics.`summary/gpu_hours`": "0.25"}


def _build_store(results: Path) -> None:
    """Each variant trained with each seed, as training and scoring log it, and the tables as
    `reproduce tables` renders and logs them."""
    experiment = load_experiment(ROOT / "configs/tiny.yaml")
    for variant, parameters, first_bleu in VARIANTS:
        for seed in SEEDS:
            bleu = first_bleu - (seed - 1)
            run = start_variant_run(results, "tiny", variant, seed, None,
                                    results / "tiny" / variant / f"seed{seed}")
            run.log_params(flat_params(experiment.variant(variant), "tiny")
                           | {"parameters": parameters})
            for step in (100, 200, 300):
                run.log_metrics({"train_loss": 6.0 - step / 100, "dev_loss": 5.0 - step / 100},
                                step)
            run.log_summary({"steps": 300, "parameters": parameters, "gpu_hours": 0.25,
                             "final_dev_loss": 2.0}, [])
            run.log_scores("test", "averaged", {"tokenized_bleu": bleu, "sacrebleu": bleu - 1})
            run.log_scores("dev", "last", {"tokenized_bleu": bleu - 2, "sacrebleu": bleu - 3,
                                           "perplexity": 5.5})
            run.finish()
    main(["tables", "--experiment", str(ROOT / "configs/tiny.yaml"), "--results", str(results),
          "--out-dir", str(results / "tiny/tables")])


@pytest.fixture(scope="module")
def addresses(tmp_path_factory) -> dict[str, str]:
    """What ``reproduce mlflow-address --ui`` prints for the store, by experiment, served by a
    real ``mlflow server`` for the module's tests."""
    folder = tmp_path_factory.mktemp("mlflow-ui")
    results = folder / "results"
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
        _build_store(results)
        with running_mlflow_server(folder, store=f"sqlite:///{results / 'mlflow.db'}") as url:
            printed = io.StringIO()
            with redirect_stdout(printed):
                main(["mlflow-address", "--results", str(results), "--ui", url])
            yield dict(line.split(": ", 1) for line in printed.getvalue().splitlines())


def _open_runs_table(page, address: str) -> None:
    page.set_viewport_size({"width": 2400, "height": 900})  # every column on screen
    page.goto(address)
    page.locator(".ag-header-cell[col-id='metrics.`summary/gpu_hours`']").wait_for(
        timeout=PAGE_LOAD_MS)


def _runs_table(page) -> list[tuple[str, dict[str, str]]]:
    """The runs table as shown, top to bottom: each row's name (a run's, or a group's label, such
    as ``Group: base``) and its cells' text by column id."""
    rows = []
    for row in page.locator(".ag-pinned-left-cols-container .ag-row").all():
        index = row.get_attribute("row-index")
        name_cell = row.locator("[col-id='attributes.`Run Name`']")
        group = name_cell.locator("span[title]")
        name = (group if group.count() else name_cell.locator("a")).inner_text().strip()
        cells = page.locator(f".ag-center-cols-container .ag-row[row-index='{index}'] [col-id]")
        rows.append((int(index), name, {cell.get_attribute("col-id"): cell.inner_text().strip()
                                        for cell in cells.all()}))
    return [(name, cells) for _, name, cells in sorted(rows)]


def _headers(page) -> list[str]:
    """The runs table's column ids, left to right."""
    return page.locator(".ag-header-cell[col-id]").evaluate_all(
        "cells => cells.map(cell => [cell.getBoundingClientRect().left,"
        " cell.getAttribute('col-id')]).sort((a, b) => a[0] - b[0]).map(pair => pair[1])")


def test_the_printed_address_opens_the_variants_with_their_key_results(addresses):
    """The address lands on the Model training runs table of the dataset's experiment: the
    variants listed, the tables run not among them, and the seed and the key-result columns
    (BLEU, sacreBLEU, dev perplexity, parameters, GPU-hours) shown first, in their order, with
    each run's values. The tables run's address shows Table 3 inline, as a table."""
    from tests.headless_browser import browser_page

    assert sorted(addresses) == ["tiny", "tiny tables"]
    with browser_page() as page:
        _open_runs_table(page, addresses["tiny"])
        # MLflow 3.17's Model training runs page (its GenAI pages have no runs table)
        assert page.get_by_role("heading").all_inner_texts() == ["Runs"]
        assert "/runs?" in page.url and "workflowType=machine_learning" in page.url
        headers = _headers(page)
        first_column = headers.index(SEED_COLUMN)
        assert headers[first_column:first_column + 1 + len(SHOWN)] == [SEED_COLUMN, *SHOWN]
        for column in [SEED_COLUMN, *SHOWN]:
            header = page.locator(f".ag-header-cell[col-id='{column}']")
            assert header.is_visible() and header.inner_text().strip() in column, column
        runs = {name: cells for name, cells in _runs_table(page) if not name.startswith("Group")}
        # one run per training, named by its seed; no tables run
        assert sorted(runs) == sorted(f"{variant} seed {seed}"
                                      for variant, _, _ in VARIANTS for seed in SEEDS)
        for variant, parameters, bleu in VARIANTS:
            for seed in SEEDS:
                expected = _logged_values(parameters, bleu, seed)
                shown = runs[f"{variant} seed {seed}"]
                assert {column: shown[column] for column in expected} == expected

        page.goto(addresses["tiny tables"])
        table = page.frame_locator("iframe.mlflow-html-iframe").locator("table")
        table.wait_for(timeout=PAGE_LOAD_MS)
        shown = table.inner_text()
        assert "A_h1" in shown and "25.80" in shown  # a variant's row, the paper's base BLEU


def test_the_key_results_view_gathers_each_variants_seeds_under_it(addresses):
    """Each variant is one row, the average of its seeds' results, with its runs below it in the
    order of their seeds, each showing its seed; the variants in the order of their names."""
    from tests.headless_browser import browser_page

    with browser_page() as page:
        _open_runs_table(page, addresses["tiny"])
        page.get_by_text("Group: base").wait_for(timeout=PAGE_LOAD_MS)
        rows = _runs_table(page)
        assert [name for name, _ in rows] == [
            name for variant in sorted(variant for variant, _, _ in VARIANTS)
            for name in (f"Group: {variant}", *(f"{variant} seed {seed}" for seed in SEEDS))]
        cells = dict(rows)
        for variant, _, bleu in VARIANTS:
            for seed in SEEDS:
                assert cells[f"{variant} seed {seed}"][SEED_COLUMN] == str(seed)
            mean = sum(bleu - (seed - 1) for seed in SEEDS) / len(SEEDS)
            assert (cells[f"Group: {variant}"]["metrics.`test_averaged_tokenized_bleu`"]
                    == f"{mean:.2f} (average)")
