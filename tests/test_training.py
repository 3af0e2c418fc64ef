"""Training: exact resume, data parallelism equal to accumulation, checkpoint averaging."""

import json
import random
from contextlib import nullcontext

import numpy as np
import pytest
import torch
import torch._dynamo
from torch._dynamo.utils import counters

from reproduce.averaging import average_checkpoints, average_last
from reproduce.model.dropout import step_key
from reproduce.special_tokens import PAD
from reproduce.training import rng_state, run_records
from reproduce.training.checkpoints import (CheckpointSchedule, list_checkpoints, load_checkpoint,
                                           save_checkpoint)
from reproduce.training.launch import launch_training
from reproduce.training.run_records import RunRecords, RunTotals, StepOutcome, peak_flops_of
from reproduce.training.assembly import build_trainer
from reproduce.training.batching import collate
from reproduce.training.loss import label_smoothed_loss
from tests.training_fixtures import TINY, VOCAB, random_corpus, small_variant, write_encoded


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    folder = tmp_path_factory.mktemp("corpora")
    return random_corpus(folder / "train", 400, seed=1), random_corpus(folder / "dev", 40, seed=2)


def _final(folder):
    return load_checkpoint(folder / "train" / "final.pt")


def test_resuming_equals_an_uninterrupted_run_bitwise(corpora, tmp_path):
    train, dev = corpora
    variant = small_variant(steps=12, dropout=0.1)
    build_trainer(variant, TINY, train, dev, tmp_path / "straight").run()
    build_trainer(variant, TINY, train, dev, tmp_path / "resumed").run(stop_after_steps=6)
    assert not (tmp_path / "resumed/train/final.pt").exists()
    second = build_trainer(variant, TINY, train, dev, tmp_path / "resumed")
    assert second.step == 6  # goes on from its checkpoint (a fresh start would end equal too)
    second.run()
    straight, resumed = _final(tmp_path / "straight"), _final(tmp_path / "resumed")
    for name, tensor in straight["model"].items():
        assert torch.equal(tensor, resumed["model"][name]), name
    last = {p.name for p in list_checkpoints(tmp_path / "straight/checkpoints")}
    assert last == {p.name for p in list_checkpoints(tmp_path / "resumed/checkpoints")}
    for name in last:
        a = load_checkpoint(tmp_path / "straight/checkpoints" / name)["optimizer"]["state"]
        b = load_checkpoint(tmp_path / "resumed/checkpoints" / name)["optimizer"]["state"]
        assert all(torch.equal(a[k]["exp_avg_sq"], b[k]["exp_avg_sq"]) for k in a)
    def curve(folder):  # throughput differs between runs; the rest must not
        rows = [json.loads(line)
                for line in (folder / "train/metrics.jsonl").read_text().splitlines()]
        return [(row["step"], row.get("train_loss"), row.get("dev_loss")) for row in rows]

    assert curve(tmp_path / "resumed") == curve(tmp_path / "straight")  # no duplicated lines


def test_a_checkpoints_rng_states_restore_every_generator_after_a_weights_only_load(tmp_path):
    """A resume restores every random generator a training may draw from: torch's, numpy's
    global one (a Gaussian cached half-way included) and Python's, through a checkpoint loaded
    with weights_only; each then draws what it drew right after the capture."""
    torch.manual_seed(1)
    np.random.seed(2)
    random.seed(3)
    np.random.standard_normal()  # numpy caches the second Gaussian of the pair
    states = rng_state.capture()
    draws = (torch.rand(3).tolist(), np.random.standard_normal(3).tolist(), random.random())
    torch.save(states, tmp_path / "rng.pt")
    torch.manual_seed(9)
    np.random.seed(9)
    random.seed(9)
    rng_state.restore(torch.load(tmp_path / "rng.pt", weights_only=True))
    assert (torch.rand(3).tolist(), np.random.standard_normal(3).tolist(),
            random.random()) == draws


