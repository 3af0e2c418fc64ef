"""How ``trainer_speed.py`` and ``beam_speed.py`` print a profile (``--profile``) and their
headlines, ``varlen_attention.py`` its table and ``decoding_precision.py`` its figures, as
``gpu_check.py``'s report shows them (standard library only: the report's process imports no
torch)."""

from __future__ import annotations

# What a kernel does, told by its name: the first kind whose words the name holds (in lower
# case). Attention comes before matrix products (cutlass names both: ``fmha_cutlass...``) and
# layer normalisation before copies (Inductor names a fused kernel by every operation in it,
# ``..._to_copy_..._native_layer_norm_backward_...``).
KERNEL_KINDS = [
    ("attention", ("flash", "fmha", "attention", "attn")),
    ("matrix products", ("gemm", "nvjet", "cutlass", "xmma", "cublas", "triton_tem_fused_mm",
                         "triton_mm", "splitk")),
    ("layer normalisation", ("layer_norm", "layernorm")),
    ("softmax and loss", ("softmax", "amax", "logsumexp", "nll", "cross_entropy")),
    ("optimizer", ("adam", "multi_tensor", "foreach")),
    ("gathers and scatters", ("index", "gather", "scatter")),
    ("copies and fills", ("memcpy", "memset", "copy", "fill")),
]
OTHER_KERNELS = "other (element-wise, reductions)"


def kernel_kind(name: str) -> str:
    """The kind of work a kernel named ``name`` does (:data:`KERNEL_KINDS`)."""
    lowered = name.lower()
    for kind, words in KERNEL_KINDS:
        if any(word in lowered for word in words):
            return kind
    return OTHER_KERNELS


def kernel_kinds(kernels: dict[str, tuple[float, int]], runs: int) -> list[dict]:
    """Every kernel's time (``name -> (milliseconds, launches)`` over ``runs`` runs) summed by
    kind, per run, the kind with the most time first."""
    totals: dict[str, list] = {}
    for name, (ms, launches) in kernels.items():
        total = totals.setdefault(kernel_kind(name), [0.0, 0])
        total[0] += ms
        total[1] += launches
    return [{"kind": kind, "ms": ms / runs, "kernels": launches / runs}
            for kind, (ms, launches) in sorted(totals.items(), key=lambda item: -item[1][0])]


def profile_lines(profiled: dict) -> list[str]:
    """The figures of ``trainer_speed.profile_runs``, a table of kernels (on a GPU) and one of
    host operations."""
    unit, busy = profiled["unit"], profiled["device_busy_ms"]
    lines = [f"profiled {profiled['runs']} x {unit}: {profiled['wall_ms']:.1f} ms wall a {unit} "
             f"(profiled), device busy "
             + (f"{busy:.1f} ms a {unit}, {profiled['kernels']:,.0f} kernels run a {unit}, "
                f"{profiled['host_launches']:,.0f} launches from the host a {unit} "
                f"({profiled['graph_launches']:,.0f} of them graph replays)"
                if busy is not None else "n/a (no CUDA)")]
    if profiled["kinds"]:
        lines += ["", *kind_table(profiled)]
    if profiled["top_kernels"]:
        lines += ["", f"| kernel | ms a {unit} | launches a {unit} |", "|---|---|---|"]
        lines += [f"| `{_short(row['name'])}` | {row['ms']:.2f} | {row['launches']:,.0f} |"
                  for row in profiled["top_kernels"]]
    lines += ["", f"| host operation | own ms a {unit} | calls a {unit} |", "|---|---|---|"]
    lines += [f"| `{_short(row['name'])}` | {row['self_ms']:.2f} | {row['calls']:,.0f} |"
              for row in profiled["top_host_ops"]]
    return lines


def kind_table(profiled: dict) -> list[str]:
    """The device's time by kind of kernel (``profiled["kinds"]``), with the rate of the matrix
    products and of attention where the profile knows their FLOPs a run (``matrix_flops``,
    ``attention_flops``: the model's exact count, :mod:`reproduce.model.flops`)."""
    unit, busy = profiled["unit"], profiled["device_busy_ms"]
    flops = {"matrix products": profiled.get("matrix_flops"),
             "attention": profiled.get("attention_flops")}
    lines = [f"| kind of kernel | ms a {unit} | share of busy | kernels a {unit} | model TFLOP/s |",
             "|---|---|---|---|---|"]
    for row in profiled["kinds"]:
        done = flops.get(row["kind"])
        rate = f"{done / row['ms'] / 1e9:,.1f}" if done and row["ms"] > 0 else ""
        lines.append(f"| {row['kind']} | {row['ms']:.2f} | {100 * row['ms'] / busy:.1f}% | "
                     f"{row['kernels']:,.0f} | {rate} |")
    return lines


def _short(name: str) -> str:
    return name if len(name) <= 90 else name[:87] + "..."


