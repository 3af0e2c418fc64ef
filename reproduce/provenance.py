"""What a trained model is: the settings its weights depend on, their digest, and the checks that
tell whether a checkpoint, or a finished training, is of the run the experiment file asks for.

*Trained settings* (:func:`trained_settings`) are every setting that shapes a variant's weights
after a given number of steps: the model, the training settings (but :data:`NOT_TRAINED_ON`),
the languages, the train and dev sources (a source pinned by its sha256 without its url:
:meth:`reproduce.config.Source.identity`) and their cleaning, and the BPE settings that make the
token ids. Test data and decoding are not part of them, nor are Slurm settings (the trainer makes
every world size compute the same step). Their *fingerprint* is a short digest of them, stable
across runs and machines: Snakemake's ``params`` for the train rule (``workflow/rules/
common.smk``), so that an edit replans that training and what follows, and nothing else.

Every file that holds weights records the model's *identity* (:class:`ModelIdentity`): what
rebuilds it (``model_config``, ``vocab_size``), the settings and fingerprint it was trained with,
and the sha256 of the sentencepiece model that made its token ids. Training checkpoints,
``train/final.pt`` and ``averaged.pt`` (which carries the identity of the checkpoints it
averages, all of one run) hold it; ``train/summary.json`` records the settings and fingerprint.

Two runs are the same run when their settings are equal: a checkpoint of other settings is not
resumed (:func:`check_trained_with`), not averaged with others, and not decoded or scored for a
variant whose settings changed; one of other pieces (:func:`check_same_pieces`) is refused before
its weights are loaded. A finished training whose summary records other settings than the
experiment file now gives is *stale* (:func:`stale_training_message`): rather than let Snakemake
delete its outputs to retrain it, only for the trainer to refuse its checkpoints, the workflow
warns once, keeps its recorded digest and steps (:func:`training_digest`, :func:`training_steps`)
while its outputs are all there, and the tables mark it stale.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reproduce.errors import CheckpointError, ConfigError

if TYPE_CHECKING:
    from reproduce.config import Experiment, ModelConfig, ResolvedVariant
    from reproduce.data.encoded import EncodedCorpus

# Keys of ``training`` that change neither the weights nor the data they are trained on: how
# often to log, evaluate and save, and how many checkpoints to keep and average. ``steps`` is
# compared on its own: raising it continues a run. Neither how a step is cut into passes
# (max_tokens_per_device), nor the padding of their tensors (pad_to_multiple, pass_buckets), nor
# compilation (CUDA graphs included), nor the attention kernel changes the weights, beyond float
# summation order: a run may resume on a GPU of another size, or on a CPU.
NOT_TRAINED_ON = frozenset({"steps", "log_every_steps", "eval_every_steps", "checkpoints",
                            "average_last", "compile", "max_tokens_per_device",
                            "pad_to_multiple", "pass_buckets", "attention", "cuda_graphs"})

# How a refused training is started over, without losing what it computed.
RESTART_HINT = ("to start over, run `reproduce train` again with --restart, which moves "
                "checkpoints/ and train/ into {folder}/replaced-<UTC time>/ (nothing is deleted)")


class StaleTrainingError(ConfigError):
    """A finished training was of other settings than the experiment file now gives."""


def trained_settings(variant: ResolvedVariant, experiment: Experiment) -> dict[str, Any]:
    """Every setting that shapes the weights of ``variant`` (of ``experiment``) after a given
    number of steps, flat: ``{"model.dropout": 0.1, "data.train.0.sha256": ..., ...}``."""
    data = experiment.data.model_dump(mode="json", exclude={"mirror_dir", "download", "test"})
    for split in ("train", "dev"):
        data[split] = [source.identity() for source in getattr(experiment.data, split)]
    sections: dict[str, Any] = {
        "model": variant.model.model_dump(mode="json"),
        "training": variant.training.model_dump(mode="json", exclude=set(NOT_TRAINED_ON)),
        "languages": [experiment.source_lang, experiment.target_lang],
        "data": data,
        "bpe": experiment.bpe.model_dump(mode="json"),
    }
    flat: dict[str, Any] = {}
    _flatten(sections, "", flat)
    return flat


def fingerprint(settings: dict[str, Any]) -> str:
    """A short digest of :func:`trained_settings`, stable across runs and machines."""
    canonical = json.dumps(settings, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def differing_settings(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """``key: recorded -> current`` for every key whose value differs (or exists on one side)."""
    missing = "(absent)"
    return [f"{key}: {recorded.get(key, missing)!r} -> {current.get(key, missing)!r}"
            for key in sorted(recorded.keys() | current.keys())
            if recorded.get(key, missing) != current.get(key, missing)]


def _flatten(value: Any, prefix: str, into: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            _flatten(item, f"{prefix}{key}.", into)
    elif isinstance(value, list) and any(isinstance(item, (dict, list)) for item in value):
        for index, item in enumerate(value):
            _flatten(item, f"{prefix}{index}.", into)
    else:
        into[prefix.removesuffix(".")] = value


# --------------------------------------------------------------------------------------------
# What a file of weights records about them
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelIdentity:
    """What rebuilds a model and tells which run trained it."""

    model_config: dict[str, Any]
    vocab_size: int
    settings: dict[str, Any]
    spm_model_sha256: str | None

    @classmethod
    def of(cls, config: ModelConfig, pieces: Pieces, settings: dict[str, Any]) -> ModelIdentity:
        return cls(config.model_dump(mode="json"), pieces.size, settings, pieces.spm_sha256)

    def record(self) -> dict[str, Any]:
        """The entries a checkpoint, ``final.pt`` or ``averaged.pt`` holds beside its weights."""
        return {"model_config": self.model_config, "vocab_size": self.vocab_size,
                "settings": self.settings, "fingerprint": fingerprint(self.settings),
                "spm_model_sha256": self.spm_model_sha256}


IDENTITY_KEYS = ("model_config", "vocab_size", "settings", "fingerprint", "spm_model_sha256")


def recorded_identity(state: dict) -> dict[str, Any]:
    """The identity entries of a loaded checkpoint, for a file derived from it to carry on."""
    return {key: state[key] for key in IDENTITY_KEYS if key in state}


def same_run(first: dict, other: dict) -> bool:
    """Whether two loaded checkpoints were trained with the same settings."""
    return first.get("fingerprint") == other.get("fingerprint")


@dataclass(frozen=True)
class Pieces:
    """The token ids a model is about to meet: where they come from (named in errors), how many
    pieces the vocabulary has, and the sha256 of the sentencepiece model that made them (None
    where it is not known)."""

    source: str
    size: int
    spm_sha256: str | None

    @classmethod
    def of_corpus(cls, corpus: EncodedCorpus) -> Pieces:
        """The pieces of an encoded split, as its ``meta.json`` records them."""
        return cls(str(corpus.directory), corpus.vocab_size, corpus.meta.get("spm_model_sha256"))


# --------------------------------------------------------------------------------------------
# Checks
# --------------------------------------------------------------------------------------------
def check_trained_with(path: Path, state: dict, settings: dict[str, Any], remedy: str) -> None:
    """Refuse the checkpoint at ``path`` unless it was trained with ``settings``, naming every
    differing key."""
    recorded = state.get("settings")
    if not isinstance(recorded, dict):
        raise CheckpointError(f"{path}: records no training settings; {remedy}")
    if recorded != settings:
        differences = "; ".join(differing_settings(recorded, settings))
        raise CheckpointError(f"{path}: trained with other settings than the experiment "
                              f"now gives ({differences}); {remedy}")


def check_same_pieces(path: Path, state: dict, pieces: Pieces, remedy: str) -> None:
    """Same number of pieces is not the same pieces: refuse the checkpoint at ``path`` unless it
    was trained on a vocabulary of ``pieces.size`` made by the same sentencepiece model, before
    its weights are loaded (they would not fit, or would mean other pieces)."""
    if state.get("vocab_size") != pieces.size:
        raise CheckpointError(
            f"{pieces.source}: {pieces.size} pieces, but {path} was trained with a vocabulary of "
            f"{state.get('vocab_size')}; {remedy}")
    recorded = state.get("spm_model_sha256")
    if None not in (recorded, pieces.spm_sha256) and recorded != pieces.spm_sha256:
        raise CheckpointError(
            f"{pieces.source}: made with another sentencepiece model (sha256 "
            f"{pieces.spm_sha256[:12]}...) than {path} was trained with ({recorded[:12]}...); "
            f"{remedy}")


# --------------------------------------------------------------------------------------------
# Finished trainings: stale or current
# --------------------------------------------------------------------------------------------
def changed_settings(summary: dict | None, settings: dict[str, Any]) -> list[str]:
    """``key: recorded -> current`` for each setting the summary's training differs in from
    ``settings``; empty when it is current or there is no summary (not finished)."""
    if summary is None:
        return []
    recorded = summary.get("settings")
    return differing_settings(recorded if isinstance(recorded, dict) else {}, settings)


def stale_training_message(variant_dir: Path, summary: dict | None,
                           settings: dict[str, Any]) -> str | None:
    """What to tell of a finished training whose settings were edited; None when it is current."""
    changes = changed_settings(summary, settings)
    if not changes:
        return None
    return (f"{variant_dir}: trained with other settings than the experiment file now gives "
            f"({'; '.join(changes)}); it is not retrained, its results stay as they are and are "
            f"marked stale in the tables. To train it anew, move {variant_dir} aside (or run its "
            f"`reproduce train` with --restart), or undo the edit")


def refuse_stale_training(variant_dir: Path, summary: dict | None,
                          settings: dict[str, Any]) -> None:
    """Refuse to plan the training of a finished variant whose settings were edited."""
    message = stale_training_message(variant_dir, summary, settings)
    if message is not None:
        raise StaleTrainingError(message)


def training_digest(summary: dict | None, settings: dict[str, Any]) -> str:
    """The digest Snakemake is given for a training: that of ``settings``, or, for a finished
    training whose settings were edited since, the one it was trained with, so that it is not
    replanned (and its outputs deleted) before the trainer would refuse its checkpoints."""
    recorded = _settings_edited_since(summary, settings)
    return fingerprint(settings if recorded is None else recorded)


def training_steps(summary: dict | None, settings: dict[str, Any], steps: int) -> int:
    """The steps Snakemake is given for a training: ``steps`` (raised, they replan it, and it
    continues from its last checkpoint), or, for a finished training whose settings were edited
    since, the steps it was trained for, as :func:`training_digest` keeps its digest."""
    if _settings_edited_since(summary, settings) is None:
        return steps
    trained_for = summary.get("steps")
    return trained_for if isinstance(trained_for, int) else steps


def _settings_edited_since(summary: dict | None, settings: dict[str, Any]) -> dict | None:
    """The settings a trainer's summary records, where they differ from ``settings``; None when
    they do not, or when the summary records none (hand-written: nothing to keep)."""
    recorded = summary.get("settings") if summary is not None else None
    if isinstance(recorded, dict) and changed_settings(summary, settings):
        return recorded
    return None

