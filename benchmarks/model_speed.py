"""Training and beam-search speed of our model, measured in the same run against peers.

* Training: our Transformer against a **peer** built from ``torch.nn.Transformer`` with the same
  hyper-parameters (post-norm, ReLU, shared embeddings and output projection), on identical
  length-bucketed batches: target and source+target tokens/s, achieved FLOP/s counted exactly
  (:mod:`reproduce.model.flops`: encoder x source tokens, decoder and output projection x target
  tokens, plus attention), model FLOPs utilisation against the GPU's dense bf16 peak where known,
  peak memory, padding waste.
* Beam search (beam 4, alpha 0.6, max length = source + 50) on a few hundred sentences:
  sentences/s and generated tokens/s of our cached decoder against the same search driven by a
  decoder that recomputes the whole prefix at every step.

On CPU the model is reduced (``--size cpu``); on a GPU ``--size base`` or ``big`` is the paper's.

    .venv/bin/python benchmarks/model_speed.py --size cpu
"""

from __future__ import annotations

import argparse
import math
import platform
import resource
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from reproduce.config import ModelConfig
from reproduce.decoding.beam_search import beam_search
from reproduce.model.flops import TransformerFlops, peak_flops
from reproduce.model.key_values import CachedTensors
from reproduce.model.transformer import DecoderCache, EncoderOutput, Transformer
from reproduce.special_tokens import BOS, EOS, PAD
from reproduce.training.batching import pack_batches
from reproduce.training.loss import label_smoothed_loss

SIZES = {
    "cpu": ModelConfig(layers=2, d_model=256, d_ff=1024, heads=4, d_k=64, d_v=64),
    "base": ModelConfig(),
    "big": ModelConfig(d_model=1024, d_ff=4096, heads=16, d_k=64, d_v=64, dropout=0.3),
}


class PeerTransformer(nn.Module):
    """The same architecture from ``torch.nn.Transformer`` (PyTorch's own implementation)."""

    def __init__(self, config: ModelConfig, vocab_size: int):
        super().__init__()
        self.config = config
        self.embedding = nn.Embedding(vocab_size, config.d_model)
        nn.init.normal_(self.embedding.weight, std=config.d_model**-0.5)
        self.transformer = nn.Transformer(
            d_model=config.d_model, nhead=config.heads, num_encoder_layers=config.layers,
            num_decoder_layers=config.layers, dim_feedforward=config.d_ff, dropout=config.dropout,
            batch_first=True, norm_first=False,
        )
        # nn.Transformer adds a final LayerNorm to each stack; the paper's post-norm has none.
        self.transformer.encoder.norm = nn.Identity()
        self.transformer.decoder.norm = nn.Identity()
        position = torch.arange(4096).unsqueeze(1)
        frequency = torch.exp(torch.arange(0, config.d_model, 2)
                              * (-math.log(10000.0) / config.d_model))
        table = torch.zeros(4096, config.d_model)
        table[:, 0::2] = torch.sin(position * frequency)
        table[:, 1::2] = torch.cos(position * frequency)
        self.register_buffer("positions", table, persistent=False)
        self.dropout = nn.Dropout(config.dropout)

    def _embed(self, tokens):
        return self.dropout(self.embedding(tokens) * math.sqrt(self.config.d_model)
                            + self.positions[: tokens.size(1)])

    def forward(self, source, target_input):
        length = target_input.size(1)
        causal = torch.triu(torch.full((length, length), float("-inf"), device=source.device),
                            diagonal=1)
        hidden = self.transformer(
            self._embed(source), self._embed(target_input), tgt_mask=causal,
            src_key_padding_mask=source.eq(PAD), memory_key_padding_mask=source.eq(PAD),
        )
        return F.linear(hidden, self.embedding.weight)


