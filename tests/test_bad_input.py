"""Bad input, as a new user would give it, through the real command line (``python -m reproduce``).

Every case must end with exit status != 0 and exactly one stderr line
``reproduce <command>: error: ...`` naming the file or field, and no traceback (issue 14, item 8).
The cases cover each class of bad input: downloads, corpora, arguments, experiment files,
checkpoints, sentencepiece models. Inputs that used to give *silent wrong results* are checked
for the right result in test_download.py, test_prepare.py and below (decode's line count).
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import json
import os
import pickle
import random
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import yaml

from reproduce.config import BpeConfig, ModelConfig, Source
from reproduce.experiment_file import load_experiment
from reproduce.provenance import trained_settings
from reproduce.data.bpe import train_sentencepiece
from reproduce.data.download import file_name
from reproduce.data.tiny_corpus import generate_corpus
from reproduce.model.transformer import Transformer
from reproduce.training.checkpoints import save_checkpoint
from tests.corpus_archives import write_tgz, write_tgz_bytes
from tests.training_fixtures import write_encoded
from tests.local_http_server import serving
from tests.project_copy import copy_workflow

ROOT = Path(__file__).resolve().parents[1]
SECRET = "s3cr3t-t0ken"


def run_cli(*args: str | Path, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    env = os.environ | {"PYTHONPATH": str(ROOT)} | (env or {})
    return subprocess.run([sys.executable, "-m", "reproduce", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def assert_one_line_error(result: subprocess.CompletedProcess, command: str, *named: str) -> str:
    """The result is a failure told in one ``reproduce <command>: error:`` line naming ``named``."""
    assert result.returncode != 0, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if ": error: " in line]
    assert errors == [line for line in errors if line.startswith(f"reproduce {command}: error: ")]
    assert len(errors) == 1 and result.stderr.rstrip("\n").endswith(errors[0]), result.stderr
    for name in named:
        assert name in errors[0], (name, errors[0])
    return errors[0]


# --------------------------------------------------------------------------------------------
# The world the cases run in: a local HTTP server, archives, a sentencepiece model, checkpoints
# --------------------------------------------------------------------------------------------
@dataclass
class World:
    root: Path
    experiment: Path
    spm: Path
    other_spm: Path
    same_size_spm: Path
    checkpoint: Path
    learned_checkpoint: Path
    mixed_checkpoints: Path
    encoded: Path
    text: Path


SMALL_MODEL = {"layers": 1, "d_ff": 32, "heads": 2, "d_k": 8, "d_v": 8, "max_positions": 64}


def _checkpoint(path: Path, vocab_size: int, d_model: int, step: int, settings: dict | None = None,
                spm: Path | None = None, **model) -> Path:
    """A verified checkpoint (sha256 sidecar) of a small model trained with ``settings`` on the
    pieces of ``spm``."""
    config = ModelConfig(d_model=d_model, **(SMALL_MODEL | model))
    torch.manual_seed(0)
    state = {"model": Transformer(config, vocab_size).state_dict(),
             "model_config": config.model_dump(), "vocab_size": vocab_size, "step": step,
             "settings": settings or {"model.d_model": d_model}}
    if spm is not None:
        state["spm_model_sha256"] = hashlib.sha256(spm.read_bytes()).hexdigest()
    save_checkpoint(state, path)
    return path


def _trained_with(experiment_file: Path, variant: str = "base") -> dict:
    experiment = load_experiment(experiment_file)
    return trained_settings(experiment.variant(variant), experiment)


def _experiment(path: Path, sources: dict[str, list[dict]], base: str = "tiny") -> Path:
    raw = yaml.safe_load((ROOT / f"configs/{base}.yaml").read_text())
    raw["data"].update(sources)
    raw["model"].update(d_model=16, **SMALL_MODEL)  # the checkpoints' model
    if base == "tiny":  # Table 3's row E, which the demo leaves out: learned_checkpoint's
        raw["variants"]["E_learned"] = {"table3_row": "E", "model": {"positional": "learned"}}
    path.write_text(yaml.safe_dump(raw))
    return path


def _served_archive(folder: Path) -> Path:
    return write_tgz(folder / "corpus.tgz", {"train.src": "a b\n", "train.tgt": "x y\n"})


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad_input")
    served = _served_archive(root / "served")
    pairs = generate_corpus(400, 0, 0, seed=3)["train"]
    (root / "train.src").write_text("".join(s + "\n" for s, _ in pairs))
    (root / "train.tgt").write_text("".join(t + "\n" for _, t in pairs))
    spm = train_sentencepiece(root / "train.src", root / "train.tgt", BpeConfig(vocab_size=120),
                              root / "spm")
    other = train_sentencepiece(root / "train.src", root / "train.tgt", BpeConfig(vocab_size=90),
                                root / "other")
    # As many pieces as `spm`, learned from other text: only the checkpoint's record tells them
    # apart.
    (root / "shuffled.src").write_text("".join(s[::-1] + "\n" for s, _ in pairs))
    (root / "shuffled.tgt").write_text("".join(t[::-1] + "\n" for _, t in pairs))
    same_size = train_sentencepiece(root / "shuffled.src", root / "shuffled.tgt",
                                    BpeConfig(vocab_size=120), root / "same-size")
    write_encoded(root / "encoded", 120, [([5, 6], [7, 8])])
    mixed = root / "mixed"
    _checkpoint(mixed / "step_00000010.pt", 120, 16, 10)
    _checkpoint(mixed / "step_00000020.pt", 120, 32, 20)
    with (serving(root / "served") as (url, _),
          serving(root / "served", no_length=True) as (bare, _)):
        digest = hashlib.sha256(served.read_bytes()).hexdigest()
        member = {"source_member": "train.src", "target_member": "train.tgt"}
        experiment = _experiment(root / "experiment.yaml", {"train": [
            {"name": "missing", "url": f"{url}/nothere.tgz?token={SECRET}", **member},
            {"name": "no_length", "url": f"{bare}/corpus.tgz", **member},
            {"name": "wrong_sum", "url": f"{url}/corpus.tgz", "sha256": "0" * 64, **member},
            {"name": "right", "url": f"{url}/corpus.tgz", "sha256": digest, **member},
        ]})
        yield World(root=root, experiment=experiment, spm=spm, other_spm=other,
                    same_size_spm=same_size,
                    checkpoint=_checkpoint(root / "model.pt", 120, 16, 10,
                                           _trained_with(experiment), spm),
                    learned_checkpoint=_checkpoint(root / "learned.pt", 120, 16, 10,
                                                   _trained_with(experiment, "E_learned"), spm,
                                                   positional="learned"),
                    mixed_checkpoints=mixed,
                    encoded=root / "encoded", text=root / "train.src")


def _prepare_world(world: World, name: str, members: dict[str, bytes]) -> tuple[Path, Path]:
    """An experiment whose train split is one archive holding ``members``, already downloaded."""
    source = {"name": name, "url": f"file:{name}.tgz", "source_member": "a.src",
              "target_member": "a.tgt"}
    experiment = _experiment(world.root / f"{name}.yaml", {"train": [source]})
    downloads = world.root / f"downloads-{name}"
    write_tgz_bytes(downloads / file_name(Source(**source)), members)
    return experiment, downloads


# --------------------------------------------------------------------------------------------
# The cases: (id, command, arguments from the world, names the error line must hold)
# --------------------------------------------------------------------------------------------
def _decode(world: World, **changes) -> list:
    options = {"--experiment": world.experiment, "--variant": "base",
               "--checkpoint": world.checkpoint,
               "--spm-model": world.spm, "--source": world.text,
               "--out": world.root / "out.txt"} | changes
    return [part for option, value in options.items() for part in (option, value)]


def _truncated(world: World) -> Path:
    data = world.checkpoint.read_bytes()
    path = world.root / "truncated.pt"
    path.write_bytes(data[: len(data) // 2])
    return path


def _foreign_zip(world: World) -> Path:
    path = world.root / "foreign.pt"
    with zipfile.ZipFile(path, "w") as bundle:
        bundle.writestr("notes.txt", "not a checkpoint")
    return path


def _latin1(world: World) -> Path:
    path = world.root / "latin1.txt"
    path.write_bytes("a b\nc d\nGr\xfc\xdfe\n".encode("latin-1"))
    return path


def _long_line(world: World) -> Path:
    path = world.root / "long.txt"
    path.write_text("a b\n" + " ".join(["the"] * 80) + "\n")
    return path


def _bounded(world: World, max_source_pieces: int) -> Path:
    """The world's experiment with ``decoding.max_source_pieces`` set."""
    raw = yaml.safe_load(world.experiment.read_text())
    raw["decoding"]["max_source_pieces"] = max_source_pieces
    path = world.root / f"bounded-{max_source_pieces}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _thirty_words(world: World) -> Path:
    """A short line, then one of 30 words: 31 pieces at least, its end of sentence included."""
    path = world.root / "thirty.txt"
    path.write_text("a b\n" + " ".join(["a", "b"] * 15) + "\n")
    return path