def test_the_learning_rate_and_loss_go_where_they_should(corpora, tmp_path):
    train, dev = corpora
    variant = small_variant(steps=40, dropout=0.0, warmup_steps=10)
    build_trainer(variant, TINY, train, dev, tmp_path).run()
    rows = [json.loads(line)
            for line in (tmp_path / "train/metrics.jsonl").read_text().splitlines()]
    losses = [row["train_loss"] for row in rows if "train_loss" in row]
    assert losses[-1] < losses[0] - 0.3
    summary = json.loads((tmp_path / "train/summary.json").read_text())
    assert summary["steps"] == 40
    # Steps land on tokens_per_step, here 8 micro-batches of ~37.5.
    for side in ("source", "target"):
        assert summary[f"{side}_tokens"] == 40 * summary[f"mean_{side}_tokens_per_step"]
        assert abs(summary[f"mean_{side}_tokens_per_step"] - 300) / 300 < 0.05
    assert summary["mfu"] is None  # no peak rate for a CPU
    assert summary["parameters"] == sum(t.numel() for t in _final(tmp_path)["model"].values())
    # The steps' sizes and FLOPs, counted again from the batches the same stream collates: the
    # positions each pair computes (source pieces and EOS; BOS or EOS beside the target's)
    replay = build_trainer(variant, TINY, train, dev, tmp_path / "replay")
    sources, targets, flops = 0, 0, 0
    for _ in range(40):
        batch = collate(replay.train_corpus, np.concatenate(replay.stream.next_step()))
        source = batch.source.ne(PAD).sum(dim=1).numpy()
        target = batch.target_output.ne(PAD).sum(dim=1).numpy()
        sources, targets = sources + int(source.sum()), targets + int(target.sum())
        flops += replay.flops.training(source, target)
    assert (summary["source_tokens"], summary["target_tokens"]) == (sources, targets)
    assert summary["training_flops"] == flops


def _outcome(loss, source_tokens, target_tokens, flops, padded_positions, pass_tokens, passes):
    return StepOutcome(applied=True, loss=loss, source_tokens=source_tokens,
                       target_tokens=target_tokens, flops=flops,
                       padded_positions=padded_positions, pass_tokens=pass_tokens, passes=passes,
                       grad_norm=torch.tensor(1.0), gradient_finite=True, stop_asked=False)


def _two_step_totals():
    totals = RunTotals()
    totals.add(_outcome(2.0, 30, 40, 1000, 100, 80, 1.0))
    totals.add(_outcome(1.5, 10, 20, 500, 40, 45, 2.0))
    totals.wall_seconds = 3.0
    totals.last_losses["dev"] = 1.25
    return totals


def test_a_runs_summary_sums_its_steps_and_derives_rates_and_padding_from_them():
    """Two hand-made steps: tokens, FLOPs, padded positions, pass tokens and passes add up;
    rates are per wall second, means per step, the padding waste is the share of the padded
    positions that hold no token (1 - 100 / 140), the dummy-token share that of the passes'
    tokens that are no pair's (1 - 100 / 125), the last losses are the last step's and the dev
    loss."""
    summary = _two_step_totals().summary(steps=2, peak_flops=1000.0)
    assert summary == pytest.approx({
        "source_tokens": 40, "target_tokens": 60, "wall_seconds": 3.0, "training_flops": 1500,
        "padded_positions": 140, "pass_tokens": 125, "skipped_steps": 0, "passes": 3.0,
        "mean_source_tokens_per_step": 20.0, "mean_target_tokens_per_step": 30.0,
        "mean_passes_per_step": 1.5, "target_tokens_per_second": 20.0,
        "model_flops_per_second": 500.0, "mfu": 0.5, "final_train_loss": 1.5,
        "final_dev_loss": 1.25, "padding_waste": 40 / 140, "dummy_token_share": 25 / 125,
    })
    assert RunTotals().summary(steps=0, peak_flops=None)["mfu"] is None


