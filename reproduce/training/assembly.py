"""A training run put together: every part of :class:`reproduce.training.trainer.Trainer` built
from the variant's settings and the run's folders, and the run resumed where a checkpoint of it
says.

Everything that reads a file happens here, before the loop is built: the encoded corpora are
opened (their pieces name the model's vocabulary), and the newest good checkpoint is found and
refused before anything is loaded from it unless it is of this run (the same settings,
:func:`reproduce.provenance.trained_settings`, and pieces) and no further than
``training.steps``. The parts, in the order the loop meets them: the data (the stream of steps
over the training corpus, the dev corpus), the model, the pass runner (eager, compiled or
captured; :mod:`reproduce.training.pass_runner`), the optimizer
(:mod:`reproduce.training.optimizer`) behind its update (clipping, skipping, fp16's loss scale;
:mod:`reproduce.training.precision`), the checkpoint schedule and the run's records.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from reproduce.config import Experiment, ResolvedVariant
from reproduce.data.encoded import EncodedCorpus
from reproduce.errors import CheckpointError
from reproduce.model.architectures import build_model
from reproduce.provenance import (RESTART_HINT, ModelIdentity, Pieces, check_same_pieces,
                                  check_trained_with, trained_settings)
from reproduce.training import distributed
from reproduce.training.batching import MicroBatchStream
from reproduce.training.checkpoints import CheckpointSchedule, latest_good_checkpoint
from reproduce.training.interruption import Interruption
from reproduce.training.optimizer import adam
from reproduce.training.pass_runner import PassRunner
from reproduce.training.precision import OptimizerUpdate, device_name, run_precision
from reproduce.training.run_records import MetricsCallback, RunRecords
from reproduce.training.trainer import Trainer

log = logging.getLogger(__name__)


def build_trainer(variant: ResolvedVariant, experiment: Experiment, train_dir: Path,
                  dev_dir: Path, output_dir: Path, on_metrics: MetricsCallback | None = None,
                  interruption: Interruption | None = None) -> Trainer:
    """``variant`` to be trained on ``experiment``'s encoded splits ``train_dir`` and
    ``dev_dir`` into ``output_dir``, from its newest good checkpoint there if any."""
    config, t = variant.model, variant.training
    rank, device = distributed.rank(), distributed.device()
    restart_hint = RESTART_HINT.format(folder=output_dir)
    train_corpus = EncodedCorpus.open(train_dir)
    pieces = Pieces.of_corpus(train_corpus)
    settings = trained_settings(variant, experiment)
    checkpoint_dir = output_dir / "checkpoints"
    path, state = _checkpoint_to_resume(checkpoint_dir, pieces, settings, t.steps,
                                        restart_hint) or (None, {})
    precision = run_precision(t.precision, device, state.get("precision"), path, restart_hint,
                              warn=rank == 0)
    torch.manual_seed(t.seed)  # identical initial weights on every rank
    model = build_model(config, pieces.size).to(device)
    trainer = Trainer(
        variant, experiment.name, ModelIdentity.of(config, pieces, settings), precision,
        stream=MicroBatchStream(train_corpus, t.tokens_per_step, t.micro_batches_per_step,
                                t.max_source_tokens, t.seed),
        dev_corpus=EncodedCorpus.open(dev_dir),
        model=model,
        passes=PassRunner(model, t, config.label_smoothing, device, precision),
        optimizer_update=OptimizerUpdate(adam(model, t), device.type,
                                         loss_scaling=precision == "fp16",
                                         clip_norm=t.clip_norm),
        schedule=CheckpointSchedule(checkpoint_dir, t.checkpoints.every_steps,
                                    t.checkpoints.every_minutes, t.checkpoints.keep_last,
                                    final_step=t.steps),
        records=RunRecords(output_dir / "train", on_metrics, writes=rank == 0),
        interruption=interruption or Interruption())
    if path is not None:
        trainer.load_state(state)
        log.info("resumed from %s at step %d", path, trainer.step)
    trainer.records.keep_until(trainer.step)  # the records after it (all, afresh) come again
    if rank == 0:
        log.info("training in %s (training.precision: %s) on %s", precision, t.precision,
                 device_name(device))
    return trainer


def _checkpoint_to_resume(directory: Path, pieces: Pieces, settings: dict, steps: int,
                          restart_hint: str) -> tuple[Path, dict] | None:
    """The newest good checkpoint in ``directory``, refused unless it is of this run (settings,
    pieces) and no further than ``steps``; None: start afresh."""
    found = latest_good_checkpoint(directory)
    if found is None:
        return None
    path, state = found
    check_same_pieces(path, state, pieces, restart_hint)
    check_trained_with(path, state, settings, restart_hint)
    if state["step"] > steps:
        raise CheckpointError(
            f"{path}: already at step {state['step']}, beyond training.steps = {steps}; only "
            f"raising steps continues a run; {restart_hint}")
    return found
