"""What a trained model is (:mod:`reproduce.provenance`): the settings its weights depend on, and
the digest Snakemake is given for a training."""

from pathlib import Path

from reproduce.experiment_file import load_experiment
from reproduce.provenance import fingerprint, trained_settings, training_digest, training_steps

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


def test_a_stale_training_keeps_the_steps_it_was_trained_for():
    """Raised steps replan a training, which continues from its last checkpoint; a stale one's
    are those its summary records (the trainer refuses its checkpoints). A current or
    unfinished training, or a summary that records no settings, gets the experiment's steps."""
    recorded, current = {"model.dropout": 0.1}, {"model.dropout": 0.3}
    assert training_steps({"settings": recorded, "steps": 600}, current, 900) == 600
    assert training_steps({"settings": current, "steps": 600}, current, 900) == 900
    assert training_steps({"steps": 600}, current, 900) == 900
    assert training_steps({"settings": recorded}, current, 900) == 900
    assert training_steps(None, current, 900) == 900


def _with_train_source(experiment, **update):
    """The experiment with its first train source edited."""
    train = [experiment.data.train[0].model_copy(update=update), *experiment.data.train[1:]]
    return experiment.model_copy(
        update={"data": experiment.data.model_copy(update={"train": train})})


def test_a_source_pinned_by_its_sha256_is_the_same_data_at_another_url():
    """A corpus moved to a mirror, served over https or signed anew is the same file when its
    sha256 is declared: the trained model is not stale. Another sha256 is other data, and so is
    another URL of a source that declares none (its URL is all that names its bytes)."""
    experiment, variant = _tiny()
    assert experiment.data.train[0].sha256 is not None
    settings = trained_settings(variant, experiment)
    moved = _with_train_source(experiment, url="https://mirror.example.org/c.tgz?sig=1")
    assert trained_settings(variant, moved) == settings
    repinned = _with_train_source(experiment, sha256="0" * 64)
    assert trained_settings(variant, repinned) != settings
    unpinned = _with_train_source(experiment, sha256=None)
    unpinned_moved = _with_train_source(unpinned, url="https://mirror.example.org/c.tgz")
    assert trained_settings(variant, unpinned_moved) != trained_settings(variant, unpinned)
