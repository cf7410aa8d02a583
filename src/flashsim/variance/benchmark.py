"""Time :func:`flashsim.variance.measure_gradient`: the vectorised path against the per-batch reference loop.

    python -m flashsim.variance.benchmark --env gridworld --batches 2000 --budget 128 \\
        --estimators flash_reinforce,grpo --reference-batches 2000

Both methods run the whole measurement (sampling, update directions, exact gradient, statistics with
200 bootstrap resamples) at the measurement point of ``flashsim variance`` (32 steps of exact ascent
from the uniform tabular policy, on-policy). A warm-up call runs first so that neither method pays
for imports. Wall-clock and process CPU time are both printed: on a shared machine the CPU time is
the steadier of the two.
"""

from __future__ import annotations

import argparse
import time

import torch

from flashsim.policies import make_policy
from flashsim.sim.config import build_tables
from flashsim.variance.lag import ascent_trajectory, policy_at
from flashsim.variance.measure import measure_gradient


def time_measurement(tables, policy, *, method: str, estimators: list[str], budget: int, batches: int,
                     group_size: int) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of measuring every estimator once with ``method``."""
    wall, cpu = time.perf_counter(), time.process_time()
    for estimator in estimators:
        measure_gradient(tables, policy, estimator=estimator, budget=budget, num_batches=batches, seed=0,
                         group_size=group_size, method=method)
    return time.perf_counter() - wall, time.process_time() - cpu


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="gridworld")
    parser.add_argument("--estimators", default="flash_reinforce,grpo")
    parser.add_argument("--budget", type=int, default=128)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--batches", type=int, default=2000)
    parser.add_argument("--reference-batches", type=int, default=2000, help="batches for the reference loop")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    tables = build_tables(args.env)
    start = make_policy("tabular", tables)
    policy = policy_at(start, ascent_trajectory(tables, start, steps=32, step_size=0.2)[-1])
    estimators = args.estimators.split(",")
    common = dict(estimators=estimators, budget=args.budget, group_size=args.group_size)
    time_measurement(tables, policy, method="fast", batches=4, **common)  # warm-up: imports, allocator
    time_measurement(tables, policy, method="reference", batches=4, **common)
    fast = time_measurement(tables, policy, method="fast", batches=args.batches, **common)
    reference = time_measurement(tables, policy, method="reference", batches=args.reference_batches, **common)
    scale = args.batches / args.reference_batches
    print(f"{args.env}: {len(estimators)} estimators x {args.batches} batches x budget {args.budget}, "
          f"{args.threads} torch thread(s)")
    print(f"  fast       wall {fast[0]:7.2f} s   cpu {fast[1]:7.2f} s")
    print(f"  reference  wall {reference[0] * scale:7.2f} s   cpu {reference[1] * scale:7.2f} s"
          + ("" if scale == 1 else f"   (scaled from {args.reference_batches} batches)"))
    print(f"  ratio      wall {reference[0] * scale / fast[0]:7.1f} x   cpu {reference[1] * scale / fast[1]:7.1f} x")


if __name__ == "__main__":
    main()
