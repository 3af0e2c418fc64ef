"""The scores of one split of a variant, as ``reproduce score`` writes and logs them.

What is scored depends on the task: BLEU (sacreBLEU and the paper's tokenized BLEU) of the
translations, or for parsing the labelled-bracket F1 of the repaired trees; perplexity of the
checkpoint on the encoded split in both. The scores go to a JSON file, then to the variant's
MLflow run as ``<split>_<checkpoint>_<name>`` metrics with the files as artifacts.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from reproduce.config import Experiment, ResolvedVariant
from reproduce.errors import UsageError
from reproduce.files import write_json

if TYPE_CHECKING:
    from reproduce.model.architectures import Seq2Seq

log = logging.getLogger(__name__)

# Scores logged to MLflow as `<split>_<checkpoint>_<name>`, by task.
LOGGED_SCORES = {"translation": ("sacrebleu", "tokenized_bleu", "perplexity"),
                 "parsing": ("f1", "exact_match", "repaired_sentences", "perplexity")}


def task_scores(experiment: Experiment, translations: Path, reference: Path,
                source: Path | None, trees_out: Path) -> dict:
    """BLEU for translation; labelled-bracket F1 of the repaired trees for parsing."""
    if experiment.task == "parsing":
        from reproduce.scoring.parsing import score_parses

        if source is None:
            raise UsageError("--source is required for a parsing experiment (the input words)")
        return score_parses(translations, source, reference, trees_out=trees_out)
    from reproduce.scoring.bleu import score_translations

    return score_translations(translations, reference, experiment.target_lang,
                              compound_split=experiment.scoring.compound_split)


def score_split(experiment: Experiment, variant: ResolvedVariant, split: str,
                checkpoint_name: str, *, translations: Path, reference: Path,
                source: Path | None, checkpoint: Path, encoded: Path, results: Path,
                out: Path, model: Seq2Seq | None = None) -> dict:
    """Score ``translations`` (from ``checkpoint``, named ``checkpoint_name``) against
    ``reference``, write the scores to ``out`` (parsing: the repaired trees beside it, ``.trees``),
    then log them to the variant's MLflow run, best effort: the store is a sink, and the file is
    the result whether or not it answers. The checkpoint is refused, as decoding refuses it, when
    trained with other settings than the variant now has or on other pieces than ``encoded``'s;
    ``model``: the checkpoint's, already loaded so checked, on the decoding device."""
    from reproduce.data.encoded import EncodedCorpus
    from reproduce.decoding.translate import decoding_device
    from reproduce.provenance import trained_settings
    from reproduce.scoring.perplexity import checkpoint_perplexity, model_perplexity
    from reproduce.tracking import log_best_effort, variant_run_for

    trees = out.with_suffix(".trees")  # parsing: the repaired trees that were scored
    scores = {"split": split, "checkpoint": checkpoint_name}
    scores |= task_scores(experiment, translations, reference, source, trees)
    if model is None:
        scores |= checkpoint_perplexity(checkpoint, encoded,
                                        expected_settings=trained_settings(variant, experiment))
    else:
        scores |= model_perplexity(model, EncodedCorpus.open(encoded), decoding_device())
    write_json(out, scores)
    log.info("%s", json.dumps(scores))

    def log_scores() -> None:  # from this job's files only, once they are written
        run = variant_run_for(results, experiment.name, variant.name, variant.training.seed,
                              "score")
        run.log_scores(split, checkpoint_name,
                       {name: scores[name] for name in LOGGED_SCORES[experiment.task]})
        run.log_artifact(translations, "translations")
        if trees.exists():
            run.log_artifact(trees, "trees")
        run.log_artifact(out, "scores")

    log_best_effort(results, f"the {split} {checkpoint_name} scores", log_scores)
    return scores
