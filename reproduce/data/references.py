"""The official dev/test references, read exactly as sacreBLEU reads them (section 6.1's BLEU).

``sacrebleu -t wmt14/full -l en-de`` scores against the reference side of the released files,
not against a cleaned copy: no Unicode normalisation, no HTML unescaping. Its readers
(``sacrebleu.dataset``) do only this per format:

* ``sgm`` (WMT's "fake SGML", ``FakeSGMLDataset``): every line that starts with ``<seg `` becomes
  one reference, ``re.sub(r"<seg.*?>(.*)</seg>.*?", r"\\1", line)``, then leading and trailing
  whitespace stripped and inner runs of whitespace collapsed to one space (``Dataset._clean``);
* ``text`` (``PlainTextDataset``): each line with its trailing whitespace stripped;
* ``tsv`` (``TSVDataset``): the target column of each line, the newline removed.

So the reference file scored here is what sacreBLEU itself would score against, and its
signature means what it means in other papers. Normalisation and cleaning
(:mod:`reproduce.data.prepare`) stay where they belong: on what the model is trained on and fed.

For a ``ptb`` source (parsing, section 6.3) the references are the gold trees, cleaned as for
training (:mod:`reproduce.data.treebank`: no empty elements, function tags or wrapper; POS tags
kept, since EVALB identifies punctuation by them), one tree per line.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from reproduce.config import Source
from reproduce.data.archives import extract_member, member_label
from reproduce.data.download import file_name
from reproduce.data.treebank import read_source_trees
from reproduce.errors import DataError
from reproduce.files import write_text_whole
from reproduce.parsing.trees import format_tree

_SEGMENT_LINE = re.compile(r"<seg.*?>(.*)</seg>.*?")
_WHITESPACE_RUN = re.compile(r"\s+")


def _sacrebleu_clean(text: str) -> str:
    return _WHITESPACE_RUN.sub(" ", text.strip())


def reference_lines(path: Path, format: str, label: str | None = None) -> list[str]:
    """The references in ``path`` (one member of a source, of ``format``) as sacreBLEU reads
    them; ``label`` names the file in errors (the download's member) when ``path`` is a scratch
    copy."""
    with path.open(encoding="utf-8", newline="\n") as stream:  # sacrebleu.utils.smart_open
        if format == "sgm":
            return [_sacrebleu_clean(_SEGMENT_LINE.sub(r"\1", line))
                    for line in stream if line.startswith("<seg ")]
        if format == "text":
            return [line.rstrip() for line in stream]
        return [_tsv_target(line, label or str(path), number)
                for number, line in enumerate(stream, start=1)]


def _tsv_target(line: str, label: str, number: int) -> str:
    """A blank line is the empty pair that preparation reads there (a blank line between
    documents, say), so its reference is empty, keeping every later reference beside its
    source."""
    if not line.strip():
        return ""
    columns = line.rstrip("\n").split("\t")
    if len(columns) < 2:
        raise DataError(f"{label}:{number}: a tsv reference line holds no tab; expected "
                        "'source<TAB>target'")
    return columns[1]


def write_references(sources: list[Source], download_dir: Path, out_path: Path,
                     expected_lines: int) -> int:
    """Concatenate the official references of ``sources`` into ``out_path``, one per line.

    ``expected_lines`` is the number of sentences preparation read for the split's source side;
    a different count (e.g. an SGM file with a segment sacreBLEU's reader skips) is an error
    naming the member, raised before anything is written.
    """
    references: list[str] = []
    with tempfile.TemporaryDirectory() as scratch:
        for source in sources:
            archive = download_dir / file_name(source)
            if source.format == "ptb":
                references += map(format_tree, read_source_trees(source, archive, Path(scratch)))
                continue
            member = source.target_member if source.format != "tsv" else source.source_member
            extracted = extract_member(archive, member, Path(scratch) / f"{source.name}.ref")
            references += reference_lines(extracted, source.format, member_label(archive, member))
    if len(references) != expected_lines:
        members = ", ".join(f"{source.name}:{source.target_member or source.source_member}"
                            for source in sources)
        reading = "as gold trees" if sources[0].format == "ptb" else \
            f"as sacreBLEU reads references ({sources[0].format})"
        raise DataError(
            f"{members}: read {reading}, it gives {len(references)} references, but preparation "
            f"read {expected_lines} sentences; expected one reference per source sentence"
        )
    write_text_whole(out_path, "".join(line + "\n" for line in references))
    return len(references)
