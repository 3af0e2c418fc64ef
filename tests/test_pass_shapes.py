"""Passes of few shapes (``training.pass_buckets``): dummy sentences and tokens change neither the
loss nor any gradient, and the shapes stay few and bounded; and a training step that neither
logs nor checkpoints does not wait for the host."""

import importlib.util
import json
import sys
from collections import Counter
from datetime import timedelta

import numpy as np
import pytest
import torch

from reproduce.config import ModelConfig
from reproduce.data.encoded import EncodedCorpus
from reproduce.experiment_file import load_experiment
from reproduce.model.architectures import build_model
from reproduce.model.dropout import step_key
from reproduce.special_tokens import PAD
from reproduce.training.checkpoints import list_checkpoints, load_checkpoint
from reproduce.training.batching import (TOKEN_QUANTA, MicroBatchStream, collate, device_passes,
                                         packed_dummy_rows, pass_shape, target_tokens)
from reproduce.training.projected_loss import projected_label_smoothed_loss
from reproduce.training.teacher_forcing import TeacherForcedStates
from reproduce.training.assembly import build_trainer
from reproduce.training.trainer import NonFiniteLossError, Trainer
from tests.test_batching import wmt_like_corpus
from tests.test_packed_attention import attend_each_sequence
from tests.test_training import _key_bias_masks
from tests.training_fixtures import (ROOT, TINY, VOCAB, random_corpus, small_variant,
                                     write_encoded)
from tests.training_fixtures import one_torch_thread  # noqa: F401 (autouse: one torch thread)

sys.path.insert(0, str(ROOT / "benchmarks"))  # what step_shapes.py imports beside it, as a script
_spec = importlib.util.spec_from_file_location("step_shapes", ROOT / "benchmarks/step_shapes.py")
step_shapes = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(step_shapes)


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    folder = tmp_path_factory.mktemp("corpora")
    return random_corpus(folder / "train", 400, seed=1), random_corpus(folder / "dev", 40, seed=2)


def _loss_and_gradients(model: TeacherForcedStates, batch, label_smoothing: float):
    model.zero_grad()
    states = model(batch.source, batch.target_input, batch.source_index, batch.target_index,
                   batch.source_noise, batch.target_noise)
    targets = target_tokens(batch.target_output, batch.target_index)
    loss, _ = projected_label_smoothed_loss(states, model.model.embedding.weight, targets,
                                            label_smoothing,
                                            chunk_rows=50, token_weight=batch.target_weight)
    loss.backward()
    return loss.detach(), {name: parameter.grad.clone()
                           for name, parameter in model.named_parameters()}


TINY_BASE = load_experiment(ROOT / "configs/tiny.yaml").variant("base").model


@pytest.mark.parametrize("config", [
    TINY_BASE.model_copy(update={"dropout": 0.1}),
    TINY_BASE.model_copy(update={"dropout": 0.1, "attention_dropout": 0.1}),
    TINY_BASE.model_copy(update={"dropout": 0.1, "attention_radius": 3}),
    TINY_BASE.model_copy(update={"dropout": 0.1, "attention_dropout": 0.1, "attention_radius": 3}),
    ModelConfig(architecture="rnn", layers=2, d_model=16, dropout=0.1),
], ids=["transformer", "attention-dropout", "restricted", "restricted-attention-dropout", "rnn"])
def test_dummy_sentences_and_tokens_change_neither_the_loss_nor_any_gradient(corpora, config):
    """float64, dropout on: a bucketed pass (dummy rows after 37 pairs, dummy tokens in the
    padding) and the same pairs unbucketed give the same loss and gradients to rounding; with
    restricted self-attention too, where padding attends padding, and the recurrent baseline,
    whose encoder reads every position up to a sentence's length."""
    corpus = EncodedCorpus.open(corpora[0])
    torch.manual_seed(0)
    model = TeacherForcedStates(build_model(config, corpus.vocab_size)).double().train()
    pairs = np.arange(5, 42)
    key = step_key(1, 3)
    plain = collate(corpus, pairs, multiple=8, step_key=key)
    shape = pass_shape(corpus.source_lengths[pairs] + 1, corpus.target_lengths[pairs] + 1,
                       max_tokens=512 * TOKEN_QUANTA, multiple=8)
    bucketed = collate(corpus, pairs, multiple=8, step_key=key, shape=shape)
    assert bucketed.source.shape == bucketed.target_input.shape == (64, shape.width)
    for side in (bucketed.source_index, bucketed.target_index):
        assert side.numel() == shape.tokens
    assert shape.tokens - plain.target_index.numel() > 100  # real dummy work
    loss, gradients = _loss_and_gradients(model, plain, config.label_smoothing)
    bucketed_loss, bucketed_gradients = _loss_and_gradients(model, bucketed,
                                                            config.label_smoothing)
    assert torch.allclose(bucketed_loss, loss, rtol=1e-12, atol=0)
    for name, gradient in gradients.items():
        assert torch.allclose(bucketed_gradients[name], gradient, rtol=1e-9, atol=1e-14), name
    assert gradients["model.embedding.weight"].abs().sum() > 0