def test_a_runs_totals_come_back_whole_from_their_state():
    """A resumed run carries on the counters of the segments before it (a checkpoint holds
    ``state()``): every counter and both last losses come back."""
    totals = _two_step_totals()
    totals.skipped_steps = 3
    resumed = RunTotals()
    resumed.load(json.loads(json.dumps(totals.state())))  # as a checkpoint stores it
    assert resumed.state() == totals.state()
    assert resumed.summary(2, None) == totals.summary(2, None)


def test_the_peak_and_gpu_hours_of_a_run_count_every_rank(tmp_path, monkeypatch):
    """MFU's peak is that of all the ranks together, and the GPU hours are wall hours times
    the ranks; a CPU run has neither (no peak, 0 GPU hours)."""
    monkeypatch.setattr(run_records, "device_name",
                        lambda device: "Some GPU" if device.type == "cuda" else "cpu")
    monkeypatch.setattr(run_records, "peak_flops",
                        lambda name: 1e15 if name == "Some GPU" else None)
    gpu, cpu = torch.device("cuda"), torch.device("cpu")
    assert peak_flops_of(gpu, 4) == 4e15
    assert peak_flops_of(cpu, 4) is None
    totals = _two_step_totals()
    totals.wall_seconds = 1800.0
    final = {"settings": {}, "fingerprint": "f", "step": 2, "model": {}}
    for device, hours in ((gpu, 1.0), (cpu, 0.0)):
        records = RunRecords(tmp_path / device.type / "train", None, writes=True)
        records.record(2, {"dev_loss": 1.25, "dev_perplexity": 3.49})
        schedule = CheckpointSchedule(tmp_path / device.type / "checkpoints", 1, 0, 1)
        summary = records.finish(final, schedule, {}, totals, device, world=2)
        assert summary["gpu_hours"] == hours
        assert summary["dev_curve"] == [{"step": 2, "dev_loss": 1.25, "dev_perplexity": 3.49}]
        assert json.loads(records.summary_path.read_text()) == summary


def test_only_the_writing_rank_records_metrics(tmp_path):
    """Every rank holds a RunRecords, but only rank 0 (``writes``) appends to metrics.jsonl,
    rewrites it on a resume and hands records to the tracker: two writers would tear it."""
    handed = []
    writer = RunRecords(tmp_path / "train", lambda metrics, step: handed.append((step, metrics)),
                        writes=True)
    other = RunRecords(tmp_path / "train", lambda metrics, step: handed.append((step, metrics)),
                       writes=False)
    other.record(1, {"train_loss": 9.0})
    assert not writer.metrics_path.exists() and handed == []
    for step in (1, 2, 3):
        writer.record(step, {"train_loss": float(step)})
    other.keep_until(1)
    assert len(writer.metrics_path.read_text().splitlines()) == 3
    writer.keep_until(2)
    assert [json.loads(line) for line in writer.metrics_path.read_text().splitlines()] == [
        {"step": 1, "train_loss": 1.0}, {"step": 2, "train_loss": 2.0}]
    assert handed == [(step, {"train_loss": float(step)}) for step in (1, 2, 3)]


def test_a_steps_gradient_is_that_of_its_summed_loss_over_its_target_tokens(corpora, tmp_path):
    """Section 5.3: the loss of a step is the mean over its target tokens (EOS included), so
    the gradient the optimizer gets is that of the step's summed label-smoothed loss divided by
    its target tokens, never by its source tokens; the model is the same one computed in one
    padded batch here."""
    rng = np.random.default_rng(5)
    pairs = [(source, source[::-1] + [5, 6]) for source in
             (rng.integers(4, VOCAB, rng.integers(2, 12)).tolist() for _ in range(300))]
    write_encoded(tmp_path / "train", VOCAB, pairs)  # targets two tokens longer
    train, dev = tmp_path / "train", corpora[1]
    variant = small_variant(steps=1, dropout=0.0, clip_norm=None)
    trainer = build_trainer(variant, TINY, train, dev, tmp_path / "run")
    replay = build_trainer(variant, TINY, train, dev, tmp_path / "replay")
    seen = {}
    apply = trainer.optimizer_update.apply

    def capture():
        seen.update({name: parameter.grad.clone()
                     for name, parameter in trainer.model.named_parameters()
                     if parameter.grad is not None})
        return apply()

    trainer.optimizer_update.apply = capture
    trainer.run()
    batch = collate(replay.train_corpus, np.concatenate(replay.stream.next_step()))
    total, tokens = label_smoothed_loss(replay.model(batch.source, batch.target_input),
                                        batch.target_output, variant.model.label_smoothing)
    (total / tokens).backward()
    expected = {name: parameter.grad for name, parameter in replay.model.named_parameters()
                if parameter.grad is not None}
    assert seen.keys() == expected.keys()
    for name, gradient in expected.items():
        assert torch.allclose(seen[name], gradient, rtol=1e-4, atol=1e-7), name


