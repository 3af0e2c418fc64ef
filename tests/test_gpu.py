"""CUDA: resume, bf16, fp16 with loss scaling, torch.compile, incremental decoding and data
parallelism on a GPU.

Skipped without one (tests/conftest.py); run on a GPU machine with ``pytest -m gpu``. The
trainer picks the GPU by itself (reproduce.training.distributed.device), so these runs are the
real training path, not a copy of it.
"""

import json

import pytest
import torch

from reproduce.config import load_experiment
from reproduce.model.transformer import DecoderCache
from reproduce.special_tokens import BOS, PAD
from reproduce.training.checkpoints import load_checkpoint
from reproduce.training.launch import launch_training
from reproduce.training.trainer import Trainer
from tests.test_model import random_tokens, tiny_model
from tests.test_projected_loss import bf16_autocast_errors
from tests.test_training import _final, _key_bias_masks
from tests.training_fixtures import ROOT, random_corpus, small_variant

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    folder = tmp_path_factory.mktemp("corpora")
    return random_corpus(folder / "train", 400, seed=1), random_corpus(folder / "dev", 40, seed=2)


def _assert_same_model(a, b, config, atol):
    key_bias = _key_bias_masks(config, a)
    for name, tensor in a.items():
        mask = key_bias.get(name, torch.zeros_like(tensor, dtype=torch.bool))
        assert torch.allclose(tensor[~mask].float(), b[name][~mask].float(), atol=atol), name


def test_resuming_on_the_gpu_equals_an_uninterrupted_run_bitwise(corpora, tmp_path):
    # dropout: the CUDA generator must be restored too
    variant = small_variant(steps=12, dropout=0.1)
    straight = Trainer(variant, "t", *corpora, tmp_path / "straight")
    assert straight.device.type == "cuda"
    straight.run()
    Trainer(variant, "t", *corpora, tmp_path / "resumed").run(stop_after_steps=6)
    Trainer(variant, "t", *corpora, tmp_path / "resumed").run()
    a, b = _final(tmp_path / "straight")["model"], _final(tmp_path / "resumed")["model"]
    assert all(torch.equal(a[name], b[name]) for name in a)


def test_bf16_training_follows_fp32(corpora, tmp_path):
    losses = {}
    for precision in ("fp32", "bf16"):
        variant = small_variant(steps=30, dropout=0.0, warmup_steps=10, precision=precision)
        summary = Trainer(variant, "t", *corpora, tmp_path / precision).run()
        losses[precision] = summary["final_train_loss"]
        assert summary["device"] != "cpu"
    assert abs(losses["bf16"] - losses["fp32"]) / losses["fp32"] < 0.05


def test_fp16_training_with_loss_scaling_follows_fp32(corpora, tmp_path):
    losses = {}
    for precision in ("fp32", "fp16"):
        variant = small_variant(steps=30, dropout=0.0, warmup_steps=10, precision=precision)
        summary = Trainer(variant, "t", *corpora, tmp_path / precision).run()
        losses[precision] = summary["final_train_loss"]
        assert summary["precision"] == precision and summary["device"] != "cpu"
    assert abs(losses["fp16"] - losses["fp32"]) / losses["fp32"] < 0.05


def _fp16_trainer_overflowing_at_first(variant, corpora, folder) -> Trainer:
    trainer = Trainer(variant, "t", *corpora, folder)
    update = trainer.optimizer_update
    update.load_state_dict(update.state_dict() | {"scale": 2.0**30})
    return trainer


