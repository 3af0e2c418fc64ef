"""CUDA: resume, bf16, fp16 with loss scaling, torch.compile, incremental decoding, the attention
kernels, host synchronisation and data parallelism on a GPU.

The tests marked ``gpu`` are skipped without one (tests/conftest.py); run them on a GPU machine
with ``pytest -m gpu`` (``scripts/gpu-check.sh`` does, with the benchmarks). The trainer picks the
GPU by itself (reproduce.training.distributed.device), so these runs are the real training path,
not a copy of it. The parts of those checks that a CPU can show run everywhere (unmarked).
"""

import json
import math
import os
import socket
import warnings
from collections import Counter
from pathlib import Path

import pytest
import submitit
import torch
import torch.multiprocessing
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.profiler import ProfilerActivity, profile

from reproduce.config import DecodingConfig, ModelConfig
from reproduce.errors import ConfigError
from reproduce.experiment_file import load_experiment
from reproduce.files import read_records
from reproduce.decoding.beam_search import beam_search
from reproduce.decoding.translate import cuda_matrix_products_in_tf32, decoding_arithmetic
from reproduce.model.transformer import DecoderCache, Transformer
from reproduce.special_tokens import BOS, PAD
from reproduce.training import distributed
from reproduce.training.checkpoints import load_checkpoint
from reproduce.training.launch import launch_training, local_gpus
from reproduce.training.assembly import build_trainer
from reproduce.training.trainer import Trainer
from tests.test_model import random_tokens, tiny_model
from tests.test_projected_loss import bf16_autocast_errors
from tests.test_training import _final, _key_bias_masks
from tests.training_fixtures import TINY, ROOT, VOCAB, random_corpus, small_variant

# The widths of the base model (d_model 512, 8 heads of 64), two layers: the attention kernels
# and DDP's buckets meet the paper's shapes, at a fraction of the cost.
BASE_WIDTHS = {"layers": 2, "d_model": 512, "d_ff": 2048, "heads": 8, "d_k": 64, "d_v": 64}


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    folder = tmp_path_factory.mktemp("corpora")
    return random_corpus(folder / "train", 400, seed=1), random_corpus(folder / "dev", 40, seed=2)


def _assert_same_model(a, b, config, atol):
    key_bias = _key_bias_masks(config, a)
    for name, tensor in a.items():
        mask = key_bias.get(name, torch.zeros_like(tensor, dtype=torch.bool))
        assert torch.allclose(tensor[~mask].float(), b[name][~mask].float(), atol=atol), name


@pytest.mark.gpu
def test_resuming_on_the_gpu_equals_an_uninterrupted_run_bitwise(corpora, tmp_path):
    """Eager: the same kernels at every step of both runs (compiled: the next test)."""
    variant = small_variant(steps=12, dropout=0.1, compile=False)
    straight = build_trainer(variant, TINY, *corpora, tmp_path / "straight")
    assert straight.device.type == "cuda"
    straight.run()
    build_trainer(variant, TINY, *corpora, tmp_path / "resumed").run(stop_after_steps=6)
    build_trainer(variant, TINY, *corpora, tmp_path / "resumed").run()
    a, b = _final(tmp_path / "straight")["model"], _final(tmp_path / "resumed")["model"]
    assert all(torch.equal(a[name], b[name]) for name in a)


# This test's runs on an H200 (torch 2.11, CUDA 13.0) differed by at most 4.1e-7 at step 7 and
# 6.6e-7 at step 12 (key-projection biases left out); the eager runs were bitwise equal.
COMPILED_RESUME_TOLERANCE = 5e-6


@pytest.mark.gpu
def test_resuming_compiled_training_on_the_gpu_follows_the_uninterrupted_run(corpora, tmp_path):
    """torch.compile picks a kernel's tiling and reduction split from the sizes of the first
    pass it compiles for, which the resumed run meets at another step than the uninterrupted
    one: the two differ by float summation order, compared one step after the resumption."""
    variant = small_variant(steps=7, dropout=0.1, compile=True)
    build_trainer(variant, TINY, *corpora, tmp_path / "straight").run()
    build_trainer(variant, TINY, *corpora, tmp_path / "resumed").run(stop_after_steps=6)
    build_trainer(variant, TINY, *corpora, tmp_path / "resumed").run()
    _assert_same_model(_final(tmp_path / "straight")["model"],
                       _final(tmp_path / "resumed")["model"], variant.model,
                       atol=COMPILED_RESUME_TOLERANCE)