class PrefixRecomputingDecoder:
    """Our model behind the beam-search interface, but recomputing the whole prefix each step."""

    def __init__(self, model: Transformer):
        self.model = model
        self.config = model.config  # beam search reads the model's position limit from it

    def eval(self):
        self.model.eval()

    def encode(self, source) -> EncoderOutput:
        return self.model.encode(source)

    def decode(self, new_tokens, encoded: EncoderOutput, cache: DecoderCache):
        if not cache.layers:
            cache.layers = [{"prefix": CachedTensors(tokens=new_tokens)}]
        else:
            prefix = cache.layers[0]["prefix"]
            prefix["tokens"] = torch.cat([prefix["tokens"], new_tokens], dim=1)
        states = self.model.decoder_states(cache.layers[0]["prefix"]["tokens"], encoded)
        return self.model.project(states[:, -1:])  # only the last position, as a fair peer


def synthetic_batches(vocab: int, sentences: int, max_tokens: int, seed: int):
    rng = np.random.default_rng(seed)
    source_lengths = np.clip(rng.lognormal(np.log(26), 0.5, sentences).astype(int), 1, 200)
    target_lengths = np.clip((source_lengths * rng.normal(1.1, 0.15, sentences)).astype(int), 1,
                             200)
    batches = []
    for indices in pack_batches(source_lengths, target_lengths, max_tokens, 256):
        s, t = source_lengths[indices], target_lengths[indices]
        source = torch.full((len(indices), s.max() + 1), PAD)
        target_in = torch.full((len(indices), t.max() + 1), PAD)
        target_out = torch.full((len(indices), t.max() + 1), PAD)
        for row, (ls, lt) in enumerate(zip(s, t, strict=True)):
            source[row, :ls] = torch.from_numpy(rng.integers(4, vocab, ls))
            source[row, ls] = EOS
            words = torch.from_numpy(rng.integers(4, vocab, lt))
            target_in[row, 0], target_in[row, 1 : lt + 1] = BOS, words
            target_out[row, :lt], target_out[row, lt] = words, EOS
        batches.append((source, target_in, target_out))
    real = sum(int(b[0].ne(PAD).sum() + b[2].ne(PAD).sum()) for b in batches)
    cells = sum(b[0].numel() + b[2].numel() for b in batches)
    return batches, 1 - real / cells


