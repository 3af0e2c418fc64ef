"""Binarized corpora: the sentencepiece ids of a split, memory-mapped for fast loading.

A directory holds, for each side (``source``, ``target``): ``<side>.bin``, every sentence's ids
concatenated (``uint16`` when the vocabulary fits, else ``int32``), and ``<side>_offsets.npy``,
``n + 1`` int64 offsets so that sentence ``i`` is ``bin[offsets[i]:offsets[i+1]]``; plus
``meta.json``. The ids carry no special tokens: the batcher appends EOS to sources and adds BOS
and EOS to targets.
"""

from __future__ import annotations

import json
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np

from reproduce.errors import DataError, MissingInputError, UnwritableOutputError
from reproduce.files import is_failed_write, read_json

SIDES = ("source", "target")


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= np.iinfo(np.uint16).max + 1 else np.dtype(np.int32)


class EncodedCorpusWriter:
    """Streams chunks of encoded sentence pairs into a directory, renamed into place on close."""

    def __init__(self, out_dir: Path, vocab_size: int, metadata: dict):
        self.out_dir = out_dir
        self.temporary = out_dir.with_name(out_dir.name + ".tmp")
        shutil.rmtree(self.temporary, ignore_errors=True)
        self.temporary.mkdir(parents=True)
        self.dtype = token_dtype(vocab_size)
        self.metadata = {"vocab_size": vocab_size, "dtype": self.dtype.name, **metadata}
        self.streams = {side: (self.temporary / f"{side}.bin").open("wb") for side in SIDES}
        self.lengths: dict[str, list[np.ndarray]] = {side: [] for side in SIDES}

    def write(self, sources: list[list[int]], targets: list[list[int]]) -> None:
        with self._writing():
            self._write(sources, targets)

    def close(self) -> None:
        with self._writing():
            self._close()

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """A failed write (a full disk) names the folder; nothing is renamed into place."""
        try:
            yield
        except OSError as error:
            if not is_failed_write(error):
                raise
            raise UnwritableOutputError(self.out_dir, error) from None

    def _write(self, sources: list[list[int]], targets: list[list[int]]) -> None:
        for side, sentences in zip(SIDES, (sources, targets), strict=True):
            lengths = np.fromiter((len(ids) for ids in sentences), dtype=np.int64,
                                  count=len(sentences))
            flat = np.fromiter((i for ids in sentences for i in ids), dtype=self.dtype,
                               count=int(lengths.sum()))
            self.streams[side].write(flat.tobytes())
            self.lengths[side].append(lengths)

    def _close(self) -> None:
        for side in SIDES:
            self.streams[side].close()
            lengths = (np.concatenate(self.lengths[side]) if self.lengths[side]
                       else np.zeros(0, np.int64))
            np.save(self.temporary / f"{side}_offsets.npy",
                    np.concatenate([[0], np.cumsum(lengths)]))
        self.metadata["sentences"] = int(sum(len(chunk) for chunk in self.lengths["source"]))
        (self.temporary / "meta.json").write_text(json.dumps(self.metadata, indent=2) + "\n")
        self._swap_into_place()

    def _swap_into_place(self) -> None:
        """The split encoded before (a rerun, other settings) is renamed aside, not deleted in
        place: killed at any moment, the folder holds one split whole or none, never a part."""
        previous = self.out_dir.with_name(self.out_dir.name + ".old")
        shutil.rmtree(previous, ignore_errors=True)
        if self.out_dir.exists():
            self.out_dir.replace(previous)
        self.temporary.replace(self.out_dir)
        shutil.rmtree(previous, ignore_errors=True)


def _read_offsets(path: Path, sentences: int | None) -> np.ndarray:
    again = "encode the split again"
    try:
        offsets = np.load(path, allow_pickle=False)
    except (ValueError, EOFError) as error:
        raise DataError(f"{path}: not a complete offsets array ({error}); {again}") from None
    if (offsets.ndim != 1 or len(offsets) == 0 or offsets[0] != 0
            or np.any(np.diff(offsets) < 0)
            or (sentences is not None and len(offsets) != sentences + 1)):
        raise DataError(f"{path}: not the {sentences} + 1 rising offsets that "
                        f"meta.json's sentences count asks for; {again}")
    return offsets


def _check_tokens(path: Path, size: int, dtype: np.dtype) -> None:
    expected = size * dtype.itemsize
    if path.stat().st_size != expected:
        raise DataError(
            f"{path}: {path.stat().st_size} bytes, but its offsets end at {size} tokens of "
            f"{dtype.name}, {expected} bytes: cut short, or from another encoding; encode the "
            "split again")


def _read_meta(path: Path) -> dict:
    """The record ``encode`` writes beside the tokens; another JSON value is refused by name
    (rather than as a KeyError deep inside whichever command reads the split)."""
    meta = read_json(path)
    if (not isinstance(meta, dict) or meta.get("dtype") not in ("uint16", "int32")
            or not isinstance(meta.get("vocab_size"), int)):
        raise DataError(
            f"{path}: not the record of an encoded split (expected a JSON object with an integer "
            "vocab_size and dtype uint16 or int32, as `reproduce encode` writes); encode the "
            "split again")
    return meta


class EncodedCorpus:
    """Read access to an encoded split: ``corpus.source(i)``, ``corpus.target_lengths``..."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.meta = _read_meta(directory / "meta.json")
        dtype = np.dtype(self.meta["dtype"])
        self._tokens = {}
        self._offsets = {}
        for side in SIDES:
            self._offsets[side] = _read_offsets(directory / f"{side}_offsets.npy",
                                                self.meta.get("sentences"))
            size = int(self._offsets[side][-1])
            _check_tokens(directory / f"{side}.bin", size, dtype)
            self._tokens[side] = (
                np.memmap(directory / f"{side}.bin", dtype=dtype, mode="r", shape=(size,))
                if size else np.zeros(0, dtype)
            )
        self.source_lengths = np.diff(self._offsets["source"])
        self.target_lengths = np.diff(self._offsets["target"])

    @classmethod
    def open(cls, directory: Path) -> "EncodedCorpus":
        if not (directory / "meta.json").exists():
            raise MissingInputError(f"{directory}: not an encoded corpus (no meta.json)")
        return cls(directory)

    @property
    def vocab_size(self) -> int:
        return int(self.meta["vocab_size"])

    def __len__(self) -> int:
        return len(self.source_lengths)

    def source(self, index: int) -> np.ndarray:
        return self._slice("source", index)

    def target(self, index: int) -> np.ndarray:
        return self._slice("target", index)

    def concatenated(self, side: str, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The tokens of the sentences ``indices`` of ``side`` ("source" or "target"), one
        sentence after the other, as int64, and the sentences' lengths: one gather for a whole
        batch (:func:`reproduce.training.batching.collate`)."""
        offsets = self._offsets[side]
        starts = offsets[indices]
        lengths = offsets[indices + 1] - starts
        ends = np.cumsum(lengths)  # where each sentence ends in the result
        positions = np.repeat(starts - (ends - lengths), lengths) + np.arange(lengths.sum())
        return np.asarray(self._tokens[side][positions], dtype=np.int64), lengths

    def _slice(self, side: str, index: int) -> np.ndarray:
        offsets = self._offsets[side]
        return np.asarray(self._tokens[side][offsets[index] : offsets[index + 1]], dtype=np.int64)
