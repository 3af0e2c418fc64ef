"""The paper's numbers, kept as data in ``configs/paper/``."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

PAPER_DIR = Path(__file__).resolve().parents[2] / "configs" / "paper"


def paper_table2() -> pd.DataFrame:
    return pd.read_csv(PAPER_DIR / "table2.csv", dtype={"reproduced_as": "string"})


def paper_table3() -> pd.DataFrame:
    return pd.read_csv(PAPER_DIR / "table3.csv").set_index("variant")
