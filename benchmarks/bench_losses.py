"""Benchmark of the loss core: the formula-first loss against the previous (fused) one, and its share of a step.

Three parts, each a subcommand:

``loss``
    Forward + backward of ``flash_reinforce_loss`` and ``grpo_loss`` on a [B, T] float32 batch, for
    the loss as it is now ("formula": the paper's lines in one function) and as it was at ``--previous``
    ("previous": by default 2cebd53, the composed ``policy_loss``; 49f9756 is the fused token pass), both with
    ``validate=True`` and ``False``, in the same run. The previous package is read with
    ``git show <commit>:src/flashsim/losses/...`` into a temporary directory and imported under another
    name. Before timing, both are checked equal in float64 (loss and gradient to 1e-10 relative).
``sim``
    The simulator (PromptBandit, FlashREINFORCE, B = 128, lag 0, tabular policy): learner updates
    per CPU-second with either loss, and the loss's share of an update.
``scale``
    The tiny ``scale/`` model (character Llama, hidden 128, 2 layers; B = 64 rollouts of up to 24
    tokens): the loss's share of one ``scale.learner.Learner.step``.

The loss's share of a step: a wrapper around the learner's ``loss_fn`` times the loss's forward and,
separately, its backward alone (``torch.autograd.grad(loss, log_probs)``, graph retained); the share
is (forward + backward) / (step − that extra backward). CPU time is ``time.process_time``.

Usage (repo root)::

    python benchmarks/bench_losses.py loss --threads 1
    python benchmarks/bench_losses.py sim
    python benchmarks/bench_losses.py scale

Variants are timed round-robin so that load from other processes slows each alike; tables report
medians. Figures and what they mean: docs/performance.md, "Loss core".
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import torch
from torch import Tensor

import flashsim.losses as formula

ROOT = Path(__file__).resolve().parents[1]
PREVIOUS = "2cebd53"  # the last commit of the composed loss (policy_loss over 8 files of losses/)


def previous_losses(commit: str) -> ModuleType:
    """``flashsim.losses`` as of ``commit``, imported as ``flashsim_previous_losses`` from a temp dir."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True).stdout

    package = Path(tempfile.mkdtemp(prefix="flashsim_previous_")) / "flashsim_previous_losses"
    package.mkdir()
    for path in git("ls-tree", "--name-only", commit, "src/flashsim/losses/").split():
        text = git("show", f"{commit}:{path}").replace("flashsim.losses", "flashsim_previous_losses")
        (package / Path(path).name).write_text(text)
    spec = importlib.util.spec_from_file_location("flashsim_previous_losses", package / "__init__.py",
                                                  submodule_search_locations=[str(package)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its own modules import flashsim_previous_losses.<name>
    spec.loader.exec_module(module)
    return module


def make_batch(batch: int, tokens: int, *, seed: int = 0, group_size: int = 8) -> dict[str, Tensor]:
    """A stale float32 batch: unequal lengths (mean ≈ T/2), NaN padding, small logit-space drift.

    Shape:
        ``log_probs``, ``behavior_log_probs``: [B, T] float32; ``action_mask``: [B, T] bool;
        ``rewards``: [B] float32; ``group_ids``: [B] int64 (groups of ``group_size``).
    """
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(tokens // 8, 7 * tokens // 8 + 1, (batch,), generator=g)
    mask = torch.arange(tokens)[None, :] < lengths[:, None]
    # The sampled token's logit z: mostly confident (p = sigmoid(z) near 1), some uncertain.
    logits = 2.5 + 2.0 * torch.randn(batch, tokens, generator=g)
    drift = 0.3 * torch.rand(batch, 1, generator=g)  # per-trajectory staleness in logit space
    behavior = torch.nn.functional.logsigmoid(logits)
    current = torch.nn.functional.logsigmoid(logits + drift * torch.randn(batch, tokens, generator=g))
    nan = torch.tensor(float("nan"))
    return {
        "log_probs": torch.where(mask, current, nan),
        "behavior_log_probs": torch.where(mask, behavior, nan),
        "action_mask": mask,
        "rewards": (torch.rand(batch, generator=g) < 0.5).float(),
        "group_ids": torch.arange(batch) // group_size,
    }


def loss_calls(module: ModuleType, data: dict[str, Tensor]) -> dict[str, Callable[[Tensor], tuple]]:
    """``flash`` and ``grpo`` of ``module`` as functions of the log-probs (validate passed on)."""
    blp, rewards, mask, groups = (data[k] for k in ("behavior_log_probs", "rewards", "action_mask", "group_ids"))
    return {
        "flash": lambda lp, **o: module.flash_reinforce_loss(lp, blp, rewards, mask, **o),
        "grpo": lambda lp, **o: module.grpo_loss(lp, blp, rewards, mask, groups, **o),
    }


def check_equal(previous: ModuleType, data: dict[str, Tensor]) -> dict[str, float]:
    """Both losses agree in float64 (loss and gradient, 1e-10 relative); returns acceptance and clip stats."""
    data64 = {k: (v.double() if torch.is_floating_point(v) else v) for k, v in data.items()}
    summary = {}
    now, before = loss_calls(formula, data64), loss_calls(previous, data64)
    for name in now:
        results = []
        for calls in (now, before):
            leaf = data64["log_probs"].clone().requires_grad_(True)
            loss, stats = calls[name](leaf)
            results.append((loss.detach(), torch.autograd.grad(loss, leaf)[0], stats))
        (loss, gradient, stats), (loss_b, gradient_b, _) = results
        torch.testing.assert_close(loss, loss_b, rtol=1e-10, atol=1e-14)
        torch.testing.assert_close(gradient, gradient_b, rtol=1e-10, atol=1e-14)
        for key in ("acceptance_rate", "clip_fraction", "tis_capped_fraction"):  # each loss reports its own
            if key in stats:
                summary[f"{name} {key}"] = float(stats[key])
    return summary


def time_round_robin(
    steps: dict[str, Callable[[], None]], repeats: int, warmup: int, calls: int
) -> dict[str, dict[str, list[float]]]:
    """Wall and CPU seconds per call of each step, over ``repeats`` rounds of ``calls`` consecutive calls."""
    for _ in range(warmup):
        for step in steps.values():
            step()
    times = {name: {"wall": [], "cpu": []} for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():
            for _ in range(calls):
                wall, cpu = time.perf_counter(), time.process_time()
                step()
                times[name]["cpu"].append(time.process_time() - cpu)
                times[name]["wall"].append(time.perf_counter() - wall)
    return times


def loss_part(args: argparse.Namespace) -> None:
    data = make_batch(args.batch, args.tokens)
    try:
        previous = previous_losses(args.previous)
    except (OSError, subprocess.CalledProcessError) as error:  # no git, or a shallow clone without the commit
        print(f"previous loss core ({args.previous}) not available: {error}; timing the formula only")
        versions = (("formula", formula),)
        note = ""
    else:
        versions = (("formula", formula), ("previous", previous))
        summary = check_equal(previous, data)
        note = ", ".join(f"{k} {v:.3f}" for k, v in summary.items()) + f"; formula equals previous ({args.previous})"
    print(f"[B, T] = [{args.batch}, {args.tokens}] float32, torch {torch.__version__}, threads "
          f"{torch.get_num_threads()}, policy-token fraction {float(data['action_mask'].float().mean()):.2f}; {note}")
    leaf = data["log_probs"].clone().requires_grad_(True)
    steps = {}
    for loss in ("flash", "grpo"):
        for version, module in versions:
            for validate in (True, False):
                fn = loss_calls(module, data)[loss]
                steps[f"{loss} {version} validate={validate}"] = _forward_backward(fn, leaf, validate)
    load = os.getloadavg()[0]
    times = time_round_robin(steps, args.repeats, args.warmup, args.calls)
    median = {name: {k: statistics.median(v) * 1e3 for k, v in kinds.items()} for name, kinds in times.items()}
    print("| variant | wall ms | CPU ms | formula / previous (CPU) |\n|---|---:|---:|---:|")
    for name, ms in median.items():
        before = median.get(name.replace("formula", "previous"), {}).get("cpu")
        ratio = f"{ms['cpu'] / before:.2f}×" if before and "formula" in name else ""
        print(f"| {name} | {ms['wall']:.2f} | {ms['cpu']:.2f} | {ratio} |")
    print(f"load average (1 min) {load:.1f} before, {os.getloadavg()[0]:.1f} after, on {os.cpu_count()} CPUs")


def _forward_backward(fn: Callable, leaf: Tensor, validate: bool) -> Callable[[], None]:
    def step() -> None:
        leaf.grad = None
        fn(leaf, validate=validate)[0].backward()
    return step


class TimedLoss:
    """Wraps a registry loss: times its forward and (separately) its backward to ``log_probs``.

    ``advantage`` is the row's estimator of the current registry (the estimators did not change), which
    ``scale``'s learner reads from its ``loss_fn``; an older registry's rows may not carry it.
    """

    def __init__(self, loss_fn: Callable, name: str) -> None:
        self.loss_fn, self.advantage = loss_fn, formula.LOSSES[name].advantage
        self.forward = self.backward = 0.0

    def __call__(self, log_probs: Tensor, *args, **options):
        start = time.process_time()
        loss, stats = self.loss_fn(log_probs, *args, **options)
        middle = time.process_time()
        torch.autograd.grad(loss, log_probs, retain_graph=True)
        self.forward += middle - start
        self.backward += time.process_time() - middle
        return loss, stats


def loss_share(step: Callable[[], None], learner, module: ModuleType, name: str, steps: int) -> tuple[float, float]:
    """(CPU seconds per step without the extra backward, the loss's share of it) over ``steps`` steps."""
    timed = TimedLoss(module.get_loss(name), name)
    learner.loss_fn = timed
    start = time.process_time()
    for _ in range(steps):
        step()
    total = time.process_time() - start - timed.backward
    return total / steps, (timed.forward + timed.backward) / total


def sim_part(args: argparse.Namespace) -> None:
    from flashsim.sim import Simulation, TrainConfig

    previous = previous_losses(args.previous)
    config = TrainConfig(env="bandit", updates=10**6, seed=0, eval_every=10)
    sims = {"formula": Simulation(config), "previous": Simulation(config)}
    sims["previous"].learner.loss_fn = previous.get_loss("flash_reinforce")
    rates = {name: [] for name in sims}
    for _ in range(args.repeats):  # rounds of args.updates updates each, alternating
        for name, sim in sims.items():
            start = time.process_time()
            for _ in range(args.updates):
                sim.step()
            rates[name].append(args.updates / (time.process_time() - start))
    print(f"simulator: bandit, flash_reinforce, B = 128, eval every 10; {args.repeats} rounds × {args.updates} "
          f"updates; torch threads {torch.get_num_threads()}")
    print("| loss | updates per CPU-second (median, min–max) | CPU ms per update | loss share of an update |")
    print("|---|---:|---:|---:|")
    for name, sim in sims.items():
        module = formula if name == "formula" else previous
        per_step, share = loss_share(lambda s=sim: s.step(evaluate=False), sim.learner, module, "flash_reinforce",
                                     args.updates)
        r = rates[name]
        print(f"| {name} | {statistics.median(r):.0f} ({min(r):.0f}–{max(r):.0f}) | {per_step * 1e3:.2f} | "
              f"{share:.0%} |")


def scale_part(args: argparse.Namespace) -> None:
    from scale.learner import Learner
    from scale.learner.model import build_tiny_model
    from scale.rollouts import Rollout, SamplingParams
    from scale.rollouts.engines import TransformersEngine
    from scale.rollouts.tokenizer import CharTokenizer

    previous = previous_losses(args.previous)
    tokenizer = CharTokenizer()
    model = build_tiny_model(tokenizer, seed=0)
    engine = TransformersEngine(model, tokenizer, seed=0)
    prompts = [tokenizer.encode_prompt(f"{i}*{i + 3}=") for i in range(8) for _ in range(8)]
    trajectories = engine.generate(prompts, SamplingParams(max_new_tokens=24))
    rewards = torch.randint(0, 2, (64,), generator=torch.Generator().manual_seed(0)).double().tolist()
    rollouts = [Rollout(t, None, r, i // 8, "") for i, (t, r) in enumerate(zip(trajectories, rewards))]
    tokens = sum(t.num_actions for t in trajectories)
    print(f"scale: tiny Llama (hidden 128, 2 layers), B = 64 rollouts, {tokens} policy tokens, "
          f"torch threads {torch.get_num_threads()}; {args.steps} learner steps per cell")
    print("| loss | version | CPU ms per learner step | loss share of the step |\n|---|---|---:|---:|")
    for name in ("flash_reinforce", "grpo"):
        for version, module in (("formula", formula), ("previous", previous)):
            optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # lr 0: every step sees the same policy
            learner = Learner(model, optimizer, loss_name=name, loss_options={"delta": 1e9} if name != "grpo" else {})
            learner.step(rollouts)  # warm-up
            per_step, share = loss_share(lambda ln=learner: ln.step(rollouts), learner, module, name, args.steps)
            print(f"| {name} | {version} | {per_step * 1e3:.1f} | {share:.1%} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=("loss", "sim", "scale"), help="what to measure")
    parser.add_argument("--previous", default=PREVIOUS, help="git commit of the previous loss core")
    parser.add_argument("--batch", type=int, default=128, help="loss: trajectories B")
    parser.add_argument("--tokens", type=int, default=4096, help="loss: token slots T")
    parser.add_argument("--repeats", type=int, default=10, help="loss, sim: timed rounds")
    parser.add_argument("--calls", type=int, default=3, help="loss: consecutive timed calls per variant per round")
    parser.add_argument("--warmup", type=int, default=3, help="loss: untimed rounds first")
    parser.add_argument("--updates", type=int, default=100, help="sim: updates per round")
    parser.add_argument("--steps", type=int, default=5, help="scale: learner steps per cell")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    {"loss": loss_part, "sim": sim_part, "scale": scale_part}[args.part](args)


if __name__ == "__main__":
    main()
