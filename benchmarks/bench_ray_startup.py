"""What Ray placement costs before the first batch: the threaded loop vs engines in Ray actors.

Times, for the tiny preset's model and one engine, from constructing the rollout source to holding the
first batch of 64 trajectories (``loop.placement: threads`` vs ``ray``, which includes ``ray.init`` of a
local cluster, the actor process start with its torch/transformers imports, and building the engine),
then the steady time per batch (fastest of 3 more). Sampling only: no learner step.

    python benchmarks/bench_ray_startup.py
"""

from __future__ import annotations

import functools
import itertools
import time

import torch


def main() -> None:
    from scale.learner.model import build_tiny_model
    from scale.rollouts import SamplingParams
    from scale.rollouts.collect import RolloutSettings
    from scale.rollouts.engines import TransformersEngine
    from scale.rollouts.prompts import PromptStream, arithmetic_task
    from scale.rollouts.ray_sources import RayRollouts
    from scale.rollouts.rewards import math_reward
    from scale.rollouts.sources import AsyncRollouts
    from scale.rollouts.tokenizer import CharTokenizer

    torch.set_num_threads(1)
    tokenizer = CharTokenizer()
    model = build_tiny_model(tokenizer, seed=0)
    train, _ = arithmetic_task(seed=0, num_train=2000, num_test=0, max_operand=99, operations="*", tool_fraction=0.25)
    settings = RolloutSettings(SamplingParams(max_new_tokens=24), math_reward, tools=True, max_turns=3)
    print("| placement | first batch s | per batch s |")
    print("|---|---:|---:|")
    for placement in ("threads", "ray"):
        stream = PromptStream(train, seed=0)
        started = time.perf_counter()
        if placement == "threads":
            source = AsyncRollouts([TransformersEngine(model, tokenizer, seed=1)], tokenizer, stream, settings,
                                   itertools.count(), prompts_per_call=16, queue_size=32)
        else:
            source = RayRollouts([functools.partial(TransformersEngine, model, tokenizer, seed=1)], tokenizer,
                                 stream, settings, itertools.count(), prompts_per_call=16, queue_size=32)
        source.publish(model, 0)
        source.next_batch(64)
        first = time.perf_counter() - started
        steady = []
        for _ in range(3):
            start = time.perf_counter()
            source.next_batch(64)
            steady.append(time.perf_counter() - start)
        source.close()
        print(f"| {placement} | {first:.1f} | {min(steady):.2f} |", flush=True)


if __name__ == "__main__":
    main()
