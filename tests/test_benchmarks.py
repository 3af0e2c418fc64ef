"""The benchmark scripts run and print their tables, and write their figures as JSON with
``--json`` (smoke tests: no timing is asserted)."""

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from reproduce.experiment_file import load_experiment
from reproduce.model.flops import TransformerFlops

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))  # what beam_speed.py imports beside it, as a script
_spec = importlib.util.spec_from_file_location("beam_speed", ROOT / "benchmarks/beam_speed.py")
beam_speed = sys.modules.setdefault("beam_speed", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(beam_speed)  # benchmarks/ is no package: loaded from its file
import profile_table  # noqa: E402  (beside beam_speed.py, imported by it)
import trainer_speed  # noqa: E402


def _run(script: str, *args: str) -> str:
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_prepare_speed_prints_every_stage():
    output = _run("prepare_speed.py", "--pairs", "3000", "--vocab-size", "800")
    for stage in ("extract + normalise + clean", "sentencepiece BPE training", "encoding",
                  "peak resident memory"):
        assert stage in output


def test_model_speed_compares_ours_with_the_peers():
    output = _run("model_speed.py", "--size", "cpu", "--vocab", "500", "--steps", "1", "--repeats",
                  "1", "--decode-sentences", "4", "--max-tokens", "256")
    assert "| ours |" in output and "| peer: torch.nn.Transformer |" in output
    assert "recomputing the prefix" in output and "cached / recomputing" in output


def test_trainer_speed_prints_cold_and_warm_headlines(tmp_path):
    """The small model (gpu-check's CPU smoke runs --size cpu): its own steps of 3,000 tokens in
    passes of at most 3,000, and steps a second in the headline."""
    output = _run("trainer_speed.py", "--size", "small", "--pairs", "2000", "--vocab", "500",
                  "--steps", "4", "--log-every", "2", "--profile", "2", "--json",
                  str(tmp_path / "figures.json"))
    assert "CPU small (trainer, cold):" in output and "CPU small (trainer, warm):" in output
    assert "mean tokens per step" in output and "exact MFU n/a" in output
    figures = json.loads((tmp_path / "figures.json").read_text())
    assert figures["name"] == "CPU" and figures["steps"] == 4
    assert figures["max_tokens_per_device"] == 3000
    assert 2500 < figures["mean_target_tokens_per_step"] < 3500
    assert [window["step"] for window in figures["windows"]] == [2, 4]
    warm, last = figures["headlines"]["warm"], figures["windows"][1]
    assert warm["mfu"] is None and warm["target_tokens_per_second"] == (
        last["target_tokens_per_second"]) and warm["steps_per_second"] == last["steps_per_second"]
    assert last["steps_per_second"] == pytest.approx(
        last["target_tokens_per_second"] / figures["mean_target_tokens_per_step"], rel=0.3)
    assert (f"(trainer, warm): {warm['target_tokens_per_second'] / 1000:,.1f}k target tok/s, "
            f"exact MFU n/a (no known peak), {warm['steps_per_second']:.1f} steps/s") in output
    # two more steps profiled: on a CPU no kernels, the host's own operations, matrix products
    # among them, each called at least once a step
    profiled = figures["profile"]
    assert profiled["unit"] == "step" and profiled["runs"] == 2
    assert profiled["device_busy_ms"] is None and profiled["top_kernels"] == []
    assert profiled["kinds"] == [] and profiled["matrix_flops"] > profiled["attention_flops"] > 0
    assert len(profiled["top_host_ops"]) == 10
    assert {"aten::mm", "aten::addmm"} & {op["name"] for op in profiled["top_host_ops"]}
    assert all(op["calls"] >= 1 and op["self_ms"] > 0 for op in profiled["top_host_ops"])
    assert "profiled 2 x step: " in output and "| host operation | own ms a step |" in output


@pytest.mark.parametrize("compiled", [False, True])
def test_loss_memory_compares_the_unfused_and_chunked_losses(tmp_path, compiled):
    output = _run("loss_memory.py", "--tokens", "64", "--vocab", "500", "--d-model", "16",
                  "--repeats", "1", *(["--compile"] if compiled else []), "--json",
                  str(tmp_path / "figures.json"))
    assert "| unfused | 64 | 128 |" in output and "| chunked | 64 | 64 |" in output
    assert "| gradient-with-loss | 64 | 64 |" in output
    assert "N 64: chunked / unfused memory" in output
    assert "gradient with the loss / chunked time" in output
    assert f"compiled chunks: {compiled}" in output
    figures = json.loads((tmp_path / "figures.json").read_text())
    assert [(row["path"], row["tokens"], row["projected"]) for row in figures["rows"]] == [
        ("unfused", 64, 128), ("chunked", 64, 64), ("gradient-with-loss", 64, 64)]
    assert [ratio["tokens"] for ratio in figures["ratios"]] == [64] and not figures["bf16"]
    assert figures["compile"] is compiled


def test_beam_speed_decodes_a_synthetic_test_set_through_the_translation_path(tmp_path):
    output = _run("beam_speed.py", "--size", "cpu", "--sentences", "6", "--vocab", "300",
                  "--profile", "--json", str(tmp_path / "figures.json"))
    assert ("CPU cpu (beam 4, alpha 0.6, 6 sentences, worst lengths, check_every=1 (auto), "
            "cuda_graphs=False (auto)):" in output)
    assert "generated tok/s" in output
    found = re.search(r"6 sentences, ([\d,]+) source tokens \(EOS included\), ([\d,]+) generated "
                      r"tokens", output)
    source, generated = (int(number.replace(",", "")) for number in found.groups())
    # each hypothesis holds at least its EOS and at most its source's length + 50 (section 6.1)
    assert 6 <= generated <= source + 6 * 50
    figures = json.loads((tmp_path / "figures.json").read_text())
    assert (figures["source_tokens"], figures["generated_tokens"]) == (source, generated)
    assert figures["sentences"] == 6 and figures["beam"] == 4 and figures["alpha"] == 0.6
    assert figures["device"] == figures["name"] == "CPU"
    # a random model's hypotheses run to source + 50, so the searches' model FLOPs are known
    sources = [len(line.split()) + 1 for line in beam_speed.synthetic_sources(6, 300, seed=0)]
    assert generated == sum(sources) + 6 * 50 and figures["peak"] is None
    cpu_model = load_experiment(ROOT / "configs/wmt14_en_de.yaml").variant("base").model
    cpu_model = cpu_model.model_copy(update=beam_speed.CPU_MODEL)
    assert figures["model_flops"] == TransformerFlops(cpu_model, 300).beam_search(
        sources, [length + 50 for length in sources], 4)
    assert f"{figures['model_flops'] / 1e12:.4g} TFLOP" in output
    # one batch decoded again under the profiler: the decoder's matrix products among the host
    # operations with the most time of their own
    profiled = figures["profile"]
    assert profiled["unit"] == "batch" and profiled["runs"] == 1 and profiled["wall_ms"] > 0
    assert {"aten::mm", "aten::addmm", "aten::linear"} & {
        op["name"] for op in profiled["top_host_ops"]}
    assert "profiled 1 x batch: " in output and "| host operation | own ms a batch |" in output


def test_beam_speed_with_trained_lengths_ends_hypotheses_at_their_sources_length(tmp_path):
    """``--lengths trained``: each hypothesis ends at about its source's length (here exactly:
    as many generated tokens as source tokens, EOS included on both sides), not at source + 50;
    the figures and the headline say so, and name the setting replaced on the command line."""
    output = _run("beam_speed.py", "--size", "cpu", "--sentences", "6", "--vocab", "300",
                  "--lengths", "trained", "--check-every", "4", "--json",
                  str(tmp_path / "figures.json"))
    assert ("CPU cpu (beam 4, alpha 0.6, 6 sentences, trained lengths, check_every=4, "
            "cuda_graphs=False (auto)):" in output)
    figures = json.loads((tmp_path / "figures.json").read_text())
    assert figures["lengths"] == "trained" and figures["replaced"] == {"check_every": 4}
    assert figures["auto"] == {"cuda_graphs": False}
    assert figures["check_every"] == 4 and figures["tokens_per_batch"] == 65_536
    assert figures["generated_tokens"] == figures["source_tokens"]
    assert figures["model_flops"] is None and "model FLOPs: n/a" in output


def test_beam_speed_can_change_the_window_stride_and_the_attention_kernels(tmp_path):
    """``--window-stride`` and ``--attention-kernels`` (the benchmark's options, no settings)
    set the stride the static cache's window grows by and the SDPA kernels decoding may choose
    from, for a GPU run to compare with the whole-buffer reads and the efficient kernel; the
    figures and the headline name them."""
    figures = {}
    for stride in (None, 3):
        options = [] if stride is None else ["--window-stride", str(stride),
                                             "--attention-kernels", "math"]
        path = tmp_path / f"{stride}.json"
        output = _run("beam_speed.py", "--size", "cpu", "--sentences", "4", "--vocab", "300",
                      "--cuda-graphs", *options, "--json", str(path))
        figures[stride] = json.loads(path.read_text())
    assert figures[None]["window_stride"] == 32 and figures[None]["options"] == {}
    assert figures[None]["attention_kernels"] == ["flash", "efficient", "math"]
    assert figures[3]["window_stride"] == 3 and figures[3]["attention_kernels"] == ["math"]
    assert figures[3]["options"] == {"window_stride": 3, "attention_kernels": "math"}
    assert ("cuda_graphs=True, check_every=1 (auto), window_stride=3, attention_kernels=math):"
            in output)
    refused = subprocess.run([sys.executable, str(ROOT / "benchmarks/beam_speed.py"),
                              "--window-stride", "0"], capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2
    assert "--window-stride: a number of positions above 0 (got 0)" in refused.stderr


# Kernels of a compiled base step on an H200 (the profile of 2026-11-27, names cut short) and
# the kind of work each does.
H200_KERNELS = {
    "triton_per_fused__to_copy_add_mul_native_layer_norm_backward_scalar_tensor_where_7":
        "layer normalisation",
    "fmha_cutlassB_bf16_aligned_64x64_k64_sm80(PyTorchMemEffAttention::AttentionBackwardKernel<"
    "cutlass::arch::Sm80, cutlass::bfloat16_t, true, false, true, 64, 64, 64, false>::Params)":
        "attention",
    "nvjet_sm90_tst_192x192_64x4_1x2_h_bz_coopB_TNN": "matrix products",
    "void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<64,"
    " 128, 128, 8, 4, 4, 4, false, false, cutlass::bfloat16_t>": "attention",
    "void at::native::indexFuncLargeIndex<c10::BFloat16, long, unsigned int, 2, 2, -2, true, "
    "at::native::(anonymous namespace)::ReduceAdd>": "gathers and scatters",
    "triton_poi_fused__to_copy_mul_3": "copies and fills",
    "triton_red_fused__to_copy_add_amax_exp_gather_log_mul_select_squeeze_sub_sum_unsqueeze_1":
        "softmax and loss",
    "nvjet_sm90_tst_128x184_64x5_4x2_h_bz_coopA_splitK_NNT": "matrix products",
    "void at::native::unrolled_elementwise_kernel<at::native::CUDAFunctor_add<float>, "
    "std::array<char*, 3ul>, 4>": "other (element-wise, reductions)",
    "void at::native::reduce_kernel<128, 4, at::native::ReduceOp<float, at::native::"
    "func_wrapper_t<float, at::native::sum_functor<float, float, float>>>>":
        "other (element-wise, reductions)",
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous "
    "namespace)::FusedAdamMathFunctor<float, 4>>": "optimizer",
    "Memcpy DtoD (Device -> Device)": "copies and fills",
}


@pytest.mark.parametrize("name", H200_KERNELS)
def test_a_kernel_is_told_by_its_name_what_work_it_does(name):
    assert profile_table.kernel_kind(name) == H200_KERNELS[name]


def test_the_kernels_time_is_summed_by_kind_with_the_rates_of_their_exact_flops():
    """Every kernel's time counts in its kind (not only the top kernels'), per run; the matrix
    products' and attention's rates are their model FLOPs a run over their time a run."""
    kernels = {"nvjet_a": (30.0, 6), "nvjet_b": (10.0, 2), "flash_fwd": (8.0, 4),
               "triton_per_fused_native_layer_norm_backward_1": (2.0, 2)}
    kinds = profile_table.kernel_kinds(kernels, runs=2)
    assert kinds == [{"kind": "matrix products", "ms": 20.0, "kernels": 4.0},
                     {"kind": "attention", "ms": 4.0, "kernels": 2.0},
                     {"kind": "layer normalisation", "ms": 1.0, "kernels": 1.0}]
    profiled = {"unit": "step", "device_busy_ms": 25.0, "kinds": kinds,
                "matrix_flops": 7e12, "attention_flops": 0.5e12}
    assert profile_table.kind_table(profiled)[2:] == [
        "| matrix products | 20.00 | 80.0% | 4 | 350.0 |",
        "| attention | 4.00 | 16.0% | 2 | 125.0 |",
        "| layer normalisation | 1.00 | 4.0% | 1 |  |"]


def test_a_profiled_steps_flops_split_into_matrix_products_and_attention():
    """The matrix products' FLOPs follow from the step's token counts alone; attention's are
    the rest of the step's exact count, eq. 1's products over each pair's positions."""
    model = load_experiment(ROOT / "configs/wmt14_en_de.yaml").variant("base").model
    flops = TransformerFlops(model, 37000)
    pairs = [(np.array([3, 30, 7]), np.array([5, 28, 9])), (np.array([12, 4]), np.array([11, 6]))]
    steps = [SimpleNamespace(source_tokens=int(s.sum()), target_tokens=int(t.sum()),
                             flops=flops.training(s, t)) for s, t in pairs]
    split = trainer_speed.matrix_and_attention_flops(flops, steps)
    attention = [3 * flops.attention(s, t) for s, t in pairs]
    assert split["attention_flops"] == sum(attention) / 2
    assert split["matrix_flops"] == sum(step.flops for step in steps) / 2 - sum(attention) / 2
    assert split["matrix_flops"] == 3 * (flops.per_source_token() * 56
                                         + flops.per_target_token() * 59) / 2


def test_the_attention_table_gives_each_packed_kernels_speed_up_over_padded():
    """A GPU's row of ``varlen_attention.py`` (varlen and flex timed) and a CPU's (padded only)."""
    gpu = {"query_tokens": 32124, "size": "base", "kind": "encoder", "padded_queries": 128496,
           "padded_ms": 3.3, "varlen_ms": 1.5, "flex_ms": 0.75, "padded_peak_mib": 1351.0,
           "varlen_peak_mib": 398.0, "flex_peak_mib": 400.0, "padded_error": 2e-3,
           "varlen_error": 1.7e-3, "flex_error": 1.8e-3, "varlen_tiles": 1066, "flex_tiles": 513}
    cpu = {key: gpu[key] for key in ("query_tokens", "size", "kind", "padded_queries",
                                     "padded_ms", "padded_error", "varlen_tiles", "flex_tiles")}
    header, _, gpu_line, cpu_line = profile_table.attention_table([gpu, cpu])
    assert header.count("|") == gpu_line.count("|") == cpu_line.count("|")
    assert gpu_line == ("| 32,124 | base | encoder | 4.00 | 1,066 / 513 | 3.30 | 1.50 | 0.75 | "
                        "2.20x / 4.40x | 1,351 / 398 / 400 | 1.7e-03 / 1.8e-03 (2.0e-03) |")
    assert cpu_line.endswith("| 3.30 | n/a | n/a | n/a | n/a | n/a (2.0e-03 vs float64) |")


def test_line_lengths_names_each_files_longest_line(tmp_path):
    """SGM as ``prepare`` reads it (entities unescaped) and plain text; pieces of a BPE learned
    from the files, their end of sentence counted, never fewer than the words."""
    sgm = tmp_path / "test.en.sgm"
    sgm.write_text('<srcset setid="t" srclang="any">\n<doc docid="d">\n'
                   '<seg id="1">a short one</seg>\n'
                   '<seg id="2">the longest line &amp; its seven words</seg>\n'
                   '<seg id="3">two words</seg>\n</doc>\n</srcset>\n')
    text = tmp_path / "dev.en"
    text.write_text("one\nthe houses are small\nthe house is small and old\nno\n")
    output = _run("line_lengths.py", str(sgm), str(text), "--vocab", "40")
    assert "test.en.sgm: 3 lines" in output and "dev.en: 4 lines" in output
    sgm_part, text_part = output.split("dev.en: 4 lines")
    assert "words      7 (line 2)" in sgm_part and "characters 34 (line 2)" in sgm_part
    assert "words      6 (line 3)" in text_part and "characters 26 (line 3)" in text_part
    pieces = [int(count) for count in re.findall(r"pieces, BPE of +\d+: (\d+) \(line", output)]
    assert len(pieces) == 2 and pieces[0] >= 7 + 1 and pieces[1] >= 6 + 1


def test_demo_cpu_sums_by_rule_and_puts_the_longest_training_first(tmp_path):
    """Three trainings of 10, 6 and 4 CPU s on two cores: 10 s when the longest starts first
    (6 + 4 beside it), 14 when it starts last; then Snakemake's 4 s shared by the two cores and
    the start-up's 1 s."""
    main = "/x/reproduce/__main__.py"

    def training(variant: str, cpu: float) -> dict:
        return {"argv": [main, "train", "--variant", variant, "--seed", "1", "--out-dir",
                         f"results/tiny/{variant}/seed-1"], "cpu": cpu}

    records = [{"argv": [main, "init-tracking", "--results", "results"], "cpu": 1.0},
               training("short", 4.0), training("middle", 6.0), training("long", 10.0),
               {"argv": ["/x/.venv/bin/snakemake", "--cores", "2", "all"], "cpu": 4.0}]
    log = tmp_path / "cpu.jsonl"
    log.write_text("".join(json.dumps(record) + "\n" for record in records))
    output = _run("demo_cpu.py", str(log))
    assert "| train | 3 | 20 | 4.0-10.0 |" in output
    assert "estimated wall time alone on 2 cores: 13 s" in output
    assert "(start-up 1 s, jobs 10 s, Snakemake's share 2 s)" in output


@pytest.mark.slow
def test_decoding_precision_compares_a_trained_checkpoints_translations(tmp_path):
    """A checkpoint of the tiny pipeline decoded in fp32 and bf16: both scored, the changed
    lines counted, the difference that of the two scores."""
    from tests.stage_pipeline import D, build_pipeline

    experiment, results = build_pipeline(tmp_path)
    output = _run("decoding_precision.py", "--experiment", str(experiment), "--variant", "base",
                  "--checkpoint", str(results / D / "base/averaged.pt"),
                  "--spm-model", str(results / D / "bpe/spm.model"),
                  "--source", str(results / D / "data/dev.src"),
                  "--reference", str(results / D / "data/dev.ref"),
                  "--json", str(tmp_path / "figures.json"))
    figures = json.loads((tmp_path / "figures.json").read_text())
    assert figures["precision"] == "bf16" and figures["sentences"] == 40
    assert 0 <= figures["changed_lines"] <= 40
    assert figures["changed_share"] == figures["changed_lines"] / 40
    assert figures["bleu_difference"] == figures["bf16"]["sacrebleu"] - figures["fp32"]["sacrebleu"]
    assert f"{figures['changed_lines']} of 40 translations changed" in output


def test_tiny_schedules_prints_each_trainings_dev_losses(tmp_path):
    from tests.training_fixtures import corpus_pair

    corpus_pair(tmp_path / "encoded", 200)
    small = ('"model": {"layers": 1, "d_model": 16, "d_ff": 32, "heads": 2, "d_k": 8, "d_v": 8}, '
             '"training": {"steps": 4, "tokens_per_step": 300, "max_tokens_per_device": 256, '
             '"warmup_steps": 2, "eval_every_steps": 2, "average_last": 2, '
             '"checkpoints": {"every_steps": 2, "every_minutes": 0, "keep_last": 5}')
    output = _run("tiny_schedules.py", "--encoded", str(tmp_path / "encoded"),
                  f'base:1:{{{small}, "lr_scale": 0.7}}}}', f"A_h1:2:{{{small}}}}}")
    lines = output.splitlines()
    assert len(lines) == 2 and lines[0].startswith("base:1:") and lines[1].startswith("A_h1:2:")
    for line in lines:
        losses = line.split("dev losses: ")[1].split(", ")
        assert len(losses) == 2 and all(float(loss) > 0 for loss in losses), line
