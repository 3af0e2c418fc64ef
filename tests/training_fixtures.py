"""A small random parallel corpus and a tiny variant for training tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from reproduce.data.encoded import EncodedCorpusWriter
from reproduce.experiment_file import load_experiment

ROOT = Path(__file__).resolve().parents[1]
VOCAB = 40
# The experiment whose name, data and BPE settings the tests' trainings record (their variants
# are built here or taken from it; their data are the corpora given).
TINY = load_experiment(ROOT / "configs/tiny.yaml")


def write_encoded(out_dir: Path, vocab_size: int, pairs: list[tuple[list[int], list[int]]]) -> None:
    """Write a small corpus in one go."""
    writer = EncodedCorpusWriter(out_dir, vocab_size, {})
    writer.write([source for source, _ in pairs], [target for _, target in pairs])
    writer.close()


def random_corpus(directory: Path, pairs: int, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    data = []
    for _ in range(pairs):
        source = rng.integers(4, VOCAB, rng.integers(2, 12)).tolist()
        data.append((source, [((token * 7) % (VOCAB - 4)) + 4 for token in reversed(source)]))
    write_encoded(directory, VOCAB, data)
    return directory


def corpus_pair(folder: Path, pairs: int) -> tuple[Path, Path]:
    """A train corpus of ``pairs`` pairs and a dev corpus a tenth its size."""
    return (random_corpus(folder / "train", pairs, seed=1),
            random_corpus(folder / "dev", pairs // 10, seed=2))


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """One thread per trainer in the modules that import this fixture, as their trainer
    subprocesses have (and less contention on small machines)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def small_variant(steps: int, dropout: float = 0.1, **training):
    experiment = load_experiment(ROOT / "configs/tiny.yaml")
    base = experiment.variant("base")
    model = base.model.model_copy(update={"layers": 1, "d_model": 16, "d_ff": 32, "heads": 2,
                                          "d_k": 8, "d_v": 8, "dropout": dropout})
    settings = {"steps": steps, "tokens_per_step": 300, "max_tokens_per_device": 256,
                "warmup_steps": 10, "lr_scale": 1.0, "log_every_steps": 2, "eval_every_steps": 4,
                "checkpoints": base.training.checkpoints.model_copy(
                    update={"every_steps": 3, "keep_last": 5}),
                "average_last": 2} | training
    return base.model_copy(update={"model": model,
                                   "training": base.training.model_copy(update=settings)})
