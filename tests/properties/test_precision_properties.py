"""Low-precision inputs: DESIGN.md invariant 11 (bf16/fp16 promoted before exp; float64 stays float64).

"Promoted before exponentiation" is checked as an identity: a loss on half-precision inputs equals,
bit for bit, the same loss on those inputs cast to float32 first. Any exp, log or subtraction done in
half precision would break it (exp overflows past 65504 in float16, and exp(x) for |x| < 5e-4 rounds
to 1 in float16 and bfloat16).
"""

import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.testing import assert_close

from flashsim.losses import LOSSES
from flashsim.testing import FLOAT_DTYPES, LossBatch, evaluate_loss, global_advantages, loss_batches, loss_names

HALF = st.sampled_from([torch.float16, torch.bfloat16])


def floating_stats(stats):
    return {key: value for key, value in stats.items() if torch.is_floating_point(value)}


@given(st.data(), HALF, loss_names())
def test_half_precision_inputs_give_exactly_the_float32_loss_and_stats(data, dtype, name):
    batch = data.draw(loss_batches(dtype=dtype, max_drift=1.0), label="batch")
    loss, gradient, stats = evaluate_loss(name, batch)
    loss32, gradient32, stats32 = evaluate_loss(name, batch.to(torch.float32))
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    assert torch.equal(loss, loss32)
    assert gradient.dtype == dtype and torch.equal(gradient, gradient32.to(dtype))
    for key, value in floating_stats(stats).items():
        assert value.dtype == torch.float32, key
        assert_close(value, stats32[key], rtol=0, atol=0, equal_nan=True, msg=key)


@given(st.data(), HALF, st.floats(11.5, 15.0), st.sampled_from(["none", "sequence"]))
def test_a_ratio_beyond_the_half_precision_range_stays_finite(data, dtype, log_ratio, gate):
    """exp(11.5) ≈ 1e5 > 65504, the float16 maximum: computed in float32 the loss stays finite."""
    batch = data.draw(loss_batches(dtype=dtype, max_drift=0.0, min_log_prob=-3.0), label="batch")
    behavior = torch.where(batch.action_mask, batch.log_probs.float() - log_ratio, 0.0).to(dtype)
    stale = LossBatch(batch.log_probs, behavior, batch.rewards, batch.action_mask, batch.group_ids)
    loss, _, stats = evaluate_loss("flash_reinforce_loss", stale, gate=gate, delta=float("inf"))
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    assert bool(torch.isfinite(stats["ratio_max"])) and float(stats["ratio_max"]) > 65504


@given(st.data(), HALF)
def test_a_tiny_log_ratio_is_not_rounded_away_in_half_precision(data, dtype):
    """Certain tokens (log π = 0) sampled with log μ = −2^-12: the ratio exp(2^-12) = 1.000244 rounds to
    exactly 1 in float16 and bfloat16, but not in the float32 the loss computes in."""
    batch = data.draw(loss_batches(dtype=dtype), label="batch")
    log_probs = torch.zeros_like(batch.log_probs)
    behavior = torch.full_like(batch.log_probs, -(2.0**-12))
    stale = LossBatch(log_probs, behavior, batch.rewards, batch.action_mask, batch.group_ids)
    _, _, stats = evaluate_loss("flash_reinforce_loss", stale, gate="none")
    ratio = torch.exp(torch.tensor(2.0**-12))
    assert float(torch.exp(torch.tensor(2.0**-12, dtype=dtype))) == 1.0
    assert stats["ratio_min"].dtype == torch.float32
    assert float(stats["ratio_min"]) == float(stats["ratio_max"]) == float(ratio) > 1.0


@given(loss_batches(dtype=torch.float64), loss_names())
def test_float64_inputs_stay_float64(batch, name):
    loss, gradient, stats = evaluate_loss(name, batch)
    assert loss.dtype == torch.float64 and gradient.dtype == torch.float64
    assert all(value.dtype == torch.float64 for value in floating_stats(stats).values())


def advantage_tolerance(name: str, rewards: torch.Tensor, group_ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A few ulps of the compute dtype, per trajectory, times how much the estimator amplifies rounding.

    Centring rounds to ~B ulps of max|R|; GRPO then divides by its group's std + 1e-6, which amplifies
    that rounding by 1 / (std + 1e-6) (and by at most √G through the std's own rounding).
    """
    eps = torch.finfo(dtype).eps
    scale = max(1.0, float(rewards.abs().max()))
    base = torch.full_like(rewards, 16 * rewards.numel() * eps * scale)
    if ADVANTAGES_OF.get(name) != "group_normalized":
        return base
    _, index = torch.unique(group_ids, return_inverse=True)
    sizes = torch.bincount(index).to(torch.float64)
    means = torch.zeros_like(sizes).index_add_(0, index, rewards) / sizes
    squares = torch.zeros_like(sizes).index_add_(0, index, (rewards - means[index]) ** 2)
    std = torch.sqrt(squares / (sizes - 1).clamp(min=1))
    return base * (1 + sizes[index].sqrt()) / (std[index] + 1e-6)


ADVANTAGES_OF = {"grpo_loss": "group_normalized", **{name: spec.advantage.__name__ for name, spec in LOSSES.items()}}


@given(st.data(), st.sampled_from(FLOAT_DTYPES), st.sampled_from(FLOAT_DTYPES), loss_names())
def test_advantages_equal_the_float64_computation_whatever_the_reward_dtype(data, reward_dtype, dtype, name):
    """Rewards are promoted to the compute dtype before any estimator: bf16 rewards centred in bf16
    were off by up to 4.5e-3; promoted, the error is a few ulps of the compute dtype."""
    batch = data.draw(loss_batches(dtype=dtype), label="batch")
    rewards = batch.rewards.to(reward_dtype)
    batch = LossBatch(batch.log_probs, batch.behavior_log_probs, rewards, batch.action_mask, batch.group_ids)
    _, _, stats = evaluate_loss(name, batch)
    exact = global_advantages(name, LossBatch(*(x.double() if x is rewards else x for x in (
        batch.log_probs, batch.behavior_log_probs, rewards, batch.action_mask, batch.group_ids))))
    compute = torch.promote_types(dtype, torch.float32)
    assert stats["advantages"].dtype == compute
    error = (stats["advantages"].double() - exact).abs()
    assert bool((error <= advantage_tolerance(name, rewards.double(), batch.group_ids, compute)).all()), error.max()
