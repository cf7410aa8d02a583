"""From prompts to scored rollouts, and evaluation: engine (± calculator tool) → reward → :class:`Rollout`.

:func:`collect` is what a rollout worker (or the synchronous loop) does for one engine call: encode
the prompts, repeat each ``group_size`` times (GRPO's siblings share a ``group_id``), generate, score
each trajectory. A trajectory whose reward function fails is dropped and counted when
``on_reward_error="drop"``; otherwise :class:`scale.rollouts.rewards.RewardError` names the prompt.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from statistics import NormalDist
from typing import Any

from scale.rollouts.prompts import PromptExample
from scale.rollouts.rewards import score
from scale.rollouts.tokenizer import Tokenizer
from scale.rollouts.tools import calculator, generate_with_tools
from scale.rollouts.trajectory import Rollout, RolloutEngine, SamplingParams, Trajectory


@dataclass(frozen=True)
class RolloutSettings:
    """How prompts become scored rollouts (shared by training and evaluation)."""

    sampling: SamplingParams
    reward_fn: Callable[[Any, str, str], float]
    group_size: int = 1
    tools: bool = False
    max_turns: int = 3
    on_reward_error: str = "raise"
    tool: Callable[[str], str] = calculator
    """What a ``<calc>`` call answers: the exact calculator, or an ``UnreliableCalculator``."""


def response_text(trajectory: Trajectory, tokenizer: Tokenizer) -> str:
    """What the model wrote: its own tokens only (tool outputs removed), special tokens skipped."""
    own = [t for t, is_action in zip(trajectory.token_ids, trajectory.action_mask) if is_action]
    return tokenizer.decode(own, skip_special=True)


def generate(engine: RolloutEngine, tokenizer: Tokenizer, prompt_ids: Sequence[Sequence[int]],
             settings: RolloutSettings) -> list[Trajectory]:
    """Single-turn generation, or multi-turn with the calculator when ``settings.tools``."""
    if settings.tools:
        return generate_with_tools(engine, tokenizer, prompt_ids, settings.sampling, max_turns=settings.max_turns,
                                   tool=settings.tool)
    return engine.generate(prompt_ids, settings.sampling)


def collect(
    engine: RolloutEngine,
    tokenizer: Tokenizer,
    examples: Sequence[PromptExample],
    settings: RolloutSettings,
    group_counter: itertools.count,
) -> tuple[list[list[Rollout]], int]:
    """Generate ``group_size`` trajectories per example and score them.

    Returns ``(groups, num_dropped)``: one list of rollouts per example (siblings share a group id
    drawn from ``group_counter``), and how many trajectories were dropped for a failed reward.
    """
    prompt_ids = [tokenizer.encode_prompt(e.prompt) for e in examples]
    repeated = [ids for ids in prompt_ids for _ in range(settings.group_size)]
    trajectories = generate(engine, tokenizer, repeated, settings)
    groups, dropped = [], 0
    for index, example in enumerate(examples):
        group_id, group = next(group_counter), []
        for trajectory in trajectories[index * settings.group_size : (index + 1) * settings.group_size]:
            response = response_text(trajectory, tokenizer)
            reward = score(settings.reward_fn, example.prompt, response, example.answer,
                           on_error=settings.on_reward_error)
            if reward is None:
                dropped += 1
                continue
            group.append(Rollout(trajectory, example, reward, group_id, response))
        if group:
            groups.append(group)
    return groups, dropped


def evaluate_completions(
    engine: RolloutEngine, tokenizer: Tokenizer, examples: Sequence[PromptExample], settings: RolloutSettings,
    *, batch_size: int = 256,
) -> dict[str, float]:
    """Mean reward (accuracy for 0/1 rewards) with its 95 % interval (``accuracy_low``, ``accuracy_high``:
    :func:`accuracy_interval`), mean length and tool calls over ``examples``, one sample each; and the mean
    reward of the trajectories that called a tool (``accuracy_tool``) and of those that did not
    (``accuracy_no_tool``; each NaN when there are none), which says how much the tool pays over the model's
    own answers."""
    single = replace(settings, group_size=1)
    counter = itertools.count()
    rewards, lengths, calls, truncated = [], [], [], []
    for start in range(0, len(examples), batch_size):
        groups, _ = collect(engine, tokenizer, examples[start : start + batch_size], single, counter)
        for rollout in itertools.chain.from_iterable(groups):
            rewards.append(rollout.reward)
            lengths.append(rollout.trajectory.num_actions)
            calls.append(rollout.trajectory.num_tool_calls)
            truncated.append(rollout.trajectory.finish_reason == "length")
    n = max(len(rewards), 1)
    low, high = accuracy_interval(sum(rewards), len(rewards))
    split = {called: [r for r, c in zip(rewards, calls) if (c > 0) == called] for called in (True, False)}
    return {"accuracy": sum(rewards) / n, "accuracy_low": low, "accuracy_high": high, "length": sum(lengths) / n,
            "tool_calls": sum(calls) / n, "truncation": sum(truncated) / n, "count": float(len(rewards)),
            **{key: sum(split[called]) / len(split[called]) if split[called] else float("nan")
               for key, called in (("accuracy_tool", True), ("accuracy_no_tool", False))}}


ACCURACY_CONFIDENCE = 0.95
"""Coverage of :func:`accuracy_interval` (the ``eval/accuracy_low`` / ``eval/accuracy_high`` columns)."""


def accuracy_interval(total_reward: float, n: int, confidence: float = ACCURACY_CONFIDENCE) -> tuple[float, float]:
    """Wilson score interval of a success rate from ``n`` draws whose rewards sum to ``total_reward``.

    With p̂ = total / n and z the normal quantile at (1 + confidence) / 2::

        centre = (p̂ + z²/2n) / (1 + z²/n),   half = z / (1 + z²/n) · √(p̂(1 − p̂)/n + z²/4n²)

    (Wilson 1927; unlike p̂ ± z·√(p̂(1−p̂)/n) it stays inside [0, 1] and does not collapse at p̂ = 0 or 1).
    Exact coverage for 0/1 rewards; for rewards in [0, 1] it is conservative (their variance is at most
    p(1 − p)). NaN bounds for n = 0 or a mean outside [0, 1].

    >>> [round(x, 4) for x in accuracy_interval(50, 100)]
    [0.4038, 0.5962]
    """
    if n <= 0 or not 0.0 <= total_reward <= n:
        return math.nan, math.nan
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p, z2 = total_reward / n, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z / (1 + z2 / n) * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return max(centre - half, 0.0), min(centre + half, 1.0)