def _lines(world: World, name: str, count: int) -> Path:
    path = world.root / name
    path.write_text("".join("a b\n" for _ in range(count)))
    return path


def _download(world: World, source: str) -> list:
    return ["--experiment", world.experiment, "--split", "train", "--source", source,
            "--out-dir", world.root / "downloads"]


def _prepare(world: World, name: str, members: dict[str, bytes]) -> list:
    experiment, downloads = _prepare_world(world, name, members)
    return ["--experiment", experiment, "--split", "train", "--downloads", downloads,
            "--out-dir", world.root / f"data-{name}"]


def _prepare_treebank(world: World, name: str, members: dict[str, bytes]) -> list:
    """``prepare`` of a train split that is one ptb source, a glob over ``members``."""
    source = {"name": name, "url": f"file:{name}.tgz", "format": "ptb",
              "source_member": "wsj/*/*.mrg"}
    experiment = _experiment(world.root / f"{name}.yaml", {"train": [source]}, base="tiny_parsing")
    downloads = world.root / f"downloads-{name}"
    write_tgz_bytes(downloads / file_name(Source(**source)), members)
    return ["--experiment", experiment, "--split", "train", "--downloads", downloads,
            "--out-dir", world.root / f"data-{name}"]


def _train(world: World, **changes) -> list:
    options = {"--experiment": world.experiment, "--variant": "base", "--train-data": world.encoded,
               "--dev-data": world.encoded, "--out-dir": world.root / "variant",
               "--results": world.root / "results"} | changes
    return [part for option, value in options.items() for part in (option, value)]


def _average(world: World, last: str, folder: Path | None = None) -> list:
    return ["--checkpoint-dir", folder or world.mixed_checkpoints, "--last", last,
            "--out", world.root / "averaged.pt"]


def _score(world: World, hypotheses: int = 3, encoded: Path | None = None) -> list:
    return ["--experiment", world.experiment, "--variant", "base", "--split", "dev",
            "--checkpoint-name", "last", "--translations", _lines(world, "hyp.txt", hypotheses),
            "--reference", _lines(world, "ref.txt", 4), "--checkpoint", world.checkpoint,
            "--encoded", encoded or world.encoded, "--results", world.root / "results",
            "--out", world.root / "scores.json"]


def _encoded_with_vocabulary(world: World, vocab_size: int, pairs: int = 1) -> Path:
    path = world.root / f"encoded-{vocab_size}-{pairs}"
    write_encoded(path, vocab_size, [([5, 6], [7, 8])] * pairs)
    return path


def _encoded_with_long_dev_line(world: World) -> Path:
    """A dev split whose line 2 is one piece over ``decoding.max_source_pieces`` (1024) with its
    end of sentence."""
    path = world.root / "encoded-long-line"
    write_encoded(path, 120, [([5, 6], [7, 8]), ([5] * 1024, [7, 8]), ([5] * 1023, [7, 8])])
    return path


def _encoded_with_other_pieces(world: World) -> Path:
    """An encoded split whose record names another sentencepiece model than the checkpoint's."""
    path = world.root / "encoded-other-pieces"
    write_encoded(path, 120, [([5, 6], [7, 8])])
    meta = json.loads((path / "meta.json").read_text())
    meta["spm_model_sha256"] = hashlib.sha256(world.same_size_spm.read_bytes()).hexdigest()
    (path / "meta.json").write_text(json.dumps(meta))
    return path


def _many_characters(world: World) -> Path:
    """Text of 300 distinct characters, more than a vocabulary of 100 pieces can hold."""
    path = world.root / "characters.txt"
    path.write_text("".join("".join(chr(0x4E00 + (7 * line + i) % 300) for i in range(40)) + "\n"
                            for line in range(300)))
    return path


def _bad_experiment(world: World, edit) -> Path:
    raw = yaml.safe_load((ROOT / "configs/tiny.yaml").read_text())
    edit(raw)
    path = world.root / "typo.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


