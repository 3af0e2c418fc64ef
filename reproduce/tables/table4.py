"""Table 4: English constituency parsing (section 6.3), labelled-bracket F1 on the test split
(WSJ section 23 in the paper), our row placed in the paper's table under the training setting it
reproduces (``tables.table4``); the other parsers are the paper's numbers as cited."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from reproduce.config import Experiment
from reproduce.tables.paper import paper_table4
from reproduce.tables.results import SeededResults, read_variant

CITED = "cited, not reproduced"
COLUMNS = ["parser", "training", "status", "seeds", "F1 (test)", "paper F1", "F1 - paper",
           "F1 (dev)", "exact match (test)", "repaired sentences (test)", "params x10^6"]
# Our roles in tables.table4 -> the paper's wording of the training setting.
TRAINING_SETTINGS = {"wsj_only": "WSJ only, discriminative", "semi_supervised": "semi-supervised"}
PAPER_TRANSFORMER = "Transformer (4 layers)"


def _our_row(variant: str, results: SeededResults, paper_f1: float | None) -> dict:
    ours = results.test("f1")
    parameters = results.trained("parameters")
    return {
        "status": f"ours: {variant}" if results.scores is not None else
        f"{results.status} ({variant})",
        "seeds": results.seeds_text,
        "F1 (test)": ours,
        "paper F1": paper_f1,
        "F1 - paper": None if ours is None or paper_f1 is None else ours - paper_f1,
        "F1 (dev)": results.dev("f1"),
        "exact match (test)": results.test("exact_match"),
        "repaired sentences (test)": results.test("repaired_sentences"),
        "params x10^6": None if parameters is None else parameters / 1e6,
    }


def build_table4(experiment: Experiment, results_dir: Path) -> pd.DataFrame:
    """The paper's rows in its order; the Transformer row of each setting in ``tables.table4``
    becomes ours (the paper's F1 beside it)."""
    reproduced = {TRAINING_SETTINGS[role]: variant
                  for role, variant in experiment.tables.table4.items()}
    rows = []
    for _, paper in paper_table4().iterrows():
        variant = reproduced.get(paper["training"])
        if paper["parser"] == PAPER_TRANSFORMER and variant is not None:
            results = read_variant(results_dir, experiment, variant)
            row = _our_row(variant, results, float(paper["f1"]))
        else:
            row = {"status": CITED, "paper F1": paper["f1"]}
        rows.append({"parser": paper["parser"], "training": paper["training"], **row})
    return pd.DataFrame(rows, columns=COLUMNS)


def table4_caption(experiment: Experiment) -> tuple[str, str, list[str]]:
    """Heading, what was measured, and the notes printed under the table."""
    decoding = ", ".join(
        f"{variant}: beam {settings.beam_size}, alpha {settings.length_penalty}, max length = "
        f"input + {settings.max_length_offset}"
        for variant, settings in (
            (name, experiment.variant(name).decoding) for name in experiment.tables.table4.values()
        )
    ) or "no variant mapped in tables.table4"
    measured = (f"Measured: {experiment.name} test split, averaged checkpoint ({decoding}); "
                "paper: WSJ section 23, beam 21, alpha 0.3, max length = input + 300.")
    notes = [
        "F1: labelled-bracket F1 (percent) with EVALB's COLLINS.prm conventions: punctuation "
        "and TOP ignored, ADVP = PRT, preterminals not counted. Our output tags every word XX "
        "(Vinyals & Kaiser et al. 2014's linearisation), so punctuation is recognised by the "
        "gold tree's tag at the same word position.",
        "Trees are linearised with labelled closing brackets and POS tags replaced by XX; a "
        "malformed output is repaired into a well-formed tree over the input words. "
        "'repaired sentences' counts test outputs that needed any repair (scores/*.json "
        "lists each repair kind).",
        "F1 (dev): the dev split (paper: section 22) with the last checkpoint.",
        f"Rows marked '{CITED}' are the paper's Table 4 numbers, copied as printed.",
        "seeds: the trainings our row averages, one per seed of training.seed; F1 and the "
        "other scores are their mean.",
        "— = not available yet.",
    ]
    return f"Table 4 — {experiment.name}: English constituency parsing", measured, notes
