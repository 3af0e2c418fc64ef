"""A rank's share of a step fused into as few passes as fit: the trained model depends neither on
the cut into passes nor on the number of ranks; the training forward and loss compile into one
graph (no host synchronisation, no data-dependent shape), whose recompiles stay bounded."""

import json

import numpy as np
import pytest
import torch

from reproduce.experiment_file import load_experiment
from reproduce.data.encoded import EncodedCorpus
from reproduce.model.architectures import build_model
from reproduce.model.dropout import step_key
from reproduce.training.batching import (MicroBatchStream, collate, device_passes,
                                         target_tokens)
from reproduce.training.launch import launch_training
from reproduce.training.projected_loss import projected_label_smoothed_loss
from reproduce.training.teacher_forcing import TeacherForcedLoss, TeacherForcedStates
from reproduce.training.assembly import build_trainer
from tests.test_batching import wmt_like_corpus
from tests.test_training import _key_bias_masks
from tests.training_fixtures import TINY, ROOT, random_corpus
from tests.training_fixtures import one_torch_thread  # noqa: F401 (autouse: one torch thread)

TOLERANCE = 1e-5  # per parameter, one step after: float summation order, normalised by Adam


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    folder = tmp_path_factory.mktemp("corpora")
    return random_corpus(folder / "train", 1500, seed=1), random_corpus(folder / "dev", 40, seed=2)


def tiny_base(max_tokens_per_device: int):
    """configs/tiny.yaml's base (2 layers, d_model 64, P_drop 0.1, ~3,500 tokens a step), one
    step."""
    base = load_experiment(ROOT / "configs/tiny.yaml").variant("base")
    training = base.training.model_copy(update={
        "steps": 1, "max_tokens_per_device": max_tokens_per_device,
        "checkpoints": base.training.checkpoints.model_copy(update={"every_steps": 1}),
        "average_last": 1})
    return base.model_copy(update={"training": training})


def _trained(folder):
    summary = json.loads((folder / "train/summary.json").read_text())
    return torch.load(folder / "train/final.pt", weights_only=True)["model"], summary


def _assert_same_model(reference, model, config):
    key_bias = _key_bias_masks(config, reference)
    for name, tensor in reference.items():
        mask = key_bias.get(name, torch.zeros_like(tensor, dtype=torch.bool))
        difference = (tensor[~mask] - model[name][~mask]).abs().max().item()
        assert difference <= TOLERANCE, (name, difference)


@pytest.fixture(scope="module")
def one_pass(corpora, tmp_path_factory):
    folder = tmp_path_factory.mktemp("one_pass")
    variant = tiny_base(max_tokens_per_device=16384)
    build_trainer(variant, TINY, *corpora, folder).run()
    return variant, folder


def test_one_rank_makes_one_pass_and_trains_the_model_of_many_small_passes(one_pass, corpora,
                                                                           tmp_path):
    variant, folder = one_pass
    reference, summary = _trained(folder)
    assert summary["mean_passes_per_step"] == 1
    assert summary["mean_target_tokens_per_step"] > 3000
    small = tiny_base(max_tokens_per_device=256)
    build_trainer(small, TINY, *corpora, tmp_path).run()
    model, many = _trained(tmp_path)
    assert many["mean_passes_per_step"] > 8  # more passes than the step's 8 micro-batches
    _assert_same_model(reference, model, variant.model)
    # The settings that trained them are the same: a run may resume on a GPU of another size.
    assert many["fingerprint"] == summary["fingerprint"]


@pytest.mark.slow
@pytest.mark.parametrize("settings", [{}, {"cuda_graphs": True, "pass_buckets": True}],
                         ids=["loss-apart", "loss-inside-the-pass"])
def test_two_ranks_train_the_model_of_one_rank_in_one_pass(one_pass, corpora, tmp_path,
                                                           settings):
    """Real processes: submitit's local executor starts two gloo ranks, as Slurm would; each
    fuses its 4 micro-batches into one pass. With cuda_graphs' settings, the pass is the one a
    GPU captures (states and loss in one module under DistributedDataParallel, buckets of dummy
    tokens), run eager here: the projection's gradient, computed inside the loss operator's
    forward, is all-reduced with the others."""
    variant, folder = one_pass
    trained = variant.model_copy(
        update={"training": variant.training.model_copy(update=settings)})
    experiment = load_experiment(ROOT / "configs/tiny.yaml")
    launch_training(experiment, trained, *corpora, tmp_path / "two", tmp_path, launcher="local",
                    tasks=2)
    model, summary = _trained(tmp_path / "two")
    assert summary["world_size"] == 2 and summary["mean_passes_per_step"] == 1
    _assert_same_model(_trained(folder)[0], model, variant.model)


