"""Command line of the package: one sub-command per pipeline stage (``python -m reproduce --help``).

Each command takes explicit input and output paths, so that the Snakemake rules (and users) call
the stages one by one. Heavy imports happen inside the commands to keep ``--help`` fast.

Every expected error (bad input, refused operation) ends the command with one line
``reproduce <command>: error: ...`` naming the file or field and a non-zero exit status; the
traceback is shown only with ``--verbose``. Arguments are checked by their argparse types before
any work starts; errors raised later are mapped to that line in one place, :func:`main`.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import logging
import sys
import traceback
import zipfile
from pathlib import Path

from reproduce.config import ConfigError, Experiment, ResolvedVariant, load_experiment
from reproduce.errors import ReproduceError, UsageError

log = logging.getLogger("reproduce")


def _experiment(args: argparse.Namespace) -> Experiment:
    return load_experiment(args.experiment)


def _variant(experiment: Experiment, args: argparse.Namespace) -> ResolvedVariant:
    if args.variant not in experiment.variants:
        raise ConfigError(
            f"--variant {args.variant!r}: not a variant of {args.experiment}; "
            f"known: {', '.join(experiment.variants)}"
        )
    return experiment.variant(args.variant)


def _write_json(path: Path, payload: dict) -> None:
    from reproduce.data.text import write_json

    write_json(path, payload)


def _set_threads(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)


# ------------------------------------------------------------------------------------------------
# Data
# ------------------------------------------------------------------------------------------------
def cmd_download(args: argparse.Namespace) -> None:
    from reproduce.data.download import download_source

    experiment = _experiment(args)
    sources = {source.name: source for source in getattr(experiment.data, args.split)}
    if args.source not in sources:
        raise ConfigError(
            f"{args.experiment}: data.{args.split} has no source named {args.source!r}"
            f" (known: {', '.join(sources)})"
        )
    mirror = Path(experiment.data.mirror_dir) if experiment.data.mirror_dir else None
    download_source(sources[args.source], Path(args.out_dir), mirror_dir=mirror,
                    limits=experiment.data.download)


def cmd_prepare(args: argparse.Namespace) -> None:
    from reproduce.data.prepare import prepare_split

    experiment = _experiment(args)
    prepare_split(
        sources=getattr(experiment.data, args.split),
        split=args.split,
        download_dir=Path(args.downloads),
        out_dir=Path(args.out_dir),
        cleaning=experiment.data.cleaning,
        min_pairs=experiment.data.min_pairs,
    )


def cmd_references(args: argparse.Namespace) -> None:
    from reproduce.data.references import write_references

    experiment = _experiment(args)
    with open(args.source_lines, encoding="utf-8", newline="\n") as prepared_source:
        expected = sum(1 for _ in prepared_source)
    count = write_references(getattr(experiment.data, args.split), Path(args.downloads),
                             Path(args.out), expected_lines=expected)
    log.info("%s: %d official references", args.out, count)


def cmd_train_bpe(args: argparse.Namespace) -> None:
    from reproduce.data.bpe import train_sentencepiece

    experiment = _experiment(args)
    train_sentencepiece(
        Path(args.source), Path(args.target), experiment.bpe, Path(args.model_prefix)
    )


def cmd_encode(args: argparse.Namespace) -> None:
    from reproduce.data.bpe import encode_split

    encode_split(Path(args.spm_model), Path(args.source), Path(args.target), Path(args.out_dir))


def cmd_make_tiny_corpus(args: argparse.Namespace) -> None:
    from reproduce.data.tiny_corpus import write_tiny_corpus_archive

    write_tiny_corpus_archive(Path(args.out))


def cmd_make_tiny_treebank(args: argparse.Namespace) -> None:
    from reproduce.data.tiny_treebank import write_tiny_treebank_archive

    write_tiny_treebank_archive(Path(args.out))


# ------------------------------------------------------------------------------------------------
# Training
# ------------------------------------------------------------------------------------------------
def cmd_init_tracking(args: argparse.Namespace) -> None:
    from reproduce.tracking import prepare_store, redact

    print(f"MLflow store: {redact(prepare_store(Path(args.results)))}", file=sys.stderr)


def cmd_train(args: argparse.Namespace) -> None:
    experiment = _experiment(args)
    variant = _variant(experiment, args)
    from reproduce.training.launch import launch_training
    from reproduce.training.slurm_request import parse_request

    slurm = parse_request(args.slurm)
    _set_threads(args.threads)
    launch_training(
        experiment=experiment,
        variant=variant,
        train_dir=Path(args.train_data),
        dev_dir=Path(args.dev_data),
        output_dir=Path(args.out_dir),
        results_dir=Path(args.results),
        launcher=args.launcher,
        tasks=args.tasks,
        slurm=slurm,
        threads=args.threads,
        restart=args.restart,
    )


def cmd_average(args: argparse.Namespace) -> None:
    from reproduce.averaging import average_last, average_manifest

    if args.manifest is not None:
        average_manifest(Path(args.manifest), args.last, Path(args.out))
    elif args.last is None:
        raise UsageError("--checkpoint-dir needs --last (how many checkpoints to average)")
    else:
        average_last(Path(args.checkpoint_dir), args.last, Path(args.out), args.every_steps)


# ------------------------------------------------------------------------------------------------
# Evaluation
# ------------------------------------------------------------------------------------------------
def cmd_decode(args: argparse.Namespace) -> None:
    experiment = _experiment(args)
    variant = _variant(experiment, args)
    from reproduce.config import trained_settings
    from reproduce.decoding.translate import translate_file

    _set_threads(args.threads)
    translate_file(
        checkpoint=Path(args.checkpoint),
        spm_model=Path(args.spm_model),
        source=Path(args.source),
        out=Path(args.out),
        decoding=variant.decoding,
        expected_settings=trained_settings(variant, experiment),
    )


def cmd_score(args: argparse.Namespace) -> None:
    experiment = _experiment(args)
    _variant(experiment, args)
    from reproduce.scoring.scores import score_split

    _set_threads(args.threads)
    score_split(experiment, args.variant, args.split, args.checkpoint_name,
                translations=Path(args.translations), reference=Path(args.reference),
                source=None if args.source is None else Path(args.source),
                checkpoint=Path(args.checkpoint), encoded=Path(args.encoded),
                results=Path(args.results), out=Path(args.out))


def cmd_summarize(args: argparse.Namespace) -> None:
    from reproduce.data.text import read_json

    summary = {
        "dataset": args.dataset,
        "variant": args.variant,
        "dev": read_json(Path(args.dev)),
        "test": read_json(Path(args.test)),
    }
    _write_json(Path(args.out), summary)


def cmd_tables(args: argparse.Namespace) -> None:
    from reproduce.tables.render import render_tables
    from reproduce.tracking import log_best_effort, tables_run

    experiment = _experiment(args)
    results = Path(args.results)
    written = render_tables(experiment, results, Path(args.out_dir))

    def log_tables() -> None:
        with tables_run(results, experiment.name) as run:
            for path in written:
                run.log_artifact(path, "tables")

    log_best_effort(results, "the tables", log_tables)
    for path in written:
        print(path)


def _integers(text: str, option: str) -> list[int]:
    try:
        return [int(item) for item in text.split(",")]
    except ValueError:
        raise UsageError(f"{option} {text!r}: expected comma-separated integers") from None


def cmd_attention(args: argparse.Namespace) -> None:
    from reproduce.figures.attention import plot_attention
    from reproduce.tracking import log_best_effort, variant_run_for

    if args.results and not (args.dataset and args.variant):
        raise UsageError("--results needs --dataset and --variant (the run to log the plots to)")
    sentences = _integers(args.sentences, "--sentences")
    layers = _integers(args.layers, "--layers") if args.layers else None
    written = plot_attention(Path(args.checkpoint), Path(args.spm_model), Path(args.source),
                             Path(args.target), sentences, layers, Path(args.out_dir))

    def log_figures() -> None:
        run = variant_run_for(Path(args.results), args.dataset, args.variant, "attention")
        for path in written:
            run.log_artifact(path, "figures")

    if args.results:
        log_best_effort(Path(args.results), "the attention figures", log_figures)
    for path in written:
        print(path)


def cmd_table1(args: argparse.Namespace) -> None:
    from reproduce.tables.table1 import render_table1

    lengths = _integers(args.lengths, "--lengths")
    if any(n <= 0 for n in lengths):
        raise UsageError(f"--lengths {args.lengths}: expected positive sequence lengths")
    if args.d_model % 8:  # positive already (its argparse type)
        raise UsageError(f"--d-model {args.d_model}: expected a positive multiple of 8 (the heads)")
    if args.kernel % 2 == 0:  # positive already (its argparse type), as is --radius
        raise UsageError(f"--kernel {args.kernel} must be odd and positive (same padding)")
    for path in render_table1(Path(args.out_dir), lengths, args.d_model, args.kernel,
                              args.radius, args.threads, args.min_run_time):
        print(path)


# ------------------------------------------------------------------------------------------------
# Arguments
# ------------------------------------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors are the same single line as every other expected error."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def existing_file(text: str) -> Path:
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{path}: is a directory, expected a file")
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{path}: no such file")
    return path


def existing_dir(text: str) -> Path:
    path = Path(text)
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{path}: no such directory")
    return path


def checkpoint_file(text: str) -> Path:
    """A file in torch's checkpoint format (a zip archive): a truncated or empty one is refused
    here, before any model is built."""
    path = existing_file(text)
    if not zipfile.is_zipfile(path):
        raise argparse.ArgumentTypeError(
            f"{path}: not a readable checkpoint ({path.stat().st_size} bytes, no zip directory: "
            f"truncated or not written by torch.save)"
        )
    return path


def _version() -> str:
    try:
        return importlib.metadata.version("reproduce")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (package not installed)"


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="reproduce", description="Reproduce 'Attention Is All You Need', stage by stage."
    )
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="debug logging, and the traceback of any error")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}",
                        help="print the package version and exit")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name, handler, help):
        sub = commands.add_parser(name, help=help, description=help)
        sub.set_defaults(handler=handler)
        return sub

    def needs_experiment(sub):
        sub.add_argument("--experiment", required=True, help="experiment file (configs/*.yaml)")

    def needs_threads(sub):
        sub.add_argument("--threads", type=positive_int, default=1,
                         help="CPU threads per process (default 1)")

    def needs_variant(sub, help="the variant's name in the experiment file"):
        sub.add_argument("--variant", required=True, help=help)

    sub = command("download", cmd_download, "download one source of an experiment")
    needs_experiment(sub)
    sub.add_argument("--split", required=True, choices=["train", "dev", "test"],
                     help="the split that lists the source")
    sub.add_argument("--source", required=True, help="the source's name in the experiment")
    sub.add_argument("--out-dir", required=True, help="folder of downloads")

    sub = command("prepare", cmd_prepare, "extract, normalise and clean one split")
    needs_experiment(sub)
    sub.add_argument("--split", required=True, choices=["train", "dev", "test"],
                     help="the split to prepare")
    sub.add_argument("--downloads", required=True, type=existing_dir,
                     help="folder of downloaded archives")
    sub.add_argument("--out-dir", required=True, help="folder for <split>.src/.tgt/.report.json")

    sub = command("references", cmd_references,
                  "the official dev/test references, as sacreBLEU reads them")
    needs_experiment(sub)
    sub.add_argument("--split", required=True, choices=["dev", "test"], help="dev or test")
    sub.add_argument("--downloads", required=True, type=existing_dir,
                     help="folder of downloaded archives")
    sub.add_argument("--source-lines", required=True, type=existing_file,
                     help="the prepared source side of the split (one reference per line of it)")
    sub.add_argument("--out", required=True, help="the references file to write (<split>.ref)")

    sub = command("train-bpe", cmd_train_bpe, "train the shared sentencepiece BPE model")
    needs_experiment(sub)
    sub.add_argument("--source", required=True, type=existing_file,
                     help="prepared source side of the train split")
    sub.add_argument("--target", required=True, type=existing_file,
                     help="prepared target side of the train split")
    sub.add_argument("--model-prefix", required=True,
                     help="writes <prefix>.model and <prefix>.vocab")

    sub = command("encode", cmd_encode, "encode a split into binarized token ids")
    sub.add_argument("--spm-model", required=True, type=existing_file,
                     help="sentencepiece model (spm.model)")
    sub.add_argument("--source", required=True, type=existing_file, help="prepared source side")
    sub.add_argument("--target", required=True, type=existing_file, help="prepared target side")
    sub.add_argument("--out-dir", required=True, help="folder of the encoded split")

    sub = command("make-tiny-corpus", cmd_make_tiny_corpus, "regenerate the tiny corpus archive")
    sub.add_argument("--out", required=True,
                     help="the .tgz to write (configs/data/tiny_corpus.tgz)")

    sub = command("make-tiny-treebank", cmd_make_tiny_treebank,
                  "regenerate the tiny treebank archive (parsing, section 6.3)")
    sub.add_argument("--out", required=True,
                     help="the .tgz to write (configs/data/tiny_treebank.tgz)")

    sub = command("init-tracking", cmd_init_tracking,
                  "check the MLflow tracking server, or create the embedded store")
    sub.add_argument("--results", required=True, help="results root (holds the MLflow store)")

    sub = command("train", cmd_train, "train one variant (resumes from its checkpoints)")
    needs_experiment(sub)
    needs_variant(sub)
    sub.add_argument("--train-data", required=True, type=existing_dir, help="encoded train split")
    sub.add_argument("--dev-data", required=True, type=existing_dir, help="encoded dev split")
    sub.add_argument("--out-dir", required=True, help="the variant's folder")
    sub.add_argument("--results", required=True, help="results root (holds the MLflow store)")
    sub.add_argument("--launcher", choices=["inline", "local", "slurm"], default="inline",
                     help="run in this process, in local processes, or as a Slurm job via submitit")
    sub.add_argument("--tasks", type=positive_int, default=1,
                     help="processes for the local launcher (default 1)")
    sub.add_argument("--slurm", action="append", default=[], metavar="NAME=VALUE",
                     help="the Slurm launcher's request, one resource at a time (slurm_partition, "
                          "slurm_account, qos, constraint, nodes, gpu, tasks_per_node, "
                          "cpus_per_task, mem_mb, runtime, slurm_extra, max_requeues, "
                          "requeue_signal_seconds); the pipeline passes the train rule's resources")
    needs_threads(sub)
    sub.add_argument("--restart", action="store_true",
                     help="start from step 0: move checkpoints/ and train/ aside into replaced-<time>/")

    sub = command("average", cmd_average, "average the last K checkpoints on the save grid")
    source = sub.add_mutually_exclusive_group(required=True)
    source.add_argument("--manifest", type=existing_file,
                        help="train/checkpoints.json: the grid checkpoints training kept")
    source.add_argument("--checkpoint-dir", type=existing_dir, help="folder of step_*.pt checkpoints")
    sub.add_argument("--last", type=positive_int,
                     help="how many of the latest to average (default with --manifest: all listed)")
    sub.add_argument("--every-steps", type=positive_int,
                     help="with --checkpoint-dir: average only steps on this grid (default: the "
                          "last K files, refused unless evenly spaced)")
    sub.add_argument("--out", required=True, help="the averaged checkpoint to write")

    sub = command("decode", cmd_decode, "beam-search translation of a source file")
    needs_experiment(sub)
    needs_variant(sub, help="variant whose decoding settings apply")
    sub.add_argument("--checkpoint", required=True, type=checkpoint_file,
                     help="checkpoint to translate with (final.pt or averaged.pt)")
    sub.add_argument("--spm-model", required=True, type=existing_file,
                     help="sentencepiece model of the checkpoint's dataset")
    sub.add_argument("--source", required=True, type=existing_file,
                     help="UTF-8 text, one sentence per line")
    sub.add_argument("--out", required=True, help="translations, one line per source line")
    needs_threads(sub)

    sub = command("score", cmd_score, "BLEU (sacreBLEU and tokenized) or, for parsing, "
                  "labelled-bracket F1 (and the repaired trees beside --out); and perplexity")
    needs_experiment(sub)
    needs_variant(sub)
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
    sub.add_argument("--out", required=True, help="scores JSON to write")
    needs_threads(sub)

    sub = command("summarize", cmd_summarize, "merge a variant's dev and test scores")
    sub.add_argument("--dataset", required=True, help="the experiment's name")
    needs_variant(sub)
    sub.add_argument("--dev", required=True, type=existing_file, help="dev scores JSON")
    sub.add_argument("--test", required=True, type=existing_file, help="test scores JSON")
    sub.add_argument("--out", required=True, help="summary JSON to write")

    sub = command("tables", cmd_tables, "render the experiment's tables (2 and 3, or 4 for parsing) from whatever has finished")
    needs_experiment(sub)
    sub.add_argument("--results", required=True, help="results root")
    sub.add_argument("--out-dir", required=True, help="folder for the tables and plots")

    sub = command("attention", cmd_attention,
                  "Figures 3-5: plot the attention heads of chosen layers for chosen sentences")
    sub.add_argument("--checkpoint", required=True, type=checkpoint_file,
                     help="trained checkpoint (final.pt or averaged.pt)")
    sub.add_argument("--spm-model", required=True, type=existing_file, help="sentencepiece model")
    sub.add_argument("--source", required=True, help="source sentences, one per line")
    sub.add_argument("--target", required=True,
                     help="their translations (e.g. the model's own), one per line")
    sub.add_argument("--sentences", default="0", help="0-based line numbers, comma-separated")
    sub.add_argument("--layers", default=None, help="1-based layers, comma-separated (default: last)")
    sub.add_argument("--out-dir", required=True, help="folder for the figures")
    sub.add_argument("--results", default=None, help="results root, to log to the variant's run")
    sub.add_argument("--dataset", default=None, help="dataset of the variant's MLflow run")
    sub.add_argument("--variant", default=None, help="variant whose MLflow run gets the figures")

    sub = command("table1", cmd_table1,
                  "Table 1: complexity per layer, analytic and measured on this machine")
    sub.add_argument("--out-dir", required=True, help="folder for table1.md, .csv and .png")
    sub.add_argument("--lengths", default="16,32,64,128,256,512,1024",
                     help="sequence lengths n, comma-separated")
    sub.add_argument("--d-model", type=positive_int, default=512, help="model width d")
    sub.add_argument("--kernel", type=positive_int, default=3, help="convolution width k")
    sub.add_argument("--radius", type=positive_int, default=16, help="restricted self-attention's r")
    needs_threads(sub)
    sub.add_argument("--min-run-time", type=float, default=0.2,
                     help="seconds of repeated runs per timing")
    return parser


# ------------------------------------------------------------------------------------------------
# Errors
# ------------------------------------------------------------------------------------------------
def _one_line(text: str) -> str:
    return " ".join(text.split())


def expected_error_message(error: BaseException) -> str | None:
    """The one-line message of an expected error, or None for a bug (which keeps its traceback).

    Expected are the package's :class:`ReproduceError` (whatever else it derives from) and an
    OSError about a named file (a path given that cannot be read or written). Anything else,
    a ValueError or a RuntimeError included, is a bug: the modules that load checkpoints wrap
    torch's failures into :class:`~reproduce.errors.CheckpointError` themselves."""
    if isinstance(error, ReproduceError):
        return _one_line(str(error))
    if isinstance(error, OSError) and error.filename is not None:
        return _one_line(f"{error.filename}: {error.strerror or error}")
    return None


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    try:
        args.handler(args)
    except Exception as error:
        message = expected_error_message(error)
        if message is None:
            raise
        if args.verbose:
            traceback.print_exc()
        sys.exit(f"reproduce {args.command}: error: {message}")