@pytest.mark.gpu
def test_bf16_training_follows_fp32(corpora, tmp_path):
    losses = {}
    for precision in ("fp32", "bf16"):
        variant = small_variant(steps=30, dropout=0.0, warmup_steps=10, precision=precision,
                                compile=False)  # compilation has tests of its own
        summary = build_trainer(variant, TINY, *corpora, tmp_path / precision).run()
        losses[precision] = summary["final_train_loss"]
        assert summary["device"] != "cpu"
    assert abs(losses["bf16"] - losses["fp32"]) / losses["fp32"] < 0.05


@pytest.mark.gpu
def test_fp16_training_with_loss_scaling_follows_fp32(corpora, tmp_path):
    losses = {}
    for precision in ("fp32", "fp16"):
        variant = small_variant(steps=30, dropout=0.0, warmup_steps=10, precision=precision,
                                compile=False)
        summary = build_trainer(variant, TINY, *corpora, tmp_path / precision).run()
        losses[precision] = summary["final_train_loss"]
        assert summary["precision"] == precision and summary["device"] != "cpu"
    assert abs(losses["fp16"] - losses["fp32"]) / losses["fp32"] < 0.05


def _fp16_trainer_overflowing_at_first(variant, corpora, folder) -> Trainer:
    trainer = build_trainer(variant, TINY, *corpora, folder)
    update = trainer.optimizer_update
    update.load_state_dict(update.state_dict() | {"scale": 2.0**30})
    return trainer


@pytest.mark.gpu
def test_resuming_fp16_on_the_gpu_equals_an_uninterrupted_run_bitwise(corpora, tmp_path):
    """On the GPU Adam is fused: the scaler hands it the overflow flag, and the kernel itself
    skips the update and leaves Adam's step count as it was."""
    variant = small_variant(steps=12, dropout=0.1, precision="fp16", compile=False)
    _fp16_trainer_overflowing_at_first(variant, corpora, tmp_path / "straight").run()
    _fp16_trainer_overflowing_at_first(variant, corpora, tmp_path / "resumed").run(
        stop_after_steps=6)
    resumed = build_trainer(variant, TINY, *corpora, tmp_path / "resumed")
    assert resumed.precision == "fp16" and resumed.optimizer_update.loss_scale < 2.0**30
    resumed.run()
    a, b = _final(tmp_path / "straight")["model"], _final(tmp_path / "resumed")["model"]
    assert all(torch.equal(a[name], b[name]) for name in a)
    straight, again = (load_checkpoint(tmp_path / run / "checkpoints/step_00000012.pt")
                       for run in ("straight", "resumed"))
    assert straight["loss_scaler"] == again["loss_scaler"]
    assert straight["totals"]["skipped_steps"] == again["totals"]["skipped_steps"] > 0
    assert all(state["step"].item() == 12 for state in straight["optimizer"]["state"].values())


@pytest.mark.gpu
def test_auto_trains_in_bf16_where_the_gpu_has_bf16_units_else_in_fp16(corpora, tmp_path):
    expected = "bf16" if torch.cuda.get_device_capability()[0] >= 8 else "fp16"  # Ampere on
    summary = build_trainer(small_variant(steps=2, dropout=0.0, precision="auto"), TINY, *corpora,
                            tmp_path).run()
    assert summary["precision"] == expected


@pytest.mark.gpu
def test_compiled_training_equals_eager_on_the_gpu(corpora, tmp_path):
    eager = small_variant(steps=3, dropout=0.0, compile=False)
    compiled = small_variant(steps=3, dropout=0.0, compile=True)
    build_trainer(eager, TINY, *corpora, tmp_path / "eager").run()
    build_trainer(compiled, TINY, *corpora, tmp_path / "compiled").run()
    _assert_same_model(_final(tmp_path / "eager")["model"], _final(tmp_path / "compiled")["model"],
                       eager.model, atol=1e-4)


