"""What decoding in bf16 (or fp16, or TF32 on a GPU) does to a trained model's translations: the
same checkpoint and source decoded in fp32 and in ``--precision`` through
:func:`reproduce.decoding.translate.translate_sentences` (the decoding settings of the
experiment's variant, ``decoding.precision`` aside), then the share of lines whose translation
changed and sacreBLEU of each against the reference (``decoding.precision`` stays fp32 until
such a figure, on a WMT model, shows the difference negligible).

    python benchmarks/decoding_precision.py --experiment configs/tiny.yaml --variant base \\
        --checkpoint results/tiny/base/seed-1/averaged.pt --spm-model results/tiny/bpe/spm.model \\
        --source results/tiny/data/test.src --reference results/tiny/data/test.ref
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import get_args

import sacrebleu
import torch

from reproduce.config import DecodingPrecision
from reproduce.data.bpe import load_sentencepiece
from reproduce.decoding.translate import load_model, translate_sentences
from reproduce.experiment_file import load_experiment
from reproduce.files import read_lines, write_json
from profile_table import precision_lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--experiment", type=Path, required=True)
    parser.add_argument("--variant", required=True)
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--spm-model", type=Path, required=True)
    parser.add_argument("--source", type=Path, required=True)
    parser.add_argument("--reference", type=Path, required=True)
    parser.add_argument("--precision", default="bf16",
                        choices=[p for p in get_args(DecodingPrecision) if p != "fp32"])
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    args = parser.parse_args()

    decoding = load_experiment(args.experiment).variant(args.variant).decoding
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = load_model(args.checkpoint, device)
    processor = load_sentencepiece(args.spm_model)
    sources, references = read_lines(args.source), read_lines(args.reference)
    figures = {"benchmark": "decoding_precision", "device": str(device),
               "checkpoint": str(args.checkpoint), "source": str(args.source),
               "sentences": len(sources), "precision": args.precision}
    translations = {}
    for precision in ("fp32", args.precision):
        settings = decoding.model_copy(update={"precision": precision})
        started = time.perf_counter()
        translations[precision] = translate_sentences(model, processor, sources, settings,
                                                      device, str(args.source))
        seconds = time.perf_counter() - started
        bleu = sacrebleu.corpus_bleu(translations[precision], [references]).score
        figures[precision] = {"sacrebleu": bleu, "seconds": seconds}
    changed = sum(a != b for a, b in zip(translations["fp32"], translations[args.precision],
                                         strict=True))
    figures["changed_lines"], figures["changed_share"] = changed, changed / len(sources)
    figures["bleu_difference"] = (figures[args.precision]["sacrebleu"]
                                  - figures["fp32"]["sacrebleu"])
    print(f"device {device}, {len(sources)} sentences of {args.source}, {args.checkpoint}")
    print("\n".join(precision_lines(figures)))
    if args.json:
        write_json(args.json, figures)


if __name__ == "__main__":
    main()