def test_resuming_fp16_on_the_gpu_equals_an_uninterrupted_run_bitwise(corpora, tmp_path):
    """On the GPU Adam is fused: the scaler hands it the overflow flag, and the kernel itself
    skips the update and leaves Adam's step count as it was."""
    variant = small_variant(steps=12, dropout=0.1, precision="fp16")
    _fp16_trainer_overflowing_at_first(variant, corpora, tmp_path / "straight").run()
    _fp16_trainer_overflowing_at_first(variant, corpora, tmp_path / "resumed").run(
        stop_after_steps=6)
    resumed = Trainer(variant, "t", *corpora, tmp_path / "resumed")
    assert resumed.precision == "fp16" and resumed.optimizer_update.loss_scale < 2.0**30
    resumed.run()
    a, b = _final(tmp_path / "straight")["model"], _final(tmp_path / "resumed")["model"]
    assert all(torch.equal(a[name], b[name]) for name in a)
    straight, again = (load_checkpoint(tmp_path / run / "checkpoints/step_00000012.pt")
                       for run in ("straight", "resumed"))
    assert straight["loss_scaler"] == again["loss_scaler"]
    assert straight["totals"]["skipped_steps"] == again["totals"]["skipped_steps"] > 0
    assert all(state["step"].item() == 12 for state in straight["optimizer"]["state"].values())


def test_auto_trains_in_bf16_where_the_gpu_has_bf16_units_else_in_fp16(corpora, tmp_path):
    expected = "bf16" if torch.cuda.get_device_capability()[0] >= 8 else "fp16"  # Ampere on
    summary = Trainer(small_variant(steps=2, dropout=0.0, precision="auto"), "t", *corpora,
                      tmp_path).run()
    assert summary["precision"] == expected


def test_compiled_training_equals_eager_on_the_gpu(corpora, tmp_path):
    eager = small_variant(steps=3, dropout=0.0)
    compiled = small_variant(steps=3, dropout=0.0, compile=True)
    Trainer(eager, "t", *corpora, tmp_path / "eager").run()
    Trainer(compiled, "t", *corpora, tmp_path / "compiled").run()
    _assert_same_model(_final(tmp_path / "eager")["model"], _final(tmp_path / "compiled")["model"],
                       eager.model, atol=1e-4)


def test_incremental_decoding_equals_the_full_pass_on_the_gpu():
    model = tiny_model().cuda()
    source = random_tokens(3, 7).cuda()
    source[2, 5:] = PAD
    target = torch.cat([torch.full((3, 1), BOS), random_tokens(3, 9, seed=7)], dim=1).cuda()
    full = model(source, target)
    encoded, cache = model.encode(source), DecoderCache()
    steps = [model.decode(target[:, t : t + 1], encoded, cache) for t in range(target.size(1))]
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=1e-4)


def test_two_ranks_sharing_the_gpu_equal_one_rank(corpora, tmp_path):
    """Two processes on one GPU talk through gloo (NCCL needs a GPU per rank)."""
    experiment = load_experiment(ROOT / "configs/tiny.yaml")
    variant = small_variant(steps=6, dropout=0.0)
    launch_training(experiment, variant, *corpora, tmp_path / "one", tmp_path, launcher="inline")
    launch_training(experiment, variant, *corpora, tmp_path / "two", tmp_path, launcher="local",
                    tasks=2)
    _assert_same_model(_final(tmp_path / "one")["model"], _final(tmp_path / "two")["model"],
                       variant.model, atol=1e-5)
    summary = json.loads((tmp_path / "two/train/summary.json").read_text())
    assert summary["world_size"] == 2 and summary["device"] != "cpu"


def test_chunked_loss_under_bf16_autocast_follows_the_fp32_formula():
    """Base sizes (d_model 512, vocabulary 37,000, 3,072 target tokens in 4,096 positions):
    bf16 logits cost ~3 significant digits against fp32; against the unfused path under the same
    autocast only the GEMMs' shapes differ (a rounding flipped here and there)."""
    errors = bf16_autocast_errors("cuda", batch=64, width=512, vocab=37000)
    loss, states, weight = errors["fp32"]
    assert loss < 1e-3 and states < 2e-2 and weight < 2e-2
    loss, states, weight = errors["autocast"]
    assert loss < 1e-4 and states < 1e-2 and weight < 1e-2
