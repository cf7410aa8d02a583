"""Multi-turn calculator trajectories: tool outputs are appended with action_mask False, generation goes on."""

import pytest

pytest.importorskip("transformers")

import torch  # noqa: E402

from scale.learner import pack, policy_log_probs  # noqa: E402
from scale.rollouts import SamplingParams  # noqa: E402
from scale.rollouts.engines import TransformersEngine  # noqa: E402
from scale.rollouts.tools import UnreliableCalculator, calculator, generate_with_tools, tool_call  # noqa: E402


@pytest.mark.parametrize("expression, expected", [("12*7", "84"), (" 3 - 10 ", "-7"), ("(2+3)*4", "20"),
                                                  ("2**3", "?"), ("1/2", "?"), ("import os", "?"), ("", "?"),
                                                  ("9" * 7 + "*" + "9" * 7, "?")])
def test_calculator_evaluates_integer_arithmetic_and_nothing_else(expression, expected):
    assert calculator(expression) == expected


def test_the_unreliable_calculator_is_wrong_on_its_share_of_expressions_by_one_to_nine_and_always_the_same():
    expressions = [f"{a}*{b}" for a in range(40) for b in range(40)]
    tool = UnreliableCalculator(0.3, seed=7)
    wrong = [e for e in expressions if tool(e) != calculator(e)]
    assert abs(len(wrong) / len(expressions) - 0.3) < 0.04  # 1,600 expressions: ±3.5 standard errors
    assert all(1 <= abs(int(tool(e)) - int(calculator(e))) <= 9 for e in wrong)
    assert [tool(e) for e in wrong] == [UnreliableCalculator(0.3, seed=7)(e) for e in wrong]  # a pure function
    assert {e for e in expressions if UnreliableCalculator(0.3, seed=8)(e) != calculator(e)} != set(wrong)
    assert tool("2**3") == "?" and UnreliableCalculator(0.0)("12*7") == "84"


@pytest.mark.parametrize("error_rate", [-0.1, 1.5])
def test_the_unreliable_calculator_refuses_a_rate_outside_zero_one(error_rate):
    with pytest.raises(ValueError, match="error_rate"):
        UnreliableCalculator(error_rate)


def test_the_run_config_builds_the_unreliable_tool_with_the_run_seed():
    from scale.run.build import build
    from scale.run.config import load_config

    config = load_config("scale/configs/tiny_cpu.yaml", ["rollout.tool_error_rate=0.25", "seed=3", "warmup.steps=0",
                                                          "data.num_train=64", "data.num_test=16"])
    assert build(config).settings.tool == UnreliableCalculator(0.25, seed=3)
    with pytest.raises(ValueError, match="tool_error_rate"):
        load_config("scale/configs/tiny_cpu.yaml", ["rollout.tool_error_rate=2"])


def test_tool_call_reads_the_last_complete_call_at_the_end():
    assert tool_call("<calc>1+2</calc>") == "1+2"
    assert tool_call("x<calc>1</calc>y<calc>3*4</calc>") == "3*4"
    assert tool_call("<calc>1+2</calc>5") is None
    assert tool_call("1+2</calc>") is None


def _masked_spans(mask):
    """(start, end) of each run of False in ``mask`` (end exclusive)."""
    spans, start = [], None
    for i, m in enumerate(list(mask) + [True]):
        if not m and start is None:
            start = i
        elif m and start is not None:
            spans.append((start, i))
            start = None
    return spans


def test_tool_outputs_are_masked_and_generation_continues_after_them(tool_model, tokenizer):
    engine = TransformersEngine(tool_model, tokenizer, seed=0)
    prompts = [tokenizer.encode_prompt(f"{a}*{b}=") for a, b in [(3, 4), (12, 7), (25, 2), (9, 9)] * 4]
    trajectories = generate_with_tools(engine, tokenizer, prompts, SamplingParams(max_new_tokens=24), max_turns=3)
    called = [t for t in trajectories if t.num_tool_calls > 0]
    assert len(called) >= len(trajectories) // 2, [tokenizer.decode(t.token_ids) for t in trajectories]
    for t in called:
        spans = _masked_spans(t.action_mask)
        assert len(spans) == t.num_tool_calls
        for start, end in spans:
            before = tokenizer.decode(t.token_ids[:start])
            assert tokenizer.decode(t.token_ids[start:end]) == f"<out>{calculator(tool_call(before))}</out>"
            assert t.log_probs[start:end] == [0.0] * (end - start)
        last_end = spans[-1][1]
        assert last_end < len(t.token_ids) or t.finish_reason == "length"  # the model wrote after the output
        assert t.finish_reason in ("eos", "length")


def test_multi_turn_behaviour_log_probs_equal_the_learners(tool_model, tokenizer):
    engine = TransformersEngine(tool_model, tokenizer, seed=1)
    prompts = [tokenizer.encode_prompt(f"{a}*{b}=") for a, b in [(3, 4), (12, 7), (25, 2), (9, 9)]]
    trajectories = generate_with_tools(engine, tokenizer, prompts, SamplingParams(max_new_tokens=24))
    batch = pack(trajectories, tokenizer.pad_id)
    with torch.no_grad():
        learner, _ = policy_log_probs(tool_model, batch)
    torch.testing.assert_close(learner[batch.action_mask], batch.behavior_log_probs[batch.action_mask],
                               rtol=0, atol=2e-5)


def test_the_token_budget_covers_tool_outputs(tool_model, tokenizer):
    engine = TransformersEngine(tool_model, tokenizer, seed=2)
    prompts = [tokenizer.encode_prompt("12*7=")] * 8
    for t in generate_with_tools(engine, tokenizer, prompts, SamplingParams(max_new_tokens=10)):
        assert len(t.token_ids) <= 10
        if t.token_ids[-1] != tokenizer.eos_id:
            assert t.finish_reason == "length"
        else:
            assert t.finish_reason == "eos"