def test_without_the_weights_dummy_tokens_would_count():
    """What the test above relies on: the loss weighs the dummy tokens by 0; unweighted they
    are scored as tokens (so its equality is not there by construction)."""
    torch.manual_seed(0)
    states, weight = torch.randn(6, 4, dtype=torch.float64), torch.randn(9, 4, dtype=torch.float64)
    targets = torch.tensor([5, 6, 7, 8, PAD, PAD])
    token_weight = torch.tensor([1.0, 1, 1, 1, 0, 0])
    real, _ = projected_label_smoothed_loss(states[:4], weight, targets[:4], 0.1)
    weighted, _ = projected_label_smoothed_loss(states, weight, targets, 0.1,
                                                token_weight=token_weight)
    unweighted, _ = projected_label_smoothed_loss(states, weight, targets, 0.1)
    assert torch.allclose(weighted, real, rtol=1e-14) and not torch.allclose(unweighted, real)


def test_collated_buckets_keep_every_pair_as_it_was_and_put_dummies_where_no_token_looks(
        corpora):
    corpus = EncodedCorpus.open(corpora[0])
    pairs = np.arange(100, 123)
    plain = collate(corpus, pairs, multiple=8, step_key=step_key(1, 1))
    shape = pass_shape(corpus.source_lengths[pairs] + 1, corpus.target_lengths[pairs] + 1, 4096, 8)
    bucketed = collate(corpus, pairs, multiple=8, step_key=step_key(1, 1), shape=shape)
    real = bucketed.target_weight.bool()
    assert int(real.sum()) == plain.target_index.numel()
    for side, (tensor, index, noise) in enumerate([
            ("source", "source_index", "source_noise"),
            ("target_input", "target_index", "target_noise")]):
        plain_tensor, tensor = getattr(plain, tensor), getattr(bucketed, tensor)
        assert torch.equal(tensor[:len(pairs), :plain_tensor.size(1)], plain_tensor)
        positions = getattr(bucketed, index)
        assert torch.equal(positions, positions.unique())  # ascending, each once
        mask = real if side == 1 else _real_source(bucketed, plain)
        # the pairs' tokens: the same ids and dropout keys as unbucketed
        assert torch.equal(tensor.reshape(-1)[positions[mask]],
                           plain_tensor.reshape(-1)[getattr(plain, index)])
        assert torch.equal(getattr(bucketed, noise)[mask], getattr(plain, noise))
        # dummy tokens are PAD (hidden as keys; targets: after their row's end)
        assert (tensor.reshape(-1)[positions[~mask]] == PAD).all()
    # dummy rows are empty pairs: one position, not a token, that attention may look at
    assert (bucketed.source[len(pairs):, 0] != PAD).all()
    assert not np.isin(np.arange(len(pairs), shape.rows) * shape.width,
                       bucketed.source_index.numpy()).any()