def time_training(model, batches, device, steps, bf16, counter: TransformerFlops) -> dict:
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    model.train()
    target_tokens = all_tokens = flops = 0
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    for step in range(steps + 2):
        if step == 2:  # two warm-up steps
            if device.type == "cuda":
                torch.cuda.synchronize()
            started, target_tokens, all_tokens, flops = time.perf_counter(), 0, 0, 0
        source, target_in, target_out = (t.to(device) for t in batches[step % len(batches)])
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            logits = model(source, target_in)
        loss, tokens = label_smoothed_loss(logits, target_out, 0.1)
        (loss / tokens).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        target_tokens += tokens
        all_tokens += tokens + int(source.ne(PAD).sum())
        flops += counter.training(source.ne(PAD).sum(1).cpu().numpy(),
                                  target_out.ne(PAD).sum(1).cpu().numpy())
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    parameters = sum(p.numel() for p in model.parameters())
    flops /= seconds
    peak_memory = (torch.cuda.max_memory_allocated() if device.type == "cuda"
                   else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    return {"target tokens/s": target_tokens / seconds, "src+tgt tokens/s": all_tokens / seconds,
            "GFLOP/s": flops / 1e9, "MFU": _mfu(flops, device),
            "peak memory (MiB)": peak_memory / 2**20, "parameters": parameters}


def _mfu(flops: float, device: torch.device) -> str:
    if device.type != "cuda":
        return "n/a (CPU)"
    name = torch.cuda.get_device_name(device)
    peak = peak_flops(name)
    return f"{100 * flops / peak:.1f}%" if peak else f"n/a ({name})"


def time_beam_search(model, sources, device) -> dict:
    started = time.perf_counter()
    outputs = []
    for batch in sources:
        outputs += beam_search(model, batch.to(device), beam_size=4, alpha=0.6,
                               max_length_offset=50)
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    sentences = sum(len(batch) for batch in sources)
    return {"sentences/s": sentences / seconds,
            "generated tokens/s": sum(len(o) + 1 for o in outputs) / seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", choices=SIZES, default="cpu")
    parser.add_argument("--vocab", type=int, default=37000)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3,
                        help="interleaved timing repeats (median kept)")
    parser.add_argument("--max-tokens", type=int, default=2048, help="tokens per side per batch")
    parser.add_argument("--decode-sentences", type=int, default=200)
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast (GPUs)")
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    config = SIZES[args.size]
    batches, waste = synthetic_batches(args.vocab, 4000, args.max_tokens, seed=0)
    device_name = (torch.cuda.get_device_name(device) if device.type == "cuda"
                   else platform.processor() or "cpu")
    print(f"device: {device_name}, threads: {torch.get_num_threads()}, torch {torch.__version__}, "
          f"size: {args.size} "
          f"(N={config.layers}, d_model={config.d_model}, d_ff={config.d_ff}, h={config.heads}), "
          f"vocab {args.vocab}, {args.max_tokens} tokens/side/batch, padding waste "
          f"{100 * waste:.1f}%")
    models = {}
    for name, build in (("ours", Transformer), ("peer: torch.nn.Transformer", PeerTransformer)):
        torch.manual_seed(0)
        models[name] = build(config, args.vocab).to(device)
    # Interleaved repeats, the median kept: neither model always runs first (or on a warmer
    # machine).
    runs = {name: [] for name in models}
    for _ in range(args.repeats):
        for name, model in models.items():
            runs[name].append(time_training(model, batches, device, args.steps, args.bf16,
                                            TransformerFlops(config, args.vocab)))
    rows = {name: sorted(results, key=lambda row: row["target tokens/s"])[len(results) // 2]
            for name, results in runs.items()}
    columns = list(rows["ours"])
    print("\n| training | " + " | ".join(columns) + " |\n|---|" + "---|" * len(columns))
    for name, row in rows.items():
        print(f"| {name} | "
              + " | ".join(f"{v:,.1f}" if isinstance(v, float) else str(v) for v in row.values())
              + " |")

    torch.manual_seed(0)
    model = Transformer(config, args.vocab).to(device).eval()
    rng = np.random.default_rng(1)
    lengths = np.clip(rng.lognormal(np.log(20), 0.4, args.decode_sentences).astype(int), 2, 80)
    order = np.argsort(lengths)
    sources = []
    for start in range(0, len(order), 50):
        chunk = lengths[order[start : start + 50]]
        batch = torch.full((len(chunk), chunk.max() + 1), PAD)
        for row, length in enumerate(chunk):
            batch[row, :length] = torch.from_numpy(rng.integers(4, args.vocab, length))
            batch[row, length] = EOS
        sources.append(batch)
    decoders = {"ours (cached keys/values)": model,
                "recomputing the prefix": PrefixRecomputingDecoder(model)}
    results = {name: time_beam_search(decoder, sources, device)
               for name, decoder in decoders.items()}
    print(f"\n| beam search, {args.decode_sentences} sentences | sentences/s | generated tokens/s |"
          "\n|---|---|---|")
    for name, row in results.items():
        print(f"| {name} | {row['sentences/s']:.2f} | {row['generated tokens/s']:.1f} |")
    ratio = (results["ours (cached keys/values)"]["sentences/s"]
             / results["recomputing the prefix"]["sentences/s"])
    speedup = (rows["ours"]["target tokens/s"]
               / rows["peer: torch.nn.Transformer"]["target tokens/s"])
    print(f"\ncached / recomputing: {ratio:.2f}x; ours / peer training tokens/s: {speedup:.2f}x")


if __name__ == "__main__":
    main()
