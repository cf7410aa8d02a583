"""Advantage estimators: DESIGN.md invariants 2 (batch-centred), 9 (constant rewards) and 13 (groups).

Float64 throughout. Where a property is exact in real arithmetic but not in floating point (a sum
of B terms, a shifted mean), the tolerance is a few ulps of the magnitudes involved, stated inline.
"""

import math

import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.testing import assert_close

from flashsim.losses import (
    batch_centered,
    group_centered,
    group_normalized,
    leave_one_out,
    positive_only,
)
from flashsim.testing import loss_batches

EPS = torch.finfo(torch.float64).eps
GROUPED = {"group_normalized": group_normalized, "group_centered": group_centered, "leave_one_out": leave_one_out}
rewards_floats = st.floats(-1e3, 1e3)
shifts = st.floats(-1e3, 1e3)
# Decimal rewards such as 0.7 are the realistic case whose mean over a group is not exact.
constants = st.integers(-1000, 1000).map(lambda k: k / 100) | st.floats(-10, 10)


def rounding(batch_size: int, *magnitudes: float) -> float:
    """Bound on the rounding of a mean of ``batch_size`` terms: a few ulps of the largest magnitude."""
    return 4 * batch_size * EPS * max(1.0, *magnitudes)


def group_sums(values: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    _, index = torch.unique(group_ids, return_inverse=True)
    return torch.zeros(int(index.max()) + 1, dtype=values.dtype).index_add_(0, index, values)


@given(loss_batches(rewards=rewards_floats))
def test_batch_centered_advantages_sum_to_zero(batch):
    advantages = batch_centered(batch.rewards)
    scale = float(batch.rewards.abs().max())
    assert abs(float(advantages.sum())) <= rounding(batch.batch_size, scale) * batch.batch_size


@given(loss_batches(rewards=rewards_floats), shifts)
def test_batch_centered_advantages_are_unchanged_by_a_constant_added_to_every_reward(batch, shift):
    scale = float(batch.rewards.abs().max())
    assert_close(
        batch_centered(batch.rewards + shift), batch_centered(batch.rewards),
        rtol=0, atol=rounding(batch.batch_size, scale, abs(shift)),
    )


@given(loss_batches(rewards=rewards_floats), st.floats(-1e3, 1e3))
def test_batch_centered_advantages_scale_with_the_rewards(batch, factor):
    scale = float(batch.rewards.abs().max())
    assert_close(
        batch_centered(factor * batch.rewards), factor * batch_centered(batch.rewards),
        rtol=0, atol=rounding(batch.batch_size, scale * abs(factor)),
    )


@given(loss_batches(), st.sampled_from(sorted(GROUPED)))
def test_group_advantages_sum_to_zero_within_every_group(batch, name):
    advantages = GROUPED[name](batch.rewards, batch.group_ids)
    # group_normalized divides by std + 1e-6: a zero-sum group stays zero-sum up to rounding / 1e-6 at worst.
    atol = 1e-9 if name == "group_normalized" else rounding(batch.batch_size, 1.0) * batch.batch_size
    sums = group_sums(advantages, batch.group_ids)
    assert_close(sums, torch.zeros_like(sums), rtol=0, atol=atol)


@given(loss_batches(group_size=1), st.sampled_from(sorted(GROUPED)))
def test_a_group_of_one_gets_advantage_exactly_zero(batch, name):
    advantages = GROUPED[name](batch.rewards, batch.group_ids)
    assert torch.equal(advantages, torch.zeros_like(advantages))


@given(loss_batches(batch_size=(1, 16)), constants, st.sampled_from([torch.float64, torch.float32]))
def test_constant_rewards_give_exactly_zero_advantage_for_every_baseline(batch, value, dtype):
    rewards = torch.full((batch.batch_size,), value, dtype=dtype)
    for name, estimator in {"batch_centered": batch_centered, **GROUPED}.items():
        advantages = estimator(rewards, batch.group_ids)
        assert torch.equal(advantages, torch.zeros_like(advantages)), (name, advantages)


@given(loss_batches(rewards=rewards_floats), st.data())
def test_a_group_with_equal_rewards_gets_exactly_zero_grpo_advantage(batch, data):
    group = data.draw(st.sampled_from(batch.group_ids.tolist()))
    value = data.draw(constants)
    rewards = torch.where(batch.group_ids == group, value, batch.rewards)
    for estimator in GROUPED.values():
        advantages = estimator(rewards, batch.group_ids)
        assert torch.equal(advantages[batch.group_ids == group], torch.zeros_like(advantages[batch.group_ids == group]))


@given(loss_batches(), shifts)
def test_group_advantages_are_unchanged_by_a_constant_added_to_every_reward(batch, shift):
    for name, estimator in GROUPED.items():
        # group_normalized divides rounding of order ulp(|shift|) by (std + 1e-6) ≥ 1e-6.
        atol = rounding(8, 1.0, abs(shift)) * (1e6 if name == "group_normalized" else 1.0)
        assert_close(estimator(batch.rewards + shift, batch.group_ids), estimator(batch.rewards, batch.group_ids),
                     rtol=0, atol=atol)


@given(loss_batches())
def test_leave_one_out_is_the_group_centred_advantage_times_g_over_g_minus_one(batch):
    _, index = torch.unique(batch.group_ids, return_inverse=True)
    size = torch.bincount(index)[index].to(torch.float64)
    centered = group_centered(batch.rewards, batch.group_ids)
    expected = torch.where(size > 1, centered * size / (size - 1).clamp(min=1), 0.0)
    assert_close(leave_one_out(batch.rewards, batch.group_ids), expected, rtol=1e-12, atol=1e-14)


@given(loss_batches())
def test_group_normalized_advantage_divides_the_centred_one_by_the_unbiased_group_std_plus_eps(batch):
    centered = group_centered(batch.rewards, batch.group_ids)
    expected = torch.zeros_like(centered)
    for group in batch.group_ids.unique():
        members = batch.group_ids == group
        if int(members.sum()) > 1:
            std = math.sqrt(float((centered[members] ** 2).sum()) / (int(members.sum()) - 1))
            expected[members] = centered[members] / (std + 1e-6)
    assert_close(group_normalized(batch.rewards, batch.group_ids), expected, rtol=1e-12, atol=1e-14)


@given(loss_batches())
def test_advantages_are_detached_even_when_rewards_require_grad(batch):
    rewards = batch.rewards.clone().requires_grad_(True)
    for estimator in (batch_centered, positive_only, *GROUPED.values()):
        advantages = estimator(rewards, batch.group_ids)
        assert not advantages.requires_grad
    assert_close(positive_only(batch.rewards), batch.rewards, rtol=0, atol=0)
