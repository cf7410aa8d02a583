"""The learner: chunked log-probs inside the model, microbatches with global denominators, policy lag."""

import copy
import itertools

import pytest

pytest.importorskip("transformers")

import torch  # noqa: E402

from scale.learner import Learner, pack, policy_log_probs  # noqa: E402
from scale.rollouts import Rollout, SamplingParams  # noqa: E402
from scale.rollouts.collect import RolloutSettings  # noqa: E402
from scale.rollouts.engines import TransformersEngine  # noqa: E402
from scale.rollouts.prompts import PromptExample, PromptStream  # noqa: E402
from scale.rollouts.rewards import math_reward  # noqa: E402
from scale.rollouts.sources import AsyncRollouts, RolloutFleetError, SyncRollouts, lag_metrics  # noqa: E402


def _rollouts(model, tokenizer, count=8, group_size=2, seed=0):
    engine = TransformersEngine(model, tokenizer, seed=seed)
    prompts = [tokenizer.encode_prompt(f"{i}*{i + 3}=") for i in range(count // group_size) for _ in range(group_size)]
    trajectories = engine.generate(prompts, SamplingParams(max_new_tokens=6))
    g = torch.Generator().manual_seed(seed)
    rewards = torch.randint(0, 2, (count,), generator=g).double().tolist()
    return [Rollout(t, None, r, i // group_size, "") for i, (t, r) in enumerate(zip(trajectories, rewards))]


def test_policy_log_probs_equal_the_naive_log_softmax_of_the_models_logits(float64_model, tokenizer):
    batch = pack([r.trajectory for r in _rollouts(float64_model, tokenizer)], tokenizer.pad_id, dtype=torch.float64)
    log_probs, entropies = policy_log_probs(float64_model, batch, temperature=0.9, chunk_size=3)
    P, T = batch.prompt_width, batch.completion_ids.shape[1]
    position_ids = (batch.attention_mask.cumsum(-1) - 1).clamp(min=0)
    logits = float64_model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                           position_ids=position_ids).logits[:, P - 1 : P + T - 1] / 0.9
    naive = torch.log_softmax(logits, -1).gather(-1, batch.completion_ids[..., None]).squeeze(-1)
    mask = batch.action_mask
    torch.testing.assert_close(log_probs[mask], naive[mask])
    torch.testing.assert_close(entropies[mask], -(logits.softmax(-1) * logits.log_softmax(-1)).sum(-1)[mask])
    assert bool((log_probs[~mask] == 0).all())


@pytest.mark.parametrize("algo", ["flash_reinforce", "grpo", "token_mean", "entropy_filter"])
def test_microbatches_with_global_denominators_give_the_full_batch_gradient(float64_model, tokenizer, algo):
    rollouts = _rollouts(float64_model, tokenizer, count=8, group_size=4)
    grads = []
    for microbatch_size in (None, 3):
        model = copy.deepcopy(float64_model)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
        learner = Learner(model, optimizer, loss_name=algo, microbatch_size=microbatch_size, max_grad_norm=None,
                          loss_options={"delta": 1e9} if algo != "grpo" else {})
        stats = learner.step(rollouts)
        grads.append(torch.cat([p.grad.reshape(-1) for p in model.parameters() if p.grad is not None]))
        assert learner.version == 1 and stats["trust/acceptance_rate"] == 1.0
    assert grads[0].abs().max() > 0
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-9, atol=1e-12)


def test_the_entropy_filter_reaches_the_loss_through_scales_learner(float64_model, tokenizer):
    rollouts = _rollouts(float64_model, tokenizer, count=8, group_size=1)
    assert {r.reward for r in rollouts} == {0.0, 1.0}
    grads = {}
    for algo in ("flash_reinforce", "entropy_filter"):
        model = copy.deepcopy(float64_model)
        learner = Learner(model, torch.optim.SGD(model.parameters(), lr=0.0), loss_name=algo, max_grad_norm=None,
                          loss_options={"delta": 1e9})
        learner.step(rollouts)
        grads[algo] = torch.cat([p.grad.reshape(-1) for p in model.parameters() if p.grad is not None])
    assert not torch.allclose(grads["flash_reinforce"], grads["entropy_filter"])


def test_sync_rollouts_are_on_policy(float64_model, tokenizer):
    stream = PromptStream([PromptExample(f"{i}*2=", str(2 * i), str(i)) for i in range(10)], seed=0)
    settings = RolloutSettings(SamplingParams(max_new_tokens=4), math_reward)
    source = SyncRollouts(TransformersEngine(float64_model, tokenizer, seed=0), tokenizer, stream, settings,
                          itertools.count())
    for version in range(3):
        source.publish(float64_model, version)
        rollouts, info = source.next_batch(4)
        assert lag_metrics(rollouts, version) == {"lag/mean": 0.0, "lag/max": 0.0, "lag/min": 0.0}
        assert info["rollout/dropped"] == 0


def test_async_lag_is_measured_per_trajectory_and_bounded_by_queue_and_in_flight(float64_model, tokenizer):
    examples = [PromptExample(f"{i}*2=", str(2 * i), str(i)) for i in range(50)]
    settings = RolloutSettings(SamplingParams(max_new_tokens=4), math_reward)
    batch, queue_size, per_call = 4, 3, 2
    source = AsyncRollouts([TransformersEngine(float64_model, tokenizer, seed=0)], tokenizer,
                           PromptStream(examples, seed=0), settings, itertools.count(),
                           prompts_per_call=per_call, queue_size=queue_size)
    try:
        seen, lags = set(), []
        for version in range(8):
            rollouts, _ = source.next_batch(batch)
            assert len(rollouts) == batch
            assert all(r.trajectory.version <= version for r in rollouts)
            lags += [version - r.trajectory.version for r in rollouts]
            seen |= {r.group_id for r in rollouts}
            source.publish(float64_model, version + 1)
        # At most queue_size groups wait and per_call are in flight when a version is published, plus the
        # call that had already started: they are consumed within ceil((Q + 2·per_call) / B) updates.
        bound = -(-(queue_size + 2 * per_call) // batch)
        assert max(lags) <= bound and max(lags) >= 1
        assert len(seen) == 8 * batch  # no trajectory consumed twice
    finally:
        source.close()
    assert not any(w.is_alive() for w in source.workers)


def test_a_reward_error_in_a_worker_is_raised_in_the_learner(float64_model, tokenizer):
    def broken(prompt, response, answer):
        raise RuntimeError("bad reward")

    settings = RolloutSettings(SamplingParams(max_new_tokens=2), broken)
    source = AsyncRollouts([TransformersEngine(float64_model, tokenizer, seed=0)], tokenizer,
                           PromptStream([PromptExample("7*1=", "7", "x")], seed=0), settings, itertools.count(),
                           prompts_per_call=1, queue_size=2)
    with pytest.raises(RolloutFleetError, match="rollout-worker-0.*7\\*1=") as raised:
        source.next_batch(2)
    source.close()
    assert isinstance(raised.value.__cause__, ValueError) and "7*1=" in str(raised.value.__cause__)