def _real_source(bucketed, plain):
    """Which of a bucketed batch's source tokens are the pairs': their positions, re-based
    from the unbucketed width."""
    width, plain_width = bucketed.source.size(1), plain.source.size(1)
    rows, columns = plain.source_index // plain_width, plain.source_index % plain_width
    return torch.from_numpy(np.isin(bucketed.source_index.numpy(),
                                    (rows * width + columns).numpy()))


def test_pass_shapes_are_few_bounded_and_hold_their_passes(tmp_path):
    """A WMT-like length distribution in 25k-token steps on one rank, as one pass a step: every
    pass fits its shape, each size within a factor of its pass's (tokens within a quantum),
    and the shapes are few."""
    corpus = wmt_like_corpus(tmp_path / "wmt", 40_000, seed=2)
    stream = MicroBatchStream(corpus, 25_000, 8, 256, seed=1)
    max_tokens, quantum = 32_768, 32_768 // TOKEN_QUANTA
    shapes, real, computed = set(), 0, 0
    for _ in range(150):
        (pairs,) = device_passes(np.concatenate(stream.next_step()), corpus, max_tokens)
        sizes = [corpus.source_lengths[pairs] + 1, corpus.target_lengths[pairs] + 1]
        shape = pass_shape(*sizes, max_tokens, 8)
        widest = max(int(side.max()) for side in sizes)
        tokens = max(int(side.sum()) for side in sizes)
        assert len(pairs) <= shape.rows < 2 * len(pairs)
        assert widest <= shape.width < 2 * widest and shape.width % 8 == 0
        assert tokens <= shape.tokens < tokens + quantum and shape.tokens % quantum == 0
        assert shape.tokens <= max_tokens
        shapes.add(shape)
        real += sum(int(side.sum()) for side in sizes)
        computed += 2 * shape.tokens
    assert len(shapes) <= 16, sorted(shapes, key=lambda shape: shape.tokens)
    assert 1 - real / computed < 0.06


def test_a_step_that_neither_logs_nor_saves_does_not_synchronise_with_the_host(corpora, tmp_path):
    """The benchmark's counter (.item(), .tolist(), bool(), float(), int(), .numpy(), .cpu(),
    nonzero on tensors, and the ATen operations under them) finds nothing in such a step, with
    buckets or without; its totals are read from host memory once the next step is queued."""
    for buckets in (False, True):
        variant = small_variant(steps=20, log_every_steps=10, eval_every_steps=10,
                                pass_buckets=buckets)
        trainer = build_trainer(variant, TINY, *corpora, tmp_path / str(buckets))
        for _ in range(2):  # warm-up: Adam's state, the first shapes
            trainer._train_step().outcome()
        with step_shapes.HostSyncCounter() as counter:
            queued = trainer._train_step()
        assert trainer.step == 3 and counter.total() == 0, (counter.methods, counter.operations)
        assert queued.readings.device.type == "cpu"
        assert np.isfinite(queued.outcome().loss)


ASKED_AT = 8  # rank 1 is asked to stop as it queues this step


@pytest.mark.parametrize("every_minutes", [0.0, 1e-6], ids=["grid-saves", "timed-saves"])
def test_ranks_learn_of_a_stop_with_a_steps_totals_and_stop_together(corpora, tmp_path,
                                                                      every_minutes):
    """Two gloo ranks, rank 1 asked to stop as it queues step 8: the request travels in step 8's
    totals, and both ranks stop after step 9 (rank 0 saving it), by when both have read them,
    also where rank 0 saves every step on the clock (reading each step's totals at once, rank 1
    a step late). No round of the loop whose step neither logs nor saves reads more from the
    device than the totals of the step before (one ``.tolist()``): agreeing on a stop at every
    step would make each step wait for the device."""
    torch.multiprocessing.spawn(_two_rank_loop, args=(corpora, tmp_path, every_minutes),
                                nprocs=2)
    ranks = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(2)]
    assert [rank["step"] for rank in ranks] == [ASKED_AT + 1] * 2
    assert ranks[0]["reason"] == "another rank was asked to stop"
    assert (tmp_path / f"run/checkpoints/step_{ASKED_AT + 1:08d}.pt").exists()
    saved_on_the_clock = every_minutes > 0
    for rank, record in enumerate(ranks):
        if rank == 0 and saved_on_the_clock:
            continue
        quiet = [reads for step, reads in record["rounds"] if step % 6 and step <= ASKED_AT]
        assert len(quiet) == ASKED_AT - 1 and all(reads in ({}, {"tolist": 1})
                                                  for reads in quiet), record["rounds"]


