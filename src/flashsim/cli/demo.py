"""``flashsim demo``: FlashREINFORCE vs GRPO on PromptBandit, on-policy and with policy lag 8.

Four simulated runs at one rollout budget — FlashREINFORCE (B = 128 prompts × 1 rollout, sequence
gate) and GRPO (16 prompts × G = 8, PPO clip), each at lag 0 and at a fixed lag of 8 updates — then a
table on stdout (exact success of the final policy, updates to 90 % of the optimum, gate acceptance,
clip fraction) and a figure of the learning curves. About 10 s of CPU on a 2-core laptop.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import torch

from flashsim.config import directory_argument
from flashsim.outputs import plot_curves
from flashsim.sim import AlgorithmConfig, FixedLag, TrainConfig, build_tables, optimal_success, train
from flashsim.testing.conventions import ALGORITHMS

RUNS = ALGORITHMS  # the registry rows that are a loss function itself: flash_reinforce and grpo
LAGS = (0, 8)


def configure(parser: argparse.ArgumentParser) -> None:
    """The options of ``flashsim demo`` (:mod:`flashsim.cli` makes the parser)."""
    parser.add_argument("--updates", type=int, default=150, help="learner updates per run (B = 128 rollouts each)")
    parser.add_argument("--seed", type=int, default=0, help="random seed of every run")
    parser.add_argument("--out", type=directory_argument, default=Path("flashsim-demo"),
                        help="directory for the figure")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    torch.set_num_threads(1)  # tiny tensors: one thread is fastest
    optimum = optimal_success(build_tables("bandit"))
    print(f"FlashREINFORCE vs GRPO on PromptBandit (48 train prompts × 4 answers), {args.updates} updates × "
          f"128 rollouts per run, seed {args.seed}; optimal success {optimum:.3f}")
    curves, table = {}, []
    for label in RUNS:
        for lag in LAGS:
            config = TrainConfig(env="bandit", algorithm=AlgorithmConfig.for_loss(label), lag=FixedLag(lag),
                                 updates=args.updates, seed=args.seed, eval_every=5)
            result = train(config, plot=False)
            curves[f"{label}, lag {lag}"] = result.rows
            table.append(_table_row(label, lag, result, optimum))
    _print_table(table)
    args.out.mkdir(parents=True, exist_ok=True)
    path = plot_curves(curves, args.out / "demo.png", smooth=5, heldout=False,
                       title=f"PromptBandit · {args.updates} updates × 128 rollouts · seed {args.seed}")
    print(f"learning curves saved to {path.resolve()}")
    return 0


def _table_row(label: str, lag: int, result, optimum: float) -> dict[str, object]:
    rows = result.rows
    reached = [row["update"] + 1 for row in rows
               if not math.isnan(row["env/success_train"]) and row["env/success_train"] >= 0.9 * optimum]
    return {
        "run": f"{label}, lag {lag}",
        "success": result.summary["success_train"],
        "of_optimum": result.summary["success_train"] / optimum,
        "to_90": reached[0] if reached else None,
        "acceptance": sum(row["trust/acceptance_rate"] for row in rows) / len(rows),
        "clip": sum(row["trust/clip_fraction"] for row in rows) / len(rows),
    }


def _print_table(table: list[dict[str, object]]) -> None:
    print()
    print(f"{'run':<22} {'success':>8} {'of opt.':>8} {'updates to 90%':>15} {'gate accept':>12} {'clipped':>8}")
    for row in table:
        to_90 = "—" if row["to_90"] is None else str(row["to_90"])
        print(f"{row['run']:<22} {row['success']:>8.3f} {row['of_optimum']:>8.1%} {to_90:>15} "
              f"{row['acceptance']:>12.3f} {row['clip']:>8.3f}")
    print("\nsuccess: exact expected success of the final policy on the train prompts; updates to 90%: first "
          "evaluated update (every 5) at ≥ 90 % of the optimum; gate accept: mean fraction of trajectories the "
          "sequence gate admits (1 for GRPO, which has no gate); clipped: mean fraction of PPO-clipped tokens.")