@pytest.fixture
def padded_kernels(request):
    """The SDPA kernels attention on the padded batch may choose from, replaced for the test
    (in place: the attention modules hold the list) by the names in its parameter, or left."""
    from torch.nn.attention import SDPBackend

    from reproduce.model.packed_attention import PADDED_KERNELS

    kept = list(PADDED_KERNELS)
    if request.param is not None:
        PADDED_KERNELS[:] = [getattr(SDPBackend, name) for name in request.param]
    yield PADDED_KERNELS
    PADDED_KERNELS[:] = kept


@pytest.mark.gpu
@pytest.mark.parametrize("padded_kernels", [None, ["MATH"]], indirect=True)
@pytest.mark.parametrize("stride", [2, 32])
@pytest.mark.parametrize("seed", [0, 2])
def test_search_steps_replayed_as_cuda_graphs_give_the_same_translations(seed, stride,
                                                                         padded_kernels,
                                                                         monkeypatch):
    """``decoding.cuda_graphs``: graphs recorded and replayed (counted: 3 over the first two
    searches, the batch shedding done sentences at halves, a new graph each time, and with a
    window ``stride`` of 2 positions a graph for each window too), the same translations as eager
    steps on the growing cache; fp32, and under bf16 autocast without its cache (as translate
    runs it); with the default SDPA kernels, and with the math kernel alone (beam_speed.py's
    ``--attention-kernels math``)."""
    from reproduce.decoding.step_graphs import StepGraphs
    from reproduce.model import key_values
    from tests.test_beam_search import peaky_model, random_batch

    monkeypatch.setattr(key_values, "READ_WINDOW_STRIDE", stride)

    model, batch = peaky_model(seed).cuda(), random_batch(seed, 16).cuda()
    replays = Counter()
    record = StepGraphs._record
    monkeypatch.setattr(StepGraphs, "_record",
                        lambda self, *args: replays.update(["records"]) or record(self, *args))
    for check_every in (1, 8):
        eager = beam_search(model, batch, 4, 0.6, 6, check_every=check_every)
        assert beam_search(model, batch, 4, 0.6, 6, check_every=check_every,
                           cuda_graphs=True) == eager
    assert replays["records"] > 2
    with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False):
        eager = beam_search(model, batch, 4, 0.6, 6, check_every=8)
        assert beam_search(model, batch, 4, 0.6, 6, check_every=8, cuda_graphs=True) == eager


@pytest.mark.gpu
def test_incremental_decoding_equals_the_full_pass_on_the_gpu():
    model = tiny_model().cuda()
    source = random_tokens(3, 7).cuda()
    source[2, 5:] = PAD
    target = torch.cat([torch.full((3, 1), BOS), random_tokens(3, 9, seed=7)], dim=1).cuda()
    full = model(source, target)
    encoded, cache = model.encode(source), DecoderCache()
    steps = [model.decode(target[:, t : t + 1], encoded, cache) for t in range(target.size(1))]
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("seed", [0, 2])
def test_reading_which_sentences_are_done_every_few_steps_changes_no_translation_on_the_gpu(
        seed):
    """``decoding.check_every`` on the GPU, where it saves a host read per step: the same
    translations, sentences done between reads frozen on the device."""
    from tests.test_beam_search import peaky_model, random_batch

    model, batch = peaky_model(seed).cuda(), random_batch(seed, 16).cuda()
    every_step = beam_search(model, batch, 4, 0.6, 6, check_every=1)
    for check_every in (4, 8):
        assert beam_search(model, batch, 4, 0.6, 6, check_every=check_every) == every_step


def _visible_gpus() -> str | None:
    return os.environ.get("CUDA_VISIBLE_DEVICES")


