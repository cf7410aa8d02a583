"""Env-steps per second: each toy env's native vector env vs gymnasium's SyncVectorEnv over the single env.

Both step ``--num-envs`` sub-envs with uniformly random actions (pre-drawn from a seeded numpy
generator, so action sampling is not timed) and autoreset. SyncVectorEnv is built the standard way,
``gymnasium.make_vec(id, num_envs, vectorization_mode="sync")`` (each sub-env is ``gymnasium.make(id)``).
The best of ``--repeats`` timings is reported, to be robust to other load on the machine. The last
column steps one unwrapped single env in a plain loop: the single env is the batch-of-one case of the
shared numpy dynamics, so its per-step cost is numpy call overhead, which SyncVectorEnv pays per sub-env.
A last row steps gymnasium's own ``FrozenLake-v1`` (slippery): its exact tables (``toy_envs.exact_tables``,
from the ``P`` table) in the shared core's vector env against gymnasium's SyncVectorEnv of FrozenLake.

Usage::

    python benchmarks/bench_envs.py --num-envs 1024 --steps 300 --sync-steps 30 --repeats 3
"""

from __future__ import annotations

import argparse
import platform
import time

import gymnasium as gym
import numpy as np

import toy_envs


def steps_per_second(envs: gym.vector.VectorEnv, num_steps: int, repeats: int, seed: int) -> float:
    """Best-of-``repeats`` env-steps per second over ``num_steps`` batched steps of random actions."""
    actions = np.random.default_rng(seed).integers(0, envs.single_action_space.n, size=(num_steps, envs.num_envs))
    best = np.inf
    for _ in range(repeats):
        envs.reset(seed=seed)
        start = time.perf_counter()
        for step_actions in actions:
            envs.step(step_actions)
        best = min(best, time.perf_counter() - start)
    return num_steps * envs.num_envs / best


def single_env_steps_per_second(env: gym.Env, num_steps: int, repeats: int, seed: int) -> float:
    """Best-of-``repeats`` steps per second of one unwrapped single env (reset on episode end)."""
    actions = np.random.default_rng(seed).integers(0, env.action_space.n, size=num_steps).tolist()
    best = np.inf
    for _ in range(repeats):
        env.reset(seed=seed)
        start = time.perf_counter()
        for action in actions:
            _, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                env.reset()
        best = min(best, time.perf_counter() - start)
    return num_steps / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, default=1024, help="sub-envs per vector env")
    parser.add_argument("--steps", type=int, default=300, help="batched steps timed for the native vector env")
    parser.add_argument("--sync-steps", type=int, default=30, help="batched steps timed for SyncVectorEnv")
    parser.add_argument("--repeats", type=int, default=3, help="timings per measurement; the best is kept")
    parser.add_argument("--seed", type=int, default=0, help="seed of the envs and of the random actions")
    args = parser.parse_args()

    print(
        f"numpy {np.__version__}, gymnasium {gym.__version__}, python {platform.python_version()}, "
        f"{args.num_envs} envs, random actions, best of {args.repeats}"
    )
    print("| env | native vector env (steps/s) | SyncVectorEnv (steps/s) | speed-up | one single env (steps/s) |")
    print("|---|---:|---:|---:|---:|")
    for env_id in toy_envs.ENV_IDS:
        native = gym.make_vec(env_id, num_envs=args.num_envs, vectorization_mode="vector_entry_point")
        sync = gym.make_vec(env_id, num_envs=args.num_envs, vectorization_mode="sync")
        native_rate = steps_per_second(native, args.steps, args.repeats, args.seed)
        sync_rate = steps_per_second(sync, args.sync_steps, args.repeats, args.seed)
        single_rate = single_env_steps_per_second(
            gym.make(env_id).unwrapped, 10 * args.sync_steps, args.repeats, args.seed
        )
        speed_up = native_rate / sync_rate
        print(f"| `{env_id}` | {native_rate:,.0f} | {sync_rate:,.0f} | {speed_up:.0f}x | {single_rate:,.0f} |")
    frozen = gym.make("FrozenLake-v1")
    tables = toy_envs.exact_tables(frozen)
    native = toy_envs.TabularVectorEnv(toy_envs.TabularDynamics(tables), args.num_envs)
    sync = gym.make_vec("FrozenLake-v1", num_envs=args.num_envs, vectorization_mode="sync")
    native_rate = steps_per_second(native, args.steps, args.repeats, args.seed)
    sync_rate = steps_per_second(sync, args.sync_steps, args.repeats, args.seed)
    single_rate = single_env_steps_per_second(frozen.unwrapped, 10 * args.sync_steps, args.repeats, args.seed)
    print(f"| `FrozenLake-v1` (tables in the core) | {native_rate:,.0f} | {sync_rate:,.0f} | "
          f"{native_rate / sync_rate:.0f}x | {single_rate:,.0f} (gymnasium's own) |")


if __name__ == "__main__":
    main()
