"""Attention over a training pass, padded (SDPA on ``[B, h, T, d]``) against varlen (flash on the
packed ``[N, h, d]`` tokens) and flex (compiled FlexAttention on the packed tokens in tiles of
128 tokens): time forward+backward, peak memory, and how far each is from the padded reference
(reproduce.model.packed_attention). Flex's time includes building its block mask, which a
training pass builds once for all its layers. Each row also counts the tiles of 128 x 128
(query, key) tokens each packed kernel computes for each head (on any device): varlen's, a
sentence's own (causal: those up to the diagonal), and flex's, which short sentences share.

A pass is built as the trainer builds one: WMT-like lengths (log-normal around 26 tokens, targets
about 1.05x their source), sorted into micro-batches of ~3,100 tokens (the paper's 25k-token step
over 8), micro-batches drawn at random until the pass holds ``--tokens`` target tokens; so the
padded batch is as wide as the pass's longest sentence. For each of encoder self-attention,
decoder (causal) self-attention and encoder-decoder attention, at the widths of base (h 8) and big
(h 16), d_k = d_v = 64, bf16: median milliseconds of forward+backward over ``--repeats`` runs
(CUDA events, after warm-up), peak extra memory, and ||varlen - padded|| / ||padded|| (both
against a float32 computation of the same bf16 inputs). Without CUDA (or without the varlen API)
only the padded path runs, on a small pass, and its output is checked against each sentence
attended alone in float64 (flex runs on CUDA only: FlexAttention has no backward on CPUs).

    python benchmarks/varlen_attention.py --tokens 16384 32768 --json out.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from reproduce.model.packed_attention import (FLEX_BLOCK, attend_flex, attend_packed,
                                              attend_padded, sentence_blocks, varlen_available)
from reproduce.model.token_layout import TokenLayout
from profile_table import attention_table

MICRO_BATCH_TOKENS = 3_100
WIDTHS = {"base": 8, "big": 16}  # heads; d_k = d_v = 64
KINDS = ("encoder", "decoder", "cross")


def pass_lengths(rng: np.random.Generator, tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """Source and target lengths of one pass of about ``tokens`` target tokens."""
    sources = np.clip(rng.lognormal(np.log(26), 0.6, 200_000).astype(int), 1, 200)
    targets = np.clip((sources * rng.normal(1.05, 0.15, sources.size)).astype(int), 1, 200)
    order = np.argsort(targets, kind="stable")
    micro, start = [], 0
    while start < order.size:
        end = start + 1
        while end < order.size and (end - start + 1) * targets[order[end]] <= MICRO_BATCH_TOKENS:
            end += 1
        micro.append(order[start:end])
        start = end
    chosen, total = [], 0
    for index in rng.permutation(len(micro)):
        if total >= tokens:
            break
        chosen.append(micro[index])
        total += int(targets[micro[index]].sum())
    rows = np.concatenate(chosen)
    return sources[rows], targets[rows]


def layout_of(lengths: np.ndarray, device: torch.device) -> TokenLayout:
    width = int(lengths.max())
    padding = torch.arange(width)[None, :] >= torch.as_tensor(lengths)[:, None]
    return TokenLayout(padding.to(device))


def reference_float64(q, k, v, queries: TokenLayout, keys: TokenLayout, causal: bool):
    """Each sentence attended alone, in float64: eq. 1 written out."""
    q_lengths = (~queries.padding).sum(1).tolist()
    k_lengths = (~keys.padding).sum(1).tolist()
    out, qs, ks = [], 0, 0
    for n, m in zip(q_lengths, k_lengths, strict=True):
        qi, ki, vi = (x.double().transpose(0, 1) for x in (q[qs:qs + n], k[ks:ks + m],
                                                           v[ks:ks + m]))  # [h, n|m, d]
        scores = qi @ ki.transpose(-1, -2) / qi.size(-1) ** 0.5
        if causal:
            scores = scores.masked_fill(~torch.ones(n, m, dtype=torch.bool).tril(), float("-inf"))
        out.append((scores.softmax(-1) @ vi).transpose(0, 1))
        qs, ks = qs + n, ks + m
    return torch.cat(out)


def varlen_tiles(query_lengths: np.ndarray, key_lengths: np.ndarray, causal: bool) -> int:
    """Tiles of ``FLEX_BLOCK`` x ``FLEX_BLOCK`` tokens that flash computes per head over these
    sentences, each on its own (causal: a query block's key blocks up to its own)."""
    query_blocks = -(-np.asarray(query_lengths) // FLEX_BLOCK)
    if causal:
        return int((query_blocks * (query_blocks + 1) // 2).sum())
    return int((query_blocks * -(-np.asarray(key_lengths) // FLEX_BLOCK)).sum())


def timed(run, repeats: int, cuda: bool) -> tuple[float, float]:
    """Median milliseconds of ``run()`` and its peak extra memory in MiB (CUDA; 0 on a CPU)."""
    for _ in range(3):
        run()
    times = []
    if cuda:
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    for _ in range(repeats):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            run()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            began = time.perf_counter()
            run()
            times.append(1e3 * (time.perf_counter() - began))
    peak = (torch.cuda.max_memory_allocated() - base) / 2**20 if cuda else 0.0
    return statistics.median(times), peak


def measure(kind: str, heads: int, sources, targets, repeats: int, device, dtype) -> dict:
    cuda = device.type == "cuda"
    source_layout, target_layout = layout_of(sources, device), layout_of(targets, device)
    queries = source_layout if kind == "encoder" else target_layout
    keys = target_layout if kind == "decoder" else source_layout
    causal = kind == "decoder"
    n, m = int(queries.cumulative_lengths()[-1]), int(keys.cumulative_lengths()[-1])
    q = torch.randn(n, heads, 64, device=device, dtype=dtype, requires_grad=True)
    k = torch.randn(m, heads, 64, device=device, dtype=dtype, requires_grad=True)
    v = torch.randn(m, heads, 64, device=device, dtype=dtype, requires_grad=True)
    grad = torch.randn(n, heads, 64, device=device, dtype=dtype)
    row = {"kind": kind, "heads": heads, "sentences": len(sources), "query_tokens": n,
           "key_tokens": m, "padded_queries": queries.padding.numel(),
           "padded_keys": keys.padding.numel(),
           "varlen_tiles": varlen_tiles(sources if kind == "encoder" else targets,
                                        targets if kind == "decoder" else sources, causal),
           "flex_tiles": int(sentence_blocks(queries, keys, causal).kv_num_blocks.sum())}

    flex = torch.compile(attend_flex, dynamic=False)  # as training compiles it

    def attend(kernel: str | None):
        if kernel != "flex":
            return attend_packed(q, k, v, queries, keys, causal, kernel)
        fresh = TokenLayout(queries.padding, queries.index)  # its block mask built anew
        return flex(q, k, v, fresh, fresh if keys is queries else keys, causal)

    def forward_backward(kernel: str | None):
        def run():
            attend(kernel).backward(grad)
            q.grad = k.grad = v.grad = None
        return run

    row["padded_ms"], row["padded_peak_mib"] = timed(forward_backward(None), repeats, cuda)
    if varlen_available(q):
        for kernel in ("varlen", "flex"):
            row[f"{kernel}_ms"], row[f"{kernel}_peak_mib"] = timed(forward_backward(kernel),
                                                                   repeats, cuda)
    with torch.no_grad():
        padded = attend_padded(q, k, v, queries, keys, causal).float()
        if varlen_available(q):
            exact = attend_padded(q.float(), k.float(), v.float(), queries, keys, causal)
            row["padded_error"] = float((padded - exact).norm() / exact.norm())
            for kernel in ("varlen", "flex"):
                packed = attend(kernel).float()
                row[f"{kernel}_error"] = float((packed - exact).norm() / exact.norm())
                row[f"{kernel}_nan"] = bool(packed.isnan().any())
        else:
            exact = reference_float64(q, k, v, queries, keys, causal)
            row["padded_error"] = float((padded.double() - exact).norm() / exact.norm())
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, nargs="+", default=[16_384, 32_768])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    dtype = torch.bfloat16 if cuda else torch.float32
    probe = torch.zeros(1, device=device, dtype=dtype)
    print(f"device {torch.cuda.get_device_name(0) if cuda else 'cpu'}, torch {torch.__version__}, "
          f"{dtype}, varlen available: {varlen_available(probe)}")
    rows = []
    for tokens in args.tokens:
        sources, targets = pass_lengths(np.random.default_rng(tokens), tokens)
        for size, heads in WIDTHS.items():
            for kind in KINDS:
                row = {"tokens": tokens, "size": size,
                       **measure(kind, heads, sources, targets, args.repeats, device, dtype)}
                rows.append(row)
                print(json.dumps(row), flush=True)
    print("\n" + "\n".join(attention_table(rows)))
    if args.json:
        args.json.write_text(json.dumps({"benchmark": "varlen_attention", "cuda": cuda,
                                         "torch": torch.__version__, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
