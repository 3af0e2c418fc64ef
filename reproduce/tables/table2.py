"""Table 2: BLEU on the test set (newstest2014, averaged checkpoints) and training cost.

Our training cost is given two ways: the paper's (GPU-hours x an assumed sustained rate per GPU,
``tables.gpu_flops_per_second``) and analytically, 6 x parameters x tokens processed (forward
and backward of a dense model, source and target tokens both counted; attention's
length-dependent FLOPs are left out).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from reproduce.config import Experiment
from reproduce.tables.paper import paper_table2
from reproduce.tables.results import read_variant


def build_table2(experiment: Experiment, results_dir: Path) -> pd.DataFrame:
    pair = experiment.tables.paper_language_pair
    paper = paper_table2()
    rows = []
    for _, cited in paper.iterrows():
        role = cited["reproduced_as"]
        paper_bleu, paper_flops = cited[f"bleu_{pair}"], cited[f"flops_{pair}"]
        row = {"model": cited["model"], "paper BLEU": paper_bleu, "paper FLOPs": paper_flops}
        if pd.isna(role) or role not in experiment.tables.table2:
            row["status"] = "cited, not reproduced"
            rows.append(row)
            continue
        variant = experiment.tables.table2[role]
        results = read_variant(results_dir, experiment.name, variant)
        summary = results.summary or {}
        tokens = summary.get("source_tokens", 0) + summary.get("target_tokens", 0)
        gpu_hours = summary.get("gpu_hours")
        ours = results.test("tokenized_bleu")
        row |= {
            "status": f"ours: {experiment.name}/{variant}" if results.scores else "pending",
            "BLEU (tokenized)": ours,
            "sacreBLEU": results.test("sacrebleu"),
            "BLEU - paper": ours - paper_bleu if ours is not None and pd.notna(paper_bleu) else None,
            "GPU-hours": gpu_hours,
            "FLOPs (GPU-hours x rate)": gpu_hours * 3600 * experiment.tables.gpu_flops_per_second
            if gpu_hours is not None else None,
            "FLOPs (6 N D)": 6 * summary["parameters"] * tokens if summary else None,
        }
        rows.append(row)
    columns = ["model", "status", "BLEU (tokenized)", "sacreBLEU", "paper BLEU", "BLEU - paper",
               "GPU-hours", "FLOPs (GPU-hours x rate)", "FLOPs (6 N D)", "paper FLOPs"]
    frame = pd.DataFrame(rows, columns=columns)
    ours_first = frame["status"].ne("cited, not reproduced")
    return pd.concat([frame[ours_first], frame[~ours_first]], ignore_index=True)
