"""The corpora a variant trains and is evaluated on, as MLflow dataset inputs (``log_input``).

One dataset per declared source of each split: its URL (without credentials, query or fragment:
a ``?token=`` never reaches the store), the archive's sha256 where the experiment declares one,
and the sentence pairs read and kept after cleaning, from ``<split>.report.json`` of the prepare
stage when it exists. The split is the input's ``mlflow.data.context``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from mlflow.entities import Dataset, DatasetInput, InputTag

from reproduce.config import DataConfig

SPLITS = ("train", "dev", "test")


def public_url(url: str) -> str:
    """``url`` without user, password, query and fragment."""
    if url.startswith("file:"):
        return url.split("?", 1)[0].split("#", 1)[0]
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def dataset_inputs(data: DataConfig, reports_dir: Path) -> list[DatasetInput]:
    """Every source of every split, with its pair counts from
    ``reports_dir/<split>.report.json``."""
    inputs = []
    for split in SPLITS:
        report_path = reports_dir / f"{split}.report.json"
        counts = json.loads(report_path.read_text())["sources"] if report_path.exists() else {}
        for source in getattr(data, split):
            inputs.append(_dataset_input(split, source.name, source.url, source.sha256,
                                         counts.get(source.name, {})))
    return inputs


def _dataset_input(split: str, name: str, url: str, sha256: str | None,
                   counts: dict) -> DatasetInput:
    location = public_url(url)
    profile = {"sha256": sha256, "pairs_read": counts.get("read"), "pairs_kept": counts.get("kept")}
    profile = {key: value for key, value in profile.items() if value is not None}
    # The digest names this content: the archive (its checksum, else its address) as cleaned.
    identity = json.dumps([location, sha256, counts.get("kept")])
    dataset = Dataset(
        name=name,
        digest=hashlib.sha256(identity.encode()).hexdigest()[:12],
        source_type="local" if url.startswith("file:") else "http",
        source=json.dumps({"url": location}),
        profile=json.dumps(profile),
    )
    return DatasetInput(dataset, tags=[InputTag("mlflow.data.context", split)])
