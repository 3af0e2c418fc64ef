"""What a trained model is (:mod:`reproduce.provenance`): the settings its weights depend on, and
the digest Snakemake is given for a training."""

from pathlib import Path

from reproduce.experiment_file import load_experiment
from reproduce.provenance import fingerprint, trained_settings, training_digest

ROOT = Path(__file__).resolve().parents[1]


def _tiny():
    experiment = load_experiment(ROOT / "configs/tiny.yaml")
    return experiment, experiment.variant("base")


def test_averaging_saving_logging_and_the_test_set_are_not_trained_on():
    """How many checkpoints are averaged or kept, how often a run logs, and which test set it is
    scored on do not change its weights, and a longer run (more steps) continues a shorter one:
    editing them keeps the fingerprint, so a finished training is neither replanned nor marked
    stale, and its checkpoints still resume."""
    experiment, variant = _tiny()
    training = variant.training
    edited = variant.model_copy(
        update={
            "training": training.model_copy(
                update={
                    "average_last": training.average_last + 1,
                    "log_every_steps": 1,
                    "steps": 7,
                    "checkpoints": training.checkpoints.model_copy(update={"keep_last": 9}),
                }
            )
        }
    )
    other_test = experiment.model_copy(
        update={
            "data": experiment.data.model_copy(
                update={
                    "test": [experiment.data.test[0].model_copy(update={"name": "another_test"})]
                }
            )
        }
    )
    settings = trained_settings(variant, experiment)
    assert trained_settings(edited, experiment) == settings
    assert trained_settings(variant, other_test) == settings
    assert not any(key.startswith("data.test") for key in settings)


def test_a_finished_training_keeps_the_digest_of_the_settings_it_was_trained_with():
    """Snakemake is given the digest of the settings a finished training recorded, not of the
    edited ones, so that it does not delete its outputs to retrain what the trainer would refuse;
    an unfinished or current one gets the digest of the settings the experiment gives now."""
    recorded, current = {"model.dropout": 0.1}, {"model.dropout": 0.3}
    assert training_digest({"settings": recorded}, current) == fingerprint(recorded)
    assert training_digest({"settings": current}, current) == fingerprint(current)
    assert training_digest(None, current) == fingerprint(current)
    assert fingerprint(recorded) != fingerprint(current)
