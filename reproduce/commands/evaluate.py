"""Evaluation commands: translate with a checkpoint, score the translations (each alone, or both
for several splits in one process, as the pipeline evaluates a training), and merge a variant's
dev and test scores."""

from __future__ import annotations

import argparse
from pathlib import Path

from reproduce.commands.arguments import (
    add_command, add_experiment, add_seed, add_threads, add_variant, checkpoint_file, existing_dir,
    existing_file, output_file, seed_number,
)
from reproduce.commands import experiment_of, set_threads, variant_of
from reproduce.errors import DataError, UsageError
from reproduce.files import read_json, write_json


def _decode(commands: argparse._SubParsersAction) -> None:
    sub = add_command(commands, "decode", cmd_decode, "beam-search translation of a source file")
    add_experiment(sub)
    add_variant(sub, help="variant whose decoding settings apply")
    add_seed(sub)
    sub.add_argument("--checkpoint", required=True, type=checkpoint_file,
                     help="checkpoint to translate with (final.pt or averaged.pt)")
    sub.add_argument("--spm-model", required=True, type=existing_file,
                     help="sentencepiece model of the checkpoint's dataset")
    sub.add_argument("--source", required=True, type=existing_file,
                     help="UTF-8 text, one sentence per line")
    sub.add_argument("--out", required=True, type=output_file,
                     help="translations, one line per source line")
    add_threads(sub)


def cmd_decode(args: argparse.Namespace) -> None:
    experiment = experiment_of(args)
    variant = variant_of(experiment, args)
    from reproduce.provenance import trained_settings
    from reproduce.decoding.translate import translate_file

    set_threads(args.threads)
    translate_file(
        checkpoint=Path(args.checkpoint),
        spm_model=Path(args.spm_model),
        source=Path(args.source),
        out=Path(args.out),
        decoding=variant.decoding,
        expected_settings=trained_settings(variant, experiment),
    )


def _score(commands: argparse._SubParsersAction) -> None:
    sub = add_command(commands, "score", cmd_score,
                      "BLEU (sacreBLEU and tokenized) or, for parsing, labelled-bracket F1 (and "
                      "the repaired trees beside --out); and perplexity")
    add_experiment(sub)
    add_variant(sub)
    add_seed(sub)
    sub.add_argument("--split", required=True, choices=["dev", "test"], help="the split scored")
    sub.add_argument("--checkpoint-name", required=True, choices=["last", "averaged"],
                     help="which checkpoint the translations came from")
    sub.add_argument("--translations", required=True, type=existing_file,
                     help="hypotheses, one per line")
    sub.add_argument("--reference", required=True, type=existing_file,
                     help="references (parsing: gold trees), one per line")
    sub.add_argument("--source", type=existing_file,
                     help="the input sentences, one per line (parsing: the words of each tree)")
    sub.add_argument("--checkpoint", required=True, type=checkpoint_file,
                     help="checkpoint whose perplexity is measured")
    sub.add_argument("--encoded", required=True, type=existing_dir,
                     help="encoded split for perplexity")
    sub.add_argument("--results", required=True, help="results root (holds the MLflow store)")
    sub.add_argument("--out", required=True, type=output_file,
                     help="scores JSON to write")
    add_threads(sub)


def cmd_score(args: argparse.Namespace) -> None:
    experiment = experiment_of(args)
    variant = variant_of(experiment, args)  # refused before torch is imported
    from reproduce.scoring.scores import score_split

    set_threads(args.threads)
    score_split(experiment, variant, args.split, args.checkpoint_name,
                translations=Path(args.translations), reference=Path(args.reference),
                source=None if args.source is None else Path(args.source),
                checkpoint=Path(args.checkpoint), encoded=Path(args.encoded),
                results=Path(args.results), out=Path(args.out))


# The options of `evaluate` given once per evaluated split, in the order of its --split options.
PER_SPLIT = {
    "split": dict(choices=["dev", "test"], help="a split to evaluate: its options follow"),
    "checkpoint_name": dict(choices=["last", "averaged"], help="which checkpoint it is"),
    "checkpoint": dict(type=checkpoint_file, help="checkpoint to translate with"),
    "source": dict(type=existing_file, help="the split's input sentences, one per line"),
    "reference": dict(type=existing_file, help="its references (parsing: gold trees)"),
    "encoded": dict(type=existing_dir, help="its encoded form, for perplexity"),
    "translations": dict(type=output_file, help="translations to write"),
    "out": dict(type=output_file, help="scores JSON to write"),
}


