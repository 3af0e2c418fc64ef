"""A recorded browser check of the MLflow UI: screenshots of a store's runs page (at the address
``reproduce mlflow-address`` prints), a run's metric charts, the tables run and the compare view.

The store is a pipeline's (``--results results`` after ``bash scripts/demo.sh``), or else a
throw-away one built with the project's own tracking functions and commands (three variants
trained with two seeds each: params, a training-loss curve, a summary and scores; ``reproduce
tables``; the values are synthetic, chosen only to be told apart). It is served as a newcomer
serves it, ``mlflow ui --backend-store-uri sqlite:///<results>/mlflow.db`` on 127.0.0.1, and
headless Chromium (Debian's ``chromium``, driven by Playwright) captures the pages.

    .venv/bin/python scripts/mlflow-ui-check.py docs/ --results results
    .venv/bin/python scripts/mlflow-ui-check.py docs/
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from reproduce.cli import main as reproduce  # noqa: E402
from reproduce.experiment_file import load_experiment  # noqa: E402
from reproduce.tracking import flat_params, start_variant_run  # noqa: E402
from reproduce.tracking.runs import run_name  # noqa: E402
from reproduce.tracking.datasets import dataset_inputs  # noqa: E402
from reproduce.tracking.view import addresses  # noqa: E402

# Synthetic, only to tell the runs apart in the pictures: (variant, Table 3 row, final loss, BLEU);
# the second seed's BLEU is 0.4 lower and its loss 0.05 higher.
RUNS = [("base", "base", 1.9, 25.1), ("A_h1", "A", 2.2, 24.0), ("D_ls0", "D", 2.0, 24.9)]
SEEDS = (1, 2)
# The run whose charts are shown, and the runs compared (the tiny experiment has them all).
CHARTED = run_name("base", 1)
COMPARED = [run_name(variant, 1) for variant, _, _, _ in RUNS]
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars"]
# How long a page is given to draw its charts once loaded (it polls the server: never idle), and
# to show what it is waited for (on a loaded machine the runs table can take longer than that).
SETTLE_MS = 10_000
LOAD_MS = 120_000
# What shows that a page is drawn: a group's row of the key-results view, a chart, the table.
RUNS_DRAWN = ".ag-pinned-left-cols-container .ag-row span[title]"
CHART_DRAWN = ".js-plotly-plot"
TABLE_DRAWN = "iframe.mlflow-html-iframe"


def build_store(results: Path) -> None:
    experiment = load_experiment(ROOT / "configs/tiny.yaml")
    for variant, row, final_loss, bleu in RUNS:
        for seed in SEEDS:
            loss, score = final_loss + 0.05 * (seed - 1), bleu - 0.4 * (seed - 1)
            run = start_variant_run(results, "tiny", variant, seed, row,
                                    results / variant / f"seed{seed}")
            run.log_params(flat_params(experiment.variant(variant), "tiny")
                           | {"parameters": 400_000 + int(bleu * 1000)})
            run.log_datasets(dataset_inputs(experiment.data, results / "no-reports"))
            for step in range(0, 601, 50):
                run.log_metrics({"train_loss": loss + 6.0 / (1 + step / 40)}, step)
            run.log_summary({"steps": 600, "gpu_hours": 0.1, "final_train_loss": loss,
                             "final_dev_loss": loss + 0.2}, [])
            run.log_scores("test", "averaged", {"tokenized_bleu": round(score, 2),
                                                "sacrebleu": round(score - 0.5, 2)})
            run.log_scores("dev", "last", {"tokenized_bleu": round(score - 0.6, 2),
                                           "sacrebleu": round(score - 1.1, 2),
                                           "perplexity": round(4.5 + loss, 2)})
            run.finish()
    reproduce(["tables", "--experiment", str(ROOT / "configs/tiny.yaml"), "--results",
               str(results), "--out-dir", str(results / "tiny/tables")])


@contextmanager
def mlflow_ui(results: Path, port: int):
    """The address of ``mlflow ui`` serving the embedded store of ``results``, once it answers
    API calls; stopped on leaving."""
    mlflow = Path(sys.executable).with_name("mlflow")
    log = tempfile.TemporaryFile()
    process = subprocess.Popen(
        [str(mlflow), "ui", "--backend-store-uri", f"sqlite:///{results.resolve()}/mlflow.db",
         "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if process.poll() is not None or time.monotonic() > deadline:  # the port taken?
                log.seek(0)
                sys.exit(f"mlflow-ui-check: mlflow ui did not start on {url}:\n"
                         + log.read().decode(errors="replace")[-2000:])
            try:
                urllib.request.urlopen(f"{url}/api/2.0/mlflow/experiments/search?max_results=1",
                                       timeout=2).read()
                break
            except OSError:
                time.sleep(1)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


def screenshot(page, url: str, out: Path, size: tuple[int, int] = (2560, 800),
               drawn: str | None = None) -> None:
    """``url`` as ``out``, once the element ``drawn`` (a Playwright selector) is shown and the
    page has settled."""
    from PIL import Image

    page.set_viewport_size({"width": size[0], "height": size[1]})
    page.goto(url)
    if drawn is not None:
        page.locator(drawn).first.wait_for(timeout=LOAD_MS)
    page.wait_for_timeout(SETTLE_MS)
    page.screenshot(path=out)
    Image.open(out).convert("RGB").quantize(colors=64).save(out, optimize=True)  # a small PNG
    print(f"{out}: {url}")


def capture(results: Path, url: str, out_dir: Path) -> None:
    """The four screenshots of the store of ``results``, served at ``url``."""
    from mlflow.tracking import MlflowClient
    from playwright.sync_api import sync_playwright

    shown = addresses(results, url)
    client = MlflowClient(f"sqlite:///{results.resolve()}/mlflow.db")
    experiment_id = client.get_experiment_by_name("tiny").experiment_id
    run_ids = {run.info.run_name: run.info.run_id for run in client.search_runs(
        [experiment_id], "tags.kind = 'variant'")}
    missing = [name for name in (CHARTED, *COMPARED) if name not in run_ids]
    if missing:
        sys.exit(f"mlflow-ui-check: {results}/mlflow.db: the experiment tiny has no run named"
                 f" {', '.join(missing)}")
    compared = quote(json.dumps([run_ids[name] for name in COMPARED], separators=(",", ":")))
    experiments = quote(json.dumps([experiment_id]))
    out_dir.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium",
                                             args=CHROMIUM_FLAGS)
        page = browser.new_page()
        screenshot(page, shown["tiny"], out_dir / "mlflow-runs.png", drawn=RUNS_DRAWN)
        screenshot(page, f"{url}/#/experiments/{experiment_id}/runs/{run_ids[CHARTED]}"
                   "/model-metrics?workflowType=machine_learning",
                   out_dir / "mlflow-run-charts.png", size=(1600, 1400), drawn=CHART_DRAWN)
        screenshot(page, shown["tiny tables"], out_dir / "mlflow-tables.png", size=(1600, 900),
                   drawn=TABLE_DRAWN)
        screenshot(page, f"{url}/#/compare-runs?runs={compared}"
                   f"&experiments={experiments}&workflowType=machine_learning",
                   out_dir / "mlflow-compare.png", size=(1600, 2000), drawn=CHART_DRAWN)
        browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path,
                        help="folder for mlflow-runs.png, mlflow-run-charts.png, "
                             "mlflow-tables.png and mlflow-compare.png")
    parser.add_argument("--results", type=Path,
                        help="the results folder of a pipeline run whose store is shown (its"
                             " experiment tiny); without it, a throw-away store of synthetic"
                             " values")
    args = parser.parse_args()
    port = int(os.environ.get("MLFLOW_SERVER_PORT", "5917"))
    os.environ.pop("MLFLOW_TRACKING_URI", None)  # the embedded store of the results folder
    with tempfile.TemporaryDirectory() as scratch:
        results = args.results
        if results is None:
            results = Path(scratch) / "results"
            build_store(results)
        elif not (results / "mlflow.db").exists():
            sys.exit(f"mlflow-ui-check: {results}/mlflow.db: no MLflow store there; run the"
                     " pipeline first (bash scripts/demo.sh)")
        with mlflow_ui(results, port) as url:
            capture(results, url, args.out_dir)


if __name__ == "__main__":
    main()