@pytest.fixture(scope="module")
def one_rank(corpora, tmp_path_factory):
    from reproduce.experiment_file import load_experiment
    from tests.training_fixtures import ROOT

    folder = tmp_path_factory.mktemp("one")
    experiment = load_experiment(ROOT / "configs/tiny.yaml")
    launch_training(experiment, small_variant(steps=6, dropout=0.0), *corpora, folder, folder,
                    launcher="inline")
    return experiment, folder


@pytest.mark.slow
@pytest.mark.parametrize("ranks", [2, 4, 8])
def test_data_parallel_ranks_equal_one_rank_on_the_same_steps(corpora, one_rank, tmp_path, ranks):
    """Real processes: submitit's local executor starts gloo ranks, as Slurm would; each rank
    computes its share of every step's 8 micro-batches."""
    experiment, one_folder = one_rank
    variant = small_variant(steps=6, dropout=0.0)
    launch_training(experiment, variant, *corpora, tmp_path / "many", tmp_path, launcher="local",
                    tasks=ranks)
    one, many = _final(one_folder), _final(tmp_path / "many")
    key_bias = _key_bias_masks(variant.model, one["model"])
    for name, tensor in one["model"].items():
        mask = key_bias.get(name, torch.zeros_like(tensor, dtype=torch.bool))
        assert torch.allclose(tensor[~mask], many["model"][name][~mask], atol=1e-6), name
    summary = json.loads((tmp_path / "many/train/summary.json").read_text())
    reference = json.loads((one_folder / "train/summary.json").read_text())
    assert summary["world_size"] == ranks
    for key in ("source_tokens", "target_tokens", "training_flops"):
        assert summary[key] == reference[key], key


@pytest.mark.slow
def test_with_dropout_the_model_does_not_depend_on_the_ranks_nor_on_a_resume_onto_others(
        corpora, tmp_path):
    """Dropout noise is keyed by the token, not the rank or pass: 1 and 2 gloo ranks, and runs
    stopped on one number of ranks and requeued onto another, train the same model."""
    from reproduce.experiment_file import load_experiment
    from tests.training_fixtures import ROOT

    experiment = load_experiment(ROOT / "configs/tiny.yaml")
    variant = small_variant(steps=6, dropout=0.3)

    def train(folder, ranks, stop_after_steps=None):
        launcher = "inline" if ranks == 1 else "local"
        launch_training(experiment, variant, *corpora, folder, tmp_path, launcher=launcher,
                        tasks=ranks, stop_after_steps=stop_after_steps)

    train(tmp_path / "one", 1)
    train(tmp_path / "two", 2)
    train(tmp_path / "one_then_two", 1, stop_after_steps=3)
    train(tmp_path / "one_then_two", 2)
    train(tmp_path / "two_then_one", 2, stop_after_steps=3)
    train(tmp_path / "two_then_one", 1)
    reference = _final(tmp_path / "one")["model"]
    key_bias = _key_bias_masks(variant.model, reference)
    for run in ("two", "one_then_two", "two_then_one"):
        model = _final(tmp_path / run)["model"]
        for name, tensor in reference.items():
            mask = key_bias.get(name, torch.zeros_like(tensor, dtype=torch.bool))
            assert torch.allclose(tensor[~mask], model[name][~mask], atol=1e-6), (run, name)


