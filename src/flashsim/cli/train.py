"""``flashsim train``: one simulated training run — env, algorithm, lag, budget, seed — to a directory.

Writes ``metrics.csv``, ``metrics.jsonl``, ``curves.png``, ``summary.json``, ``config.json`` and a
resumable ``checkpoint.pt`` to ``--out``, and TensorBoard event files with ``--logger tensorboard``;
``--resume`` continues an interrupted run from there (its configuration comes from the checkpoint;
``--updates`` may extend the budget). The help text of
each option is the docstring of the config field it sets (:mod:`flashsim.sim.config`); the flags are
generated from those dataclasses by :mod:`flashsim.config`, which also reads ``--config FILE.yaml`` and
``--set KEY=VALUE`` strictly.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

import torch

from flashsim.cli import add_config_sources, add_loss_option_flags, loss_option_assignments
from flashsim.config import add_flags, directory_argument, field_docs, flag_assignments, load
from flashsim.losses.registry import LOSSES
from flashsim.outputs import LOGGERS
from flashsim.sim.config import AlgorithmConfig, AsyncWorkers, TrainConfig
from flashsim.sim.simulation import CHECKPOINT, load_state, train
from flashsim.storage import jsonable

_NAMES = {"algorithm.learning_rate": ("--lr", "--learning-rate")}

_WORKER_ONLY = ("max_queued", "crash_prob", "restart_time")
"""Fields of :class:`AsyncWorkers` with their own flags (``--lag workers:N[:sync]`` sets the others)."""


def configure(parser: argparse.ArgumentParser) -> None:
    """The options of ``flashsim train`` (:mod:`flashsim.cli` makes the parser)."""
    parser.add_argument("--out", type=directory_argument, required=True, metavar="DIR",
                        help="run directory for all outputs")
    parser.add_argument("--resume", action="store_true", help="continue the interrupted run in --out")
    parser.add_argument(
        "--algo", choices=list(LOSSES), default=None,
        help="the algorithm: a loss of flashsim.losses.LOSSES with its group size (8 for grpo, rloo, dr_grpo; "
        "flags below override single fields) [default: flash_reinforce]",
    )
    add_config_sources(parser, "TrainConfig", "algorithm.loss_options.clip_eps=0.1", after="--algo")
    add_loss_option_flags(parser, "algorithm.loss_options")  # --delta, --clip-eps, ...: one flag per table row
    parser.add_argument("--json", action="store_true", help="print the final summary as JSON on stdout")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    parser.add_argument("--logger", choices=LOGGERS, default=None,
                        help="also log the metrics to TensorBoard: event files in --out (tensorboard --logdir OUT); "
                        "give it again with --resume [default: none]")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (tiny tensors: 1 is fastest)")
    paths = add_flags(parser, TrainConfig, flat=True, names=_NAMES, exclude=("algorithm.loss",))
    paths += add_flags(parser, AsyncWorkers, prefix="lag", flat=True,
                       exclude=[f"lag.{name}" for name in field_docs(AsyncWorkers) if name not in _WORKER_ONLY])
    parser.set_defaults(func=run, config_paths=paths)


def build_config(args: argparse.Namespace, base: TrainConfig | None = None) -> TrainConfig:
    """The run's config: ``base`` (or the defaults) with ``--algo``, then ``--config``, ``--set`` and the flags
    (:func:`flashsim.config.load`)."""
    config = base if base is not None else TrainConfig()
    if args.algo is not None:
        config = replace(config, algorithm=AlgorithmConfig.for_loss(args.algo))
    flags = flag_assignments(args, args.config_paths) + loss_option_assignments(args)
    return load(TrainConfig, args.config, args.set, flags, base=config)


def run(args: argparse.Namespace) -> int:
    torch.set_num_threads(args.threads)
    try:
        base = None
        if args.resume:
            if not (args.out / CHECKPOINT).exists():
                raise FileNotFoundError(f"nothing to resume: {args.out / CHECKPOINT} does not exist")
            base = load_state(args.out / CHECKPOINT)["simulation"].config
        config = build_config(args, base)
        result = train(config, args.out, resume=args.resume, progress=not args.no_progress, logger=args.logger)
    except (ValueError, TypeError, FileExistsError, FileNotFoundError, ImportError) as error:
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
    bound = "optimum" if summary["optimum_is_exact"] else "upper bound on the optimum"
    success, optimum = summary["success_train"], summary["optimal_success_train"]
    if optimum is None:  # no exact tables: a Monte Carlo estimate
        print(f"  success (train, MC)     {success:.4f} ± {summary['success_train_stderr']:.4f} (s.e.)")
    else:
        print(f"  exact success (train)   {success:.4f}  ({bound} {optimum:.4f})")
    print(f"  batch reward            {final['env/reward']:.4f}")
    print(f"  gate acceptance rate    {final['trust/acceptance_rate']:.4f}")
    print(f"  observed lag mean/max   {final['lag/mean']:.2f} / {final['lag/max']:.0f}")
    print(f"  {summary['updates_per_second']:.1f} updates/s; outputs in {out}")
