"""Whether a variant's finished training is of the settings its experiment file gives now.

A finished run's ``train/summary.json`` records the settings it was trained with
(:func:`reproduce.config.trained_settings`). After an edit of the experiment file:

- Snakemake would replan the variant's training and, as it does before any job, delete the
  job's outputs (``final.pt``, ``summary.json``, the checkpoint list), only for the trainer to
  refuse the old checkpoints. Instead the workflow warns of each stale variant once, naming the
  edit; where its training outputs are all there, the train rule's fingerprint stays the one
  it was trained with, so nothing is replanned; where some are missing,
  :func:`refuse_stale_training` stops the plan while Snakemake builds it, before the others
  are deleted.
- The tables would show the old model's scores beside the new settings; they mark the variant
  stale instead (:mod:`reproduce.tables.results`).

Raising ``training.steps`` is not an edit of this kind: steps are not among the trained settings,
and the run continues. A summary written before summaries recorded their settings cannot tell
whether the file was edited since: it is treated as stale (:data:`NOT_RECORDED`), warned of once,
left as it is and not shown beside settings it may not have been trained with.
"""

from __future__ import annotations

from pathlib import Path

from reproduce.config import differing_settings
from reproduce.errors import ConfigError


class StaleTrainingError(ConfigError):
    """A finished training was of other settings than the experiment file now gives."""


# What :func:`changed_settings` gives for a summary written before summaries recorded settings.
NOT_RECORDED = "settings not recorded (summary written by a version before summaries recorded them)"


def changed_settings(summary: dict | None, settings: dict) -> list[str]:
    """``key: recorded -> current`` for each setting the summary's run was trained without
    (:data:`NOT_RECORDED` alone when it records none); empty when it is current or absent."""
    if summary is None:
        return []
    if not isinstance(summary.get("settings"), dict):
        return [NOT_RECORDED]
    return differing_settings(summary["settings"], settings)


def stale_training_message(variant_dir: Path, summary: dict | None, settings: dict) -> str | None:
    """What to tell of a finished variant whose settings were edited; None when it is current."""
    changes = changed_settings(summary, settings)
    if not changes:
        return None
    if changes == [NOT_RECORDED]:
        return (f"{variant_dir}: {NOT_RECORDED}, so whether it was trained with the settings the "
                f"experiment file now gives cannot be told; it is not retrained, its results stay "
                f"as they are and are marked so in the tables instead of shown. To train it anew, "
                f"move {variant_dir} aside (or run its `reproduce train` with --restart)")
    return (f"{variant_dir}: trained with other settings than the experiment file now gives "
            f"({'; '.join(changes)}); it is not retrained, its results stay as they are and are "
            f"marked stale in the tables. To train it anew, move {variant_dir} aside (or run its "
            f"`reproduce train` with --restart), or undo the edit")


def refuse_stale_training(variant_dir: Path, summary: dict | None, settings: dict) -> None:
    """Refuse to plan the training of a finished variant whose settings were edited."""
    message = stale_training_message(variant_dir, summary, settings)
    if message is not None:
        raise StaleTrainingError(message)