def _evaluate(commands: argparse._SubParsersAction) -> None:
    sub = add_command(commands, "evaluate", cmd_evaluate,
                      "decode, then score, one split after another in one process (what `decode` "
                      "and `score` do, without a process and its imports for each): --split "
                      "starts a split's options, each given once per split")
    add_experiment(sub)
    add_variant(sub, help="variant whose decoding settings apply")
    add_seed(sub)
    sub.add_argument("--spm-model", required=True, type=existing_file,
                     help="sentencepiece model of the checkpoints' dataset")
    sub.add_argument("--results", required=True, help="results root (holds the MLflow store)")
    add_threads(sub)
    split = sub.add_argument_group("each split")
    for name, options in PER_SPLIT.items():
        split.add_argument(f"--{name.replace('_', '-')}", action="append", required=True,
                           **options)


def cmd_evaluate(args: argparse.Namespace) -> None:
    counts = {name: len(getattr(args, name)) for name in PER_SPLIT}
    if len(set(counts.values())) > 1:
        given = ", ".join(f"--{name.replace('_', '-')} {count}x" for name, count in counts.items())
        raise UsageError(f"every --split takes each of its options once: got {given}")
    experiment = experiment_of(args)
    variant = variant_of(experiment, args)  # refused before torch is imported
    from reproduce.data.bpe import load_sentencepiece
    from reproduce.data.encoded import EncodedCorpus
    from reproduce.decoding.translate import (decoding_device, load_model, sentencepiece_pieces,
                                              write_translations)
    from reproduce.provenance import Pieces, trained_settings
    from reproduce.scoring.scores import score_split

    set_threads(args.threads)
    expected_settings = trained_settings(variant, experiment)  # every split's checkpoint's
    processor, device = load_sentencepiece(Path(args.spm_model)), decoding_device()
    pieces = sentencepiece_pieces(Path(args.spm_model), processor)
    for number in range(counts["split"]):
        split = argparse.Namespace(**{name: getattr(args, name)[number] for name in PER_SPLIT})
        # loaded once for decoding and perplexity, checked against both files' pieces first
        model = load_model(split.checkpoint, device, expected_settings,
                           (pieces, Pieces.of_corpus(EncodedCorpus.open(split.encoded))))
        write_translations(model, processor, split.source, Path(split.translations),
                           variant.decoding, device)
        score_split(experiment, variant, split.split, split.checkpoint_name,
                    translations=Path(split.translations), reference=split.reference,
                    source=split.source, checkpoint=split.checkpoint, encoded=split.encoded,
                    results=Path(args.results), out=Path(split.out), model=model)


def _summarize(commands: argparse._SubParsersAction) -> None:
    sub = add_command(commands, "summarize", cmd_summarize,
                      "merge a variant's dev and test scores")
    sub.add_argument("--dataset", required=True, help="the experiment's name")
    add_variant(sub)
    sub.add_argument("--seed", required=True, type=seed_number, help="the training's seed")
    sub.add_argument("--dev", required=True, type=existing_file, help="dev scores JSON")
    sub.add_argument("--test", required=True, type=existing_file, help="test scores JSON")
    sub.add_argument("--out", required=True, type=output_file,
                     help="summary JSON to write")


def cmd_summarize(args: argparse.Namespace) -> None:
    summary = {
        "dataset": args.dataset,
        "variant": args.variant,
        "seed": args.seed,
        "dev": _scores(Path(args.dev)),
        "test": _scores(Path(args.test)),
    }
    write_json(Path(args.out), summary)


def _scores(path: Path) -> dict:
    """A split's scores as ``score`` wrote them: a JSON object (the tables read its keys)."""
    scores = read_json(path)
    if not isinstance(scores, dict):
        raise DataError(f"{path}: expected a JSON object of scores, as `reproduce score` writes, "
                        f"got a {type(scores).__name__}")
    return scores


def register(commands: argparse._SubParsersAction) -> None:
    """Add the evaluation commands, in the order the pipeline runs them."""
    for add in (_decode, _score, _evaluate, _summarize):
        add(commands)