@pytest.mark.parametrize(("launching", "ranks_see"), [(None, "0,1"), ("3,5", "3,5")])
def test_local_ranks_see_the_gpus_of_the_process_that_launches_them(monkeypatch, tmp_path,
                                                                    launching, ranks_see):
    """submitit's local executor gives its tasks no GPU unless asked (CUDA_VISIBLE_DEVICES
    empty: ``--launcher local`` trained on the CPU of a GPU machine), and numbers those it gives
    from 0 unless told which."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    if launching is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", launching)
    executor = submitit.LocalExecutor(folder=tmp_path)
    executor.update_parameters(tasks_per_node=2, timeout_min=5, **local_gpus())
    assert executor.submit(_visible_gpus).results() == [ranks_see, ranks_see]


def test_local_ranks_refuse_gpus_named_otherwise_than_by_index(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-8d4c1f0e")
    with pytest.raises(ConfigError, match=r"CUDA_VISIBLE_DEVICES='GPU-8d4c1f0e': the local "
                                          r"launcher hands GPUs to its processes by index"):
        local_gpus()


@pytest.mark.gpu
def test_two_ranks_sharing_the_gpu_equal_one_rank(corpora, tmp_path):
    """Two processes on one GPU talk through gloo (NCCL needs a GPU per rank)."""
    _assert_two_ranks_train_as_one(small_variant(steps=6, dropout=0.0), corpora, tmp_path,
                                   atol=1e-5)


@pytest.mark.gpu
def test_two_ranks_replaying_captured_passes_train_as_one_rank_does(corpora, tmp_path):
    """``training.cuda_graphs`` under DistributedDataParallel: two processes share the GPU
    (gloo), each replaying its compiled pass (states and loss) as CUDA graphs, whose gradients
    DDP's hooks all-reduce; fp32, two steps, so that a gradient left out of the all-reduce
    (an lr of ~8e-3 at step 1) shows far above the ranks' summation order. Its own gpu-check
    step (pytest-gpu-ranks): three compiled trainings take minutes."""
    variant = small_variant(steps=2, dropout=0.0, precision="fp32", compile=True,
                            pass_buckets=True, cuda_graphs=True)
    _assert_two_ranks_train_as_one(variant, corpora, tmp_path, atol=1e-4)


def _assert_two_ranks_train_as_one(variant, corpora, tmp_path: Path, atol: float) -> None:
    """``variant`` trained by one process, then by two sharing the GPU (``--launcher local``):
    the same model within ``atol``."""
    experiment = load_experiment(ROOT / "configs/tiny.yaml")
    launch_training(experiment, variant, *corpora, tmp_path / "one", tmp_path, launcher="inline")
    launch_training(experiment, variant, *corpora, tmp_path / "two", tmp_path, launcher="local",
                    tasks=2)
    _assert_same_model(_final(tmp_path / "one")["model"], _final(tmp_path / "two")["model"],
                       variant.model, atol=atol)
    summary = json.loads((tmp_path / "two/train/summary.json").read_text())
    assert summary["world_size"] == 2 and summary["device"] != "cpu"


@pytest.mark.gpu
def test_chunked_loss_under_bf16_autocast_follows_the_fp32_formula():
    """Base sizes (d_model 512, vocabulary 37,000, 3,072 target tokens in 4,096 positions):
    bf16 logits cost ~3 significant digits against fp32; against the unfused path under the same
    autocast only the GEMMs' shapes differ (a rounding flipped here and there)."""
    errors = bf16_autocast_errors("cuda", batch=64, width=512, vocab=37000)
    loss, states, weight = errors["fp32"]
    assert loss < 1e-3 and states < 2e-2 and weight < 2e-2
    loss, states, weight = errors["autocast"]
    assert loss < 1e-4 and states < 1e-2 and weight < 1e-2


# -- the attention kernels ----------------------------------------------------------------------
SDPA_KERNELS = {  # the op that scaled_dot_product_attention dispatches to, for each backend
    "aten::_scaled_dot_product_flash_attention": "flash",
    "aten::_scaled_dot_product_flash_attention_for_cpu": "flash",
    "aten::_scaled_dot_product_efficient_attention": "efficient",
    "aten::_scaled_dot_product_cudnn_attention": "cudnn",
    "aten::_scaled_dot_product_attention_math": "math",
    "aten::_scaled_dot_product_fused_attention_overrideable": "overrideable",
}


def attention_kernels(run) -> tuple[int, Counter]:
    """How many times ``run()`` calls scaled_dot_product_attention, and which backend's kernel
    each call ran (by the op it dispatched to, as the profiler records it)."""
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        run()
    ops = Counter(event.name for event in profiler.events())
    kernels = Counter()
    for op, backend in SDPA_KERNELS.items():
        kernels[backend] += ops[op]
    return ops["aten::scaled_dot_product_attention"], +kernels