def _loss_of_a_pass(model: TeacherForcedStates, batch, label_smoothing: float,
                    compiled_chunks: bool = False) -> torch.Tensor:
    states = model(batch.source, batch.target_input, batch.source_index, batch.target_index,
                   batch.source_noise, batch.target_noise)
    targets = target_tokens(batch.target_output, batch.target_index)
    loss, _ = projected_label_smoothed_loss(states, model.model.embedding.weight, targets,
                                            label_smoothing,
                                            compiled=compiled_chunks)
    return loss


@pytest.mark.parametrize("compiled_chunks", [False, True])
@pytest.mark.parametrize("attention_dropout", [0.0, 0.1])
def test_the_training_forward_and_loss_compile_into_one_graph(corpora, attention_dropout,
                                                              compiled_chunks):
    """``fullgraph=True`` refuses any graph break: a boolean-mask index, ``.item()``,
    ``.tolist()`` or ``nonzero`` in the forward pass or the loss would be one (and a host
    synchronisation on a GPU). AOTAutograd traces the backward pass too. The loss's own
    compiled chunk functions (``compiled=True``, as the trainer runs them outside the compiled
    forward) are traced into the enclosing graph as well."""
    variant = tiny_base(max_tokens_per_device=4096)
    config = variant.model.model_copy(update={"attention_dropout": attention_dropout})
    corpus = EncodedCorpus.open(corpora[0])
    torch.manual_seed(0)
    model = TeacherForcedStates(build_model(config, corpus.vocab_size)).train()
    batch = collate(corpus, np.arange(64), multiple=8, step_key=step_key(1, 1))
    compiled = torch.compile(_loss_of_a_pass, fullgraph=True, backend="aot_eager")
    loss = compiled(model, batch, config.label_smoothing, compiled_chunks)
    loss.backward()
    assert torch.allclose(loss, _loss_of_a_pass(model, batch, config.label_smoothing), rtol=1e-5)
    assert model.model.embedding.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("autocast", [None, torch.bfloat16])
def test_with_cuda_graphs_the_loss_joins_the_compiled_pass_in_one_graph(corpora, autocast):
    """``training.cuda_graphs``' pass (:class:`TeacherForcedLoss`): forward, then the loss with
    its gradients for the loss gradient announced, in one graph with no break, so that a CUDA
    graph recorded around it holds the loss too; the same loss and gradients as eager, in fp32
    and under bf16 autocast (whose dtype the traced loss operator is given)."""
    variant = tiny_base(max_tokens_per_device=4096)
    corpus = EncodedCorpus.open(corpora[0])
    torch.manual_seed(0)
    model = TeacherForcedLoss(build_model(variant.model, corpus.vocab_size),
                              variant.model.label_smoothing).train()
    batch = collate(corpus, np.arange(64), multiple=8, step_key=step_key(1, 1))
    inputs = (batch.source, batch.target_input, batch.source_index, batch.target_index,
              batch.source_noise, batch.target_noise, batch.target_output, batch.target_weight,
              torch.tensor(0.25))
    weight = model.states.model.embedding.weight
    losses, gradients = [], []
    for call in (model, torch.compile(model, fullgraph=True, backend="aot_eager")):
        with torch.autocast("cpu", dtype=autocast, enabled=autocast is not None):
            loss = call(*inputs)
        (loss * 0.25).backward()
        losses.append(loss)
        gradients.append(weight.grad)
        weight.grad = None
    assert torch.allclose(losses[1], losses[0], rtol=1e-5)
    assert torch.allclose(gradients[1], gradients[0], rtol=1e-4, atol=1e-7)


def test_recompiles_stay_bounded_over_hundreds_of_steps_of_wmt_length_data(tmp_path):
    """Batch sizes and widths vary from pass to pass; widths are rounded to pad_to_multiple and
    torch.compile makes the sizes dynamic after its first recompile, so a few graphs serve every
    pass (counted on dynamo's eager backend: the graphs, not the kernels, are what recompiles)."""
    corpus = wmt_like_corpus(tmp_path / "wmt", 3000, seed=1)
    variant = tiny_base(max_tokens_per_device=2048)
    config = variant.model.model_copy(update={"layers": 1, "d_model": 16, "d_ff": 32,
                                              "heads": 2, "d_k": 8, "d_v": 8})
    torch.manual_seed(0)
    model = TeacherForcedStates(build_model(config, corpus.vocab_size)).train()
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    forward = torch.compile(model, backend="eager")
    stream = MicroBatchStream(corpus, 3000, 8, 256, seed=1)
    shapes = set()
    with torch.no_grad():
        for step in range(1, 201):
            share = np.concatenate(stream.next_step())
            for indices in device_passes(share, corpus, 2048):
                batch = collate(corpus, indices, multiple=8, step_key=step_key(1, step))
                shapes.add((tuple(batch.source.shape), tuple(batch.target_input.shape)))
                forward(batch.source, batch.target_input, batch.source_index, batch.target_index,
                        batch.source_noise, batch.target_noise)
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    assert len(shapes) > 100  # the passes really vary
    assert graphs <= 4, graphs  # 3 on torch 2.13
