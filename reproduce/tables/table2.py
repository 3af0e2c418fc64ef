"""Table 2: BLEU on the test set (newstest2014, averaged checkpoints, section 6.1) and training
cost, our Transformer base and big beside the paper's, our recurrent baseline (a variant with
``model.architecture: rnn``, :mod:`reproduce.model.recurrent`) beside them, then the paper's
other systems as cited.

The training cost is given two ways:

* the paper's estimate (Table 2, footnote): training time x number of GPUs x a sustained rate
  per GPU, i.e. GPU-hours x 3600 x the peak rate of the GPU that ran, at the precision it trained
  in (:mod:`reproduce.gpu_peak_rates`; the paper used 9.5e12 for its P100s), or
  ``tables.gpu_flops_per_second`` when that is set;
* the exact count the trainer records (``training_flops`` of ``summary.json``): every step's
  forward and backward FLOPs from its pairs' real lengths (:mod:`reproduce.model.flops`), for
  the Transformer and the recurrent model alike.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from reproduce.config import Experiment
from reproduce.gpu_peak_rates import peak_rate
from reproduce.tables.comparisons import (
    compare, interval_text, noise_covered, significance_notes, table2_pairs,
)
from reproduce.tables.paper import paper_table2
from reproduce.tables.results import SeededResults, VariantResults, read_variant, spread_text

CITED = "cited, not reproduced"
# Paired bootstrap tests of our rows against these Table 2 roles (tables.table2).
BASELINES = ("rnn", "base")
COLUMNS = ["model", "status", "seeds", "device", "BLEU (tokenized)", "BLEU (tokenized) min–max",
           "sacreBLEU", "sacreBLEU min–max", "paper BLEU", "BLEU - paper",
           *(column for role in BASELINES for column in (
               f"ΔsacreBLEU vs {role}", f"Δ 95% CI vs {role}", f"p vs {role}",
               f"Δ CI covers vs {role}")),
           "GPU-hours", "rate basis", "peak FLOPs/s per GPU",
           "FLOPs (GPU-hours x rate)",
           "FLOPs (exact count)", "paper FLOPs"]
# Our rows with no counterpart in the paper's Table 2 (``reproduced_as``): role -> model name.
OUR_BASELINES = {"rnn": "LSTM encoder-decoder + attention (Luong et al. 2015)"}


def paper_style_flops(gpu_hours: float | None,
                      gpu_flops_per_second: float | None) -> float | None:
    """Training time x GPUs x sustained rate; None for runs without GPU time or rate."""
    if not gpu_hours or gpu_flops_per_second is None:
        return None
    return gpu_hours * 3600 * gpu_flops_per_second


def _seed_rate(experiment: Experiment, variant: str,
               one: VariantResults) -> tuple[str | None, float | None]:
    """What the paper-style estimate of one training multiplies by, and how it was chosen."""
    device, gpu_hours = one.trained("device"), one.trained("gpu_hours")
    if not gpu_hours:
        return None, None
    if experiment.tables.gpu_flops_per_second is not None:
        return "tables.gpu_flops_per_second", experiment.tables.gpu_flops_per_second
    # What the run computed in (training.precision resolved on its GPU; summaries written
    # before the record: the configured precision, then never auto).
    precision = one.trained("precision") or experiment.variant(variant).training.precision
    known = peak_rate(device, precision)
    if known is None:
        return f"unknown: {device}, {precision}", None
    return f"{known.gpu}, {known.precision} peak", known.flops_per_second


def _cost(experiment: Experiment, variant: str, results: SeededResults) -> dict:
    """The paper-style estimate of one training: the mean over the trained seeds of each seed's
    GPU-hours at its own GPU's rate, since seeds may run on other GPUs. The basis names each
    distinct one, the rate column holds the rate every seed shares (else nothing), and a seed
    without an estimate leaves none for the row."""
    seeds = list(results.trained_seeds.values())
    rates = [_seed_rate(experiment, variant, one) for one in seeds]
    estimates = [paper_style_flops(one.trained("gpu_hours"), rate)
                 for one, (_, rate) in zip(seeds, rates, strict=True)]
    shared = {rate for _, rate in rates}
    return {
        "rate basis": _distinct(basis for basis, _ in rates),
        "peak FLOPs/s per GPU": shared.pop() if len(shared) == 1 else None,
        "FLOPs (GPU-hours x rate)": (sum(estimates) / len(estimates)
                                     if estimates and None not in estimates else None),
    }


def _hardware(results: SeededResults) -> str | None:
    """``N x device`` of the trained seeds: each distinct one, not a mean of GPU counts."""
    texts = []
    for one in results.trained_seeds.values():
        device, world = one.trained("device"), one.trained("world_size")
        texts.append(f"{world} x {device}" if device is not None and world else device)
    return _distinct(texts)


def _distinct(texts) -> str | None:
    """The distinct texts among ``texts`` in their order, ``; `` between; None for none."""
    return "; ".join(dict.fromkeys(text for text in texts if text is not None)) or None


def _difference(ours: float | None, paper: float) -> float | None:
    return None if ours is None or pd.isna(paper) else ours - paper


def _our_row(experiment: Experiment, variant: str, results: SeededResults,
             paper_bleu: float, paper_flops: float) -> dict:
    ours = results.test("tokenized_bleu")
    gpu_hours = results.trained("gpu_hours")
    status = f"ours: {variant}" if results.scores is not None else f"{results.status} ({variant})"
    return {
        "status": status,
        "seeds": results.seeds_text,
        "device": _hardware(results),
        "BLEU (tokenized)": ours,
        "BLEU (tokenized) min–max": spread_text(results.test_values("tokenized_bleu")),
        "sacreBLEU": results.test("sacrebleu"),
        "sacreBLEU min–max": spread_text(results.test_values("sacrebleu")),
        "paper BLEU": paper_bleu,
        "BLEU - paper": _difference(ours, paper_bleu),
        "GPU-hours": gpu_hours,
        **_cost(experiment, variant, results),
        "FLOPs (exact count)": results.trained("training_flops"),
        "paper FLOPs": paper_flops,
    }


def _significance(experiment: Experiment, results_dir: Path) -> dict[str, dict]:
    """Variant -> its paired bootstrap columns against each baseline role it is tested with."""
    roles = {variant: role for role, variant in experiment.tables.table2.items()}
    columns: dict[str, dict] = {}
    for pair in table2_pairs(experiment):
        comparison = compare(experiment, results_dir, pair)
        if comparison is None:
            continue
        role = roles[pair.baseline]
        columns.setdefault(pair.system, {}).update({
            f"ΔsacreBLEU vs {role}": comparison.difference,
            f"Δ 95% CI vs {role}": interval_text(comparison),
            f"p vs {role}": comparison.p_value,
            f"Δ CI covers vs {role}": noise_covered(comparison),
        })
    return columns


def build_table2(experiment: Experiment, results_dir: Path) -> pd.DataFrame:
    """Our base/big rows first (as ``tables.table2`` maps them), then our recurrent baseline,
    then the cited systems that have a number for ``tables.paper_language_pair``."""
    pair = experiment.tables.paper_language_pair
    tests = _significance(experiment, results_dir)
    ours, cited = [], []
    for _, paper in paper_table2().iterrows():
        paper_bleu, paper_flops = paper[f"bleu_{pair}"], paper[f"flops_{pair}"]
        variant = experiment.tables.table2.get(paper["reproduced_as"])
        if variant is not None:
            results = read_variant(results_dir, experiment, variant)
            row = _our_row(experiment, variant, results, paper_bleu, paper_flops)
            ours.append({"model": paper["model"], **row, **tests.get(variant, {})})
        elif pd.notna(paper_bleu) or pd.notna(paper_flops):
            cited.append({"model": paper["model"], "status": CITED, "paper BLEU": paper_bleu,
                          "paper FLOPs": paper_flops})
    for role, model in OUR_BASELINES.items():
        variant = experiment.tables.table2.get(role)
        if variant is not None:
            results = read_variant(results_dir, experiment, variant)
            row = _our_row(experiment, variant, results, float("nan"), float("nan"))
            ours.append({"model": model, **row})
    return pd.DataFrame(ours + cited, columns=COLUMNS)


def _tokenized_bleu_note(experiment: Experiment) -> str:
    if experiment.scoring.compound_split:
        steps = ("the paper's scoring (tensor2tensor's get_ende_bleu.sh): Moses "
                 "replace-unicode-punctuation and tokenization, hyphenated compounds split as "
                 "`a ##AT##-##AT## b`, multi-bleu.perl")
    else:
        steps = ("Moses replace-unicode-punctuation and tokenization, multi-bleu.perl, without "
                 "get_ende_bleu.sh's ##AT## compound split (scoring.compound_split: false; the "
                 "paper does not say how EN-FR was tokenized, this is our choice)")
    return (f"BLEU (tokenized): {steps}, on hypotheses and official references alike. "
            "BLEU - paper = BLEU (tokenized) - paper BLEU.")


def _baseline_notes(experiment: Experiment) -> list[str]:
    """What our rows without a paper counterpart are."""
    variant = experiment.tables.table2.get("rnn")
    if variant is None:
        return []
    model = experiment.variant(variant).model
    return [f"{OUR_BASELINES['rnn']} (variant {variant}): our recurrent baseline, a "
            f"bidirectional LSTM encoder and an LSTM decoder of {model.layers} layers, "
            f"d_model = {model.d_model}, {model.rnn_attention} global attention, trained, "
            "averaged, decoded and scored by the same rules as our Transformer rows on the same "
            "data (reproduce/model/recurrent.py). The paper has no such row (its recurrent "
            "systems, GNMT and Deep-Att, are cited), so paper BLEU and FLOPs are empty."]


def _significance_notes(experiment: Experiment) -> list[str]:
    """What the Δ, CI and p columns test, for the pairs this experiment's mapping gives."""
    roles = {variant: role for role, variant in experiment.tables.table2.items()}
    pairs = table2_pairs(experiment)
    if not pairs:
        return []
    compared = ", ".join(f"{roles[pair.system]} against {roles[pair.baseline]}" for pair in pairs)
    return [f"ΔsacreBLEU vs <role>: tested for {compared}; p: a difference significant at 0.05 "
            "when p < 0.05.", *significance_notes(experiment, "test", pairs)]


