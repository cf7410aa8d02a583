"""GRPO: DESIGN.md invariant 13 (group advantages, G = 1, the clip's zero gradient, equal lengths).

The zero-sum and G = 1 parts for the advantage functions themselves are in
``test_advantage_properties.py``; here they are checked through ``grpo_loss``.
"""

import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.testing import assert_close

from flashsim.losses import group_normalized, token_weights
from flashsim.testing import aggregations, evaluate_loss, loss_batches, loss_names

TIGHT = {"rtol": 1e-12, "atol": 1e-15}
clip_ranges = st.floats(0.05, 0.5)


@given(loss_batches(), st.booleans())
def test_grpo_advantages_sum_to_zero_within_every_group(batch, scale_by_std):
    _, _, stats = evaluate_loss("grpo_loss", batch, scale_by_std=scale_by_std)
    _, index = torch.unique(batch.group_ids, return_inverse=True)
    sums = torch.zeros(int(index.max()) + 1, dtype=torch.float64).index_add_(0, index, stats["advantages"])
    # Rounding of a G-term mean (≤ 8 · 4 ulps of |R| ≤ 1), divided by std + 1e-6 ≥ 1e-6 at worst.
    assert_close(sums, torch.zeros_like(sums), rtol=0, atol=1e-9)


@given(loss_batches(group_size=1, max_drift=1.0), aggregations(), loss_names().filter(lambda n: "grpo" in n))
def test_with_one_rollout_per_prompt_grpo_has_zero_advantage_loss_and_gradient(batch, aggregation, name):
    loss, gradient, stats = evaluate_loss(name, batch, aggregation=aggregation)
    assert torch.equal(stats["advantages"], torch.zeros_like(stats["advantages"]))
    assert float(loss) == 0.0 and torch.equal(gradient, torch.zeros_like(gradient))


@given(loss_batches(max_drift=0.6), aggregations(), clip_ranges, st.none() | clip_ranges)
def test_clipped_tokens_get_zero_gradient_and_the_others_the_ratio_weighted_policy_gradient(
    batch, aggregation, clip_eps, clip_eps_high
):
    """A token is clipped when A > 0 and r > 1 + ε_high, or A < 0 and r < 1 − ε_low: moving further
    that way gains nothing, so its gradient is exactly zero. Every other token has
    −∂L/∂log π = w_it r_it A_i (∂r/∂log π = r), w the aggregation weight."""
    options = {"aggregation": aggregation, "clip_eps": clip_eps, "clip_eps_high": clip_eps_high}
    _, gradient, stats = evaluate_loss("grpo_loss", batch, **options)
    high = clip_eps if clip_eps_high is None else clip_eps_high
    advantages = group_normalized(batch.rewards, batch.group_ids)[:, None]
    ratio = torch.exp(torch.where(batch.action_mask, batch.log_probs - batch.behavior_log_probs, 0.0))
    pushed_up, pushed_down = (advantages > 0) & (ratio > 1 + high), (advantages < 0) & (ratio < 1 - clip_eps)
    clipped = batch.action_mask & (pushed_up | pushed_down)
    weights = token_weights(batch.action_mask, aggregation, dtype=torch.float64)
    expected = torch.where(clipped, 0.0, weights * ratio * advantages)
    assert torch.equal(gradient[clipped], torch.zeros_like(gradient[clipped]))
    assert_close(-gradient, expected, **TIGHT)
    assert_close(stats["clip_fraction"], clipped.sum().double() / batch.num_tokens, rtol=0, atol=0)


@given(loss_batches(max_drift=0.6), clip_ranges)
def test_the_clip_never_increases_the_objective(batch, clip_eps):
    """min(r A, clip(r) A) ≤ r A: the clipped loss is never below the unclipped (ε = ∞) one."""
    loss, _, _ = evaluate_loss("grpo_loss", batch, clip_eps=clip_eps)
    unclipped, _, _ = evaluate_loss("grpo_loss", batch, clip_eps=0.999999, clip_eps_high=1e9)
    assert float(loss) >= float(unclipped) - 1e-12


@given(loss_batches(equal_lengths=True, max_drift=0.6), loss_names())
def test_token_mean_and_sample_mean_agree_when_all_trajectories_have_the_same_length(batch, name):
    loss_t, gradient_t, _ = evaluate_loss(name, batch, aggregation="token_mean")
    loss_s, gradient_s, _ = evaluate_loss(name, batch, aggregation="sample_mean")
    assert_close(loss_t, loss_s, **TIGHT)
    assert_close(gradient_t, gradient_s, **TIGHT)