def test_ranks_that_cannot_share_a_step_are_refused_before_launch(corpora, tmp_path):
    from reproduce.experiment_file import load_experiment
    from tests.training_fixtures import ROOT

    experiment = load_experiment(ROOT / "configs/tiny.yaml")
    with pytest.raises(ValueError,
                       match=r"micro_batches_per_step \(8\) is not a multiple of the 3 ranks"):
        launch_training(experiment, small_variant(steps=2), *corpora, tmp_path, tmp_path,
                        launcher="local", tasks=3)
    assert not (tmp_path / "submitit").exists()


def _key_bias_masks(config, state):
    """Key-projection biases shift every attention logit of a query equally, so softmax makes
    their gradient exactly zero; float noise there is all Adam sees, and it normalises noise
    into full-size steps. Those entries are left out of the comparison, nothing else is."""
    width = config.heads * config.d_k
    masks = {}
    for name, tensor in state.items():
        if name.endswith("qkv.bias") or name.endswith("kv.bias"):
            mask = torch.zeros_like(tensor, dtype=torch.bool)
            start = width if name.endswith("qkv.bias") else 0
            mask[start : start + width] = True
            masks[name] = mask
    return masks


def _handmade(path, step, value):
    save_checkpoint({"model": {"w": torch.full((2, 2), value), "count": torch.tensor(3)},
                     "model_config": {}, "vocab_size": 5, "step": step, "fingerprint": "same run"},
                    path)
    return path


def test_averaging_equals_the_hand_computed_mean(tmp_path):
    paths = [_handmade(tmp_path / f"step_0000000{i}.pt", i, v)
             for i, v in ((1, 1.0), (2, 2.0), (4, 6.0))]
    averaged = average_checkpoints(paths)
    assert torch.equal(averaged["model"]["w"], torch.full((2, 2), 3.0))
    assert averaged["averaged_steps"] == [1, 2, 4]
    assert averaged["step"] == 4  # the last averaged checkpoint's step, not the first's
    state = average_last(tmp_path, 2, tmp_path / "averaged.pt", every_steps=2)
    assert torch.equal(state["model"]["w"], torch.full((2, 2), 4.0))
    assert state["step"] == 4 and state["averaged_steps"] == [2, 4]
    with pytest.raises(ValueError, match="3 checkpoints, but average_last asks for 4"):
        average_last(tmp_path, 4, tmp_path / "averaged.pt")
    for last in (0, -3):
        with pytest.raises(ValueError, match=f"--last must be at least 1, got {last}"):
            average_last(tmp_path, last, tmp_path / "averaged.pt")


def test_checkpoints_of_different_runs_are_not_averaged(tmp_path):
    first = _handmade(tmp_path / "step_00000001.pt", 1, 1.0)
    other = tmp_path / "step_00000002.pt"
    save_checkpoint({"model": {"w": torch.full((2, 2), 2.0), "count": torch.tensor(3)},
                     "model_config": {}, "vocab_size": 5, "step": 2, "fingerprint": "another run"},
                    other)
    with pytest.raises(ValueError,
                       match=r"step_00000002.pt: trained with other settings \(fingerprint another "
                             r"run\)"):
        average_checkpoints([first, other])


