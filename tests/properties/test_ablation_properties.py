"""What each registered ablation does differently from FlashREINFORCE, for any batch.

The registry tests elsewhere check that every entry runs and keeps its contract; these check that an
entry is the ablation it claims to be, by its effect on the gradient ∂L/∂log π (float64, exact
relations, so a wrongly wired axis fails).
"""

import math

import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.testing import assert_close

from flashsim.losses import bernoulli_kl
from flashsim.testing import evaluate_loss, loss_batches

DELTA = 0.05  # a gate threshold that the drawn drifts cross on some tokens and not on others


def token_ratios(batch) -> torch.Tensor:
    """ρ_it = π/μ on policy tokens, 0 on padding."""
    ratio = (batch.log_probs - batch.behavior_log_probs).exp()
    return torch.where(batch.action_mask, ratio, 0.0)


def token_kl(batch) -> torch.Tensor:
    """d_it = KL(Bernoulli(μ) ‖ Bernoulli(π)) of the sampled action."""
    return bernoulli_kl(batch.behavior_log_probs.exp(), batch.log_probs.exp())


@given(loss_batches(max_drift=1.0, rewards=st.sampled_from([0.0, 1.0])))
def test_positive_only_gives_failed_trajectories_zero_gradient(batch):
    _, gradient, stats = evaluate_loss("positive_only", batch, delta=math.inf)
    failed = batch.rewards == 0
    assert torch.equal(stats["advantages"], batch.rewards)  # A = R: no baseline
    assert gradient[failed].eq(0).all()
    succeeded_tokens = batch.action_mask & ~failed[:, None]
    assert gradient[succeeded_tokens].lt(0).all()  # pushed up on every policy token of a success


@given(loss_batches(max_drift=1.0))
def test_token_gate_drops_single_tokens_but_never_a_whole_trajectory(batch):
    _, gradient, stats = evaluate_loss("token_gate", batch, delta=DELTA)
    expected_kept = batch.action_mask & (token_kl(batch) <= DELTA)
    assert torch.equal(stats["token_kept"], expected_kept)
    assert stats["admitted"].all() and float(stats["acceptance_rate"]) == 1.0
    assert gradient[~expected_kept].eq(0).all()
    _, ungated, _ = evaluate_loss("no_gate", batch)
    assert_close(gradient, torch.where(expected_kept, ungated, 0.0), rtol=1e-12, atol=0)


@given(loss_batches(max_drift=1.0))
def test_the_sequence_gate_keeps_or_drops_whole_trajectories_by_their_mean_kl(batch):
    _, gradient, stats = evaluate_loss("flash_reinforce", batch, delta=DELTA)
    mean_kl = torch.where(batch.action_mask, token_kl(batch), 0.0).sum(1) / batch.action_mask.sum(1)
    assert torch.equal(stats["admitted"], mean_kl <= DELTA)
    assert torch.equal(stats["token_kept"], batch.action_mask & stats["admitted"][:, None])
    _, ungated, _ = evaluate_loss("no_gate", batch)
    assert_close(gradient, torch.where(stats["admitted"][:, None], ungated, 0.0), rtol=1e-12, atol=0)


@given(loss_batches(max_drift=1.0))
def test_no_gate_keeps_every_policy_token_at_any_drift(batch):
    _, gradient, stats = evaluate_loss("no_gate", batch)
    assert torch.equal(stats["token_kept"], batch.action_mask) and float(stats["acceptance_rate"]) == 1.0
    B, lengths = batch.batch_size, batch.action_mask.sum(1, keepdim=True)
    expected = -token_ratios(batch) * stats["advantages"][:, None] / (B * lengths)  # −ρ A / (B T_i)
    assert_close(gradient, torch.where(batch.action_mask, expected, 0.0), rtol=1e-12, atol=1e-300)


@given(loss_batches(max_drift=1.0))
def test_token_mean_reweights_each_trajectory_from_one_over_b_t_to_one_over_all_tokens(batch):
    _, sample_mean, _ = evaluate_loss("flash_reinforce", batch, delta=math.inf)
    _, token_mean, _ = evaluate_loss("token_mean", batch, delta=math.inf)
    B, lengths = batch.batch_size, batch.action_mask.sum(1, keepdim=True).double()
    assert_close(token_mean, sample_mean * B * lengths / lengths.sum(), rtol=1e-12, atol=1e-300)


@given(loss_batches(max_drift=1.0))
def test_truncated_is_caps_the_ratio_at_c(batch):
    cap = 1.2
    _, gradient, _ = evaluate_loss("tis", batch, tis_cap=cap)
    _, ungated, _ = evaluate_loss("no_gate", batch)
    ratio = token_ratios(batch)
    expected = torch.where(batch.action_mask, ungated * ratio.clamp(max=cap) / ratio, 0.0)
    assert_close(gradient, expected, rtol=1e-12, atol=1e-300)


@given(loss_batches(max_drift=1.0))
def test_ratio_mask_drops_exactly_the_tokens_outside_the_band(batch):
    band = (0.8, 1.25)
    _, gradient, stats = evaluate_loss("ratio_mask", batch, ratio_bounds=band)
    ratio = token_ratios(batch)
    inside = batch.action_mask & (ratio >= band[0]) & (ratio <= band[1])
    assert torch.equal(stats["token_kept"], inside)
    _, ungated, _ = evaluate_loss("no_gate", batch)
    assert_close(gradient, torch.where(inside, ungated, 0.0), rtol=1e-12, atol=0)


@given(loss_batches(max_drift=1.0))
def test_ppo_clip_equals_the_ungated_gradient_except_where_the_clip_binds(batch):
    eps = 0.2
    _, gradient, stats = evaluate_loss("ppo_clip", batch, clip_eps=eps)
    _, ungated, _ = evaluate_loss("no_gate", batch)
    ratio, advantages = token_ratios(batch), stats["advantages"][:, None]
    binds = batch.action_mask & (((ratio > 1 + eps) & (advantages > 0)) | ((ratio < 1 - eps) & (advantages < 0)))
    assert gradient[binds].eq(0).all()
    assert_close(gradient[~binds], ungated[~binds], rtol=1e-12, atol=1e-300)


@given(loss_batches(group_size=3, rewards=st.sampled_from([0.0, 1.0])))
def test_rloo_advantage_is_the_reward_minus_the_mean_of_the_other_siblings(batch):
    _, _, stats = evaluate_loss("rloo", batch)
    for group in batch.group_ids.unique():
        rewards = batch.rewards[batch.group_ids == group]
        others = (rewards.sum() - rewards) / (len(rewards) - 1)
        assert_close(stats["advantages"][batch.group_ids == group], rewards - others, rtol=1e-12, atol=1e-15)
