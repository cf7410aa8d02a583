"""Held-out accuracy split by whether the trajectory called the tool (``eval/accuracy_tool`` /
``eval/accuracy_no_tool``): what the calculator pays over the model's own answers."""

import itertools
import math

import pytest

pytest.importorskip("transformers")

from scale.rollouts import SamplingParams  # noqa: E402
from scale.rollouts.collect import RolloutSettings, collect, evaluate_completions  # noqa: E402
from scale.rollouts.engines import TransformersEngine  # noqa: E402
from scale.rollouts.prompts import arithmetic_task  # noqa: E402
from scale.rollouts.tools import calculator  # noqa: E402


def _length_reward(prompt, response, answer):
    """A reward that differs from trajectory to trajectory (its own text's length), so that a mean over the
    wrong trajectories cannot pass for the right one."""
    return len(response) / 24


def test_the_split_is_the_mean_reward_of_the_trajectories_with_and_without_a_call(tool_model, tokenizer):
    _, test = arithmetic_task(seed=1, num_train=1, num_test=64, max_operand=30, operations="*", tool_fraction=1.0)
    settings = RolloutSettings(SamplingParams(max_new_tokens=24, temperature=2.0), _length_reward,
                               tools=True, tool=calculator)  # hot enough that some trajectories do not call
    row = evaluate_completions(TransformersEngine(tool_model, tokenizer, seed=0), tokenizer, test, settings)
    groups, _ = collect(TransformersEngine(tool_model, tokenizer, seed=0), tokenizer, test, settings,
                        itertools.count())
    rollouts = [r for group in groups for r in group]
    called = [r.reward for r in rollouts if r.trajectory.num_tool_calls > 0]
    own = [r.reward for r in rollouts if r.trajectory.num_tool_calls == 0]
    assert called and own, "the sample should hold trajectories of both kinds"
    assert sum(called) / len(called) != sum(own) / len(own)  # the test tells the two groups apart
    assert row["accuracy_tool"] == pytest.approx(sum(called) / len(called), abs=1e-12)
    assert row["accuracy_no_tool"] == pytest.approx(sum(own) / len(own), abs=1e-12)
    assert row["accuracy"] == pytest.approx((sum(called) + sum(own)) / len(rollouts), abs=1e-12)


def test_without_the_tool_every_trajectory_is_in_the_no_tool_group(tool_model, tokenizer):
    _, test = arithmetic_task(seed=1, num_train=1, num_test=32, max_operand=30, operations="*", tool_fraction=1.0)
    settings = RolloutSettings(SamplingParams(max_new_tokens=24), _length_reward, tools=False)
    row = evaluate_completions(TransformersEngine(tool_model, tokenizer, seed=0), tokenizer, test, settings)
    assert math.isnan(row["accuracy_tool"]) and row["accuracy_no_tool"] == row["accuracy"]