@pytest.mark.slow
def test_torch_compile_trains_the_same_model(corpora, tmp_path):
    train, dev = corpora
    eager = small_variant(steps=3, dropout=0.0)
    compiled = small_variant(steps=3, dropout=0.0, compile=True)
    build_trainer(eager, TINY, train, dev, tmp_path / "eager").run()
    torch._dynamo.reset()
    counters.clear()
    build_trainer(compiled, TINY, train, dev, tmp_path / "compiled").run()
    # passes of many sizes, one graph each: the forward, and the loss's chunk function (its
    # loss and gradients from one product: projected_loss.py), traced with symbolic sizes from
    # the first pass on
    assert counters["stats"]["unique_graphs"] == 2 and counters["frames"]["total"] == 2
    a, b = _final(tmp_path / "eager")["model"], _final(tmp_path / "compiled")["model"]
    assert a.keys() == b.keys()  # checkpoints hold the plain model, not the compiled wrapper
    key_bias = _key_bias_masks(eager.model, a)
    for name, tensor in a.items():
        mask = key_bias.get(name, torch.zeros_like(tensor, dtype=torch.bool))
        assert torch.allclose(tensor[~mask], b[name][~mask], atol=1e-5), name


def test_checkpoints_and_their_average_name_the_sentencepiece_model_of_the_data(tmp_path):
    """A checkpoint records the sha256 of the sentencepiece model its train split was encoded
    with (the split's meta.json), so decoding and scoring can refuse other pieces of equal count."""
    train = random_corpus(tmp_path / "train", 60, seed=1)
    dev = random_corpus(tmp_path / "dev", 6, seed=2)
    meta = json.loads((train / "meta.json").read_text())
    (train / "meta.json").write_text(json.dumps(meta | {"spm_model_sha256": "ab" * 32}))
    build_trainer(small_variant(steps=6), TINY, train, dev, tmp_path / "run").run()
    average_last(tmp_path / "run/checkpoints", 2, tmp_path / "averaged.pt")
    for path in [*list_checkpoints(tmp_path / "run/checkpoints"), tmp_path / "run/train/final.pt",
                 tmp_path / "averaged.pt"]:
        assert load_checkpoint(path)["spm_model_sha256"] == "ab" * 32, path


def test_a_steps_passes_draw_that_steps_dropout_keys_and_only_its_last_all_reduces(corpora,
                                                                                    tmp_path):
    """Dropout noise is a function of (seed, step, ...): every pass of step s is collated with
    ``step_key(seed, s)``, a new key each step; and of a step cut into several passes, only the
    last all-reduces its gradients across ranks (the others keep theirs until then)."""
    variant = small_variant(steps=2, dropout=0.1, max_tokens_per_device=96)
    trainer = build_trainer(variant, TINY, *corpora, tmp_path)
    keys, lasts = [], []
    collate_passes = trainer._collate_passes

    def recording_collate_passes(group, key):
        keys.append(key)
        lasts.append([])
        return collate_passes(group, key)

    def recording_gradients_held(last):
        lasts[-1].append(last)
        return nullcontext()

    trainer._collate_passes = recording_collate_passes
    trainer.passes.gradients_held = recording_gradients_held
    trainer.run()
    assert keys == [step_key(variant.training.seed, step) for step in (1, 2)]
    assert keys[0] != keys[1]
    assert all(len(passes) > 1 for passes in lasts)  # 300 tokens a step, at most 96 a pass
    assert lasts == [[False] * (len(passes) - 1) + [True] for passes in lasts]


def test_the_logged_training_loss_is_the_steps_mean_over_its_target_tokens(corpora, tmp_path):
    """The ``train_loss`` of a step is its summed label-smoothed loss over its target tokens
    (EOS included), not over its source tokens: here targets are two tokens longer than
    sources, and the loss is computed again from the step's pairs in one padded batch."""
    rng = np.random.default_rng(5)
    pairs = [(source, source[::-1] + [5, 6]) for source in
             (rng.integers(4, VOCAB, rng.integers(2, 12)).tolist() for _ in range(300))]
    write_encoded(tmp_path / "train", VOCAB, pairs)
    train, dev = tmp_path / "train", corpora[1]
    variant = small_variant(steps=1, dropout=0.0, log_every_steps=1)
    build_trainer(variant, TINY, train, dev, tmp_path / "run").run()
    replay = build_trainer(variant, TINY, train, dev, tmp_path / "replay")
    batch = collate(replay.train_corpus, np.concatenate(replay.stream.next_step()))
    with torch.no_grad():
        total, tokens = label_smoothed_loss(replay.model(batch.source, batch.target_input),
                                            batch.target_output, variant.model.label_smoothing)
    rows = [json.loads(line)
            for line in (tmp_path / "run/train/metrics.jsonl").read_text().splitlines()]
    (logged,) = [row["train_loss"] for row in rows if "train_loss" in row]
    assert logged == pytest.approx(total.item() / tokens, rel=1e-5)
    summary = json.loads((tmp_path / "run/train/summary.json").read_text())
    assert summary["target_tokens"] == tokens  # and the sides are counted each as itself
    assert summary["source_tokens"] == int(batch.source.ne(PAD).sum()) < tokens