def table2_caption(experiment: Experiment, results_dir: Path) -> tuple[str, str, list[str]]:
    """Heading, what was measured, and the notes printed under the table."""
    pair = experiment.tables.paper_language_pair.replace("_", "-").upper()
    averaged = ", ".join(
        f"{role} = {variant}: last {experiment.variant(variant).training.average_last}"
        for role, variant in experiment.tables.table2.items()
    ) or "no variant mapped in tables.table2"
    signatures = {read_variant(results_dir, experiment, variant).test("sacrebleu_signature")
                  for variant in experiment.tables.table2.values()} - {None}
    notes = [
        "seeds: the trainings a row averages, one per seed of its training.seed (`1 of 2` while "
        "one is missing); BLEU, sacreBLEU, GPU-hours and FLOPs are their mean (the cost of one "
        "training), min–max the spread of BLEU over seeds.",
        _tokenized_bleu_note(experiment),
        "sacreBLEU on detokenized output against the official references as released (read as "
        "`sacrebleu -t` reads them, not normalised)" + (
            f": `{'`, `'.join(sorted(signatures))}`." if signatures else "."),
        *_significance_notes(experiment),
        "FLOPs (GPU-hours x rate): the paper's estimate, GPU-hours x 3600 s x a rate per GPU. "
        "The paper used 9.5e12 FLOP/s for its P100s; we use the datasheet peak of the GPU that "
        "ran (rate basis; each seed's own), at its training precision: fp32 = the FP32 peak "
        "without tensor cores, bf16 = the dense BF16 tensor-core peak; "
        "tables.gpu_flops_per_second, when set, "
        "overrides it. — for runs without GPU time, and for a GPU/precision not in "
        "reproduce/gpu_peak_rates.py (rate basis says 'unknown'; set "
        "tables.gpu_flops_per_second to estimate it).",
        "FLOPs (exact count): the training FLOPs the trainer counted step by step from each "
        "pair's real source and target lengths (summary.json's training_flops; "
        "reproduce/model/flops.py): matrix products only, a multiply-add = 2 FLOPs, the backward "
        "pass = 2 x the forward, padding not counted; Transformer: encoder per source token, "
        "decoder and output projection per target token, attention per pair of positions; rnn: "
        "the LSTM gates per token and direction, attention scores and context per (target, "
        "source) pair, the combination layer and the output projection.",
        "Paper training: base 100K steps on 8 P100 GPUs in 12 hours, big 300K steps in 3.5 days.",
        *_baseline_notes(experiment),
        f"Rows marked '{CITED}' are the paper's Table 2 numbers for the systems it compares "
        "against, copied as printed.",
        "— = not available: not finished yet (our rows) or not reproduced (cited rows).",
    ]
    measured = (f"Measured: {experiment.name} ({experiment.source_lang}→{experiment.target_lang})"
                f" test split, averaged checkpoint ({averaged}); paper: WMT14 {pair} newstest2014.")
    return f"Table 2 — {experiment.name}: BLEU and training cost", measured, notes
