"""Gradients of the losses: DESIGN.md invariants 1, 5, 6, 9 and 12.

Gradients are taken with ``torch.autograd.grad`` with respect to the learner's log-probs: every
model's gradient is this one pushed through ``∇_θ log π`` by the chain rule, so checking it token by
token checks the update direction of any policy. Float64; expected values are formulas evaluated
with the same operations, so tolerances are a few ulps (1e-12 relative) unless stated.
"""

import math

import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.testing import assert_close

from flashsim.losses import (
    AGGREGATIONS,
    LOSSES,
    batch_centered,
    token_weights,
)
from flashsim.testing import (
    LOSS_FUNCTIONS,
    LossBatch,
    aggregations,
    evaluate_loss,
    loss_batches,
    loss_names,
)

TIGHT = {"rtol": 1e-12, "atol": 1e-15}
gates = st.sampled_from(["sequence", "token", "none"])


def on_policy(batch: LossBatch) -> LossBatch:
    """The same batch with μ = π on every token (padding junk kept)."""
    behavior = torch.where(batch.action_mask, batch.log_probs, batch.behavior_log_probs)
    return LossBatch(batch.log_probs, behavior, batch.rewards, batch.action_mask, batch.group_ids)


@given(loss_batches(), aggregations())
def test_on_policy_gradient_is_the_advantage_over_length_per_token_averaged_over_the_batch(batch, aggregation):
    """Invariant 1: with μ = π the default gate admits everything and −∇L = (1/B) Σ_i (A_i/T_i) Σ_t ∇log π."""
    batch = on_policy(batch)
    _, gradient, stats = evaluate_loss("flash_reinforce_loss", batch, aggregation=aggregation)
    advantages = batch_centered(batch.rewards)
    weights = token_weights(batch.action_mask, aggregation, dtype=torch.float64)
    assert bool(stats["admitted"].all())
    assert_close(-gradient, weights * advantages[:, None], **TIGHT)
    if aggregation == "sample_mean":
        per_token = advantages[:, None] / (batch.batch_size * batch.lengths[:, None])
        assert_close(-gradient, torch.where(batch.action_mask, per_token, 0.0), **TIGHT)


@given(loss_batches(max_drift=2.0), aggregations(), st.sampled_from(["sequence", "token"]))
def test_with_an_infinite_threshold_the_gradient_is_the_importance_weighted_policy_gradient(batch, aggregation, gate):
    """Invariant 1, off-policy: δ = ∞ gives −∇L = Σ_it w_it ρ_it A_i ∇log π with ρ = π/μ (no clipping)."""
    _, gradient, stats = evaluate_loss(
        "flash_reinforce_loss", batch, delta=math.inf, gate=gate, aggregation=aggregation
    )
    ratio = torch.exp(torch.where(batch.action_mask, batch.log_probs - batch.behavior_log_probs, 0.0))
    weights = token_weights(batch.action_mask, aggregation, dtype=torch.float64)
    assert bool(stats["admitted"].all()) and bool(stats["token_kept"].eq(batch.action_mask).all())
    assert_close(-gradient, weights * ratio * batch_centered(batch.rewards)[:, None], **TIGHT)


def repeat_tokens(batch: LossBatch, row: int, k: int) -> LossBatch:
    """Every slot of trajectory ``row`` repeated k times in place; the other rows padded to width k·T."""
    def widen(x: torch.Tensor, fill) -> torch.Tensor:
        padded = torch.cat([x, torch.full((x.shape[0], (k - 1) * x.shape[1]), fill, dtype=x.dtype)], dim=1)
        padded[row] = x[row].repeat_interleave(k)
        return padded

    return LossBatch(
        widen(batch.log_probs, math.nan), widen(batch.behavior_log_probs, -math.inf), batch.rewards,
        widen(batch.action_mask, False), batch.group_ids,
    )


