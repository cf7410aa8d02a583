"""Prompt data: the synthetic task, user files in prompt/answer and chat forms, the resumable stream."""

import json

import pytest

pytest.importorskip("transformers")

from scale.rollouts.prompts import PromptExample, PromptStream, arithmetic_task, load_prompts  # noqa: E402
from scale.rollouts.tokenizer import CharTokenizer  # noqa: E402


def test_the_synthetic_task_is_seeded_correct_and_split_without_overlap():
    train, test = arithmetic_task(seed=3, num_train=200, num_test=50, max_operand=20, operations="+-*",
                                  tool_fraction=0.5)
    again, _ = arithmetic_task(seed=3, num_train=200, num_test=50, max_operand=20, operations="+-*", tool_fraction=0.5)
    assert train == again
    assert not {e.prompt for e in train} & {e.prompt for e in test}
    for e in train + test:
        a, op, b = e.prompt[:-1].partition(next(c for c in "+-*" if c in e.prompt[1:]))
        assert e.prompt.endswith("=") and int(e.answer) == {"+": int.__add__, "-": int.__sub__, "*": int.__mul__}[
            op](int(a), int(b))
        assert e.solution in (e.answer, f"<calc>{e.prompt[:-1]}</calc><out>{e.answer}</out>{e.answer}")
    uses_tool = sum(e.solution != e.answer for e in train) / len(train)
    assert 0.35 < uses_tool < 0.65
    CharTokenizer().encode(train[0].solution)  # every character is in the tiny alphabet


@pytest.mark.parametrize("kwargs, message", [(dict(num_train=500, max_operand=9), "distinct"),
                                             (dict(operations="/"), "operations"),
                                             (dict(tool_fraction=1.5), "tool_fraction")],
                         ids=["too-many", "bad-operator", "bad-fraction"])
def test_bad_task_settings_raise_value_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        arithmetic_task(**({"seed": 0, "num_train": 10, "num_test": 0} | kwargs))


def test_jsonl_in_prompt_answer_gsm8k_and_chat_forms(tmp_path):
    records = [
        {"prompt": "1+1=", "answer": "2", "id": "a"},
        {"question": "Tom has 3 apples...", "answer": "He has 3+2=5. #### 5"},
        {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2*3?"},
                      {"role": "assistant", "content": "\\boxed{6}"}]},
        {"prompt": [{"role": "user", "content": "4+4?"}], "ground_truth": 8},
    ]
    path = tmp_path / "data.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n\n")
    examples = load_prompts(path)
    assert examples[0] == PromptExample("1+1=", "2", "a")
    assert examples[1].answer.endswith("#### 5")
    assert examples[2].prompt == ({"role": "system", "content": "Be brief."}, {"role": "user", "content": "2*3?"})
    assert examples[2].answer == "\\boxed{6}"
    assert examples[3].prompt == ({"role": "user", "content": "4+4?"},) and examples[3].answer == "8"


def test_parquet_and_json_list_files_load_the_same_records(tmp_path):
    pyarrow = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    rows = [{"prompt": "1+2=", "answer": "3"}, {"prompt": "2+2=", "answer": "4"}]
    pq.write_table(pyarrow.Table.from_pylist(rows), tmp_path / "d.parquet")
    (tmp_path / "d.json").write_text(json.dumps(rows))
    assert [e.prompt for e in load_prompts(tmp_path / "d.parquet")] == ["1+2=", "2+2="]
    assert [e.answer for e in load_prompts(tmp_path / "d.json")] == ["3", "4"]


@pytest.mark.parametrize("content, name, message", [
    ('{"answer": "1"}\n', "a.jsonl", "expected one of"),
    ('{"prompt": "x"}\n', "b.jsonl", "expected one of"),
    ('{"prompt": "x", \n', "c.jsonl", "c.jsonl:1: not valid JSON"),
    ('', "d.jsonl", "no records"),
    ('{"prompt": "x", "answer": "1"}', "e.csv", ".jsonl, .json or .parquet"),
    ('{"messages": [{"role": "assistant", "content": "1"}]}\n', "f.jsonl", "no user turn"),
], ids=["no-prompt", "no-answer", "bad-json", "empty", "bad-suffix", "assistant-only"])
def test_bad_prompt_files_raise_value_errors_that_say_where(tmp_path, content, name, message):
    (tmp_path / name).write_text(content)
    with pytest.raises(ValueError, match=message):
        load_prompts(tmp_path / name)


def test_the_stream_resumes_exactly_from_its_state():
    examples = [PromptExample(f"{i}=", str(i), str(i)) for i in range(7)]
    straight = PromptStream(examples, seed=1)
    expected = [e.id for e in straight.take(20)]
    first = PromptStream(examples, seed=1)
    head = [e.id for e in first.take(9)]
    resumed = PromptStream(examples, seed=1)
    resumed.load_state_dict(first.state_dict())
    assert head + [e.id for e in resumed.take(11)] == expected
    assert sorted(expected[:7]) == sorted(e.id for e in examples)  # each epoch is a permutation
    with pytest.raises(ValueError, match="seed"):
        PromptStream(examples, seed=2).load_state_dict(first.state_dict())
