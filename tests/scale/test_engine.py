"""The transformers rollout engine: exact behaviour log-probs, seeding, versions, stops, refused samplers."""

import pytest

pytest.importorskip("transformers")

import torch  # noqa: E402

from flashsim.losses import flash_reinforce_loss  # noqa: E402
from scale.learner import pack, policy_log_probs  # noqa: E402
from scale.rollouts import RolloutEngine, SamplingParams  # noqa: E402
from scale.rollouts.engines import TransformersEngine, sample_tokens  # noqa: E402
from tests.protocols import assert_implements, implementation_errors  # noqa: E402

PROMPTS = ["12*7=", "3+4=", "100+23=", "5="]


def _prompt_ids(tokenizer):
    return [tokenizer.encode_prompt(p) for p in PROMPTS]


@pytest.mark.parametrize("temperature", [1.0, 0.8])
def test_engine_log_probs_equal_the_learners_for_the_same_weights(float64_model, tokenizer, temperature):
    engine = TransformersEngine(float64_model, tokenizer, seed=0)
    trajectories = engine.generate(_prompt_ids(tokenizer), SamplingParams(max_new_tokens=12, temperature=temperature))
    batch = pack(trajectories, tokenizer.pad_id, dtype=torch.float64)
    with torch.no_grad():
        learner, _ = policy_log_probs(float64_model, batch, temperature=temperature, chunk_size=7)
    mask = batch.action_mask
    torch.testing.assert_close(learner[mask], batch.behavior_log_probs[mask], rtol=0, atol=1e-10)
    _, stats = flash_reinforce_loss(learner, batch.behavior_log_probs, torch.tensor([1.0, 0.0, 1.0, 0.0],
                                    dtype=torch.float64), mask)
    assert float(stats["ratio_min"]) == pytest.approx(1.0, abs=1e-9)
    assert float(stats["ratio_max"]) == pytest.approx(1.0, abs=1e-9)
    assert float(stats["acceptance_rate"]) == 1.0


def test_float32_engine_and_learner_agree_to_float32_precision(float64_model, tokenizer):
    model = float64_model.float()
    try:
        engine = TransformersEngine(model, tokenizer, seed=1, max_batch_size=3)
        trajectories = engine.generate(_prompt_ids(tokenizer) * 4, SamplingParams(max_new_tokens=12))
        batch = pack(trajectories, tokenizer.pad_id)
        with torch.no_grad():
            learner, _ = policy_log_probs(model, batch)
        torch.testing.assert_close(learner[batch.action_mask], batch.behavior_log_probs[batch.action_mask],
                                   rtol=0, atol=2e-5)
    finally:
        float64_model.double()


def test_same_seed_gives_identical_trajectories(float64_model, tokenizer):
    runs = [TransformersEngine(float64_model, tokenizer, seed=5).generate(_prompt_ids(tokenizer),
                                                                          SamplingParams(max_new_tokens=8))
            for _ in range(2)]
    assert [t.token_ids for t in runs[0]] == [t.token_ids for t in runs[1]]
    assert [t.log_probs for t in runs[0]] == [t.log_probs for t in runs[1]]


def test_published_weights_are_used_from_the_next_call_and_tag_the_version(float64_model, tokenizer):
    engine = TransformersEngine(float64_model, tokenizer, seed=0)
    assert_implements(engine, RolloutEngine)
    first = engine.generate(_prompt_ids(tokenizer)[:1], SamplingParams(max_new_tokens=4))
    assert first[0].version == 0 and engine.version == 0
    changed = {k: torch.zeros_like(v) for k, v in float64_model.state_dict().items()}
    engine.update_weights(changed, version=3)
    assert engine.version == 3
    second = engine.generate(_prompt_ids(tokenizer)[:1], SamplingParams(max_new_tokens=4))
    assert second[0].version == 3
    # All-zero weights give uniform logits: every sampled token has log-prob −log V.
    expected = -torch.log(torch.tensor(float(tokenizer.vocab_size), dtype=torch.float64))
    assert second[0].log_probs == pytest.approx([float(expected)] * len(second[0].log_probs))
    assert float64_model.model.embed_tokens.weight.abs().sum() > 0  # the learner's model is untouched


class WrongEngine:
    """Every name of RolloutEngine, none of its contract: isinstance(..., RolloutEngine) is True for it."""

    def version(self) -> int:  # a method where callers read an attribute
        return 0

    def generate(self, prompts):  # no sampling parameters
        return []

    def update_weights(self, version, weights, strict):  # swapped, and a parameter no caller passes
        pass


@pytest.mark.parametrize("module, name", [("scale.rollouts.engines.transformers_engine", "TransformersEngine"),
                                          ("scale.rollouts.engines.vllm_engine", "VLLMEngine"),
                                          ("scale.rollouts.engines.engine_process", "EngineProcess")])
def test_every_engine_class_implements_the_engine_protocol_by_signature(module, name):
    import importlib

    assert_implements(getattr(importlib.import_module(module), name), RolloutEngine)


def test_the_engine_check_rejects_an_engine_with_the_right_names_and_the_wrong_signatures():
    engine = WrongEngine()
    assert isinstance(engine, RolloutEngine)  # why a runtime Protocol's isinstance cannot be the test
    errors = "\n".join(implementation_errors(engine, RolloutEngine))
    assert "version: a method" in errors
    assert "generate: takes no parameter 'sampling'" in errors
    assert "update_weights: parameter 'weights' is not where" in errors
    assert "update_weights: requires 'strict'" in errors