CASES = [
    # Downloads
    ("download-http-404-token-url", "download", lambda w: _download(w, "missing"),
     ["nothere.tgz", "HTTP 404"]),
    ("download-no-length-no-sha256", "download", lambda w: _download(w, "no_length"),
     ["corpus.tgz", "no Content-Length", "'no_length'"]),
    ("download-sha256-mismatch", "download", lambda w: _download(w, "wrong_sum"),
     ["sha256 mismatch", "0" * 64]),
    ("download-unknown-source", "download", lambda w: _download(w, "nope"),
     ["experiment.yaml", "'nope'"]),
    # Corpora
    ("prepare-empty-split", "prepare", lambda w: _prepare(w, "empty", {"a.src": b"", "a.tgt": b""}),
     ["split train", "0 sentence pairs", "empty"]),
    ("prepare-below-min-pairs", "prepare",
     lambda w: _prepare(w, "few", {"a.src": b"a\n" * 5, "a.tgt": b"b\n" * 5}),
     ["split train", "5 sentence pairs", "data.min_pairs = 100"]),
    ("prepare-not-utf8", "prepare",
     lambda w: _prepare(w, "latin", {"a.src": b"a\nb\n", "a.tgt": b"x\n\xe4\n"}),
     ["member a.tgt", "line 2", "not UTF-8"]),
    ("prepare-sides-differ", "prepare",
     lambda w: _prepare(w, "uneven", {"a.src": b"a\nb\n", "a.tgt": b"x\n"}),
     ["'uneven'", "has 2 sentences", "has 1"]),
    ("prepare-missing-member", "prepare", lambda w: _prepare(w, "member", {"other.txt": b"a\n"}),
     ["no member 'a.src'"]),
    ("prepare-ptb-malformed-tree", "prepare",
     lambda w: _prepare_treebank(
         w, "trees", {"wsj/02/a.mrg": b"( (S (NP (NN a)) (VP (VB b))) )\n\n( (S\n (NP x y)) )\n"}),
     ["member wsj/02/a.mrg", "line 4 (tree 2)", "node 'NP' holds 2 word(s)"]),
    ("prepare-ptb-glob-matches-nothing", "prepare",
     lambda w: _prepare_treebank(w, "noglob", {"wsj/a.mrg": b"( (S (NP (NN a))) )\n"}),
     ["no member matches 'wsj/*/*.mrg'", "wsj/a.mrg"]),
    ("prepare-ptb-not-utf8", "prepare",
     lambda w: _prepare_treebank(w, "latintrees",
                                 {"wsj/02/a.mrg": b"( (S (NP (NN a)))\n (VP (VB \xe4))) )\n"}),
     ["member wsj/02/a.mrg", "line 2", "not UTF-8"]),
    ("prepare-downloads-missing", "prepare",
     lambda w: ["--experiment", w.experiment, "--split", "train", "--downloads", w.root / "nowhere",
                "--out-dir", w.root / "data"], ["--downloads", "nowhere", "no such directory"]),
    ("prepare-not-downloaded", "prepare",
     lambda w: ["--experiment", w.experiment, "--split", "train", "--downloads", w.root,
                "--out-dir", w.root / "data"], ["not downloaded", "'missing'"]),
    ("train-bpe-empty-input", "train-bpe",
     lambda w: ["--experiment", w.experiment, "--source", _lines(w, "empty.src", 0),
                "--target", _lines(w, "empty.tgt", 0), "--model-prefix", w.root / "bpe/spm"],
     ["empty.src: empty; the vocabulary is trained on the prepared train split"]),
    ("train-bpe-vocabulary-below-characters", "train-bpe",
     lambda w: ["--experiment", _bad_experiment(w, lambda raw: raw["bpe"].update(vocab_size=100)),
                "--source", _many_characters(w), "--target", _many_characters(w),
                "--model-prefix", w.root / "bpe/small"],
     ["characters.txt", "bpe.vocab_size=100", "Vocabulary size is smaller than required_chars"]),
    ("train-empty-train-split", "train",
     lambda w: _train(w, **{"--train-data": _encoded_with_vocabulary(w, 120, pairs=0)}),
     ["encoded-120-0", "train split holds no sentence pair"]),
    ("train-empty-dev-split", "train",
     lambda w: _train(w, **{"--dev-data": _encoded_with_vocabulary(w, 120, pairs=0)}),
     ["encoded-120-0", "the encoded dev split holds no sentence pair"]),
    ("train-dev-line-too-long-to-decode", "train",
     lambda w: _train(w, **{"--dev-data": _encoded_with_long_dev_line(w)}),
     ["encoded-long-line (the encoded dev split, decoded after training) line 2: 1025 pieces",
      "decoding.max_source_pieces=1024"]),
    ("train-test-line-too-long-to-decode", "train",
     lambda w: _train(w, **{"--test-data": _encoded_with_long_dev_line(w)}),
     ["encoded-long-line (the encoded test split, decoded after training) line 2: 1025 pieces",
      "decoding.max_source_pieces=1024"]),
    ("train-model-too-large-for-memory", "train",
     lambda w: _train(w, **{"--experiment": _bad_experiment(
         w, lambda raw: raw["model"].update(d_model=32768, d_ff=2**24))}),
     ["variant base", "d_model=32768", "GiB for its weights", "GiB free"]),
    ("encode-missing-spm-model", "encode",
     lambda w: ["--spm-model", w.root / "no.model", "--source", w.text, "--target", w.text,
                "--out-dir", w.root / "enc"], ["--spm-model", "no.model", "no such file"]),
    ("encode-not-an-spm-model", "encode",
     lambda w: ["--spm-model", w.text, "--source", w.text, "--target", w.text, "--out-dir",
                w.root / "enc"],
     ["train.src", "not a sentencepiece model"]),
    ("encode-not-utf8", "encode",
     lambda w: ["--spm-model", w.spm, "--source", _latin1(w), "--target", _lines(w, "three.txt", 3),
                "--out-dir", w.root / "enc"], ["latin1.txt", "line 3", "not UTF-8"]),
    # Arguments
    ("decode-unknown-variant", "decode", lambda w: _decode(w, **{"--variant": "nope"}),
     ["--variant 'nope'", "known: A_h1, D_ls0, E_learned, base, big"]),
    ("decode-seed-not-listed", "decode", lambda w: _decode(w, **{"--seed": "3"}),
     ["--seed 3", "not a seed of variant 'base'", "training.seed lists 1, 2"]),
    ("decode-seed-negative", "decode", lambda w: _decode(w, **{"--seed": "-1"}),
     ["--seed", "an integer >= 0, got -1"]),
    ("decode-threads-0", "decode", lambda w: _decode(w, **{"--threads": "0"}),
     ["--threads", "positive integer"]),
    ("train-tasks-0", "train", lambda w: _train(w, **{"--tasks": "0"}),
     ["--tasks", "positive integer, got 0"]),
    ("train-threads-not-a-number", "train", lambda w: _train(w, **{"--threads": "two"}),
     ["--threads", "'two'"]),
    ("train-unknown-variant", "train", lambda w: _train(w, **{"--variant": "base2"}),
     ["--variant 'base2'"]),
    ("train-missing-encoded-data", "train",
     lambda w: _train(w, **{"--train-data": w.root / "none"}),
     ["--train-data", "no such directory"]),
    ("average-last-0", "average", lambda w: _average(w, "0"), ["--last", "got 0"]),
    ("average-last-negative", "average", lambda w: _average(w, "-3"), ["--last", "got -3"]),
    ("average-more-than-kept", "average", lambda w: _average(w, "5"),
     ["mixed", "2 checkpoints", "asks for 5"]),
    ("make-tiny-corpus-positional", "make-tiny-corpus", lambda w: [w.root / "t.tgz"], ["--out"]),
    ("make-tiny-treebank-positional", "make-tiny-treebank", lambda w: [w.root / "t.tgz"],
     ["--out"]),
    ("score-line-counts-differ", "score", _score, ["hyp.txt has 3 lines", "ref.txt has 4"]),
    ("score-encoded-vocabulary-mismatch", "score",
     lambda w: _score(w, hypotheses=4, encoded=_encoded_with_vocabulary(w, 90)),
     ["encoded-90", "90 pieces", "vocabulary of 120"]),
    ("score-encoded-with-other-pieces", "score",
     lambda w: _score(w, hypotheses=4, encoded=_encoded_with_other_pieces(w)),
     ["encoded-other-pieces", "another sentencepiece model", "model.pt"]),
    # Experiment files
    ("experiment-missing", "decode", lambda w: _decode(w, **{"--experiment": w.root / "none.yaml"}),
     ["none.yaml", "cannot read"]),
    ("experiment-unknown-key", "decode",
     lambda w: _decode(w, **{"--experiment": _bad_experiment(
         w, lambda raw: raw["model"].update(d_modle=1))}),
     ["typo.yaml", "model.d_modle: unknown key"]),
    # Checkpoints
    ("checkpoint-missing", "decode", lambda w: _decode(w, **{"--checkpoint": w.root / "none.pt"}),
     ["--checkpoint", "none.pt", "no such file"]),
    ("checkpoint-is-a-directory", "decode", lambda w: _decode(w, **{"--checkpoint": w.root}),
     ["--checkpoint", "is a directory"]),
    ("checkpoint-truncated", "decode", lambda w: _decode(w, **{"--checkpoint": _truncated(w)}),
     ["truncated.pt", "not a readable checkpoint"]),
    ("checkpoint-empty", "score",
     lambda w: _score(w)[:-4] + ["--checkpoint", _lines(w, "empty.pt", 0)] + _score(w)[-4:],
     ["empty.pt", "0 bytes"]),
    ("checkpoint-foreign-zip", "decode", lambda w: _decode(w, **{"--checkpoint": _foreign_zip(w)}),
     ["foreign.pt", "not a complete checkpoint"]),
    ("average-shape-mismatch", "average", lambda w: _average(w, "2"),
     ["mixed", "step_00000020.pt", "cannot use the checkpoint", "shape"]),
    # Sentencepiece model and source text given to decode
    ("decode-spm-vocabulary-mismatch", "decode",
     lambda w: _decode(w, **{"--spm-model": w.other_spm}),
     ["other.model", "90 pieces", "vocabulary of 120"]),
    ("decode-spm-other-pieces-same-size", "decode",
     lambda w: _decode(w, **{"--spm-model": w.same_size_spm}),
     ["same-size.model", "another sentencepiece model", "model.pt"]),
    ("decode-line-longer-than-learned-positions", "decode",
     lambda w: _decode(w, **{"--variant": "E_learned", "--checkpoint": w.learned_checkpoint,
                             "--source": _long_line(w)}),
     ["long.txt line 2", "model.max_positions=64"]),
    ("decode-line-longer-than-max-source-pieces", "decode",
     lambda w: _decode(w, **{"--experiment": _bounded(w, 20), "--source": _thirty_words(w)}),
     ["thirty.txt line 2", "more than decoding.max_source_pieces=20", "line breaks lost"]),
    ("decode-max-source-pieces-below-learned-positions", "decode",
     lambda w: _decode(w, **{"--experiment": _bounded(w, 20), "--variant": "E_learned",
                             "--checkpoint": w.learned_checkpoint, "--source": _thirty_words(w)}),
     ["thirty.txt line 2", "decoding.max_source_pieces=20"]),
    ("decode-source-not-utf8", "decode", lambda w: _decode(w, **{"--source": _latin1(w)}),
     ["latin1.txt", "line 3", "not UTF-8"]),
    ("decode-source-missing", "decode", lambda w: _decode(w, **{"--source": w.root / "none.txt"}),
     ["--source", "none.txt", "no such file"]),
]