def _two_rank_loop(rank: int, corpora, folder, every_minutes: float) -> None:
    """One rank of the test above: 12 steps saved at 6 and 12 (and every ``every_minutes``),
    logged and evaluated at 12; writes the step it stopped at, its stop reason and, for each
    round of the loop (from one step's ``_train_step`` to the next's), its step and the host
    reads counted."""
    torch.set_num_threads(1)
    # ranks that disagree on the last step wait for each other's collective: fail within a minute
    torch.distributed.init_process_group("gloo", init_method=f"file://{folder}/store",
                                         rank=rank, world_size=2, timeout=timedelta(seconds=60))
    checkpoints = TINY.variant("base").training.checkpoints.model_copy(
        update={"every_steps": 6, "every_minutes": every_minutes})
    variant = small_variant(steps=12, log_every_steps=12, eval_every_steps=12,
                            checkpoints=checkpoints)
    trainer = build_trainer(variant, TINY, *corpora, folder / "run")
    counter, rounds, queue_step = step_shapes.HostSyncCounter(), [], trainer._train_step

    def counted_step():
        rounds.append([trainer.step + 1, Counter(counter.methods)])
        if rank == 1 and trainer.step + 1 == ASKED_AT:
            trainer.interruption.request("asked by the test")
        return queue_step()

    trainer._train_step = counted_step
    with counter:
        trainer.run()
    ends = [*(start for _, start in rounds[1:]), counter.methods]
    reads = [[step, dict(end - start)]
             for (step, start), end in zip(rounds, ends, strict=True)]
    (folder / f"rank{rank}.json").write_text(json.dumps(
        {"step": trainer.step, "reason": trainer.interruption.reason, "rounds": reads}))
    torch.distributed.destroy_process_group()


def test_the_counter_counts_what_synchronises():
    """The counter of the test above is not blind: each syncing call and operation counts."""
    tensor = torch.arange(4.0)
    with step_shapes.HostSyncCounter() as counter:
        tensor.sum().item()
        tensor.tolist()
        bool(tensor[0])
        float(tensor[1])
        tensor.nonzero()
    assert counter.methods == {"item": 1, "tolist": 1, "__bool__": 1, "__float__": 1,
                               "nonzero": 1}
    assert counter.operations["aten::_local_scalar_dense"] >= 3
    assert counter.operations["aten::nonzero"] == 1


def test_training_in_buckets_trains_the_model_of_training_without(corpora, tmp_path,
                                                                  monkeypatch):
    """Six steps with dropout, bucketed and not: the same model, to float summation order (as
    any other cut of a step into passes, tests/test_fused_passes.py). The run's summary counts
    the passes' tokens: the pairs' alone without buckets, each bucket's on both sides with."""
    shapes = []
    bucket = Trainer._bucket
    monkeypatch.setattr(Trainer, "_bucket", lambda trainer, indices: shapes.append(
        bucket(trainer, indices)) or shapes[-1])
    models = {}
    for buckets in (False, True):
        folder = tmp_path / str(buckets)
        shapes.clear()
        summary = build_trainer(small_variant(steps=6, dropout=0.1, pass_buckets=buckets), TINY,
                                *corpora, folder).run()
        models[buckets] = load_checkpoint(folder / "train/final.pt")["model"]
        real = summary["source_tokens"] + summary["target_tokens"]
        computed = sum(2 * shape.tokens for shape in shapes) if buckets else real
        assert summary["pass_tokens"] == computed
        assert summary["dummy_token_share"] == pytest.approx(1 - real / computed)
        assert (summary["dummy_token_share"] > 0) == buckets
    config = small_variant(steps=6).model
    key_bias = _key_bias_masks(config, models[False])
    for name, tensor in models[False].items():
        mask = key_bias.get(name, torch.zeros_like(tensor, dtype=torch.bool))
        assert torch.allclose(tensor[~mask], models[True][name][~mask], atol=1e-5), name


