"""Data commands: download the sources, prepare the splits and their references, train the BPE
model and encode; and regenerate the tiny archives the test experiments use."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from reproduce.commands.arguments import (
    add_command, add_experiment, add_threads, existing_dir, existing_file, output_file,
    usable_cores,
)
from reproduce.commands import experiment_of
from reproduce.config import ConfigError

log = logging.getLogger("reproduce")


def _download(commands: argparse._SubParsersAction) -> None:
    sub = add_command(commands, "download", cmd_download, "download one source of an experiment")
    add_experiment(sub)
    sub.add_argument("--split", required=True, choices=["train", "dev", "test"],
                     help="the split that lists the source")
    sub.add_argument("--source", required=True, help="the source's name in the experiment")
    sub.add_argument("--out-dir", required=True, help="folder of downloads")


def cmd_download(args: argparse.Namespace) -> None:
    from reproduce.data.download import download_source

    experiment = experiment_of(args)
    sources = {source.name: source for source in getattr(experiment.data, args.split)}
    if args.source not in sources:
        raise ConfigError(
            f"{args.experiment}: data.{args.split} has no source named {args.source!r}"
            f" (known: {', '.join(sources)})"
        )
    mirror = Path(experiment.data.mirror_dir) if experiment.data.mirror_dir else None
    download_source(sources[args.source], Path(args.out_dir), mirror_dir=mirror,
                    limits=experiment.data.download)


def _prepare(commands: argparse._SubParsersAction) -> None:
    sub = add_command(commands, "prepare", cmd_prepare, "extract, normalise and clean one split")
    add_experiment(sub)
    sub.add_argument("--split", required=True, choices=["train", "dev", "test"],
                     help="the split to prepare")
    sub.add_argument("--downloads", required=True, type=existing_dir,
                     help="folder of downloaded archives")
    sub.add_argument("--out-dir", required=True, help="folder for <split>.src/.tgt/.report.json")


def cmd_prepare(args: argparse.Namespace) -> None:
    from reproduce.data.prepare import prepare_split

    experiment = experiment_of(args)
    prepare_split(
        sources=getattr(experiment.data, args.split),
        split=args.split,
        download_dir=Path(args.downloads),
        out_dir=Path(args.out_dir),
        cleaning=experiment.data.cleaning,
        min_pairs=experiment.data.min_pairs,
    )


def _references(commands: argparse._SubParsersAction) -> None:
    sub = add_command(commands, "references", cmd_references,
                      "the official dev/test references, as sacreBLEU reads them")
    add_experiment(sub)
    sub.add_argument("--split", required=True, choices=["dev", "test"], help="dev or test")
    sub.add_argument("--downloads", required=True, type=existing_dir,
                     help="folder of downloaded archives")
    sub.add_argument("--source-lines", required=True, type=existing_file,
                     help="the prepared source side of the split (one reference per line of it)")
    sub.add_argument("--out", required=True, type=output_file,
                     help="the references file to write (<split>.ref)")


def cmd_references(args: argparse.Namespace) -> None:
    from reproduce.data.references import write_references

    experiment = experiment_of(args)
    with open(args.source_lines, encoding="utf-8", newline="\n") as prepared_source:
        expected = sum(1 for _ in prepared_source)
    count = write_references(getattr(experiment.data, args.split), Path(args.downloads),
                             Path(args.out), expected_lines=expected)
    log.info("%s: %d official references", args.out, count)


def _train_bpe(commands: argparse._SubParsersAction) -> None:
    sub = add_command(commands, "train-bpe", cmd_train_bpe,
                      "train the shared sentencepiece BPE model")
    add_experiment(sub)
    sub.add_argument("--source", required=True, type=existing_file,
                     help="prepared source side of the train split")
    sub.add_argument("--target", required=True, type=existing_file,
                     help="prepared target side of the train split")
    sub.add_argument("--model-prefix", required=True,
                     help="writes <prefix>.model and <prefix>.vocab")
    add_threads(sub, default=usable_cores())


def cmd_train_bpe(args: argparse.Namespace) -> None:
    from reproduce.data.bpe import train_sentencepiece

    experiment = experiment_of(args)
    train_sentencepiece(
        Path(args.source), Path(args.target), experiment.bpe, Path(args.model_prefix),
        args.threads,
    )


def _encode(commands: argparse._SubParsersAction) -> None:
    sub = add_command(commands, "encode", cmd_encode, "encode a split into binarized token ids")
    sub.add_argument("--spm-model", required=True, type=existing_file,
                     help="sentencepiece model (spm.model)")
    sub.add_argument("--source", required=True, type=existing_file, help="prepared source side")
    sub.add_argument("--target", required=True, type=existing_file, help="prepared target side")
    sub.add_argument("--out-dir", required=True, help="folder of the encoded split")
    add_threads(sub, default=usable_cores())


def cmd_encode(args: argparse.Namespace) -> None:
    from reproduce.data.bpe import encode_split

    encode_split(Path(args.spm_model), Path(args.source), Path(args.target), Path(args.out_dir),
                 args.threads)


def _make_tiny_corpus(commands: argparse._SubParsersAction) -> None:
    sub = add_command(commands, "make-tiny-corpus", cmd_make_tiny_corpus,
                      "regenerate the tiny corpus archive")
    sub.add_argument("--out", required=True, type=output_file,
                     help="the .tgz to write (configs/data/tiny_corpus.tgz)")


def cmd_make_tiny_corpus(args: argparse.Namespace) -> None:
    from reproduce.data.tiny_corpus import write_tiny_corpus_archive

    write_tiny_corpus_archive(Path(args.out))


def _make_tiny_treebank(commands: argparse._SubParsersAction) -> None:
    sub = add_command(commands, "make-tiny-treebank", cmd_make_tiny_treebank,
                      "regenerate the tiny treebank archive (parsing, section 6.3)")
    sub.add_argument("--out", required=True, type=output_file,
                     help="the .tgz to write (configs/data/tiny_treebank.tgz)")


def cmd_make_tiny_treebank(args: argparse.Namespace) -> None:
    from reproduce.data.tiny_treebank import write_tiny_treebank_archive

    write_tiny_treebank_archive(Path(args.out))


def register(commands: argparse._SubParsersAction) -> None:
    """Add the data commands, in the order the pipeline runs them."""
    for add in (_download, _prepare, _references, _train_bpe, _encode, _make_tiny_corpus,
                _make_tiny_treebank):
        add(commands)