@given(loss_batches(), st.integers(2, 4), aggregations(), gates, st.data())
def test_repeating_every_token_of_a_trajectory_k_times_scales_its_gradient_as_its_aggregation_says(
    batch, k, aggregation, gate, data
):
    """Invariant 5: sample_mean leaves the trajectory's total gradient unchanged; token_mean scales it by
    k·N/N' ≈ k (N, N' the token counts before and after); the token sums scale it by exactly k."""
    row = data.draw(st.integers(0, batch.batch_size - 1))
    options = {"aggregation": aggregation, "gate": gate, "max_tokens": float(batch.width)}
    _, gradient, stats = evaluate_loss("flash_reinforce_loss", batch, **options)
    repeated = repeat_tokens(batch, row, k)
    _, gradient_k, stats_k = evaluate_loss("flash_reinforce_loss", repeated, **options)
    assert torch.equal(stats_k["admitted"], stats["admitted"])  # the gate sees the same mean KL
    per_token_k = gradient_k[row].view(batch.width, k).sum(dim=1)
    tokens, tokens_k = batch.num_tokens, repeated.num_tokens
    factor = {"sample_mean": 1.0, "token_mean": k * tokens / tokens_k}.get(aggregation, float(k))
    others = {"token_mean": tokens / tokens_k}.get(aggregation, 1.0)
    assert_close(per_token_k, factor * gradient[row], **TIGHT)
    keep = torch.arange(batch.batch_size) != row
    assert_close(gradient_k[keep, : batch.width], others * gradient[keep], **TIGHT)
    assert torch.equal(gradient_k[keep, batch.width :], torch.zeros_like(gradient_k[keep, batch.width :]))


@given(loss_batches(max_drift=1.0), aggregations(), st.data())
def test_a_rejected_trajectory_has_exactly_zero_gradient_and_leaves_the_others_unchanged(batch, aggregation, data):
    """Invariant 6: whatever δ, rows with D̄_i > δ get a zero gradient and every admitted row gets
    exactly its δ = ∞ gradient: rejected trajectories (and their tokens) stay in the denominators."""
    _, gradient_all, stats_all = evaluate_loss("flash_reinforce_loss", batch, delta=math.inf, aggregation=aggregation)
    kl = stats_all["sequence_kl"]
    delta = data.draw(st.sampled_from([0.0, *kl.tolist()]), label="delta")
    _, gradient, stats = evaluate_loss("flash_reinforce_loss", batch, delta=delta, aggregation=aggregation)
    rejected = kl > delta
    assert torch.equal(stats["admitted"], ~rejected)
    assert torch.equal(gradient[rejected], torch.zeros_like(gradient[rejected]))
    assert torch.equal(gradient[~rejected], gradient_all[~rejected])
    assert_close(stats["acceptance_rate"], (~rejected).double().mean(), rtol=0, atol=0)


constants = st.integers(-1000, 1000).map(lambda k: k / 100) | st.floats(-10, 10)
with_baseline = loss_names().filter(lambda name: name != "positive_only")  # A = R: no baseline by design


@given(loss_batches(batch_size=(1, 16)), constants, with_baseline, aggregations())
def test_constant_rewards_give_exactly_zero_loss_and_gradient(batch, value, name, aggregation):
    """Invariant 9, for every loss with a baseline and every aggregation."""
    rewards = torch.full_like(batch.rewards, value)
    batch = LossBatch(batch.log_probs, batch.behavior_log_probs, rewards, batch.action_mask, batch.group_ids)
    loss, gradient, _ = evaluate_loss(name, batch, aggregation=aggregation)
    assert float(loss) == 0.0
    assert torch.equal(gradient, torch.zeros_like(gradient))


def test_every_aggregation_and_loss_is_covered_by_the_strategies():
    assert set(AGGREGATIONS) == {"sample_mean", "token_mean", "seq_mean_token_sum", "seq_mean_token_sum_norm"}
    assert set(LOSS_FUNCTIONS) == {"flash_reinforce_loss", "grpo_loss", *LOSSES}
