"""Time of one dropout site keyed by the token (``reproduce.model.dropout.TokenDropout``), forward
and backward, on the CPU: what a training step pays per site and pass in eager mode.

The tokens' keys come from the module's own ``token_keys`` (sentences of ``--length`` tokens), so
the script times any version of the module that has its interface, e.g. an older commit's:

    .venv/bin/python benchmarks/dropout_speed.py --tokens 1200 --features 64
    git worktree add /tmp/old <commit> && PYTHONPATH=/tmp/old .venv/bin/python \\
        benchmarks/dropout_speed.py --tokens 1200 --features 64

Prints the median over ``--repeats`` rounds of ``--calls`` calls each, in microseconds a call.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from reproduce.model.dropout import TokenDropout, step_key, token_keys


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=1200, help="tokens in the pass")
    parser.add_argument("--features", type=int, default=64, help="d_model")
    parser.add_argument("--length", type=int, default=25, help="tokens a sentence")
    parser.add_argument("--p", type=float, default=0.1, help="P_drop")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    sentences = -(-args.tokens // args.length)
    sizes = np.full(sentences, args.length)
    keys = torch.from_numpy(token_keys(step_key(1, 1), np.arange(sentences), sizes, 0))
    keys = keys[:args.tokens]
    site = TokenDropout(args.p, args.features)
    site.set_site(3)
    x = torch.randn(args.tokens, args.features, requires_grad=True)
    gradient = torch.randn(args.tokens, args.features)

    def forward() -> None:
        with torch.no_grad():
            site(x, keys)

    def forward_backward() -> None:
        site(x, keys).backward(gradient)

    for name, call in (("forward", forward), ("forward+backward", forward_backward)):
        call()  # warm-up
        rounds = []
        for _ in range(args.repeats):
            started = time.perf_counter()
            for _ in range(args.calls):
                call()
            rounds.append((time.perf_counter() - started) / args.calls * 1e6)
        print(f"{name}: {statistics.median(rounds):.0f} us a call (median of {args.repeats}; "
              f"{args.tokens} tokens x {args.features} features, {args.threads} thread(s), "
              f"keys {keys.dtype})")


if __name__ == "__main__":
    main()
