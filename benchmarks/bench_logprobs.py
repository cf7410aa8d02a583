"""Sampled-token log-probs from last hidden states: chunked (``scale.learner.logprobs``) vs the naive full log-softmax.

Both compute, for B × T token rows, ``log softmax(W h / τ)[a]`` and the entropy of ``softmax(W h / τ)``
from hidden states ``h`` [B, T, H] and an LM head ``W`` [V, H] — the learner's job. The naive way
materialises the [B, T, V] logits and log-softmax (``naive``: log-probs and entropies, the same outputs as
the chunked way; ``naive-logprobs-only``: just ``log_softmax(...).gather``, no entropies); the chunked
way applies the head to ``chunk_size`` rows at a time, with a closed-form chunked backward. TRL's
``selective_log_softmax`` (which starts from materialised logits) is measured too when TRL is installed.

Each variant runs in its own subprocess so that its peak memory is its own: peak RSS (``ru_maxrss``)
minus the RSS once the inputs exist. The children run with ``MALLOC_MMAP_THRESHOLD_=1048576`` so that
glibc returns freed tensor buffers to the system instead of growing its heap (otherwise the RSS peak
measures allocator fragmentation, not the algorithm). Time is the fastest of ``--repeats`` runs after
one warm-up run (the minimum is the least disturbed by other jobs on a shared machine).

    python benchmarks/bench_logprobs.py                      # B=8, T=1024, V=32000, H=512, forward and backward
    python benchmarks/bench_logprobs.py --chunk-sizes 256 1024 4096 --hidden 1024
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

MMAP_THRESHOLD_BYTES = 1 << 20


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def _run_variant(variant: str, args: argparse.Namespace) -> dict:
    import torch

    from scale.learner.logprobs import chunked_token_log_probs, naive_token_log_probs

    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    backward = args.mode == "backward"
    hidden = torch.randn(args.batch, args.tokens, args.hidden, generator=g) / args.hidden**0.5
    hidden.requires_grad_(backward)
    weight = torch.randn(args.vocab, args.hidden, generator=g).requires_grad_(backward)
    tokens = torch.randint(0, args.vocab, (args.batch, args.tokens), generator=g)
    upstream = torch.randn(args.batch, args.tokens, generator=g)

    def once() -> float:
        if variant == "naive":
            log_probs, entropy = naive_token_log_probs(hidden @ weight.T, tokens, temperature=args.temperature)
        elif variant == "naive-logprobs-only":
            log_softmax = torch.log_softmax((hidden @ weight.T) / args.temperature, dim=-1)
            log_probs = log_softmax.gather(-1, tokens[..., None]).squeeze(-1)
        elif variant == "trl":
            from trl.trainer.utils import selective_log_softmax

            log_probs = selective_log_softmax((hidden @ weight.T) / args.temperature, tokens)
        else:
            log_probs, entropy = chunked_token_log_probs(hidden, weight, tokens, temperature=args.temperature,
                                                         chunk_size=int(variant.split("=")[1]))
        if backward:
            (log_probs * upstream).sum().backward()
            hidden.grad = weight.grad = None
        return float(log_probs.detach().double().sum())

    baseline = _rss_mib()
    times, checksum = [], once()
    for _ in range(args.repeats):
        start = time.perf_counter()
        once()
        times.append(time.perf_counter() - start)
    return {"variant": variant, "mode": args.mode, "seconds": min(times),
            "peak_mib": _rss_mib() - baseline, "checksum": checksum}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--tokens", type=int, default=1024)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--chunk-sizes", type=int, nargs="+", default=[512, 1024])
    p.add_argument("--modes", nargs="+", default=["forward", "backward"], choices=["forward", "backward"])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--mode", default="forward", help=argparse.SUPPRESS)
    return p


def main() -> None:
    args = _parser().parse_args()
    if args.child:
        print(json.dumps(_run_variant(args.child, args)))
        return
    try:
        import trl  # noqa: F401

        extra = ["trl"]
    except ImportError:
        extra = []
        print("TRL is not installed: its selective_log_softmax is not measured.", file=sys.stderr)
    variants = ["naive", "naive-logprobs-only", *extra, *[f"chunked={c}" for c in args.chunk_sizes]]
    passthrough = [f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items()
                   if k in ("batch", "tokens", "vocab", "hidden", "temperature", "repeats", "threads")]
    print(f"B={args.batch} T={args.tokens} V={args.vocab} H={args.hidden} threads={args.threads}, "
          f"fastest of {args.repeats} runs\n")
    print("| mode | variant | time (s) | peak extra memory (MiB) | memory vs naive | time vs naive |")
    print("|---|---|---|---|---|---|")
    for mode in args.modes:
        results = []
        for variant in variants:
            out = subprocess.run([sys.executable, __file__, "--child", variant, "--mode", mode, *passthrough],
                                 capture_output=True, text=True, check=True,
                                 env={**os.environ, "MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD_BYTES)})
            results.append(json.loads(out.stdout.strip().splitlines()[-1]))
        naive = results[0]
        for r in results:
            assert abs(r["checksum"] - naive["checksum"]) <= 1e-4 * abs(naive["checksum"]), (r, naive)
            print(f"| {mode} | {r['variant']} | {r['seconds']:.3f} | {r['peak_mib']:.0f} | "
                  f"{r['peak_mib'] / naive['peak_mib']:.2f} | {r['seconds'] / naive['seconds']:.2f} |")


if __name__ == "__main__":
    main()
