"""A recorded browser check of the MLflow UI: screenshots of a small store's runs page and
compare view.

Builds a throw-away store with the project's own tracking functions (three variant runs with
params, a training-loss curve and BLEU metrics, and a tables run; the values are synthetic, chosen
only to be told apart), serves it with ``scripts/mlflow-server.sh`` on 127.0.0.1, and has headless
Chromium (Debian's ``chromium``) capture the experiment's page and the compare view.

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

from reproduce.config import load_experiment  # noqa: E402
from reproduce.tracking import flat_params, start_variant_run, tables_run  # noqa: E402
from reproduce.tracking.datasets import dataset_inputs  # noqa: E402

# Synthetic, only to tell the runs apart in the pictures: (variant, Table 3 row, final loss, BLEU).
RUNS = [("base", None, 1.9, 25.1), ("A_h1", "A", 2.2, 24.0), ("E_learned", "E", 2.0, 24.9)]
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars", "--virtual-time-budget=30000"]


def build_store(results: Path) -> list[str]:
    experiment = load_experiment(ROOT / "configs/tiny.yaml")
    run_ids = []
    for variant, row, final_loss, bleu in RUNS:
        run = start_variant_run(results, "ui_check", variant, row, results / variant)
        run.log_params(flat_params(experiment.variant(variant), "ui_check"))
        run.log_datasets(dataset_inputs(experiment.data, results / "no-reports"))
        for step in range(0, 601, 50):
            run.log_metrics({"train_loss": final_loss + 6.0 / (1 + step / 40)}, step)
        run.log_metrics({"test_averaged_sacrebleu": bleu, "dev_averaged_sacrebleu": bleu - 0.6,
                         "dev_perplexity": 4.5 + final_loss}, step=600)
        run.finish()
        run_ids.append(run.run_id)
    table = results / "table3.md"
    table.write_text("| variant | BLEU |\n|---|---|\n")
    with tables_run(results, "ui_check") as run:
        run.log_artifact(table, "tables")
    return run_ids


def chromium(profile: Path, *arguments: str, size: str = "2400,800") -> None:
    subprocess.run(["chromium", *CHROMIUM_FLAGS, f"--window-size={size}",
                    f"--user-data-dir={profile}", *arguments],
                   check=True, capture_output=True, timeout=180)


def screenshot(profile: Path, url: str, out: Path, size: str = "2400,800") -> None:
    from PIL import Image

    chromium(profile, f"--screenshot={out}", url, size=size)
    Image.open(out).convert("RGB").quantize(colors=64).save(out, optimize=True)  # a small PNG
    print(f"{out}: {url}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path,
                        help="folder for mlflow-runs.png and mlflow-compare.png")
    args = parser.parse_args()
    port = int(os.environ.get("MLFLOW_SERVER_PORT", "5917"))
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        profile = folder / "chromium-profile"
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

            experiment_id = MlflowClient(uri).get_experiment_by_name("ui_check").experiment_id
            args.out_dir.mkdir(parents=True, exist_ok=True)
            # MLflow 3.17's UI takes the experiment kind from its GenAI / Model training switch
            # (remembered by the browser, GenAI at first), not from mlflow.experimentKind.
            screenshot(profile,
                       f"{uri}/#/experiments/{experiment_id}?workflowType=machine_learning",
                       args.out_dir / "mlflow-runs.png")
            compared = quote(json.dumps(run_ids, separators=(",", ":")))
            experiments = quote(json.dumps([experiment_id]))
            screenshot(profile, f"{uri}/#/compare-runs?runs={compared}&experiments={experiments}",
                       args.out_dir / "mlflow-compare.png", size="1600,2000")
        finally:
            subprocess.run([*server, "stop"], env=env, capture_output=True)


if __name__ == "__main__":
    main()
