"""The paper's own numbers (Tables 2, 3 and 4 of Vaswani et al., 2017), kept as data in
``reproduce/tables/paper_numbers/`` and shown beside ours. In Table 3 a blank means "same as the
base model". They are package data, read through :mod:`importlib.resources`, so that
``reproduce tables`` works from an installed (non-editable) package, outside the checkout."""

from __future__ import annotations

from importlib import resources

import pandas as pd

from reproduce.errors import DataError, MissingInputError

PAPER_NUMBERS = resources.files(__package__) / "paper_numbers"

TABLE2_COLUMNS = ["model", "bleu_en_de", "bleu_en_fr", "flops_en_de", "flops_en_fr",
                  "reproduced_as"]
TABLE3_COLUMNS = ["variant", "row", "N", "d_model", "d_ff", "h", "d_k", "d_v", "P_drop", "eps_ls",
                  "train_steps", "positional", "ppl_dev", "bleu_dev", "params_millions"]
TABLE4_COLUMNS = ["parser", "training", "f1"]


def _read(name: str, columns: list[str], text_columns: list[str]) -> pd.DataFrame:
    path = PAPER_NUMBERS / name
    if not path.is_file():
        raise MissingInputError(f"{path}: the paper's numbers are missing from this installation")
    with path.open(encoding="utf-8") as stream:
        frame = pd.read_csv(stream, dtype={column: "object" for column in text_columns})
    if list(frame.columns) != columns:
        raise DataError(f"{path}: expected columns {columns}, found {list(frame.columns)}")
    return frame


def paper_table2() -> pd.DataFrame:
    """Table 2, one row per system; ``reproduced_as`` is "base"/"big" for the Transformer rows
    (the roles of ``tables.table2``; our ``rnn`` row has no paper counterpart)."""
    return _read("table2.csv", TABLE2_COLUMNS, ["model", "reproduced_as"])


def paper_table3() -> pd.DataFrame:
    """Table 3 indexed by our variant names (base, A_h1, ..., E_learned, big)."""
    table = _read("table3.csv", TABLE3_COLUMNS, ["variant", "row", "positional"])
    return table.set_index("variant")


def paper_table4() -> pd.DataFrame:
    """Table 4, one row per parser and training setting, the paper's order (WSJ 23 F1)."""
    return _read("table4.csv", TABLE4_COLUMNS, ["parser", "training"])