def test_a_non_finite_step_read_a_step_late_leaves_the_weights_of_the_step_before(corpora,
                                                                                 tmp_path):
    """The totals of step 4 (one non-finite gradient, then finite ones; it neither logs nor
    saves) are read once step 5 is queued: step 5 must not be applied either, so the run stops
    with step 3's weights and Adam's moments, nothing saved of steps 4 or 5."""
    trainer = build_trainer(small_variant(steps=9, log_every_steps=9, eval_every_steps=9), TINY,
                            *corpora, tmp_path)
    trainer.run(stop_after_steps=3)
    before = {name: tensor.clone() for name, tensor in trainer.model.state_dict().items()}
    moments = [state["exp_avg"].clone() for state in trainer.optimizer.state.values()]
    poisoned = []

    def once(grad):
        if poisoned:
            return grad
        poisoned.append(True)
        return torch.full_like(grad, float("inf"))

    trainer.model.embedding.weight.register_hook(once)
    with pytest.raises(NonFiniteLossError, match=r"^step 4: the gradient is not finite"):
        trainer.run()
    assert trainer.step == 3 and len(trainer.optimizer.state) == len(moments)
    for name, tensor in trainer.model.state_dict().items():
        assert torch.equal(tensor, before[name]), name
    for state, moment in zip(trainer.optimizer.state.values(), moments, strict=True):
        assert torch.equal(state["exp_avg"], moment) and int(state["step"]) == 3
    assert [path.name for path in list_checkpoints(tmp_path / "checkpoints")] == [
        "step_00000003.pt"]


def _varlen_reference(q, k, v, queries, keys, causal):
    """What varlen attention computes: each sequence of ``cumulative_lengths`` attends within
    itself, and the offsets end at the tokens' count (the kernel's contract)."""
    starts_q, starts_k = queries.cumulative_lengths().tolist(), keys.cumulative_lengths().tolist()
    assert (starts_q[-1], starts_k[-1]) == (q.size(0), k.size(0))
    return attend_each_sequence(q, k, v, starts_q, starts_k, causal)


@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_a_packed_bucketed_pass_under_varlen_attention_changes_neither_loss_nor_gradients(
        corpora, monkeypatch, dropout):
    """float64, varlen attention's semantics (:func:`_varlen_reference` in place of the kernel):
    a packed bucketed pass (fixed width, rows from the floor, dummy tokens in rows of their own)
    and the same pairs unbucketed under padded attention give the same loss and gradients. So
    no real token attends a dummy one: without a key mask, only the sentence offsets keep them
    apart."""
    from reproduce.model import packed_attention
    from reproduce.model.token_layout import TokenLayout

    monkeypatch.setattr(packed_attention, "varlen_available", lambda q: True)
    monkeypatch.setattr(packed_attention, "_attend_varlen", _varlen_reference)
    corpus = EncodedCorpus.open(corpora[0])
    torch.manual_seed(0)
    config = TINY_BASE.model_copy(update={"dropout": dropout})
    model = build_model(config, corpus.vocab_size).double().train()
    pairs = np.arange(5, 42)
    key = step_key(1, 3)
    plain = collate(corpus, pairs, multiple=8, step_key=key)
    shape = pass_shape(corpus.source_lengths[pairs] + 1, corpus.target_lengths[pairs] + 1,
                       max_tokens=512 * TOKEN_QUANTA, multiple=8, packed_width=96)
    bucketed = collate(corpus, pairs, multiple=8, step_key=key, shape=shape)
    assert shape.packed and bucketed.source.shape == (shape.rows, 96) and shape.rows >= 128
    assert shape.tokens - plain.target_index.numel() > 100  # real dummy work
    # every row with target tokens has source tokens (cross-attention keys)
    rows = [TokenLayout.of(tensor, index).cumulative_lengths().diff() for tensor, index in
            ((bucketed.source, bucketed.source_index),
             (bucketed.target_input, bucketed.target_index))]
    assert not ((rows[1] > 0) & (rows[0] == 0)).any()
    results = []
    for batch, packed in ((plain, None), (bucketed, "varlen")):
        results.append(_loss_and_gradients(TeacherForcedStates(model, packed),
                                           batch, config.label_smoothing))
    (loss, gradients), (bucketed_loss, bucketed_gradients) = results
    assert torch.allclose(bucketed_loss, loss, rtol=1e-12, atol=0)
    for name, gradient in gradients.items():
        assert torch.allclose(bucketed_gradients[name], gradient, rtol=1e-9, atol=1e-14), name


