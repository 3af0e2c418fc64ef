"""Every file-writing stage of the tiny pipeline as a command line, for fault injection: a small
corpus archive, an experiment file of a tiny model, and each stage's arguments given where its
inputs are read from and where its outputs go, so that one straight run of every stage in order
builds the inputs and the reference outputs, and a faulty run of one stage writes elsewhere.

The layout mirrors the pipeline's (``<results>/tiny/data``, ``bpe``, ``encoded``, ``base``...).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import yaml

from reproduce.data.tiny_corpus import write_tiny_corpus_archive
from reproduce.training.checkpoints import load_checkpoint

ROOT = Path(__file__).resolve().parents[1]
ENVIRONMENT = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
ENVIRONMENT.pop("MLFLOW_TRACKING_URI", None)  # each results folder holds its own store
# Files a stage writes beside its results that are not results: the MLflow store, its
# artifacts, and the training records that carry wall-clock times.
BOOKKEEPING = ("mlflow.db", "mlflow.db.lock", "mlruns", "mlartifacts", "metrics.jsonl",
               "summary.json", "checkpoints", "train.lock", "mlflow_run_id", "checkpoints.json")


def write_experiment(folder: Path) -> Path:
    """The tiny experiment on a smaller corpus (1,500 training pairs, 40 dev and test) and a
    one-layer model of width 16 trained for 12 steps, so that every stage runs in seconds."""
    archive = write_tiny_corpus_archive(folder / "corpus.tgz", train_pairs=1500, dev_pairs=40,
                                        test_pairs=40)
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    raw = yaml.safe_load((ROOT / "configs/tiny.yaml").read_text())
    for split in ("train", "dev", "test"):
        for source in raw["data"][split]:
            source.update(url=f"file:{archive}", sha256=digest)
    raw["data"]["min_pairs"] = 10
    raw["bpe"]["vocab_size"] = 200
    raw["model"].update(layers=1, d_model=16, d_ff=32, heads=2, d_k=8, d_v=8)
    raw["training"].update(steps=12, tokens_per_step=300, max_tokens_per_device=256,
                           warmup_steps=10, log_every_steps=2, eval_every_steps=4,
                           average_last=2)
    raw["training"]["checkpoints"].update(every_steps=3, keep_last=5)
    raw["decoding"].update(beam_size=2, max_length_offset=10, max_sentences_per_batch=20)
    path = folder / "tiny.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@dataclass(frozen=True)
class Stage:
    """One command: ``arguments(inputs, outputs)`` reads under the ``inputs`` results root and
    writes under ``outputs``; ``results`` are the paths (files or folders, relative to a results
    root) it writes, each compared by ``digest`` (bytes, or a model's tensors)."""

    command: str
    arguments: Callable[[Path, Path, Path], list[str]]
    results: tuple[str, ...]
    digest: Callable[[Path], str] = field(default=lambda path: file_digest(path))

    def argv(self, experiment: Path, inputs: Path, outputs: Path) -> list[str]:
        return [sys.executable, "-m", "reproduce", self.command,
                *self.arguments(experiment, inputs, outputs)]


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def pieces_digest(path: Path) -> str:
    """A sentencepiece model's pieces and scores: its bytes also record the paths it was trained
    from and written to."""
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_file=str(path))
    pieces = [(processor.id_to_piece(i), processor.get_score(i))
              for i in range(processor.vocab_size())]
    return hashlib.sha256(repr(pieces).encode()).hexdigest()


def model_digest(path: Path) -> str:
    """A checkpoint's tensors: training records its wall-clock times beside them."""
    return tensors_digest(load_checkpoint(path)["model"])


def tensors_digest(model: dict) -> str:
    digest = hashlib.sha256()
    for name in sorted(model):
        digest.update(name.encode() + model[name].numpy().tobytes())
    return digest.hexdigest()


