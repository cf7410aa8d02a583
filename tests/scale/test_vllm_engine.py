"""The vLLM engine against the learner on a GPU (skipped without CUDA and vLLM)."""

import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

pytestmark = pytest.mark.gpu


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_vllm_log_probs_match_the_learner_and_weight_updates_apply(tmp_path):
    pytest.importorskip("vllm")
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from scale.engine import SamplingParams
    from scale.engine.vllm_engine import VLLMEngine
    from scale.learner import pack, policy_log_probs
    from scale.model import build_tiny_model
    from scale.tokenizer import CharTokenizer

    tokenizer = CharTokenizer()
    model = build_tiny_model(tokenizer, hidden_size=64, num_heads=2, intermediate_size=128, seed=0)
    model.save_pretrained(tmp_path)
    engine = VLLMEngine(str(tmp_path), seed=0, dtype="float32", skip_tokenizer_init=True,
                        gpu_memory_utilization=0.2, enforce_eager=True)
    prompts = [tokenizer.encode_prompt(p) for p in ("12*7=", "3+4=")] * 8
    trajectories = engine.generate(prompts, SamplingParams(max_new_tokens=8, temperature=0.9))
    batch = pack(trajectories, tokenizer.pad_id)
    with torch.no_grad():
        learner, _ = policy_log_probs(model, batch, temperature=0.9)
    mask = batch.action_mask
    torch.testing.assert_close(learner[mask], batch.behavior_log_probs[mask], rtol=0, atol=1e-3)

    zeros = {k: torch.zeros_like(v) for k, v in model.state_dict().items()}
    engine.update_weights(zeros, version=1)
    after = engine.generate(prompts[:2], SamplingParams(max_new_tokens=4))
    assert after[0].version == 1
    expected = -torch.log(torch.tensor(float(tokenizer.vocab_size)))
    assert after[0].log_probs == pytest.approx([float(expected)] * len(after[0].log_probs), abs=1e-4)
