"""Preparation of one split: the declared members are extracted, read as sentence pairs (plain
text, SGM, TSV, or Penn Treebank trees: the cleaned tree's words and its linearisation, section
6.3), Unicode-normalised, and, for training data only, cleaned:

* pairs with an empty side are dropped,
* pairs with more than ``max_tokens`` whitespace tokens on either side are dropped,
* pairs whose token-length ratio (longer / shorter) exceeds ``max_length_ratio`` are dropped.

Dev and test sets are never filtered. Kept and dropped counts per source and per reason are
logged and written to ``<split>.report.json`` beside ``<split>.src`` and ``<split>.tgt``. All of
it streams: memory stays flat whatever the corpus size. Each source's pairs read, rate and ETA
are logged as it goes (:mod:`reproduce.stage_progress`): minutes for a WMT training corpus.

Input is checked here, where it enters: text must be UTF-8 (:mod:`reproduce.files` names the
member and line otherwise), and a split keeping fewer than ``data.min_pairs`` pairs is an error
naming the split and its sources, before BPE or training ever see it.
"""

from __future__ import annotations

import json
import logging
import shutil
import unicodedata
from collections import Counter
from itertools import zip_longest
from pathlib import Path
from typing import Iterator

from reproduce.config import Cleaning, Source
from reproduce.data.archives import extract_member, member_label
from reproduce.data.download import display_url, file_name
from reproduce.data.sgm import read_sgm
from reproduce.data.treebank import read_source_trees
from reproduce.errors import DataError, MissingInputError, UnwritableOutputError
from reproduce.files import (count_lines, is_failed_write, iter_lines, replaced_together,
                             write_text_whole)
from reproduce.parsing.linearize import linearize
from reproduce.parsing.trees import leaves
from reproduce.stage_progress import StageProgress

log = logging.getLogger(__name__)


def prepare_split(
    sources: list[Source],
    split: str,
    download_dir: Path,
    out_dir: Path,
    cleaning: Cleaning,
    min_pairs: int = 1,
) -> dict:
    out_dir.mkdir(parents=True, exist_ok=True)
    scratch = out_dir / f".extract-{split}"
    outputs = [out_dir / f"{split}.{side}" for side in ("src", "tgt")]
    report: dict = {"split": split, "sources": {}}
    for source in sources:  # before any is read
        archive = download_dir / file_name(source)
        if not archive.exists():
            raise MissingInputError(f"{archive}: not downloaded (source {source.name!r}, "
                                    f"{display_url(source.url)})")
    try:  # both sides are renamed into place only once the split has enough pairs
        with replaced_together(outputs, "w", encoding="utf-8") as (src_out, tgt_out):
            for source in sources:
                counts: Counter = Counter()
                with StageProgress(f"prepare {split}/{source.name}", None, "pairs",
                                   log) as progress:
                    pairs = _read_pairs(source, download_dir / file_name(source), scratch,
                                        progress)
                    for source_text, target_text in pairs:
                        source_text = _normalise(source_text, cleaning.unicode_normalization)
                        target_text = _normalise(target_text, cleaning.unicode_normalization)
                        counts["read"] += 1
                        progress.update()
                        reason = (_drop_reason(source_text, target_text, cleaning)
                                  if split == "train" else None)
                        if reason:
                            counts[f"dropped_{reason}"] += 1
                            continue
                        counts["kept"] += 1
                        src_out.write(source_text + "\n")
                        tgt_out.write(target_text + "\n")
                report["sources"][source.name] = dict(counts)
                log.info("%s/%s: %s", split, source.name, json.dumps(dict(counts)))
            report["kept"] = sum(entry.get("kept", 0) for entry in report["sources"].values())
            _check_enough_pairs(report, min_pairs)
    except OSError as error:  # a write on src_out or tgt_out (a full disk) names no file
        if not is_failed_write(error):
            raise
        raise UnwritableOutputError(out_dir / f"{split}.src|tgt", error) from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    report_path = out_dir / f"{split}.report.json"
    write_text_whole(report_path, json.dumps(report, indent=2) + "\n")
    return report