def test_packed_pass_shapes_are_few_and_hold_their_passes(tmp_path):
    """WMT-like 25k-token steps in one pass (the WMT configs' 32,768 and longest pair of 256
    positions): packed buckets (attention over packed tokens) take at most 8 shapes, and their
    dummy tokens stay under 5% of the tokens computed."""
    corpus = wmt_like_corpus(tmp_path / "wmt", 40_000, seed=2)
    stream = MicroBatchStream(corpus, 25_000, 8, 256, seed=1)
    shapes, real, computed = set(), 0, 0
    for _ in range(150):
        (pairs,) = device_passes(np.concatenate(stream.next_step()), corpus, 32_768)
        sizes = [corpus.source_lengths[pairs] + 1, corpus.target_lengths[pairs] + 1]
        shape = pass_shape(*sizes, 32_768, 8, packed_width=256)
        assert shape.width == 256 and shape.rows >= len(pairs)
        assert max(int(side.sum()) for side in sizes) <= shape.tokens
        shapes.add(shape)
        real += sum(int(side.sum()) for side in sizes)
        computed += 2 * shape.tokens
    assert len(shapes) <= 8, sorted(shapes, key=lambda shape: (shape.rows, shape.tokens))
    assert 1 - real / computed < 0.05


def test_the_launch_count_sees_compiled_graphs_and_what_runs_outside_them():
    """``step_shapes.py launches``' count: a compiled call is one graph, whatever it runs
    inside; outside, operations that compute or copy count once each (a conversion only where
    it copies), views and allocations not at all."""
    from torch.profiler import ProfilerActivity, profile

    compiled = torch.compile(lambda x: (x * 2).sin().sum(dim=0))
    tensor = torch.arange(6.0)
    compiled(tensor)  # compiled before the profile
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        compiled(tensor)
        tensor.view(2, 3).t()
        torch.empty(3)
        tensor.to(torch.float32)  # already float32: no copy
        tensor.to(torch.float64)
        tensor + 1
    graphs, outside = step_shapes.compiled_graphs_and_launches(profiler.events())
    assert graphs == 1
    assert outside == {"aten::to": 1, "aten::add": 1}


@pytest.mark.parametrize("packed_width", [None, 32], ids=["padded", "packed"])
def test_a_bucketed_pass_weighs_exactly_its_pairs_target_tokens_where_the_sides_differ(
        tmp_path, packed_width):
    """The loss weight of a bucketed pass is 1 at each of its pairs' target tokens, in order,
    and 0 at every dummy one (a PAD): the target side's layout, not the source side's, which
    differs here, every target being three tokens longer than its source."""
    rng = np.random.default_rng(4)
    write_encoded(tmp_path / "c", VOCAB, [
        (source, source[::-1] + [5, 6, 7])
        for source in (rng.integers(4, VOCAB, rng.integers(2, 12)).tolist() for _ in range(40))])
    corpus = EncodedCorpus.open(tmp_path / "c")
    pairs = np.arange(3, 30)
    shape = pass_shape(corpus.source_lengths[pairs] + 1, corpus.target_lengths[pairs] + 1,
                       max_tokens=1024, multiple=8, packed_width=packed_width)
    batch = collate(corpus, pairs, multiple=8, shape=shape)
    plain = collate(corpus, pairs)
    tokens = target_tokens(batch.target_output, batch.target_index)
    real = batch.target_weight == 1
    assert torch.all(batch.target_weight[~real] == 0) and torch.all(tokens[~real] == PAD)
    assert tokens[real].tolist() == target_tokens(plain.target_output,
                                                  plain.target_index).tolist()
    assert int((~real).sum()) > 0  # dummy tokens there are