def _base_width_variant(steps: int, precision: str, **training):
    """Eager (``compile: auto`` would compile on the GPU): these tests look at what each
    operation dispatches, which a compiled graph fuses away."""
    variant = small_variant(steps=steps, dropout=0.1, precision=precision, compile=False,
                            **training)
    return variant.model_copy(update={"model": variant.model.model_copy(update=BASE_WIDTHS)})


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU: the test of the GPU's kernels")
def test_every_attention_of_a_cpu_training_step_runs_the_flash_kernel(corpora, tmp_path):
    """On a CPU the chosen kernels (model/attention.py: flash, efficient, math) leave every call
    to flash, masked ones included; the math path would materialise the scores."""
    trainer = build_trainer(small_variant(steps=2, compile=False), TINY, *corpora, tmp_path)
    calls, kernels = attention_kernels(trainer._train_step)
    # encoder self-, decoder self- and cross-attention in every layer, once per device pass
    assert calls > 0 and calls % (3 * trainer.config.layers) == 0
    assert kernels == Counter(flash=calls)


@pytest.mark.gpu
def test_a_bf16_training_step_runs_flash_for_causal_and_efficient_for_masked_attention(
        corpora, tmp_path):
    """Padded attention (``training.attention: padded``; ``auto`` runs varlen on GPUs): the
    decoder's self-attention is causal without a mask: flash. Encoder self-attention and
    cross-attention mask padded keys, which flash cannot: the memory-efficient kernel. Never the
    math path (scores materialised) nor cuDNN's (left out: a plan for every new shape)."""
    variant = _base_width_variant(steps=3, precision="bf16", attention="padded")
    trainer = build_trainer(variant, TINY, *corpora, tmp_path)
    trainer._train_step()  # warm-up
    calls, kernels = attention_kernels(trainer._train_step)
    assert calls > 0 and calls % (3 * BASE_WIDTHS["layers"]) == 0
    assert kernels == Counter(flash=calls // 3, efficient=2 * calls // 3)


@pytest.mark.gpu
def test_fp32_beam_search_on_the_gpu_runs_the_memory_efficient_kernel():
    """Decoding computes in fp32 (as ``reproduce evaluate`` does), which flash does not take:
    every call, cached self-attention and cross-attention alike, goes to the efficient kernel."""
    torch.manual_seed(0)
    model = Transformer(ModelConfig(**BASE_WIDTHS, dropout=0.0), VOCAB).cuda()
    source = random_tokens(3, 7).cuda()
    source[2, 5:] = PAD
    calls, kernels = attention_kernels(lambda: beam_search(model, source, max_length_offset=4))
    assert calls > 0 and kernels == Counter(efficient=calls)


@pytest.mark.gpu
def test_tf32_decoding_computes_fp32_products_from_tf32_inputs_on_the_gpu():
    """``decoding.precision: tf32`` reaches cuBLAS: inside decoding's arithmetic a product of
    fp32 matrices (inner size 512, base's d_model) errs as inputs rounded to TF32's 10-bit
    mantissa make it (~1e-4 of its largest entry), where fp32 decoding's errs as IEEE fp32's
    rounding does (~1e-7), even in a process that asked for TF32 before."""
    torch.manual_seed(0)
    a, b = torch.randn(512, 512, device="cuda"), torch.randn(512, 512, device="cuda")
    exact = a.double() @ b.double()

    def error(precision: str) -> float:
        with decoding_arithmetic(DecodingConfig(precision=precision), "cuda"):
            return ((a @ b).double() - exact).abs().max().item() / exact.abs().max().item()

    with cuda_matrix_products_in_tf32(True):
        assert error("tf32") > 1e-5 > error("fp32")


# -- host synchronisation -----------------------------------------------------------------------
@pytest.mark.gpu
def test_a_training_step_that_neither_logs_nor_saves_does_not_synchronise(corpora, tmp_path):
    """A step queues its passes, backward passes and update without waiting for the GPU, and
    copies its totals (loss, padding, passes, a non-finite gradient) into pinned host memory
    behind them, which the trainer reads once the next step is queued. Under
    ``set_sync_debug_mode("error")`` the first synchronising call would raise. With
    ``training.pass_buckets`` and without, with padded and varlen attention (with buckets:
    packed buckets)."""
    for buckets, attention in ((False, "padded"), (True, "padded"), (False, "varlen"),
                               (True, "varlen")):
        variant = _base_width_variant(steps=10, precision="bf16", pass_buckets=buckets,
                                      attention=attention)
        trainer = build_trainer(variant, TINY, *corpora, tmp_path / f"{buckets}-{attention}")
        for _ in range(2):  # warm-up: cuBLAS handles, the allocator's pools, Adam's state
            trainer._train_step().outcome()
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            queued = trainer._train_step()
        finally:
            torch.cuda.set_sync_debug_mode("default")
        assert queued.readings.is_pinned()
        outcome = queued.outcome()
        assert outcome.gradient_finite and outcome.loss > 0, buckets


def run_counting_synchronisations(trainer: Trainer) -> tuple[dict | None, list[dict]]:
    """Runs ``trainer`` under ``torch.cuda.set_sync_debug_mode("warn")``: what :meth:`Trainer.run`
    returns and, for each round of its loop (from one step's ``_train_step`` to the next's: the
    step queued, the step before read, the log, evaluation or save of this one), its ``step``,
    the synchronising calls warned of (``synchronised``), the graphs compiled (``compiled``,
    dynamo's count), and the fewest times any of its passes' shapes ran before (``shape_runs``:
    a captured pass records a shape's graph at its second run, and replays from the third)."""
    from torch._dynamo.utils import counters

    rounds, shape_runs, marks = [], Counter(), []
    queue_step, forward = trainer._train_step, trainer.passes.forward
    compiled_graphs = counters["stats"]

    def counted_step():
        rounds.append({"step": trainer.step + 1, "shape_runs": math.inf})
        marks.append((len(caught), compiled_graphs["unique_graphs"]))
        return queue_step()

    def shaped_forward(*inputs):
        shape = tuple(None if tensor is None else tuple(tensor.shape) for tensor in inputs)
        rounds[-1]["shape_runs"] = min(rounds[-1]["shape_runs"], shape_runs[shape])
        shape_runs[shape] += 1
        return forward(*inputs)

    trainer._train_step, trainer.passes.forward = counted_step, shaped_forward
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            summary = trainer.run()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    marks.append((len(caught), compiled_graphs["unique_graphs"]))
    for record, (warned, graphs), (warned_after, graphs_after) in zip(
            rounds, marks[:-1], marks[1:], strict=True):
        record["synchronised"] = sum("synchroniz" in str(warning.message)
                                     for warning in caught[warned:warned_after])
        record["compiled"] = graphs_after - graphs
    return summary, rounds


# Steps and their cadence for the rounds above: runs of quiet steps (neither logging, evaluating
# nor saving) between the logged ones, whose rounds each queue a step and read the one before.
QUIET_CADENCE = {"steps": 24, "log_every_steps": 4, "eval_every_steps": 12,
                 "checkpoints": TINY.variant("base").training.checkpoints.model_copy(
                     update={"every_steps": 12, "keep_last": 5})}


def assert_warm_quiet_rounds_do_not_synchronise(trainer: Trainer, rounds: list[dict]) -> None:
    """No round of the loop that queues a step and reads the step before, neither of which logs,
    evaluates or saves, waits for the GPU, once warm: after two steps (cuBLAS handles, Adam's
    state), neither compiling nor meeting a pass shape that its graphs have not replayed
    before. Such rounds are a step's whole cost on the host in a long run; waiting there would
    idle the GPU while the host queues the next step."""
    t = trainer.training

    def quiet(step: int) -> bool:
        return all(step % every for every in (t.log_every_steps, t.eval_every_steps,
                                              t.checkpoints.every_steps)) and step != t.steps

    def warm_and_quiet(record: dict) -> bool:
        step = record["step"]
        replays = not trainer.passes.graphs or record["shape_runs"] >= 2
        return step > 2 and quiet(step) and quiet(step - 1) and not record["compiled"] and replays

    warm = [record for record in rounds if warm_and_quiet(record)]
    assert len(warm) >= 2 and all(record["synchronised"] == 0 for record in warm), rounds
    assert any(record["synchronised"] for record in rounds), "the warnings were not seen"


@pytest.mark.gpu
@pytest.mark.parametrize(("kernel", "compile_model", "pass_buckets"), [
    ("varlen", False, False), ("varlen", True, False), ("flex", True, True)])
def test_packed_attention_training_follows_padded_attention_on_the_gpu(
        corpora, tmp_path, kernel, compile_model, pass_buckets):
    """The same bf16 training (base widths, dropout 0.1) with attention over packed tokens
    (varlen, eager and compiled; flex, compiled in packed buckets) and over the
    padded batch: the losses of every logged step agree as bf16 training allows. Both loops
    wait for the GPU only where a step logs, evaluates or saves."""
    losses = {}
    for attention in ("padded", kernel):
        variant = _base_width_variant(precision="bf16", pass_buckets=pass_buckets,
                                      **QUIET_CADENCE)  # eager: flex is asked for compiled
        variant = variant.model_copy(update={"training": variant.training.model_copy(
            update={"compile": compile_model, "attention": attention})})
        trainer = build_trainer(variant, TINY, *corpora, tmp_path / attention)
        assert trainer.passes.packed == (None if attention == "padded" else kernel)
        assert_warm_quiet_rounds_do_not_synchronise(trainer,
                                                    run_counting_synchronisations(trainer)[1])
        losses[attention] = [row["train_loss"] for row in read_records(trainer.records.metrics_path)
                             if "train_loss" in row]
    assert len(losses[kernel]) == len(losses["padded"]) >= 5
    for padded, packed in zip(losses["padded"], losses[kernel], strict=True):
        assert abs(packed - padded) / padded < 0.02, losses


@pytest.mark.gpu
def test_packed_buckets_under_varlen_attention_train_as_unbucketed_passes_on_the_gpu(
        corpora, tmp_path):
    """Varlen attention with ``pass_buckets`` (packed buckets: dummy tokens in rows of their
    own, many rows without tokens): the same logged losses as unbucketed varlen passes, to
    bf16's rounding, and never a non-finite one (flash over empty sentences)."""
    losses = {}
    for buckets in (False, True):
        variant = _base_width_variant(steps=20, precision="bf16", attention="varlen",
                                      pass_buckets=buckets)
        trainer = build_trainer(variant, TINY, *corpora, tmp_path / str(buckets))
        trainer.run()
        losses[buckets] = [row["train_loss"] for row in read_records(trainer.records.metrics_path)
                           if "train_loss" in row]
    for plain, bucketed in zip(losses[False], losses[True], strict=True):
        assert abs(bucketed - plain) / plain < 0.02, losses


@pytest.mark.gpu
@pytest.mark.parametrize("max_tokens_per_device", [256, 4096])  # two passes a step, then one
def test_cuda_graphs_replay_each_pass_and_train_as_the_compiled_pass_does(
        corpora, tmp_path, max_tokens_per_device):
    """``training.cuda_graphs`` (bucketed passes, compiled): the same logged losses as the
    compiled passes without graphs, to bf16's rounding, and a warm step replays graphs. With one
    pass a step the replay's gradients become the parameters' own
    (``Trainer._fresh_gradients``); with two the passes add theirs into zeroed buffers,
    since the second replay overwrites the graphs' outputs. Neither loop waits for the GPU in a
    warm step that neither logs, evaluates nor saves."""
    losses, trainers = {}, {}
    for graphs in (False, True):
        variant = _base_width_variant(precision="bf16", pass_buckets=True,
                                      max_tokens_per_device=max_tokens_per_device,
                                      **QUIET_CADENCE)
        variant = variant.model_copy(update={"training": variant.training.model_copy(
            update={"compile": True, "cuda_graphs": graphs})})
        trainer = trainers[graphs] = build_trainer(variant, TINY, *corpora, tmp_path / str(graphs))
        assert trainer.passes.graphs is graphs
        summary, rounds = run_counting_synchronisations(trainer)
        assert_warm_quiet_rounds_do_not_synchronise(trainer, rounds)
        passes = summary["mean_passes_per_step"]
        assert passes > 1 if max_tokens_per_device == 256 else passes == 1
        losses[graphs] = [row["train_loss"] for row in read_records(trainer.records.metrics_path)
                          if "train_loss" in row]
    for plain, captured in zip(losses[False], losses[True], strict=True):
        assert abs(captured - plain) / plain < 0.02, losses
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as profiler:
        trainers[True]._train_step().outcome()
    assert any(event.name == "cudaGraphLaunch" for event in profiler.events())


# -- data parallelism ---------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        return listener.getsockname()[1]


def _report_ddp_settings(rank: int, variant, corpora, folder: Path, port: int) -> None:
    """One of two ranks: two steps through the Trainer's DistributedDataParallel, after which
    rank 0 writes down what DDP says of itself, and the buckets the second step all-reduced
    (DDP puts every gradient in one bucket for the first step, and rebuilds its buckets in the
    order the first backward pass produced the gradients; its logging data keep the first)."""
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2",
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    distributed.initialise()
    try:
        trainer = build_trainer(variant, TINY, *corpora, folder / "run")
        reduced = []  # bytes of each bucket all-reduced, in the order they were

        def record_bucket(state, bucket):
            reduced.append(bucket.buffer().numel() * bucket.buffer().element_size())
            return default_hooks.allreduce_hook(state, bucket)

        trainer.passes.parallel.register_comm_hook(None, record_bucket)
        for _ in range(2):  # a parameter without a gradient would make the second step raise
            reduced.clear()
            trainer._train_step()
        if rank == 0:
            ddp = trainer.passes.parallel
            logged = ddp._get_ddp_logging_data()
            report = {
                "wraps": type(ddp.module).__name__, "device": str(trainer.device),
                "find_unused_parameters": ddp.find_unused_parameters,
                "bucket_bytes_cap": ddp.bucket_bytes_cap, "device_ids": ddp.device_ids,
                "bucket_sizes": reduced,
                "bucketed_bytes": logged["total_parameter_size_bytes"],
                "backend": logged["backend_name"],
                "parameter_bytes": sum(p.numel() * p.element_size()
                                       for p in trainer.model.parameters()),
            }
            (folder / "ddp.json").write_text(json.dumps(report))
    finally:
        distributed.shutdown()


def ddp_settings_of_two_ranks(variant, corpora, folder: Path) -> dict:
    torch.multiprocessing.spawn(_report_ddp_settings, args=(variant, corpora, folder, _free_port()),
                                nprocs=2)
    report = json.loads((folder / "ddp.json").read_text())
    # As reproduce/training/distributed.py configures DDP: torch's 25 MiB buckets, and no search
    # for unused parameters (every parameter has a gradient at every pass; the search would walk
    # the autograd graph every step).
    assert report["wraps"] == "TeacherForcedStates"
    assert report["find_unused_parameters"] is False
    assert report["bucket_bytes_cap"] == 25 * 2**20
    # every parameter in a bucket, once (the shared embedding too), and at base widths several
    # buckets: each all-reduced as soon as the backward pass has filled it
    assert sum(report["bucket_sizes"]) == report["bucketed_bytes"] == report["parameter_bytes"]
    assert len(report["bucket_sizes"]) > 1
    return report


def test_data_parallel_buckets_every_parameter_and_searches_no_unused_ones(corpora, tmp_path):
    ddp_settings_of_two_ranks(_base_width_variant(steps=2, precision="fp32"), corpora, tmp_path)


@pytest.mark.gpu
def test_data_parallel_on_the_gpu_reduces_base_widths_in_several_buckets(corpora, tmp_path):
    """As on the CPU, in bf16 on the GPU; two ranks on one GPU talk through gloo (NCCL needs a
    GPU each)."""
    report = ddp_settings_of_two_ranks(_base_width_variant(steps=2, precision="bf16"), corpora,
                                       tmp_path)
    one_gpu_each = torch.cuda.device_count() >= 2
    assert report["device"] == "cuda:0" and report["device_ids"] == [0]
    assert report["backend"] == ("nccl" if one_gpu_each else "gloo")