D = "tiny"  # the dataset's folder under a results root
P = "tiny_parsing"
PARSING = ROOT / "configs/tiny_parsing.yaml"
DEV = f"{D}/base/translations/dev.averaged.txt"
SCORES = f"{D}/base/scores/dev.averaged.json"
STAGES: dict[str, Stage] = {
    "download": Stage("download", lambda e, i, o: [
        "--experiment", e, "--split", "train", "--source", "tiny_train",
        "--out-dir", o / D / "downloads"], (f"{D}/downloads",)),
    "prepare": Stage("prepare", lambda e, i, o: [
        "--experiment", e, "--split", "train", "--downloads", i / D / "downloads",
        "--out-dir", o / D / "data"], tuple(f"{D}/data/train.{s}" for s in
                                              ("src", "tgt", "report.json"))),
    "prepare_dev": Stage("prepare", lambda e, i, o: [
        "--experiment", e, "--split", "dev", "--downloads", i / D / "downloads",
        "--out-dir", o / D / "data"], tuple(f"{D}/data/dev.{s}" for s in
                                              ("src", "tgt", "report.json"))),
    "references": Stage("references", lambda e, i, o: [
        "--experiment", e, "--split", "dev", "--downloads", i / D / "downloads",
        "--source-lines", i / D / "data/dev.src", "--out", o / D / "data/dev.ref"],
        (f"{D}/data/dev.ref",)),
    "train-bpe": Stage("train-bpe", lambda e, i, o: [
        "--experiment", e, "--source", i / D / "data/train.src", "--target",
        i / D / "data/train.tgt", "--model-prefix", o / D / "bpe/spm"],
        (f"{D}/bpe/spm.model", f"{D}/bpe/spm.vocab"),
        lambda path: pieces_digest(path) if path.suffix == ".model" else file_digest(path)),
    "encode": Stage("encode", lambda e, i, o: [
        "--spm-model", i / D / "bpe/spm.model", "--source", i / D / "data/train.src",
        "--target", i / D / "data/train.tgt", "--out-dir", o / D / "encoded/train"],
        (f"{D}/encoded/train",)),
    "encode_dev": Stage("encode", lambda e, i, o: [
        "--spm-model", i / D / "bpe/spm.model", "--source", i / D / "data/dev.src",
        "--target", i / D / "data/dev.tgt", "--out-dir", o / D / "encoded/dev"],
        (f"{D}/encoded/dev",)),
    "train": Stage("train", lambda e, i, o: [
        "--experiment", e, "--variant", "base", "--train-data", i / D / "encoded/train",
        "--dev-data", i / D / "encoded/dev", "--out-dir", o / D / "base", "--results", o,
        "--threads", "1"], (f"{D}/base/train/final.pt",), model_digest),
    "average": Stage("average", lambda e, i, o: [
        "--manifest", i / D / "base/train/checkpoints.json", "--out",
        o / D / "base/averaged.pt"], (f"{D}/base/averaged.pt",), model_digest),
    "decode": Stage("decode", lambda e, i, o: [
        "--experiment", e, "--variant", "base", "--checkpoint", i / D / "base/averaged.pt",
        "--spm-model", i / D / "bpe/spm.model", "--source", i / D / "data/dev.src",
        "--out", o / DEV, "--threads", "1"], (DEV,)),
    "score": Stage("score", lambda e, i, o: [
        "--experiment", e, "--variant", "base", "--split", "dev", "--checkpoint-name",
        "averaged", "--translations", i / DEV, "--reference", i / D / "data/dev.ref",
        "--source", i / D / "data/dev.src", "--checkpoint", i / D / "base/averaged.pt",
        "--encoded", i / D / "encoded/dev", "--results", o, "--out", o / SCORES,
        "--threads", "1"], (SCORES,)),
    "summarize": Stage("summarize", lambda e, i, o: [
        "--dataset", D, "--variant", "base", "--seed", "1", "--dev", i / SCORES,
        "--test", i / SCORES,
        "--out", o / D / "base/bleu.json"], (f"{D}/base/bleu.json",)),
    "attention": Stage("attention", lambda e, i, o: [
        "--checkpoint", i / D / "base/averaged.pt", "--spm-model", i / D / "bpe/spm.model",
        "--source", i / D / "data/dev.src", "--target", i / DEV, "--sentences", "0,1",
        "--out-dir", o / D / "base/figures"], (f"{D}/base/figures",)),
    "tables": Stage("tables", lambda e, i, o: [
        "--experiment", e, "--results", i, "--out-dir", o / D / "tables"],
        (f"{D}/tables",)),
    # Parsing (section 6.3): the treebank's files become sentences and linearized trees.
    "download_treebank": Stage("download", lambda e, i, o: [
        "--experiment", PARSING, "--split", "dev", "--source", "tiny_wsj_22",
        "--out-dir", o / P / "downloads"], (f"{P}/downloads",)),
    "prepare_treebank": Stage("prepare", lambda e, i, o: [
        "--experiment", PARSING, "--split", "dev", "--downloads", i / P / "downloads",
        "--out-dir", o / P / "data"], tuple(f"{P}/data/dev.{s}" for s in
                                              ("src", "tgt", "report.json"))),
    "gold_trees": Stage("references", lambda e, i, o: [
        "--experiment", PARSING, "--split", "dev", "--downloads", i / P / "downloads",
        "--source-lines", i / P / "data/dev.src", "--out", o / P / "data/dev.ref"],
        (f"{P}/data/dev.ref",)),
    # The byte-reproducible archives of the tiny experiments.
    "make-tiny-corpus": Stage("make-tiny-corpus", lambda e, i, o: [
        "--out", o / "archives/tiny_corpus.tgz"], ("archives/tiny_corpus.tgz",)),
    "make-tiny-treebank": Stage("make-tiny-treebank", lambda e, i, o: [
        "--out", o / "archives/tiny_treebank.tgz"], ("archives/tiny_treebank.tgz",)),
}


def run_stage(stage: Stage, experiment: Path, inputs: Path, outputs: Path,
              **popen) -> subprocess.CompletedProcess:
    return subprocess.run(stage.argv(experiment, inputs, outputs), env=ENVIRONMENT,
                          capture_output=True, text=True, timeout=300, cwd=ROOT, **popen)


def build_pipeline(folder: Path) -> tuple[Path, Path]:
    """Run every stage once, in order, into ``folder/results``: the inputs of every faulty run
    and the outputs it must end equal to. Returns (experiment file, results root)."""
    experiment = write_experiment(folder)
    results = folder / "results"
    for name, stage in STAGES.items():
        done = run_stage(stage, experiment, results, results)
        assert done.returncode == 0, (name, done.stderr[-3000:])
    return experiment, results


def digests(stage: Stage, root: Path) -> dict[str, str]:
    """``relative path -> digest`` of every result file of ``stage`` under ``root``."""
    found = {}
    for result in stage.results:
        path = root / result
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for file in files:
            if file.exists():
                found[str(file.relative_to(root))] = stage.digest(file)
    return found


def final_named_files(root: Path) -> list[Path]:
    """Every file under ``root`` whose path is a final name: no ``.tmp``/``.part`` part, no
    scratch folder (``.extract-*``), no bookkeeping of the MLflow store or of training."""
    def final(path: Path) -> bool:
        parts = path.relative_to(root).parts
        return not any(part.endswith((".tmp", ".part", ".validator", ".corrupt"))
                       or ".tmp." in part  # sentencepiece's <prefix>.tmp.model
                       or part.startswith(".") or part in BOOKKEEPING
                       or part.startswith("replaced-") for part in parts)
    return sorted(p for p in root.rglob("*") if p.is_file() and final(p))
