"""Faults refused before training or stopped at once, each with one line: a folder where a
checkpoint belongs, a loss gone non-finite, SIGHUP, too few checkpoints to average."""

import pytest
import torch

from reproduce.training.checkpoints import CheckpointError
from reproduce.training.trainer import Trainer
from tests.training_fixtures import random_corpus, small_variant


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    folder = tmp_path_factory.mktemp("corpora")
    return random_corpus(folder / "train", 200, seed=1), random_corpus(folder / "dev", 20, seed=2)


# -- a folder where a checkpoint belongs ---------------------------------------------------------
@pytest.mark.parametrize("name", ["step_00000006.pt", "step_00000004.pt.sha256"])
def test_a_folder_where_a_checkpoint_belongs_is_refused_before_training(corpora, tmp_path, name):
    folder = tmp_path / "run"
    Trainer(small_variant(steps=9), "t", *corpora, folder).run(stop_after_steps=4)
    path = folder / "checkpoints" / name
    path.unlink(missing_ok=True)
    path.mkdir()
    with pytest.raises(CheckpointError) as raised:
        Trainer(small_variant(steps=9), "t", *corpora, folder)
    assert str(raised.value) == (f"{path}: a folder where training writes a checkpoint file; "
                                 f"move it out of {folder / 'checkpoints'}")
