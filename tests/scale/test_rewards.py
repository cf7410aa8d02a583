"""Answer extraction and checking, custom reward functions by import path, failing reward functions."""

import itertools
import math

import pytest

pytest.importorskip("transformers")

from scale.rollouts import SamplingParams  # noqa: E402
from scale.rollouts.collect import RolloutSettings, collect  # noqa: E402
from scale.rollouts.engines import TransformersEngine  # noqa: E402
from scale.rollouts.prompts import PromptExample  # noqa: E402
from scale.rollouts.rewards import (  # noqa: E402
    RewardError,
    answers_match,
    extract_answer,
    math_reward,
    resolve_reward,
    score,
)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("19", "19"),
        ("12+7=19", "19"),
        ("the answer is -3.", "-3"),
        ("total: 1,234 apples", "1,234"),
        ("0.5 or .25", ".25"),
        ("so 7/2", "7/2"),
        ("\\boxed{42} and then 7", "42"),
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("\\boxed{a} then \\boxed{b}", "b"),
        ("\\boxed{unclosed 5", "5"),
        ("Natalia sold 48/2 = 24 clips.\n#### 72", "72"),
        ("#### 1,000.", "1,000"),
        ("no digits", None),
        ("", None),
    ],
    ids=lambda v: repr(v)[:20],
)
def test_extract_answer_finds_the_final_answer(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize(
    "predicted, reference, equal",
    [("19", "19", True), ("19.0", "19", True), ("1,234", "1234", True), ("-0", "0", True), ("7/2", "3.5", True),
     ("\\frac{7}{2}", "3.5", True), ("19", "91", False), ("x+1", "x + 1", True), ("x", "y", False)],
)
def test_answers_match_numerically_or_as_normalised_strings(predicted, reference, equal):
    assert answers_match(predicted, reference) is equal


def test_math_reward_is_one_only_for_the_right_final_answer():
    assert math_reward("12*7=", "<calc>12*7</calc>84", "84") == 1.0
    assert math_reward("12*7=", "<calc>12*7</calc>", "84") == 0.0  # its last number is the operand 7
    assert math_reward("q", "I think \\boxed{84}", "Work... #### 84") == 1.0
    assert math_reward("q", "", "84") == 0.0


def test_custom_reward_functions_resolve_by_import_path():
    assert resolve_reward("math") is math_reward
    assert resolve_reward("scale.rollouts.rewards:math_reward") is math_reward
    assert resolve_reward("tests.scale.test_rewards:length_reward")("p", "abc", "a") == 3.0


@pytest.mark.parametrize("spec, message", [("nope", "module:function"), ("no_such_module_x:f", "cannot import"),
                                           ("scale.rollouts.rewards:missing", "has no function .missing.")],
                         ids=["bare-name", "missing-module", "missing-function"])
def test_unknown_reward_functions_raise_value_errors(spec, message):
    with pytest.raises(ValueError, match=message):
        resolve_reward(spec)


def length_reward(prompt, response, answer):
    return float(len(response))


def _raises(prompt, response, answer):
    raise KeyError("boom")


def _nan(prompt, response, answer):
    return math.nan


@pytest.mark.parametrize("fn, message", [(_raises, "raised KeyError"), (_nan, "returned nan")], ids=["raises", "nan"])
def test_a_failing_reward_function_names_the_prompt(fn, message):
    with pytest.raises(RewardError, match=f"{message}.*12\\*7="):
        score(fn, "12*7=", "84", "84")
    assert score(fn, "12*7=", "84", "84", on_error="drop") is None


def test_dropped_trajectories_are_counted_by_collect(float64_model, tokenizer):
    engine = TransformersEngine(float64_model, tokenizer, seed=0)
    examples = [PromptExample(f"{i}+1=", str(i + 1), f"e{i}") for i in range(3)]
    settings = RolloutSettings(SamplingParams(max_new_tokens=3), _nan, group_size=2, on_reward_error="drop")
    groups, dropped = collect(engine, tokenizer, examples, settings, itertools.count())
    assert groups == [] and dropped == 6
    with pytest.raises(RewardError, match="0\\+1="):
        collect(engine, tokenizer, examples, RolloutSettings(SamplingParams(max_new_tokens=3), _nan),
                itertools.count())
