"""A recorded browser check of the MLflow UI: screenshots of a small store's runs page (at the
address ``reproduce mlflow-address`` prints), a run's metric charts, the tables run and the
compare view.

Builds a throw-away store with the project's own tracking functions and commands (three variant
runs with params, a training-loss curve, a summary and scores; ``reproduce tables``; the values
are synthetic, chosen only to be told apart), serves it with ``scripts/mlflow-server.sh`` on
127.0.0.1, and has headless Chromium (Debian's ``chromium``, driven by Playwright) capture the
pages.

    .venv/bin/python scripts/mlflow-ui-check.py docs/
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from reproduce.cli import main as reproduce  # noqa: E402
from reproduce.experiment_file import load_experiment  # noqa: E402
from reproduce.tracking import flat_params, start_variant_run  # noqa: E402
from reproduce.tracking.datasets import dataset_inputs  # noqa: E402
from reproduce.tracking.view import addresses  # noqa: E402

# Synthetic, only to tell the runs apart in the pictures: (variant, Table 3 row, final loss, BLEU).
RUNS = [("base", None, 1.9, 25.1), ("A_h1", "A", 2.2, 24.0), ("E_learned", "E", 2.0, 24.9)]
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars"]
# How long a page is given to load and draw its charts (it polls the server: never idle).
SETTLE_MS = 10_000


def build_store(results: Path) -> list[str]:
    experiment = load_experiment(ROOT / "configs/tiny.yaml")
    run_ids = []
    for variant, row, final_loss, bleu in RUNS:
        run = start_variant_run(results, "tiny", variant, 1, row, results / variant)
        run.log_params(flat_params(experiment.variant(variant), "tiny")
                       | {"parameters": 400_000 + int(bleu * 1000)})
        run.log_datasets(dataset_inputs(experiment.data, results / "no-reports"))
        for step in range(0, 601, 50):
            run.log_metrics({"train_loss": final_loss + 6.0 / (1 + step / 40)}, step)
        run.log_summary({"steps": 600, "gpu_hours": 0.1, "final_train_loss": final_loss,
                         "final_dev_loss": final_loss + 0.2}, [])
        run.log_scores("test", "averaged", {"tokenized_bleu": bleu, "sacrebleu": bleu - 0.5})
        run.log_scores("dev", "last", {"tokenized_bleu": round(bleu - 0.6, 2),
                                       "sacrebleu": round(bleu - 1.1, 2),
                                       "perplexity": round(4.5 + final_loss, 2)})
        run.finish()
        run_ids.append(run.run_id)
    reproduce(["tables", "--experiment", str(ROOT / "configs/tiny.yaml"), "--results",
               str(results), "--out-dir", str(results / "tiny/tables")])
    return run_ids


def screenshot(page, url: str, out: Path, size: tuple[int, int] = (2400, 800)) -> None:
    from PIL import Image

    page.set_viewport_size({"width": size[0], "height": size[1]})
    page.goto(url)
    page.wait_for_timeout(SETTLE_MS)
    page.screenshot(path=out)
    Image.open(out).convert("RGB").quantize(colors=64).save(out, optimize=True)  # a small PNG
    print(f"{out}: {url}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path,
                        help="folder for mlflow-runs.png, mlflow-run-charts.png, "
                             "mlflow-tables.png and mlflow-compare.png")
    args = parser.parse_args()
    port = int(os.environ.get("MLFLOW_SERVER_PORT", "5917"))
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        env = dict(os.environ, MLFLOW_SERVER_DIR=str(folder / "server"),
                   MLFLOW_SERVER_HOST="127.0.0.1", MLFLOW_SERVER_PORT=str(port),
                   PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
        server = ["bash", str(ROOT / "scripts/mlflow-server.sh")]
        started = subprocess.run([*server, "start"], env=env, check=True, capture_output=True,
                                 text=True)
        uri = started.stdout.strip().removeprefix("export MLFLOW_TRACKING_URI=")
        try:
            os.environ["MLFLOW_TRACKING_URI"] = uri
            run_ids = build_store(folder / "results")
            from mlflow.tracking import MlflowClient
            from playwright.sync_api import sync_playwright

            experiment_id = MlflowClient(uri).get_experiment_by_name("tiny").experiment_id
            shown = addresses(folder / "results")
            args.out_dir.mkdir(parents=True, exist_ok=True)
            compared = quote(json.dumps(run_ids, separators=(",", ":")))
            experiments = quote(json.dumps([experiment_id]))
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path="/usr/bin/chromium",
                                                     args=CHROMIUM_FLAGS)
                page = browser.new_page()
                screenshot(page, shown["tiny"], args.out_dir / "mlflow-runs.png")
                screenshot(page, f"{uri}/#/experiments/{experiment_id}/runs/{run_ids[0]}"
                           "/model-metrics?workflowType=machine_learning",
                           args.out_dir / "mlflow-run-charts.png", size=(1600, 1400))
                screenshot(page, shown["tiny tables"], args.out_dir / "mlflow-tables.png",
                           size=(1600, 900))
                screenshot(page, f"{uri}/#/compare-runs?runs={compared}"
                           f"&experiments={experiments}&workflowType=machine_learning",
                           args.out_dir / "mlflow-compare.png", size=(1600, 2000))
                browser.close()
        finally:
            subprocess.run([*server, "stop"], env=env, capture_output=True)


if __name__ == "__main__":
    main()
