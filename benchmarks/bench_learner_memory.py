"""Peak memory per rank and step time of the scale learner: DDP vs FSDP vs FSDP + activation checkpointing.

A ~70M-parameter Llama (hidden 640, 10 layers, MLP 1728, vocabulary 32,000, tied embeddings, float32) takes
AdamW steps through :class:`scale.learner.Learner` on a fixed batch of synthetic trajectories (``--batch``
trajectories of ``--prompt`` + ``--completion`` random tokens, all of the completion policy tokens; the
global batch is split over the ranks). Each layout runs at 1 and 2 ranks (``torchrun``, gloo on CPU; a
process group even for 1 rank, so that FSDP really wraps the model).

Two memory figures per rank:

- **state**: exact bytes of the tensors this rank holds for training, counted from the tensors themselves:
  its parameters (the local shard under FSDP), their gradients and AdamW's ``exp_avg``/``exp_avg_sq``;
  divided by the model's parameter count it is the bytes per parameter (16 for a fp32 replica).
- **peak**: the operating system's high-water mark of the process's resident memory (``VmHWM``) during the
  timed steps, reset with ``/proc/self/clear_refs`` after the first (untimed) step, minus the resident memory
  measured after ``import torch, transformers`` and the process-group start (the interpreter and libraries).
  It includes activations, the LM-head chunks, FSDP's all-gather buffers and the allocator's slack.

Step time is the mean wall time of ``--steps`` steps after the first. Linux only (``/proc``).

Usage::

    python benchmarks/bench_learner_memory.py --steps 3
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYOUTS = {"ddp": {"parallel": "ddp"}, "fsdp": {"parallel": "fsdp"},
           "fsdp+ac": {"parallel": "fsdp", "activation_checkpointing": True}}


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def _state_bytes(model, optimizer) -> int:
    def local(tensor):
        return tensor.to_local() if hasattr(tensor, "to_local") else tensor

    total = 0
    for p in model.parameters():
        total += local(p).numel() * local(p).element_size()
        if p.grad is not None:
            total += local(p.grad).numel() * local(p.grad).element_size()
    for state in optimizer.state.values():
        for key in ("exp_avg", "exp_avg_sq"):
            total += local(state[key]).numel() * local(state[key]).element_size()
    return total


def worker(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist
    from transformers import LlamaConfig, LlamaForCausalLM

    from scale.learner import Learner
    from scale.learner.distributed import shard
    from scale.rollouts import Rollout
    from scale.rollouts.trajectory import Trajectory

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    baseline_kib = _status_kib("VmRSS")
    config = LlamaConfig(vocab_size=32_000, hidden_size=640, intermediate_size=1728, num_hidden_layers=10,
                         num_attention_heads=10, num_key_value_heads=10, max_position_embeddings=512,
                         tie_word_embeddings=True, attn_implementation="sdpa")
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    num_parameters = sum(p.numel() for p in model.parameters())
    generator = torch.Generator().manual_seed(1)
    rollouts = []
    for i in range(args.batch):
        prompt = torch.randint(3, 32_000, (args.prompt,), generator=generator).tolist()
        completion = torch.randint(3, 32_000, (args.completion,), generator=generator).tolist()
        trajectory = Trajectory(prompt, completion, [True] * args.completion, [-10.0] * args.completion, "eos", 0)
        rollouts.append(Rollout(trajectory, None, float(i % 2), i // 2, ""))
    local = shard(rollouts, rank, world)
    learner = Learner(model, functools.partial(torch.optim.AdamW, lr=1e-6), loss_name="flash_reinforce",
                      loss_options={"delta": 1e9}, max_tokens=args.completion, data_parallel=True,
                      **LAYOUTS[args.layout])
    learner.step(local)  # creates the AdamW state
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current resident memory
    times = []
    for _ in range(args.steps):
        dist.barrier()
        start = time.perf_counter()
        learner.step(local)
        times.append(time.perf_counter() - start)
    result = {"layout": args.layout, "ranks": world, "rank": rank, "parameters": num_parameters,
              "state_bytes": _state_bytes(model, learner.optimizer),
              "peak_bytes": (_status_kib("VmHWM") - baseline_kib) * 1024, "step_s": sum(times) / len(times)}
    Path(args.out, f"rank{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()
    os._exit(0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3, help="timed steps after the first")
    parser.add_argument("--batch", type=int, default=4, help="trajectories per global batch")
    parser.add_argument("--prompt", type=int, default=32, help="prompt tokens per trajectory")
    parser.add_argument("--completion", type=int, default=96, help="completion tokens per trajectory")
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--layouts", nargs="+", default=list(LAYOUTS), choices=list(LAYOUTS))
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--layout", default="ddp", help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    path = os.pathsep.join([str(ROOT), str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    print(f"{args.batch} trajectories x ({args.prompt} + {args.completion}) tokens per step; {args.steps} timed steps")
    print("| layout | ranks | params (M) | state / rank (MB) | state bytes / param | peak RSS / rank (MB) | step (s) |")
    print("|---|---|---|---|---|---|---|")
    for layout in args.layouts:
        for ranks in args.ranks:
            with tempfile.TemporaryDirectory() as out:
                command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node",
                           str(ranks), "--master-port", str(29600 + ranks), __file__, "--worker", "--layout", layout,
                           "--out", out, "--steps", str(args.steps), "--batch", str(args.batch),
                           "--prompt", str(args.prompt), "--completion", str(args.completion)]
                subprocess.run(command, env=env, check=True, cwd=ROOT)
                rows = [json.loads(Path(out, f"rank{r}.json").read_text()) for r in range(ranks)]
            state, peak = max(r["state_bytes"] for r in rows), max(r["peak_bytes"] for r in rows)
            step = max(r["step_s"] for r in rows)
            params = rows[0]["parameters"]
            print(f"| {layout} | {ranks} | {params / 1e6:.1f} | {state / 1e6:.0f} | {state / params:.1f} | "
                  f"{peak / 1e6:.0f} | {step:.2f} |", flush=True)


if __name__ == "__main__":
    main()
