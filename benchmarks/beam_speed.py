"""Beam-search speed on a newstest2014-sized input, through the project's decoding path.

3,003 synthetic source sentences (newstest2014's count) with the WMT lengths of the trainer
benchmark's corpus (log-normal around 26 tokens, ``trainer_speed.wmt_source_lengths``) go through
:func:`reproduce.decoding.translate.translate_sentences`, as ``reproduce evaluate`` decodes:
sorted by length, batches of ``decoding.max_sentences_per_batch``, beam 4, alpha 0.6, at most
source + 50 tokens (section 6.1; the ``decoding`` settings of ``configs/wmt14_en_de.yaml``), in
its ``decoding.precision`` (fp32) or ``--precision``'s. Only sentencepiece is left out: sentences
are strings of token ids.

The weights are random (speed needs no trained ones), and ``--lengths`` says how long the
hypotheses run, which every figure names:

* ``worst`` (the default): as the random model decodes. It seldom ends a hypothesis early, so
  nearly every sentence runs to its maximum length, source + 50: more steps than a trained
  model's translations, about as long as their sources, take.
* ``trained``: as a trained model's would. From the step at which a hypothesis holds as many
  tokens as its source (EOS included), EOS's logit is raised far above every other
  (:class:`EndsAtSourceLength`, a wrapper of this benchmark's, not of the package), so that
  hypotheses end at about their source's length and the search stops a few steps later.

A few sentences are decoded first, untimed, so that CUDA's start-up is not counted. Prints
sentences/s and generated tokens/s (each hypothesis' tokens and its EOS), e.g.

    H100 base (beam 4, alpha 0.6, 3003 sentences, worst lengths): 41.0 sentences/s, 3,200 gen...

(``generated tok/s`` at its end). ``--check-every``, ``--sentences-per-batch``,
``--tokens-per-batch``, ``--cuda-graphs`` (or ``--no-cuda-graphs``) and ``--precision`` replace
the ``decoding`` settings ``check_every``, ``max_sentences_per_batch``, ``max_tokens_per_batch``,
``cuda_graphs`` and ``precision`` of the config, and the headline names each one replaced
(``..., trained lengths, check_every=8): ...``); the config's ``auto`` takes its value for the
device that decodes (on a GPU: CUDA graphs, done sentences read every 8 steps), which the
headline names too (``cuda_graphs=True (auto)``). ``--window-stride`` is no setting: with CUDA
graphs, a step reads its cached keys and values through a window that grows by that many
positions (:data:`reproduce.model.key_values.READ_WINDOW_STRIDE`); a stride above the longest
output measures the whole-buffer reads the window replaced. ``--attention-kernels`` is no setting
either: the SDPA kernels decoding's attention may choose from (``math`` alone: softmax(Q K^T /
sqrt(d_k)) V as matrix products, where the efficient kernel spends a tile of queries on each
step's one).

On a CPU ``--size cpu`` shrinks the model (N=2, d_model=256) and ``--sentences`` the input:

    .venv/bin/python benchmarks/beam_speed.py --size cpu --sentences 16 --vocab 500

``--profile`` then decodes one batch (the set's first ``decoding.max_sentences_per_batch``
sentences) under torch.profiler (``trainer_speed.profile_runs``): wall and device-busy time,
kernels run and launches from the host, the top kernels and host operations.

``--json PATH`` also writes the figures, unrounded, as JSON (what ``gpu_check.py`` reads):
``device``, ``name``, ``size``, the model's ``layers`` and ``d_model``, ``vocab``, the decoding
settings (``beam``, ``alpha``, ``max_length_offset``, ``sentences_per_batch``,
``tokens_per_batch``, ``check_every``, ``cuda_graphs``: the values decoding ran with),
``replaced`` (the settings given on the command line), ``auto`` (the settings left at the
config's ``auto``, with the value they took on this device), ``options`` (the benchmark's own
options given: ``window_stride``, ``attention_kernels``), ``window_stride`` and
``attention_kernels`` (those the search ran with),
``lengths`` (worst or trained), ``sentences``,
``source_tokens``, ``generated_tokens``, ``seconds``, ``sentences_per_second`` and
``generated_tokens_per_second``, ``steps`` (how the search's steps ran: ``eager``,
``replayed`` as CUDA graphs, graphs ``recorded`` and the host's ``recording_seconds``),
``model_flops`` and ``peak`` (below); with ``--profile``, ``profile``.

Where every translation ran to its length limit (``worst`` lengths, as a random model decodes
them), each search ran exactly that many steps, and the model FLOPs of the searches are exact
(:meth:`reproduce.model.flops.TransformerFlops.beam_search`: the live hypotheses' work, not the
rows a batch computes for nothing); the output then says their rate and its share of the GPU's
peak at ``decoding.precision`` (``peak``: :mod:`reproduce.gpu_peak_rates`). With other lengths
``model_flops`` is null.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import get_args

import numpy as np
import torch
from torch.nn.attention import SDPBackend

from reproduce.config import DecodingPrecision
from reproduce.experiment_file import load_experiment
from reproduce.decoding.step_graphs import StepGraphs
from reproduce.decoding.translate import translate_sentences
from reproduce.model.architectures import build_model
from reproduce.files import write_json
from reproduce.gpu_peak_rates import peak_rate
from reproduce.model import key_values, packed_attention
from reproduce.model.encoder_decoder import DecoderCache, EncodedSource, TranslationModel
from reproduce.model.flops import TransformerFlops
from reproduce.special_tokens import EOS, PAD
from reproduce.training.precision import device_name
from profile_table import beam_headline, profile_lines, search_flops_line, steps_line
from trainer_speed import CPU_MODEL, ROOT, profile_runs, short_device_name, wmt_source_lengths

NEWSTEST2014_SENTENCES = 3003
WARM_UP_SENTENCES = 8
EOS_MARGIN = 30.0  # EOS's logit over the largest other, once a hypothesis is as long as its source


class TokenIdText:
    """Sentencepiece's encode/decode for text that is already token ids ("17 4 230")."""

    @staticmethod
    def encode(sentences: list[str]) -> list[list[int]]:
        return [[int(token) for token in sentence.split()] for sentence in sentences]

    @staticmethod
    def decode(ids: list[int]) -> str:
        return " ".join(map(str, ids))


