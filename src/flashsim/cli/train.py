"""``flashsim train``: one simulated training run — env, algorithm, lag, budget, seed — to a directory.

Writes ``metrics.csv``, ``metrics.jsonl``, ``curves.png``, ``summary.json``, ``config.json`` and a
resumable ``checkpoint.pt`` to ``--out``; ``--resume`` continues an interrupted run from there (its
configuration comes from the checkpoint; ``--updates`` may extend the budget). The help text of
each option is the docstring of the config field it sets (:mod:`flashsim.sim.config`).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

import torch

from flashsim.sim.config import (
    ALGORITHMS,
    AlgorithmConfig,
    AsyncWorkers,
    TimingModel,
    TrainConfig,
    field_help,
    parse_lag,
)
from flashsim.sim.envs import ENVS, EnvPreset
from flashsim.sim.output import CHECKPOINT, jsonable, load_checkpoint
from flashsim.sim.training import train

# (flag, config class, field, type): options that override one field of the chosen preset.
_ALGORITHM_FLAGS = (
    ("--batch-size", "batch_size", int), ("--group-size", "group_size", int), ("--epochs", "epochs", int),
    ("--minibatches", "minibatches", int), ("--optimizer", "optimizer", str), ("--lr", "learning_rate", float),
)
_RUN_FLAGS = (
    ("--policy", "policy", str), ("--eval-every", "eval_every", int),
    ("--checkpoint-every", "checkpoint_every", int), ("--logprob-noise", "logprob_noise", float),
)
_TIMING_FLAGS = (
    ("--update-time", "update_time", float), ("--tool-sigma", "tool_sigma", float),
    ("--straggler-prob", "straggler_prob", float),
)
_WORKER_FLAGS = (("--crash-prob", "crash_prob", float), ("--max-queued", "max_queued", int))


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "train", help="run one simulated training run (FlashREINFORCE, GRPO or an ablation) with policy lag",
        description=__doc__.split("\n\n")[0],
    )
    run_help, algorithm_help = field_help(TrainConfig), field_help(AlgorithmConfig)
    parser.add_argument("--env", default=None, help=run_help["env"] + f" Presets: {', '.join(ENVS)}. [default: bandit]")
    parser.add_argument(
        "--algo", choices=list(ALGORITHMS), default=None,
        help="algorithm preset: the loss and its batching [default: flash_reinforce]",
    )
    parser.add_argument(
        "--lag", type=parse_lag, default=None, metavar="SPEC",
        help="policy lag: L (fixed), random:MAX[:uniform|geometric|poisson[:MEAN]], or workers:N[:sync] "
        "(emergent, event-driven) [default: 0]",
    )
    parser.add_argument("--updates", type=int, default=None, help=run_help["updates"] + " [default: 200]")
    parser.add_argument("--seed", type=int, default=None, help=run_help["seed"] + " [default: 0]")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR", help="run directory for all outputs")
    parser.add_argument("--resume", action="store_true", help="continue the interrupted run in --out")
    parser.add_argument("--json", action="store_true", help="print the final summary as JSON on stdout")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    parser.add_argument("--delta", type=float, default=None, help="gate threshold δ of the loss (loss option)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (tiny tensors: 1 is fastest)")
    for flags, helps in ((_ALGORITHM_FLAGS, algorithm_help), (_RUN_FLAGS, run_help)):
        for flag, name, kind in flags:
            parser.add_argument(flag, type=kind, default=None, help=helps[name])
    for flags, helps in ((_TIMING_FLAGS, field_help(TimingModel)), (_WORKER_FLAGS, field_help(AsyncWorkers))):
        for flag, name, kind in flags:
            parser.add_argument(flag, type=kind, default=None, help=helps[name])
    parser.set_defaults(func=run)


def build_config(args: argparse.Namespace, base: TrainConfig | None = None) -> TrainConfig:
    """The run's config: ``base`` (or the defaults and presets) with every option given on the command line."""
    config = base if base is not None else TrainConfig()
    algorithm = ALGORITHMS[args.algo] if args.algo is not None else config.algorithm
    overrides = {name: getattr(args, _dest(flag)) for flag, name, _ in _ALGORITHM_FLAGS}
    algorithm = replace(algorithm, **{k: v for k, v in overrides.items() if v is not None})
    if args.delta is not None:
        algorithm = replace(algorithm, loss_options={**algorithm.loss_options, "delta": args.delta})
    changes: dict[str, object] = {"algorithm": algorithm}
    for option in ("env", "lag", "updates", "seed"):
        if getattr(args, option) is not None:
            changes[option] = getattr(args, option)
    for flag, name, _ in _RUN_FLAGS:
        if getattr(args, _dest(flag)) is not None:
            changes[name] = getattr(args, _dest(flag))
    lag = changes.get("lag", config.lag)
    worker_options = {name: getattr(args, _dest(flag)) for flag, name, _ in _WORKER_FLAGS}
    worker_options = {k: v for k, v in worker_options.items() if v is not None}
    if worker_options:
        if not isinstance(lag, AsyncWorkers):
            raise ValueError(f"{', '.join(worker_options)} need --lag workers:N (event-driven workers)")
        changes["lag"] = replace(lag, **worker_options)
    timing_options = {name: getattr(args, _dest(flag)) for flag, name, _ in _TIMING_FLAGS}
    timing_options = {k: v for k, v in timing_options.items() if v is not None}
    if timing_options:
        env = changes.get("env", config.env)
        timing = config.timing or ENVS.get(env, EnvPreset(env)).timing
        changes["timing"] = replace(timing, **timing_options)
    return replace(config, **changes)


def run(args: argparse.Namespace) -> int:
    torch.set_num_threads(args.threads)
    try:
        base = None
        if args.resume:
            if not (args.out / CHECKPOINT).exists():
                raise FileNotFoundError(f"nothing to resume: {args.out / CHECKPOINT} does not exist")
            base = load_checkpoint(args.out / CHECKPOINT)["simulation"].config
        config = build_config(args, base)
        result = train(config, args.out, resume=args.resume, progress=not args.no_progress)
    except (ValueError, TypeError, FileExistsError, FileNotFoundError) as error:
        print(f"flashsim train: error: {error}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(jsonable(result.summary), indent=2, allow_nan=False))
    else:
        _print_summary(result.summary, args.out)
    return 0


def _print_summary(summary: dict, out: Path) -> None:
    final = summary["final"]
    print(f"{summary['algorithm']} on {summary['env']}, {summary['lag']}, seed {summary['seed']}: "
          f"{summary['updates']} updates, {summary['rollouts']} rollouts")
    bound = "optimum" if summary["env"].startswith("bandit") else "upper bound on the optimum"
    success, optimum = summary["success_train"], summary["optimal_success_train"]
    if optimum is None:  # no exact tables: a Monte Carlo estimate
        print(f"  success (train, MC)     {success:.4f} ± {summary['success_train_stderr']:.4f} (s.e.)")
    else:
        print(f"  exact success (train)   {success:.4f}  ({bound} {optimum:.4f})")
    print(f"  batch reward            {final['env/reward']:.4f}")
    print(f"  gate acceptance rate    {final['trust/acceptance_rate']:.4f}")
    print(f"  observed lag mean/max   {final['lag/mean']:.2f} / {final['lag/max']:.0f}")
    print(f"  {summary['updates_per_second']:.1f} updates/s; outputs in {out}")


def _dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")