# --------------------------------------------------------------------------------------------
# More cases: every command's numeric options and paths, data files, the JSON files the commands
# read, checkpoints, sentencepiece models, treebanks
# --------------------------------------------------------------------------------------------
def _file(world: World, name: str, content: bytes) -> Path:
    path = world.root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return path


def _json(world: World, name: str, payload: object) -> Path:
    return _file(world, name, json.dumps(payload).encode())


def _table1(*options: str) -> Callable[[World], list]:
    return lambda w: ["--out-dir", w.root / "table1", "--lengths", "16", "--d-model", "16",
                      *options]


def _attention(world: World, *options) -> list:
    return ["--checkpoint", world.checkpoint, "--spm-model", world.spm, "--source", world.text,
            "--target", world.text, "--out-dir", world.root / "figures", *options]


def _manifest(world: World, payload: object) -> list:
    return ["--manifest", _json(world, "manifest/checkpoints.json", payload),
            "--out", world.root / "averaged.pt"]


def _summarize(world: World, dev: Path, test: Path | None = None) -> list:
    scores = _json(world, "scores/test.json", {"bleu": 1.0})
    return ["--dataset", "tiny", "--variant", "base", "--seed", "1", "--dev", dev,
            "--test", test or scores,
            "--out", world.root / "scores/summary.json"]


def _results_with(world: World, name: str, files: dict[str, bytes]) -> Path:
    """A results folder whose base variant's seed 1 holds ``files`` (paths under
    results/tiny/base/seed-1)."""
    results = world.root / f"results-{name}"
    for path, content in files.items():
        _file(world, f"results-{name}/tiny/base/seed-1/{path}", content)
    return results


def _tables(world: World, name: str, files: dict[str, bytes]) -> list:
    return ["--experiment", world.experiment, "--results", _results_with(world, name, files),
            "--out-dir", world.root / f"tables-{name}"]


def _encoded_with_meta(world: World, name: str, meta: bytes | None) -> Path:
    path = world.root / f"encoded-{name}"
    write_encoded(path, 120, [([5, 6], [7, 8])])
    if meta is None:
        (path / "meta.json").unlink()
    else:
        (path / "meta.json").write_bytes(meta)
    return path


def _encoded_cut_short(world: World) -> Path:
    path = _encoded_with_meta(world, "cut", (world.encoded / "meta.json").read_bytes())
    (path / "source.bin").write_bytes(b"")
    return path


def _crafted_pickle(world: World) -> Path:
    """A checkpoint-shaped zip whose pickle would run a command when unpickled unsafely."""
    marker = world.root / "pwned"

    class Exploit:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    path = world.root / "crafted.pt"
    with zipfile.ZipFile(path, "w") as bundle:
        bundle.writestr("crafted/data.pkl", pickle.dumps({"model": Exploit()}, protocol=2))
        bundle.writestr("crafted/version", "3\n")
    return path


def _prepare_with(world: World, name: str, archive: bytes, **source) -> list:
    """``prepare`` of a train split that is one downloaded file of bytes ``archive``."""
    source = {"name": name, "url": f"file:{name}.tgz", "source_member": "a.src",
              "target_member": "a.tgt"} | source
    experiment = _experiment(world.root / f"{name}.yaml", {"train": [source]})
    downloads = world.root / f"downloads-{name}"
    _file(world, f"downloads-{name}/{file_name(Source(**source))}", archive)
    return ["--experiment", experiment, "--split", "train", "--downloads", downloads,
            "--out-dir", world.root / f"data-{name}"]


def _random_text(lines: int, separator: str = " ") -> bytes:
    """``lines`` lines of random words (hardly compressible, so that half an archive of them
    holds half the text), each two words apart ``separator``."""
    words = random.Random(lines).choices(["alpha", "beta", "gamma", "delta", "eps"], k=4 * lines)
    return "".join(f"{a} {b}{separator}{c} {d}\n"
                   for a, b, c, d in zip(*[iter(words)] * 4, strict=True)).encode()