def _check_enough_pairs(report: dict, min_pairs: int) -> None:
    if report["kept"] >= min_pairs:
        return
    read = sum(entry.get("read", 0) for entry in report["sources"].values())
    raise DataError(
        f"split {report['split']}: {report['kept']} sentence pairs kept of {read} read from "
        f"sources {', '.join(report['sources'])}; expected at least data.min_pairs = {min_pairs} "
        f"(check the sources' members and the cleaning limits)"
    )


def _read_pairs(source: Source, archive: Path, scratch: Path,
                progress: StageProgress) -> Iterator[tuple[str, str]]:
    """The source's sentence pairs, streamed; their number goes to ``progress`` once the members
    are extracted (trees are not counted ahead: treebanks are small)."""
    if source.format == "ptb":
        for tree in read_source_trees(source, archive, scratch):
            yield " ".join(leaves(tree)), linearize(tree)
        return
    if source.format == "tsv":
        path = extract_member(archive, source.source_member, scratch / f"{source.name}.tsv")
        progress.set_total(count_lines(path))
        yield from _read_tsv(path, source, member_label(archive, source.source_member))
        return
    src = extract_member(archive, source.source_member, scratch / f"{source.name}.src")
    tgt = extract_member(archive, source.target_member, scratch / f"{source.name}.tgt")
    src_label = member_label(archive, source.source_member)
    tgt_label = member_label(archive, source.target_member)
    if source.format == "sgm":
        src_lines, tgt_lines = read_sgm(src, src_label), read_sgm(tgt, tgt_label)
        if len(src_lines) != len(tgt_lines):
            raise _mismatch(source, len(src_lines), len(tgt_lines))
        progress.set_total(len(src_lines))
        yield from zip(src_lines, tgt_lines, strict=True)
        return
    progress.set_total(count_lines(src))
    src_in, tgt_in = iter_lines(src, src_label), iter_lines(tgt, tgt_label)
    count = 0
    for source_line, target_line in zip_longest(src_in, tgt_in):
        if source_line is None or target_line is None:
            src_total = count + (source_line is not None) + sum(1 for _ in src_in)
            tgt_total = count + (target_line is not None) + sum(1 for _ in tgt_in)
            raise _mismatch(source, src_total, tgt_total)
        count += 1
        yield source_line, target_line


def _read_tsv(path: Path, source: Source, label: str) -> Iterator[tuple[str, str]]:
    """A blank line (WMT's TSV corpora separate documents with them) is a pair of two empty
    sides, which cleaning drops and counts; any other line needs its tab."""
    for number, line in enumerate(iter_lines(path, label), start=1):
        if not line.strip():
            yield "", ""
            continue
        columns = line.split("\t")
        if len(columns) < 2:
            raise DataError(
                f"{label} line {number} (source {source.name!r}): expected a tab between "
                f"source and target, got {line[:80]!r}"
            )
        yield columns[0], columns[1]


def _mismatch(source: Source, source_count: int, target_count: int) -> DataError:
    return DataError(
        f"source {source.name!r}: {source.source_member} has {source_count} sentences but "
        f"{source.target_member} has {target_count}"
    )


def _normalise(text: str, form: str) -> str:
    if form != "none":
        text = unicodedata.normalize(form, text)
    return " ".join(text.split())


def _drop_reason(source_text: str, target_text: str, cleaning: Cleaning) -> str | None:
    source_tokens, target_tokens = len(source_text.split()), len(target_text.split())
    if source_tokens == 0 or target_tokens == 0:
        return "empty"
    if max(source_tokens, target_tokens) > cleaning.max_tokens:
        return "too_long"
    ratio = max(source_tokens, target_tokens) / min(source_tokens, target_tokens)
    if ratio > cleaning.max_length_ratio:
        return "length_ratio"
    return None