def test_a_packed_bucket_gives_every_dummy_row_a_dummy_token_on_each_side():
    """Packed buckets put their dummy tokens in dummy rows of their own, which need one on each
    side: the side with more real tokens has fewer dummy tokens, so it decides. 10 pairs of
    10 + 3 positions, quanta of 8, rows of 15 tokens: 104 tokens would leave the source side 4
    dummy tokens for the 5 rows the target side's 74 need; 112 leave 12 for 6."""
    shape = pass_shape(np.full(10, 10), np.full(10, 3), max_tokens=256, multiple=1,
                       packed_width=16)
    assert shape.tokens == 112
    rng = np.random.default_rng(0)
    for _ in range(200):
        pairs = int(rng.integers(1, 20))
        sizes = rng.integers(2, 17, pairs), rng.integers(2, 17, pairs)
        shape = pass_shape(*sizes, max_tokens=512, multiple=8, packed_width=16)
        real = (int(sizes[0].sum()), int(sizes[1].sum()))
        rows = packed_dummy_rows(shape.tokens, real, shape.width)
        assert shape.tokens - max(real) >= rows and rows <= shape.rows - pairs


def test_a_padded_bucket_has_room_for_its_tokens_beside_its_dummy_rows_first_positions():
    """A dummy row's first position holds no token (its EOS; BOS), so a padded bucket of
    ``rows`` x ``width`` holds at most ``rows * width - (rows - pairs)`` tokens. 3 pairs of 8
    positions, quanta of 32 tokens: 4 rows of 8 hold 31, too few for 32; 8 rows it takes."""
    shape = pass_shape(np.full(3, 8), np.full(3, 8), max_tokens=1024, multiple=1)
    assert (shape.rows, shape.width, shape.tokens) == (8, 8, 32)
    rng = np.random.default_rng(1)
    for _ in range(200):
        pairs = int(rng.integers(1, 20))
        shape = pass_shape(rng.integers(2, 30, pairs), rng.integers(2, 30, pairs),
                           max_tokens=1024, multiple=8)
        assert shape.tokens <= shape.rows * shape.width - (shape.rows - pairs)


def test_a_packed_bucket_that_its_pairs_fill_exactly_takes_no_dummy_tokens(tmp_path):
    """Pairs whose tokens are exactly a bucket's, on both sides, leave no dummy token and need no
    dummy row: the pass is its pairs alone, each weighed 1. 2 pairs of 15 + 1 tokens a side
    fill the 32-token bucket."""
    write_encoded(tmp_path / "c", VOCAB, [(list(range(4, 19)), list(range(19, 34)))] * 2)
    corpus, pairs = EncodedCorpus.open(tmp_path / "c"), np.arange(2)
    shape = pass_shape(corpus.source_lengths[pairs] + 1, corpus.target_lengths[pairs] + 1,
                       max_tokens=1024, multiple=8, packed_width=16)
    assert shape.tokens == 32 and shape.packed
    batch, plain = collate(corpus, pairs, multiple=8, shape=shape), collate(corpus, pairs)
    assert torch.all(batch.target_weight == 1) and len(batch.target_weight) == 32
    assert target_tokens(batch.target_output, batch.target_index).tolist() == target_tokens(
        plain.target_output, plain.target_index).tolist()