@dataclass
class _WithLengths:
    """A model's encoding of a source batch, with each row's source length (EOS included)."""

    encoded: EncodedSource
    lengths: torch.Tensor

    def select(self, indices: torch.Tensor) -> "_WithLengths":
        return _WithLengths(self.encoded.select(indices), self.lengths.index_select(0, indices))


class EndsAtSourceLength:
    """``model`` with a trained model's output lengths: a hypothesis that holds as many tokens as
    its source gets EOS's logit raised ``EOS_MARGIN`` above the largest, so that it ends there
    (or about there, as beam search weighs its alternatives) instead of at source + 50."""

    def __init__(self, model: TranslationModel):
        self.model = model

    def __getattr__(self, name: str):
        return getattr(self.model, name)

    def encode(self, source: torch.Tensor, layout=None) -> _WithLengths:
        return _WithLengths(self.model.encode(source, layout), source.ne(PAD).sum(dim=1))

    def decode(self, target_input: torch.Tensor, encoded: _WithLengths,
               cache: DecoderCache | None = None) -> torch.Tensor:
        logits = self.model.decode(target_input, encoded.encoded, cache)
        last = logits[:, -1]
        generated = cache.decoded  # the token these logits choose is the hypothesis' generated-th
        raised = last.max(dim=-1).values + EOS_MARGIN
        lengths = encoded.lengths.repeat_interleave(last.size(0) // encoded.lengths.size(0))
        last[:, EOS] = torch.where(lengths.le(generated), raised, last[:, EOS])
        return logits


KERNEL_NAMES = {SDPBackend.FLASH_ATTENTION: "flash", SDPBackend.EFFICIENT_ATTENTION: "efficient",
                SDPBackend.MATH: "math", SDPBackend.CUDNN_ATTENTION: "cudnn"}


def _stride(text: str) -> int:
    """``--window-stride``: a number of positions above 0."""
    if not text.isdigit() or int(text) == 0:
        raise argparse.ArgumentTypeError(f"a number of positions above 0 (got {text})")
    return int(text)


def _kernels(names: str) -> list[SDPBackend]:
    """``--attention-kernels``' SDPA backends, from their names."""
    backends = {name: backend for backend, name in KERNEL_NAMES.items()}
    try:
        return [backends[name] for name in names.split(",")]
    except KeyError as unknown:
        raise argparse.ArgumentTypeError(
            f"{unknown.args[0]} is none of {', '.join(backends)}") from None


@contextmanager
def counting_steps(counts: Counter):
    """Counts how the search's steps ran, in ``counts``: ``eager``, ``replayed`` (a CUDA graph)
    and ``recorded`` (graphs), with ``recording_seconds`` the host's time recording them (what
    ``decoding.cuda_graphs`` pays where a step's shape changes: the batch's rows or its read
    window)."""
    call, record = StepGraphs.__call__, StepGraphs._record

    def counted_call(graphs, step, shape, device):
        call(graphs, step, shape, device)
        counts["replayed" if graphs.graph is not None else "eager"] += 1

    def timed_record(graphs, step):
        started = time.perf_counter()
        record(graphs, step)
        counts["recorded"] += 1
        counts["recording_seconds"] += time.perf_counter() - started

    StepGraphs.__call__, StepGraphs._record = counted_call, timed_record
    try:
        yield counts
    finally:
        StepGraphs.__call__, StepGraphs._record = call, record


def search_flops(flops: TransformerFlops, sources: list[str], translations: list[str],
                 beam: int, offset: int, position_limit: int | None) -> int | None:
    """Model FLOPs of the searches (:meth:`TransformerFlops.beam_search`) where every translation
    ran to its length limit, so that each search's steps are known from its output (a random
    model's worst-case lengths); None where one ended sooner: its search's steps are its own."""
    source = np.array([len(line.split()) + 1 for line in sources])
    limit = source + offset if position_limit is None else np.minimum(source + offset,
                                                                      position_limit)
    steps = np.array([len(line.split()) + 1 for line in translations])  # + EOS
    return flops.beam_search(source, steps, beam) if np.array_equal(steps, limit) else None


def synthetic_sources(sentences: int, vocab: int, seed: int) -> list[str]:
    """``sentences`` lines of random token ids (never a special token) of WMT-like lengths."""
    rng = np.random.default_rng(seed)
    return [" ".join(map(str, rng.integers(4, vocab, length)))
            for length in wmt_source_lengths(rng, sentences)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", choices=["cpu", "base", "big"], default="cpu")
    parser.add_argument("--sentences", type=int, default=NEWSTEST2014_SENTENCES)
    parser.add_argument("--vocab", type=int, default=37_000)
    parser.add_argument("--lengths", choices=["worst", "trained"], default="worst",
                        help="hypotheses as the random model runs them (to source + 50), or "
                             "ending at about their source's length, as a trained model's")
    parser.add_argument("--check-every", type=int,
                        help="decoding.check_every (default: the config's)")
    parser.add_argument("--sentences-per-batch", type=int,
                        help="decoding.max_sentences_per_batch (default: the config's)")
    parser.add_argument("--tokens-per-batch", type=int,
                        help="decoding.max_tokens_per_batch (default: the config's)")
    parser.add_argument("--cuda-graphs", action=argparse.BooleanOptionalAction,
                        help="decoding.cuda_graphs: the decoder's steps replayed as CUDA graphs "
                             "(default: the config's)")
    parser.add_argument("--precision", choices=get_args(DecodingPrecision),
                        help="decoding.precision (default: the config's)")
    parser.add_argument("--window-stride", type=_stride,
                        help="with CUDA graphs, the positions by which a step's window of "
                             "cached keys and values grows (reproduce.model.key_values."
                             "READ_WINDOW_STRIDE, default 32); one above the longest output "
                             "reads the whole buffer at every step, as before the window")
    parser.add_argument("--attention-kernels", type=_kernels,
                        help="comma-separated SDPA kernels that attention on the padded batch "
                             "(every attention of decoding) may choose from, in torch's order: "
                             "flash, efficient, math, cudnn (default: reproduce.model."
                             "packed_attention.PADDED_KERNELS, flash,efficient,math)")
    parser.add_argument("--profile", action="store_true",
                        help="then profile the decoding of one batch (where the time goes)")
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    args = parser.parse_args()

    options = {} if args.window_stride is None else {"window_stride": args.window_stride}
    if args.window_stride is not None:
        key_values.READ_WINDOW_STRIDE = args.window_stride
    if args.attention_kernels is not None:
        # in place: the attention modules hold the list itself
        packed_attention.PADDED_KERNELS[:] = args.attention_kernels
        options["attention_kernels"] = ",".join(
            KERNEL_NAMES[kernel] for kernel in args.attention_kernels)
    experiment = load_experiment(ROOT / "configs/wmt14_en_de.yaml")
    variant = experiment.variant("big" if args.size == "big" else "base")
    config = variant.model.model_copy(update=CPU_MODEL) if args.size == "cpu" else variant.model
    replaced = {name: value for name, value in (
        ("check_every", args.check_every), ("max_sentences_per_batch", args.sentences_per_batch),
        ("max_tokens_per_batch", args.tokens_per_batch), ("precision", args.precision),
        ("cuda_graphs", args.cuda_graphs))
        if value is not None}
    chosen = variant.decoding.model_validate(variant.decoding.model_dump() | replaced)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    decoding = chosen.on(device.type, config.architecture)  # auto's values, as figures
    auto = {name: getattr(decoding, name) for name in ("check_every", "cuda_graphs")
            if getattr(chosen, name) == "auto"}
    torch.manual_seed(0)
    model = build_model(config, args.vocab).to(device).eval()
    if args.lengths == "trained":
        model = EndsAtSourceLength(model)
    sources = synthetic_sources(args.sentences, args.vocab, seed=0)

    translate_sentences(model, TokenIdText(), sources[:WARM_UP_SENTENCES], decoding, device)
    if device.type == "cuda":
        torch.cuda.synchronize()
    with counting_steps(Counter()) as steps:
        started = time.perf_counter()
        translations = translate_sentences(model, TokenIdText(), sources, decoding, device)
        seconds = time.perf_counter() - started  # the hypotheses are on the host: all computed

    generated = sum(len(line.split()) + 1 for line in translations)  # + EOS
    source_tokens = sum(len(line.split()) + 1 for line in sources)
    machine = device_name(device)
    name = short_device_name(machine)
    model_flops = search_flops(TransformerFlops(config, args.vocab), sources, translations,
                               decoding.beam_size, decoding.max_length_offset,
                               config.position_limit)
    peak = peak_rate(machine, decoding.precision)  # None on a CPU
    figures = {
        "benchmark": "beam_speed",
        "device": name if device.type == "cpu" else machine,
        "name": name, "size": args.size, "layers": config.layers, "d_model": config.d_model,
        "vocab": args.vocab, "beam": decoding.beam_size, "alpha": decoding.length_penalty,
        "max_length_offset": decoding.max_length_offset,
        "sentences_per_batch": decoding.max_sentences_per_batch,
        "tokens_per_batch": decoding.max_tokens_per_batch, "check_every": decoding.check_every,
        "cuda_graphs": decoding.cuda_graphs, "replaced": replaced, "auto": auto,
        "options": options, "window_stride": key_values.READ_WINDOW_STRIDE,
        "attention_kernels": [KERNEL_NAMES[kernel] for kernel in packed_attention.PADDED_KERNELS],
        "lengths": args.lengths,
        "sentences": len(sources),
        "source_tokens": source_tokens, "generated_tokens": generated, "seconds": seconds,
        "sentences_per_second": len(sources) / seconds,
        "generated_tokens_per_second": generated / seconds,
        "model_flops": model_flops, "peak": peak._asdict() if peak else None,
        "steps": {kind: steps[kind] for kind in ("eager", "replayed", "recorded",
                                                 "recording_seconds")}}
    print(f"device: {figures['device']}, threads: {torch.get_num_threads()}, torch "
          f"{torch.__version__}, size: {args.size} (N={config.layers}, d_model={config.d_model}), "
          f"vocab {args.vocab}, {decoding.precision}, random weights, {args.lengths} lengths")
    print(f"decoding: beam {decoding.beam_size}, alpha {decoding.length_penalty}, max length "
          f"source + {decoding.max_length_offset}, at most {decoding.max_sentences_per_batch} "
          f"sentences and {decoding.max_tokens_per_batch:,} positions a batch, done read every "
          f"{decoding.check_every} steps, CUDA graphs {'on' if decoding.cuda_graphs else 'off'}; "
          f"{len(sources)} sentences, {source_tokens:,} source "
          f"tokens (EOS included), {generated:,} generated tokens in {seconds:.1f} s")
    print(steps_line(figures["steps"]))
    print(search_flops_line(figures))
    print(beam_headline(figures))
    if args.profile:
        batch = sources[:decoding.max_sentences_per_batch]
        figures["profile"] = profile_runs(
            lambda: translate_sentences(model, TokenIdText(), batch, decoding, device), 1,
            "batch", device.type == "cuda")
        print("\n".join(profile_lines(figures["profile"])))
    if args.json:
        write_json(args.json, figures)


if __name__ == "__main__":
    main()
