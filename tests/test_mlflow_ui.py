"""The MLflow UI as a researcher opens it: the address that ``reproduce mlflow-address`` prints,
served by ``mlflow server`` from the embedded store (as ``mlflow ui`` serves it), in headless
Chromium.

The store is built with the project's own tracking functions and commands (variant runs with
params, curves, summary and scores; ``reproduce tables``); the values are synthetic, chosen to be
told apart.
"""

from __future__ import annotations

from pathlib import Path

from reproduce.cli import main
from reproduce.experiment_file import load_experiment
from reproduce.tracking import flat_params, start_variant_run
from reproduce.tracking.view import KEY_RESULTS
from tests.mlflow_server import running_mlflow_server
from tests.training_fixtures import ROOT

# (variant, parameters, tokenized test BLEU): the other values follow from the BLEU.
VARIANTS = [("base", 412_345, 27.31), ("A_h1", 398_765, 24.06)]
# The key results a translation experiment's runs carry, as the runs table's column ids.
SHOWN = [column for column in KEY_RESULTS if "_f1`" not in column]
PAGE_LOAD_MS = 60_000


def _logged_values(parameters: int, bleu: float) -> dict[str, str]:
    """A variant's key results, by column id, as the runs table prints them."""
    return {"metrics.`test_averaged_tokenized_bleu`": f"{bleu}",
            "metrics.`test_averaged_sacrebleu`": f"{bleu - 1:.2f}",
            "metrics.`dev_last_tokenized_bleu`": f"{bleu - 2:.2f}",
            "metrics.`dev_last_sacrebleu`": f"{bleu - 3:.2f}",
            "metrics.`dev_last_perplexity`": "5.5",
            "params.`parameters`": str(parameters),
            "metrics.`summary/gpu_hours`": "0.25"}


def _build_store(results: Path) -> None:
    """Two variant runs as training and scoring log them, and the tables as `reproduce tables`
    renders and logs them."""
    experiment = load_experiment(ROOT / "configs/tiny.yaml")
    for variant, parameters, bleu in VARIANTS:
        run = start_variant_run(results, "tiny", variant, 1, None, results / "tiny" / variant)
        run.log_params(flat_params(experiment.variant(variant), "tiny")
                       | {"parameters": parameters})
        for step in (100, 200, 300):
            run.log_metrics({"train_loss": 6.0 - step / 100, "dev_loss": 5.0 - step / 100}, step)
        run.log_summary({"steps": 300, "parameters": parameters, "gpu_hours": 0.25,
                         "final_dev_loss": 2.0}, [])
        run.log_scores("test", "averaged", {"tokenized_bleu": bleu, "sacrebleu": bleu - 1})
        run.log_scores("dev", "last", {"tokenized_bleu": bleu - 2, "sacrebleu": bleu - 3,
                                       "perplexity": 5.5})
        run.finish()
    main(["tables", "--experiment", str(ROOT / "configs/tiny.yaml"), "--results", str(results),
          "--out-dir", str(results / "tiny/tables")])


def _addresses(results: Path, ui: str, capsys) -> dict[str, str]:
    capsys.readouterr()
    main(["mlflow-address", "--results", str(results), "--ui", ui])
    return dict(line.split(": ", 1) for line in capsys.readouterr().out.splitlines())


def _runs_table(page) -> dict[str, dict[str, str]]:
    """The runs table as shown: each row's run name and its cells' text by column id."""
    rows = {}
    for row in page.locator(".ag-pinned-left-cols-container .ag-row").all():
        index = row.get_attribute("row-index")
        name = row.locator("[col-id='attributes.`Run Name`'] a").inner_text().strip()
        cells = page.locator(f".ag-center-cols-container .ag-row[row-index='{index}'] [col-id]")
        rows[name] = {cell.get_attribute("col-id"): cell.inner_text().strip()
                      for cell in cells.all()}
    return rows


def test_the_printed_address_opens_the_variants_with_their_key_results(tmp_path, monkeypatch,
                                                                       capsys):
    """The address lands on the Model training runs table of the dataset's experiment: the
    variants listed, the tables run not among them, and the key-result columns (BLEU, sacreBLEU,
    dev perplexity, parameters, GPU-hours) shown first, in their order, with each variant's
    values. The tables run's address shows Table 3 inline, as a table."""
    from tests.headless_browser import browser_page

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    results = tmp_path / "results"
    _build_store(results)
    with running_mlflow_server(tmp_path, store=f"sqlite:///{results / 'mlflow.db'}") as url:
        addresses = _addresses(results, url, capsys)
        assert sorted(addresses) == ["tiny", "tiny tables"]
        with browser_page() as page:
            page.set_viewport_size({"width": 2400, "height": 900})  # every column on screen
            page.goto(addresses["tiny"])
            page.locator(".ag-header-cell[col-id='metrics.`summary/gpu_hours`']").wait_for(
                timeout=PAGE_LOAD_MS)
            # MLflow 3.17's Model training runs page (its GenAI pages have no runs table)
            assert page.get_by_role("heading").all_inner_texts() == ["Runs"]
            assert "/runs?" in page.url and "workflowType=machine_learning" in page.url
            headers = page.locator(".ag-header-cell[col-id]").evaluate_all(  # left to right
                "cells => cells.map(cell => [cell.getBoundingClientRect().left,"
                " cell.getAttribute('col-id')]).sort((a, b) => a[0] - b[0]).map(pair => pair[1])")
            first_column = next(i for i, header in enumerate(headers) if header in KEY_RESULTS)
            assert headers[first_column:first_column + len(SHOWN)] == SHOWN
            for column in SHOWN:
                header = page.locator(f".ag-header-cell[col-id='{column}']")
                assert header.is_visible() and header.inner_text().strip() in column, column
            rows = _runs_table(page)
            # one run per training, named by its seed; no tables run
            assert sorted(rows) == sorted(f"{variant} seed 1" for variant, _, _ in VARIANTS)
            for variant, parameters, bleu in VARIANTS:
                expected = _logged_values(parameters, bleu)
                shown = rows[f"{variant} seed 1"]
                assert {column: shown[column] for column in expected} == expected

            page.goto(addresses["tiny tables"])
            table = page.frame_locator("iframe.mlflow-html-iframe").locator("table")
            table.wait_for(timeout=PAGE_LOAD_MS)
            shown = table.inner_text()
            assert "A_h1" in shown and "25.80" in shown  # a variant's row, the paper's base BLEU