def test_the_ranks_shares_of_a_step_average_to_the_gradient_of_one_rank(corpora, tmp_path):
    """A step's gradient does not depend on the ranks: each of 2 ranks back-propagates its
    micro-batches' summed loss times world / (the step's target tokens), and
    DistributedDataParallel averages the ranks' gradients; that average (taken by hand here,
    each rank's trainer run alone) is the gradient one rank computes for the whole step."""
    variant = small_variant(steps=1, dropout=0.1, clip_norm=None)

    def gradients(folder, rank, world):
        trainer = build_trainer(variant, TINY, *corpora, tmp_path / folder)
        trainer.rank, trainer.world = rank, world
        trainer._train_step()
        return {name: parameter.grad for name, parameter in trainer.model.named_parameters()
                if parameter.grad is not None}

    one = gradients("one", 0, 1)
    shares = [gradients(f"rank{rank}", rank, 2) for rank in (0, 1)]
    assert all(shares[0].keys() == one.keys() == share.keys() for share in shares)
    for name, gradient in one.items():
        average = (shares[0][name] + shares[1][name]) / 2
        assert torch.allclose(average, gradient, rtol=1e-4, atol=1e-7), name
    assert not torch.allclose(shares[0]["embedding.weight"], one["embedding.weight"])  # halves


def test_a_run_stopped_or_ended_off_the_save_grid_checkpoints_its_last_step(corpora, tmp_path):
    """Checkpoints every 3 steps: a run asked to stop after step 4 still saves step 4, so that
    the next segment goes on from there and no step is trained twice; the run's final step 5,
    off the grid too, is saved as well (the checkpoints averaged end with it), and the dev loss
    is measured at it, off the evaluation grid."""
    variant = small_variant(steps=5, dropout=0.0)
    build_trainer(variant, TINY, *corpora, tmp_path).run(stop_after_steps=4)
    assert load_checkpoint(list_checkpoints(tmp_path / "checkpoints")[-1])["step"] == 4
    resumed = build_trainer(variant, TINY, *corpora, tmp_path)
    assert resumed.step == 4
    resumed.run()
    assert load_checkpoint(list_checkpoints(tmp_path / "checkpoints")[-1])["step"] == 5
    metrics = (tmp_path / "train/metrics.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in metrics]
    assert [row["step"] for row in rows if "dev_loss" in row] == [4, 5]  # every 4, and the last


def test_a_run_whose_last_step_is_checkpointed_but_unfinished_writes_its_final_model(corpora,
                                                                                    tmp_path):
    """A job stopped after saving its last step's checkpoint but before ``final.pt`` (the final
    write, or its node, failing) is requeued: it resumes at ``training.steps``, trains nothing
    and writes ``final.pt``, rather than refusing a checkpoint already at the last step."""
    variant = small_variant(steps=3, dropout=0.0)
    build_trainer(variant, TINY, *corpora, tmp_path).run()
    final = _final(tmp_path)
    (tmp_path / "train/final.pt").unlink()
    again = build_trainer(variant, TINY, *corpora, tmp_path)
    assert again.step == 3
    assert again.run()["steps"] == 3
    assert all(torch.equal(tensor, _final(tmp_path)["model"][name])
               for name, tensor in final["model"].items())