def _half(data: bytes) -> bytes:
    return data[: len(data) // 2]


def _gzip_of(text: bytes) -> bytes:
    return gzip.compress(text, mtime=0)


def _tgz_of(world: World, members: dict[str, bytes]) -> bytes:
    return write_tgz_bytes(world.root / "scratch.tgz", members).read_bytes()


def _evaluate_without_test_checkpoint(world: World) -> list:
    """``evaluate`` of two splits whose second lacks its --checkpoint."""
    split = ["--source", world.text, "--reference", world.text, "--encoded", world.encoded,
             "--translations", world.root / "hyp.txt", "--out", world.root / "scores.json"]
    return ["--experiment", world.experiment, "--variant", "base", "--spm-model", world.spm,
            "--results", world.root / "results",
            "--split", "dev", "--checkpoint-name", "last", "--checkpoint", world.checkpoint, *split,
            "--split", "test", "--checkpoint-name", "averaged", *split]


def _evaluate_one_split(world: World, folder: Path, encoded: Path) -> list:
    """``evaluate`` of the dev split: three lines, their own reference."""
    source = _lines(world, "three.txt", 3)
    return ["--experiment", world.experiment, "--variant", "base", "--spm-model", world.spm,
            "--results", folder / "results", "--split", "dev", "--checkpoint-name", "last",
            "--checkpoint", world.checkpoint, "--source", source, "--reference", source,
            "--encoded", encoded, "--translations", folder / "hyp.txt",
            "--out", folder / "scores.json"]


def test_evaluate_refuses_a_split_of_other_pieces_before_decoding_it(world, tmp_path):
    result = run_cli("evaluate", *_evaluate_one_split(world, tmp_path,
                                                      _encoded_with_other_pieces(world)),
                     cwd=world.root)
    assert_one_line_error(result, "evaluate", "encoded-other-pieces",
                          "another sentencepiece model", "model.pt")
    assert not (tmp_path / "hyp.txt").exists()


def test_evaluate_loads_a_checkpoint_once_and_writes_what_decode_and_score_write(
        world, tmp_path, monkeypatch):
    """In this process, to count the checkpoint's loads: one for the split, where ``decode``
    then ``score`` load it once each; the translations and the scores are theirs."""
    from reproduce import cli
    from reproduce.decoding import translate

    loads = []
    load_checkpoint = translate.load_checkpoint
    monkeypatch.setattr(translate, "load_checkpoint",
                        lambda path: loads.append(path) or load_checkpoint(path))
    threads = torch.get_num_threads()  # the commands set theirs
    try:
        cli.main(["evaluate", *map(str, _evaluate_one_split(world, tmp_path, world.encoded))])
        assert loads == [world.checkpoint]
        apart, source = tmp_path / "apart", world.root / "three.txt"
        cli.main(["decode", *map(str, [
            "--experiment", world.experiment, "--variant", "base", "--checkpoint",
            world.checkpoint, "--spm-model", world.spm, "--source", source,
            "--out", apart / "hyp.txt"])])
        cli.main(["score", *map(str, [
            "--experiment", world.experiment, "--variant", "base", "--split", "dev",
            "--checkpoint-name", "last", "--translations", apart / "hyp.txt",
            "--reference", source, "--checkpoint", world.checkpoint,
            "--encoded", world.encoded, "--results", apart / "results",
            "--out", apart / "scores.json"])])
        assert len(loads) == 3
    finally:
        torch.set_num_threads(threads)
    assert (tmp_path / "hyp.txt").read_text() == (apart / "hyp.txt").read_text()
    assert json.loads((tmp_path / "scores.json").read_text()) == \
        json.loads((apart / "scores.json").read_text())


MORE_CASES = [
    # evaluate's options, given once per split
    ("evaluate-split-without-checkpoint", "evaluate", _evaluate_without_test_checkpoint,
     ["every --split takes each of its options once", "--split 2x", "--checkpoint 1x"]),
    # table1's options
    ("table1-min-run-time-nan", "table1", _table1("--min-run-time", "nan"),
     ["--min-run-time", "finite number of seconds", "nan"]),
    ("table1-min-run-time-infinite", "table1", _table1("--min-run-time", "inf"),
     ["--min-run-time", "inf"]),
    ("table1-min-run-time-negative", "table1", _table1("--min-run-time", "-1"),
     ["--min-run-time", "above 0, got -1"]),
    ("table1-min-run-time-not-a-number", "table1", _table1("--min-run-time", "soon"),
     ["--min-run-time", "'soon'"]),
    ("table1-lengths-zero", "table1", _table1("--lengths", "16,0"), ["--lengths", "positive"]),
    ("table1-d-model-not-multiple-of-8", "table1", lambda w: _table1()(w) + ["--d-model", "12"],
     ["--d-model 12", "multiple of 8"]),
    ("table1-kernel-even", "table1", _table1("--kernel", "4"), ["--kernel 4", "odd"]),
    ("table1-radius-negative", "table1", _table1("--radius", "-2"), ["--radius", "got -2"]),
    # attention's options and files
    ("attention-sentence-negative", "attention", lambda w: _attention(w, "--sentences", "-1"),
     ["--sentences", "0-based line numbers"]),
    ("attention-layer-zero", "attention", lambda w: _attention(w, "--layers", "0"),
     ["--layers", "1-based layer numbers"]),
    ("attention-layer-beyond-the-model", "attention", lambda w: _attention(w, "--layers", "3"),
     ["model.pt", "layers 1..1", "got [3]"]),
    ("attention-sentence-beyond-the-file", "attention",
     lambda w: _attention(w, "--sentences", "100000"),
     ["train.src", "has 400 lines", "[100000] are out of range"]),
    ("attention-results-without-run", "attention",
     lambda w: _attention(w, "--results", w.root / "results"),
     ["--results needs --dataset, --variant and --seed"]),
    ("attention-source-missing", "attention",
     lambda w: _attention(w)[:4] + ["--source", w.root / "none.txt"] + _attention(w)[6:],
     ["none.txt"]),
    # average's options and its manifest (train/checkpoints.json)
    ("average-every-steps-0", "average", lambda w: _average(w, "2") + ["--every-steps", "0"],
     ["--every-steps", "got 0"]),
    ("average-dir-without-last", "average",
     lambda w: ["--checkpoint-dir", w.mixed_checkpoints, "--out", w.root / "averaged.pt"],
     ["--checkpoint-dir needs --last"]),
    ("average-empty-dir", "average", lambda w: _average(w, "1", _file(w, "none/.keep", b"").parent),
     ["none", "0 checkpoints"]),
    ("average-out-is-a-directory", "average",
     lambda w: _average(w, "1")[:-1] + [w.root], ["--out", "is a directory"]),
    ("average-manifest-not-json", "average",
     lambda w: ["--manifest", _file(w, "manifest/bad.json", b"{not json"), "--out",
                w.root / "averaged.pt"], ["bad.json", "not a checkpoint manifest"]),
    ("average-manifest-a-list", "average", lambda w: _manifest(w, [1, 2]),
     ["checkpoints.json", "not a checkpoint manifest"]),
    ("average-manifest-missing-keys", "average",
     lambda w: _manifest(w, {"checkpoint_dir": ".", "checkpoints": [{"file": "a.pt"}]}),
     ["checkpoints.json", "not a checkpoint manifest", "'step'"]),
    ("average-manifest-lists-nothing", "average",
     lambda w: _manifest(w, {"checkpoint_dir": ".", "checkpoints": []}),
     ["checkpoints.json", "lists no checkpoints"]),
    # decode's paths and source text
    ("decode-out-is-a-directory", "decode", lambda w: _decode(w, **{"--out": w.root}),
     ["--out", "is a directory"]),
    ("decode-spm-model-is-a-directory", "decode", lambda w: _decode(w, **{"--spm-model": w.root}),
     ["--spm-model", "is a directory"]),
    ("decode-checkpoint-of-another-variant", "decode",
     lambda w: _decode(w, **{"--checkpoint": w.learned_checkpoint}),
     ["learned.pt", "model.positional"]),
    ("decode-crafted-pickle-checkpoint", "decode",
     lambda w: _decode(w, **{"--checkpoint": _crafted_pickle(w)}), ["crafted.pt"]),
    ("decode-source-binary", "decode",
     lambda w: _decode(w, **{"--source": _file(w, "binary.txt", bytes(range(256)) * 4)}),
     ["binary.txt", "not UTF-8"]),
    # summarize's score files
    ("summarize-dev-not-json", "summarize",
     lambda w: _summarize(w, _file(w, "scores/dev.json", b"BLEU = 27.3")),
     ["dev.json", "not JSON"]),
    ("summarize-dev-a-list", "summarize", lambda w: _summarize(w, _json(w, "scores/list.json", [])),
     ["list.json", "expected a JSON object"]),
    ("summarize-test-missing", "summarize",
     lambda w: _summarize(w, _json(w, "scores/dev.json", {}), w.root / "none.json"),
     ["--test", "none.json", "no such file"]),
    ("summarize-dev-not-utf8", "summarize",
     lambda w: _summarize(w, _file(w, "scores/latin.json", b'{"n": "\xe4"}')),
     ["latin.json", "not UTF-8"]),
    # tables: what the finished variants wrote
    ("tables-summary-not-json", "tables",
     lambda w: _tables(w, "summary", {"train/summary.json": b"{\"steps\": "}),
     ["summary.json", "not valid JSON"]),
    ("tables-summary-a-list", "tables",
     lambda w: _tables(w, "list", {"train/summary.json": b"[]"}),
     ["summary.json", "expected a JSON object"]),
    ("tables-scores-not-json", "tables", lambda w: _tables(w, "bleu", {"bleu.json": b"\x00\x01"}),
     ["bleu.json"]),
    # score's files
    ("score-reference-missing", "score",
     lambda w: [w.root / "none.ref" if a == w.root / "ref.txt" else a for a in _score(w)],
     ["--reference", "none.ref", "no such file"]),
    ("score-encoded-meta-not-json", "score",
     lambda w: _score(w, 4, _encoded_with_meta(w, "metajunk", b"meta")),
     ["encoded-metajunk", "meta.json", "not JSON"]),
    ("score-encoded-meta-missing-keys", "score",
     lambda w: _score(w, 4, _encoded_with_meta(w, "metakeys", b"{}")),
     ["encoded-metakeys", "meta.json"]),
    ("score-encoded-tokens-cut-short", "score",
     lambda w: _score(w, 4, _encoded_cut_short(w)), ["encoded-cut", "source.bin", "cut short"]),
    ("score-encoded-meta-missing", "score",
     lambda w: _score(w, 4, _encoded_with_meta(w, "nometa", None)),
     ["encoded-nometa", "meta.json"]),
    # encode's text
    ("encode-line-counts-differ", "encode",
     lambda w: ["--spm-model", w.spm, "--source", _lines(w, "five.src", 5), "--target",
                _lines(w, "four.tgt", 4), "--out-dir", w.root / "enc"],
     ["five.src", "four.tgt", "same number of lines"]),
    ("encode-spm-model-empty", "encode",
     lambda w: ["--spm-model", _file(w, "empty.model", b""), "--source", w.text, "--target",
                w.text, "--out-dir", w.root / "enc"], ["empty.model", "not a sentencepiece model"]),
    # train's options
    ("train-slurm-not-name-value", "train", lambda w: _train(w) + ["--slurm", "gpu"],
     ["--slurm 'gpu'", "name=value"]),
    ("train-slurm-unknown-resource", "train", lambda w: _train(w) + ["--slurm", "gpus=2"],
     ["Slurm request", "gpus"]),
    ("train-dev-data-not-a-folder", "train", lambda w: _train(w, **{"--dev-data": w.text}),
     ["--dev-data", "no such directory"]),
    ("train-bpe-vocabulary-below-specials", "train-bpe",
     lambda w: ["--experiment", _bad_experiment(w, lambda raw: raw["bpe"].update(vocab_size=3)),
                "--source", w.text, "--target", w.text, "--model-prefix", w.root / "bpe/tiny"],
     ["bpe.vocab_size=3"]),
    ("train-bpe-source-binary", "train-bpe",
     lambda w: ["--experiment", w.experiment, "--source", _file(w, "bin.src", b"\xff\xfe" * 50),
                "--target", w.text, "--model-prefix", w.root / "bpe/bin"],
     ["bin.src", "not UTF-8"]),
    # download
    ("download-out-dir-is-a-file", "download",
     lambda w: _download(w, "right")[:-1] + [w.text], ["train.src"]),
    # prepare's archives and corpus files
    ("prepare-tgz-truncated", "prepare",
     lambda w: _prepare_with(w, "cut", _half(_tgz_of(w, {"a.src": _random_text(500),
                                                         "a.tgt": _random_text(500)}))),
     ["cut.tgz", "damaged or cut short"]),
    ("prepare-tgz-not-an-archive", "prepare",
     lambda w: _prepare_with(w, "notar", b"<html>503 Service Unavailable</html>\n"),
     ["notar"]),
    ("prepare-gz-truncated", "prepare",
     lambda w: _prepare_with(w, "gzcut", _half(_gzip_of(_random_text(500, "\t"))),
                             url="file:gzcut.gz", format="tsv", source_member=None,
                             target_member=None),
     ["gzcut.gz", "damaged or cut short"]),
    ("prepare-tsv-one-column", "prepare",
     lambda w: _prepare_with(w, "tsv", _tgz_of(w, {"a.tsv": b"only one column\n"}),
                             format="tsv", source_member="a.tsv", target_member=None),
     ["a.tsv", "line 1"]),
    ("prepare-sgm-malformed", "prepare",
     lambda w: _prepare_with(w, "sgm", _tgz_of(w, {"a.src": b"<srcset><doc><seg id=1>a b\n",
                                                   "a.tgt": b"<refset><doc><seg id=1>x</seg>\n"}),
                             format="sgm"),
     ["a.src"]),
    ("prepare-ptb-unbalanced-brackets", "prepare",
     lambda w: _prepare_treebank(w, "unbalanced", {"wsj/02/a.mrg": b"( (S (NP (NN a)) )\n"}),
     ["member wsj/02/a.mrg", "line 1"]),
    ("prepare-ptb-empty-tree", "prepare",
     lambda w: _prepare_treebank(w, "emptytree", {"wsj/02/a.mrg": b"( )\n"}),
     ["member wsj/02/a.mrg", "line 1"]),
    # references
    ("references-source-lines-missing", "references",
     lambda w: ["--experiment", w.experiment, "--split", "dev", "--downloads", w.root,
                "--source-lines", w.root / "none.src", "--out", w.root / "dev.ref"],
     ["--source-lines", "none.src", "no such file"]),
    # the tiny archives' writers
    ("make-tiny-corpus-out-is-a-directory", "make-tiny-corpus", lambda w: ["--out", w.root],
     ["--out", "is a directory"]),
]
CASES += MORE_CASES

@pytest.mark.parametrize("command, arguments, named", [case[1:] for case in CASES],
                         ids=[case[0] for case in CASES])
def test_bad_input_is_one_clear_line(world, command, arguments, named):
    result = run_cli(command, *arguments(world), cwd=world.root)
    line = assert_one_line_error(result, command, *named)
    assert SECRET not in result.stderr and SECRET not in line
    assert not (world.root / "pwned").exists()  # no checkpoint ran the code it carried


def test_verbose_shows_the_traceback_as_well(world):
    result = run_cli("--verbose", "decode", *_decode(world, **{"--spm-model": world.other_spm}),
                     cwd=world.root)
    assert result.returncode != 0
    assert "Traceback" in result.stderr
    assert result.stderr.rstrip("\n").splitlines()[-1].startswith("reproduce decode: error: ")


def test_a_line_over_the_bound_is_refused_before_any_decoding(world):
    """The refusal is decode's only word: not one progress line (logged after every sentence
    here), no translations written; the same file decodes under a bound that covers its line."""
    source, out = _thirty_words(world), world.root / "thirty.out"
    refused = run_cli("decode", *_decode(world, **{"--experiment": _bounded(world, 20),
                                                  "--source": source, "--out": out}),
                      cwd=world.root, env={"REPRODUCE_PROGRESS_SECONDS": "0"})
    line = assert_one_line_error(refused, "decode", "thirty.txt line 2")
    assert refused.stdout == "" and refused.stderr == line + "\n"
    assert not out.exists()
    decoded = run_cli("decode", *_decode(world, **{"--experiment": _bounded(world, 64),
                                                  "--source": source, "--out": out}),
                      cwd=world.root, env={"REPRODUCE_PROGRESS_SECONDS": "0"})
    assert decoded.returncode == 0, decoded.stderr
    assert "decode " in decoded.stderr  # its progress lines, which the refusal never reached
    assert out.read_text().count("\n") == 2


DEV_TRANSLATIONS = "results/tiny/base/seed-1/translations/dev.last.txt"


def _decode_workflow(world: World, folder: Path, max_source_pieces: int) -> Path:
    """A copy of the workflow whose evaluate rule's inputs are there: the world's experiment (with
    ``max_source_pieces``), sentencepiece model and a checkpoint of it (as the last and the
    averaged weights), dev and test sources whose second line has 30 words (their own
    references), and the world's encoded split as both encoded splits."""
    workdir = copy_workflow(folder)
    experiment = shutil.copy(_bounded(world, max_source_pieces), workdir / "configs/tiny.yaml")
    (workdir / "pipeline.yaml").write_text(yaml.safe_dump(
        {"experiments": ["configs/tiny.yaml"], "results": "results",
         "training": {"launcher": "inline", "tasks": 1, "threads": 1}}))
    dataset = workdir / "results/tiny"
    placed = {"bpe/spm.model": world.spm}
    for split in ("dev", "test"):
        placed |= {f"data/{split}.src": _thirty_words(world),
                   f"data/{split}.ref": _thirty_words(world)}
    for name, source in placed.items():
        (dataset / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, dataset / name)
    for split in ("dev", "test"):
        shutil.copytree(world.encoded, dataset / f"encoded/{split}")
    for weights in ("train/final.pt", "averaged.pt"):
        _checkpoint(dataset / "base/seed-1" / weights, 120, 16, 10, _trained_with(experiment),
                    world.spm)
    return workdir


def _snakemake_decode(workdir: Path, *options: str) -> subprocess.CompletedProcess:
    """Snakemake asked for the dev translations, with the evaluate rule alone allowed to run."""
    return subprocess.run(
        [str(Path(sys.executable).with_name("snakemake")), "--cores", "1",
         "--configfile=pipeline.yaml", "--allowed-rules", "evaluate", *options, "--",
         DEV_TRANSLATIONS], cwd=workdir, capture_output=True, text=True, timeout=300,
        env={key: value for key, value in os.environ.items() if key != "MLFLOW_TRACKING_URI"}
        | {"PYTHONPATH": str(ROOT), "REPRODUCE_PROGRESS_SECONDS": "0"})


def test_the_evaluate_rule_logs_the_refusal_as_its_one_line(world, tmp_path):
    """Snakemake's evaluate rule decodes through the same code: the job fails, and its log holds
    the refusal alone, before any decoding, with no translations written."""
    workdir = _decode_workflow(world, tmp_path, 20)
    result = _snakemake_decode(workdir)
    assert result.returncode != 0, result.stdout[-3000:] + result.stderr[-3000:]
    log = (workdir / "results/logs/tiny/evaluate_base_seed1.log").read_text()
    assert log.startswith("reproduce evaluate: error: ") and log.count("\n") == 1, log
    assert "data/dev.src line 2" in log and "decoding.max_source_pieces=20" in log
    assert not (workdir / DEV_TRANSLATIONS).exists()


def test_an_edited_bound_replans_no_decoding(world, tmp_path):
    """The bound changes no translation, nor does how often beam search reads which sentences
    are done, so unlike the beam size or a batch size neither is among the evaluate rule's
    params: translations made under one value stay when it is edited."""
    workdir = _decode_workflow(world, tmp_path, 64)
    decoded = _snakemake_decode(workdir)
    assert decoded.returncode == 0, decoded.stdout[-3000:] + decoded.stderr[-3000:]
    assert (workdir / DEV_TRANSLATIONS).read_text().count("\n") == 2
    experiment = workdir / "configs/tiny.yaml"
    decoded_with = experiment.read_text()
    for edit, replanned in (({"max_source_pieces": 40}, False), ({"check_every": 4}, False),
                            ({"beam_size": 2}, True), ({"max_tokens_per_batch": 1000}, True),
                            ({"precision": "bf16"}, True)):
        raw = yaml.safe_load(decoded_with)
        raw["decoding"].update(edit)
        experiment.write_text(yaml.safe_dump(raw))
        planned = _snakemake_decode(workdir, "--dry-run")
        output = planned.stdout + planned.stderr
        assert planned.returncode == 0, output[-3000:]
        assert (re.search(r"^evaluate\s+1$", output, re.MULTILINE) is not None) == replanned, (
            edit, output[-3000:])


# --------------------------------------------------------------------------------------------
# The MLflow store named by MLFLOW_TRACKING_URI
# --------------------------------------------------------------------------------------------
TRACKING_CASES = [
    ("tracking-uri-unknown-scheme", f"ftp://user:{SECRET}@example.org/mlflow",
     ["MLFLOW_TRACKING_URI=ftp://***@example.org/mlflow", "no store of scheme 'ftp'"]),
    ("tracking-uri-sqlite-names-no-file", "sqlite:///", ["MLFLOW_TRACKING_URI=sqlite:///",
                                                         "names no database file"]),
    ("tracking-server-address-without-port-number", "http://127.0.0.1:mlflow",
     ["MLFLOW_TRACKING_URI=http://127.0.0.1:mlflow", "not a server address"]),
]


@pytest.mark.parametrize("uri, named", [case[1:] for case in TRACKING_CASES],
                         ids=[case[0] for case in TRACKING_CASES])
def test_bad_input_is_one_clear_line_of_tracking(world, uri, named):
    result = run_cli("init-tracking", "--results", world.root / "results", cwd=world.root,
                     env={"MLFLOW_TRACKING_URI": uri})
    line = assert_one_line_error(result, "init-tracking", *named)
    assert SECRET not in result.stderr and SECRET not in line


# --------------------------------------------------------------------------------------------
# Odd input handled correctly: (id, command, arguments, check of the result)
# --------------------------------------------------------------------------------------------
def _ran(result: subprocess.CompletedProcess) -> None:
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr


def _odd_line_breaks(world: World) -> list:
    source = world.root / "odd.txt"
    odd = ["form\ffeed", "vertical\vtab", "line\u2028separator", "para\u2029graph", "next\x85line"]
    source.write_text("".join(line + "\n" for line in odd), encoding="utf-8")
    return _decode(world, **{"--source": source, "--out": world.root / "odd.out"})


def _five_translations(world: World, result: subprocess.CompletedProcess) -> None:
    _ran(result)
    assert (world.root / "odd.out").read_bytes().count(b"\n") == 5


def _empty_translations(world: World, result: subprocess.CompletedProcess) -> None:
    _ran(result)
    assert (world.root / "empty.out").read_bytes() == b""


def _crlf_source(world: World) -> list:
    lf = _file(world, "lf.txt", b"a b\nb a a\n")
    assert run_cli("decode", *_decode(world, **{"--source": lf, "--out": world.root / "lf.out"}),
                   cwd=world.root).returncode == 0
    crlf = _file(world, "crlf.txt", b"a b\r\nb a a\r\n")
    return _decode(world, **{"--source": crlf, "--out": world.root / "crlf.out"})


def _same_as_lf(world: World, result: subprocess.CompletedProcess) -> None:
    _ran(result)
    crlf = (world.root / "crlf.out").read_bytes()
    assert b"\r" not in crlf and crlf == (world.root / "lf.out").read_bytes()
    assert crlf.count(b"\n") == 2


def _written_in_new_folder(world: World, result: subprocess.CompletedProcess) -> None:
    _ran(result)
    assert (world.root / "new/folder/out.txt").read_bytes().count(b"\n") == 2


PAIRS = 120  # above the experiments' data.min_pairs (100)


def _prepared(name: str) -> Callable[[World, subprocess.CompletedProcess], None]:
    """The prepared train split holds the PAIRS pairs, without a carriage return."""
    def check(world: World, result: subprocess.CompletedProcess) -> None:
        _ran(result)
        source = (world.root / f"data-{name}/train.src").read_bytes()
        target = (world.root / f"data-{name}/train.tgt").read_bytes()
        assert source.splitlines() == [f"s{i} a".encode() for i in range(PAIRS)]
        assert target.splitlines() == [f"t{i} b".encode() for i in range(PAIRS)]
        assert b"\r" not in source + target
    return check


def _pairs(side: str, end: str = "\n") -> bytes:
    return "".join(f"{side}{i} {'a' if side == 's' else 'b'}{end}" for i in range(PAIRS)).encode()


def _tsv_rows() -> bytes:
    return b"".join(s + b"\t" + t + b"\n" for s, t in zip(_pairs("s").splitlines(),
                                                          _pairs("t").splitlines(), strict=True))


OLD_SUMMARY = {"dataset": "tiny", "variant": "base", "steps": 10, "parameters": 123}


def _old_summary(world: World) -> list:
    """A finished base variant whose summary records no settings (written by hand, or cut)."""
    results = _results_with(world, "old", {
        "train/summary.json": json.dumps(OLD_SUMMARY).encode(),
        "bleu.json": json.dumps({"dev": {"tokenized_bleu": 12.5, "perplexity": 3.0},
                                 "test": {"tokenized_bleu": 11.0, "perplexity": 3.5}}).encode()})
    return ["--experiment", world.experiment, "--results", results, "--out-dir",
            world.root / "tables-old"]


def _not_recorded_not_shown(world: World, result: subprocess.CompletedProcess) -> None:
    _ran(result)
    row = next(row for row in csv.DictReader((world.root / "tables-old/table3.csv").open())
               if row["variant"] == "base")
    assert "seed 1: stale: trained with other settings (" in row["status"]  # seed 2: not started
    assert "model.d_model: '(absent)' -> 16" in row["status"]
    assert row["BLEU (dev)"] == row["PPL (dev)"] == row["params x10^6"] == ""
    base = world.root / "results-old/tiny/base/seed-1"
    assert json.loads((base / "train/summary.json").read_text()) == OLD_SUMMARY  # left as it is
    assert (base / "bleu.json").exists()


def _nothing_yet(world: World, result: subprocess.CompletedProcess) -> None:
    _ran(result)
    rows = list(csv.DictReader((world.root / "tables-none/table3.csv").open()))
    assert {row["status"] for row in rows} == {"pending: not started"} and len(rows) == 5


def _downloaded(world: World, result: subprocess.CompletedProcess) -> None:
    _ran(result)
    [file] = (world.root / "new-downloads/deeper").glob("corpus.tgz.*")
    assert file.read_bytes() == (world.root / "served/corpus.tgz").read_bytes()


def _averaged_in_new_folder(world: World, result: subprocess.CompletedProcess) -> None:
    _ran(result)
    averaged = torch.load(world.root / "new-average/a.pt", weights_only=True)
    original = torch.load(world.mixed_checkpoints / "step_00000020.pt", weights_only=True)
    assert averaged["model"].keys() == original["model"].keys()
    assert all(torch.equal(averaged["model"][name], original["model"][name])
               for name in original["model"])


def _figures_of_seed_0(world: World) -> list:
    return _attention(world, "--out-dir", world.root / "figures-seed-0", "--results",
                      world.root / "results-seed-0", "--dataset", "tiny", "--variant", "base",
                      "--seed", "0")


def _logged_to_the_run_of_seed_0(world: World, result: subprocess.CompletedProcess) -> None:
    """--seed 0 names a seed (an integer >= 0), not a missing one: the figures are written and
    logged to the run of seed 0."""
    from mlflow.tracking import MlflowClient

    _ran(result)
    figures = sorted(path.name for path in (world.root / "figures-seed-0").iterdir())
    assert figures
    client = MlflowClient(f"sqlite:///{world.root / 'results-seed-0/mlflow.db'}")
    [run] = client.search_runs([client.get_experiment_by_name("tiny").experiment_id])
    assert run.data.tags["seed"] == "0"
    assert sorted(Path(item.path).name
                  for item in client.list_artifacts(run.info.run_id, "figures")) == figures


HANDLED_CASES = [
    ("decode-source-odd-line-breaks", "decode", _odd_line_breaks, _five_translations),
    ("decode-source-empty", "decode",
     lambda w: _decode(w, **{"--source": _lines(w, "empty.txt", 0),
                             "--out": w.root / "empty.out"}), _empty_translations),
    ("decode-source-crlf", "decode", _crlf_source, _same_as_lf),
    ("decode-out-in-missing-folder", "decode",
     lambda w: _decode(w, **{"--source": _lines(w, "two.txt", 2),
                             "--out": w.root / "new/folder/out.txt"}), _written_in_new_folder),
    ("prepare-plain-gz-source", "prepare",
     lambda w: _prepare_with(w, "plaingz", _gzip_of(_tsv_rows()), url="file:plaingz.gz",
                             format="tsv", source_member=None, target_member=None),
     _prepared("plaingz")),
    ("prepare-crlf-line-ends", "prepare",
     lambda w: _prepare_with(w, "crlf", _tgz_of(w, {"a.src": _pairs("s", "\r\n"),
                                                    "a.tgt": _pairs("t", "\r\n")})),
     _prepared("crlf")),
    ("tables-summary-without-settings", "tables", _old_summary, _not_recorded_not_shown),
    ("tables-nothing-finished-yet", "tables",
     lambda w: ["--experiment", w.experiment, "--results", w.root / "results-none",
                "--out-dir", w.root / "tables-none"], _nothing_yet),
    ("attention-seed-0-logs-to-its-run", "attention", _figures_of_seed_0,
     _logged_to_the_run_of_seed_0),
    ("download-out-dir-missing", "download",
     lambda w: _download(w, "right")[:-1] + [w.root / "new-downloads/deeper"], _downloaded),
    ("average-out-in-missing-folder", "average",
     lambda w: ["--checkpoint-dir", w.mixed_checkpoints, "--last", "1", "--out",
                w.root / "new-average/a.pt"], _averaged_in_new_folder),
]


@pytest.mark.parametrize("command, arguments, check", [case[1:] for case in HANDLED_CASES],
                         ids=[case[0] for case in HANDLED_CASES])
def test_bad_input_is_handled_correctly(world, command, arguments, check):
    check(world, run_cli(command, *arguments(world), cwd=world.root))