def trainer_headline(figures: dict, label: str, how: str = "trainer") -> str:
    """The headline of a run's ``label`` (cold or warm) window: its rates, as BENCHMARKS.md
    quotes them; ``how`` says how it ran."""
    headline = figures["headlines"][label]
    mfu = (f"{100 * headline['mfu']:.1f}%" if headline["mfu"] is not None
           else "n/a (no known peak)")
    return (f"{figures['name']} {figures['size']} ({how}, {label}): "
            f"{headline['target_tokens_per_second'] / 1000:,.1f}k target tok/s, exact MFU {mfu}, "
            f"{headline['steps_per_second']:.1f} steps/s")


def beam_headline(figures: dict) -> str:
    """The figures' line of ``beam_speed.py`` (and BENCHMARKS.md): which lengths, each
    decoding setting replaced, each left at ``auto`` with the value it took, and the
    benchmark's own options given."""
    named = [f"{figures['lengths']} lengths",
             *(f"{name}={value}" for name, value in figures["replaced"].items()),
             *(f"{name}={value} (auto)" for name, value in figures["auto"].items()),
             *(f"{name}={value}" for name, value in figures["options"].items())]
    return (f"{figures['name']} {figures['size']} (beam {figures['beam']}, alpha "
            f"{figures['alpha']}, {figures['sentences']} sentences, {', '.join(named)}): "
            f"{figures['sentences_per_second']:,.1f} sentences/s, "
            f"{figures['generated_tokens_per_second']:,.0f} generated tok/s")


def precision_lines(figures: dict) -> list[str]:
    """``decoding_precision.py``'s figures as it prints them: each precision's BLEU and time,
    then the difference and the translations changed."""
    other = figures["precision"]
    return [*(f"{precision}: sacreBLEU {figures[precision]['sacrebleu']:.2f} in "
              f"{figures[precision]['seconds']:.1f} s" for precision in ("fp32", other)),
            f"{other} - fp32: {figures['bleu_difference']:+.2f} BLEU; "
            f"{figures['changed_lines']} of {figures['sentences']} translations changed "
            f"({100 * figures['changed_share']:.1f}%)"]


def precision_headline(figures: dict, device: str, source: str) -> str:
    """The line of ``decoding_precision.py``'s figures that BENCHMARKS.md takes, the machine
    named ``device`` and the decoded file ``source``."""
    return (f"{device} decoding in {figures['precision']} vs fp32 ({figures['sentences']} "
            f"sentences of {source}): {figures['bleu_difference']:+.2f} BLEU, "
            f"{figures['changed_lines']} translations changed "
            f"({100 * figures['changed_share']:.1f}%)")


def search_flops_line(figures: dict) -> str:
    """``beam_speed.py``'s model FLOPs of the searches, their rate and its share of the peak of
    the device at the decoding's precision, where every hypothesis ran to its length limit."""
    flops = figures["model_flops"]
    if flops is None:
        return ("model FLOPs: n/a (some translations ended before their length limit, so the "
                "searches' steps are not known from the outputs)")
    rate, peak = flops / figures["seconds"], figures["peak"]
    share = (f"{100 * rate / peak['flops_per_second']:.1f}% of the {peak['gpu']}'s "
             f"{peak['precision']} peak" if peak else "no known peak")
    return (f"model FLOPs of the searches (every hypothesis to its length limit): "
            f"{flops / 1e12:.4g} TFLOP, {rate / 1e12:.4g} TFLOP/s, {share}")


def steps_line(steps: dict) -> str:
    """How ``beam_speed.py``'s search steps ran (its ``steps`` figures)."""
    return (f"search steps: {steps['eager']:,} eager, {steps['replayed']:,} replayed as CUDA "
            f"graphs; {steps['recorded']:,} graphs recorded in "
            f"{steps['recording_seconds']:.2f} s of the host's time")


def attention_table(rows: list[dict]) -> list[str]:
    """``varlen_attention.py``'s table of padded against varlen and flex attention (its
    ``rows``): each packed kernel's time, its speed-up over padded, peak memory and error."""
    lines = ["| pass tokens | size | attention | padded cells / token | tiles varlen / flex | "
             "padded ms | varlen ms | flex ms | speed-up varlen / flex | "
             "peak MiB padded / varlen / flex | error varlen / flex (padded's) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "varlen_ms" in r:
            packed = (f"{r['varlen_ms']:.2f} | {r['flex_ms']:.2f} | "
                      f"{r['padded_ms'] / r['varlen_ms']:.2f}x / "
                      f"{r['padded_ms'] / r['flex_ms']:.2f}x | "
                      f"{r['padded_peak_mib']:,.0f} / {r['varlen_peak_mib']:,.0f} / "
                      f"{r['flex_peak_mib']:,.0f} | {r['varlen_error']:.1e} / "
                      f"{r['flex_error']:.1e} ({r['padded_error']:.1e})")
        else:
            packed = f"n/a | n/a | n/a | n/a | n/a ({r['padded_error']:.1e} vs float64)"
        lines.append(f"| {r['query_tokens']:,} | {r['size']} | {r['kind']} | "
                     f"{r['padded_queries'] / r['query_tokens']:.2f} | "
                     f"{r['varlen_tiles']:,} / {r['flex_tiles']:,} | {r['padded_ms']:.2f} | "
                     f"{packed} |")
    return lines
