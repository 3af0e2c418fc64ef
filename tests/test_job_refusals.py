"""A submitted training job that stops on an expected error reports the task's own one line (with
the job and its log named), as the same run inline would, not submitit's traceback text."""

import pytest

from reproduce.experiment_file import load_experiment
from reproduce.errors import ReproduceError
from reproduce.training.launch import TrainingJobRefused, launch_training
from tests.training_fixtures import ROOT, corpus_pair, small_variant
from tests.training_fixtures import one_torch_thread  # noqa: F401 (autouse: one torch thread)

DIVERGING = 1e10  # training.lr_scale: the loss is nan from step 2 on


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    return corpus_pair(tmp_path_factory.mktemp("corpora"), 200)


@pytest.mark.parametrize("tasks", [1, 2])
def test_a_refusal_inside_a_submitted_job_comes_back_as_its_one_line(corpora, tmp_path, tasks,
                                                                     monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    experiment = load_experiment(ROOT / "configs/tiny.yaml")
    folder = tmp_path / "variant"
    with pytest.raises(TrainingJobRefused) as raised:
        launch_training(experiment, small_variant(steps=9, lr_scale=DIVERGING), *corpora,
                        folder, tmp_path, launcher="local", tasks=tasks)
    message = str(raised.value)
    assert isinstance(raised.value, ReproduceError) and raised.value.kind == "NonFiniteLossError"
    assert message.startswith("step 2: the training loss is nan (fp32): training diverged")
    assert "\n" not in message and "Traceback" not in message
    assert "; log: " in message and message.endswith("_log.err)")
    # The job ran the ranks asked for, each with its own log.
    assert len(list((folder / "submitit").glob("*_log.err"))) == tasks
    # Consumed: a later job that happens to get the same id cannot read this one's refusal.
    assert not list((folder / "submitit").glob("*_refusal.json"))