def test_finish_reasons_eos_stop_and_length(float64_model, tokenizer):
    engine = TransformersEngine(float64_model, tokenizer, seed=0)
    trajectories = engine.generate(_prompt_ids(tokenizer) * 8, SamplingParams(max_new_tokens=6, stop=("1",)))
    for t in trajectories:
        text = tokenizer.decode(t.token_ids)
        if t.finish_reason == "eos":
            assert t.token_ids[-1] == tokenizer.eos_id and "1" not in text[:-5]
        elif t.finish_reason == "stop":
            assert text.endswith("1") and text.count("1") == 1
        else:
            assert len(t.token_ids) == 6 and "1" not in text
    assert {t.finish_reason for t in trajectories} >= {"stop", "length"}


def test_stop_token_ids_end_generation_with_reason_stop(float64_model, tokenizer):
    engine = TransformersEngine(float64_model, tokenizer, seed=0)
    one = tokenizer.token_id("1")
    trajectories = engine.generate(_prompt_ids(tokenizer) * 8, SamplingParams(max_new_tokens=6, stop_token_ids=(one,)))
    stopped = [t for t in trajectories if t.finish_reason == "stop"]
    assert stopped and all(t.token_ids[-1] == one and t.token_ids.count(one) == 1 for t in stopped)


def test_min_p_keeps_tokens_within_a_factor_of_the_most_likely_and_renormalises():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(64, 10, generator=g, dtype=torch.float64)
    tokens, log_probs = sample_tokens(logits, SamplingParams(min_p=0.3, allow_truncated_sampling=True), g)
    probs = torch.softmax(logits, -1)
    kept = probs >= 0.3 * probs.max(-1, keepdim=True).values
    assert bool(kept.gather(-1, tokens[:, None]).all())
    expected = torch.log(probs.gather(-1, tokens[:, None]).squeeze(-1) / (probs * kept).sum(-1))
    torch.testing.assert_close(log_probs, expected)


def test_sample_tokens_records_the_log_prob_of_the_sampling_distribution():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(64, 10, generator=g, dtype=torch.float64)
    tokens, log_probs = sample_tokens(logits, SamplingParams(temperature=0.5), g)
    torch.testing.assert_close(log_probs, torch.log_softmax(logits / 0.5, -1).gather(-1, tokens[:, None]).squeeze(-1))
    truncated = SamplingParams(top_k=3, allow_truncated_sampling=True)
    tokens, log_probs = sample_tokens(logits, truncated, g)
    top3 = torch.topk(logits, 3, dim=-1)
    assert bool((top3.indices == tokens[:, None]).any(-1).all())
    expected = logits.gather(-1, tokens[:, None]).squeeze(-1) - torch.logsumexp(top3.values, -1)
    torch.testing.assert_close(log_probs, expected)


@pytest.mark.parametrize("params", [dict(top_p=0.9), dict(top_k=5), dict(min_p=0.1), dict(greedy=True)],
                         ids=["top-p", "top-k", "min-p", "greedy"])
def test_truncating_samplers_are_refused_unless_explicitly_allowed(params):
    with pytest.raises(ValueError, match="biases the importance ratio"):
        SamplingParams(**params)
    assert SamplingParams(**params, allow_truncated_sampling=True).is_truncated


@pytest.mark.parametrize("params, message", [(dict(max_new_tokens=0), "max_new_tokens"),
                                             (dict(temperature=0.0), "temperature"),
                                             (dict(top_p=0.0), "top_p"), (dict(stop="x"), "stop"),
                                             (dict(min_p=1.0), "min_p"), (dict(stop_token_ids=[3]), "stop_token_ids"),
                                             (dict(stop_token_ids=(-1,)), "stop_token_ids")],
                         ids=["no-tokens", "zero-temperature", "zero-top-p", "stop-not-tuple", "min-p-one",
                              "stop-ids-list", "negative-stop-id"])
def test_bad_sampling_params_raise_value_errors(params, message):
    with pytest.raises(ValueError, match=message):
        SamplingParams(**params)


def test_only_the_newest_publication_is_loaded_and_the_copy_ignores_later_training():
    from scale.rollouts.engines.weights import PublishedWeights

    weights, loads = PublishedWeights(), []
    learner = torch.nn.Linear(2, 1)
    weights.publish(learner, version=1)
    with torch.no_grad():
        learner.weight.add_(1.0)  # the learner trains on after publishing version 1
    weights.publish({"weight": torch.zeros(1, 2), "bias": torch.zeros(1)}, version=2)
    assert weights.version == 2
    assert weights.load_newest(loads.append) == 2 and [state["weight"].sum().item() for state in loads] == [0.0]
    assert weights.load_newest(loads.append) == 2 and len(loads) == 1  # nothing new: nothing loaded
    weights.publish(learner, version=3)
    snapshot = learner.weight.detach().clone()
    with torch.no_grad():
        learner.weight.add_(1.0)
    assert weights.load_newest(loads.append) == 3 and torch.equal(loads[-1]["weight"], snapshot)
