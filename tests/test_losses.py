"""Hand-derived float64 checks of every loss, correction and aggregation mode.

The expected values are computed here with plain Python loops over trajectories and tokens, from the
formulas in DESIGN.md, independently of the library's vectorised code.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from flashsim.losses import (
    AGGREGATIONS,
    LOSSES,
    aggregate,
    bernoulli_kl,
    flash_reinforce_loss,
    get_loss,
    grpo_loss,
)
from tests.corrections import correction_loss

B, T = 6, 7
LENGTHS = [7, 3, 5, 1, 6, 2]
CLAMP = 1e-6


def make_batch(seed: int = 0, drift: float = 0.05, junk: float = math.nan):
    """A stale float64 batch with unequal lengths and junk in the padding slots."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.arange(T)[None, :] < torch.tensor(LENGTHS)[:, None]
    behavior = torch.log(torch.rand(B, T, generator=g, dtype=torch.float64) * 0.9 + 0.05)
    current = (behavior + drift * torch.randn(B, T, generator=g, dtype=torch.float64)).clamp(max=-1e-3)
    behavior = torch.where(mask, behavior, torch.full_like(behavior, junk))
    current = torch.where(mask, current, torch.full_like(current, junk)).requires_grad_(True)
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 1.0], dtype=torch.float64)
    return current, behavior, rewards, mask


def token_kl(lp: float, blp: float) -> float:
    p = min(max(math.exp(blp), CLAMP), 1 - CLAMP)
    q = min(max(math.exp(lp), CLAMP), 1 - CLAMP)
    return p * math.log(p / q) + (1 - p) * math.log((1 - p) / (1 - q))


def outer_weight(mode: str, i: int, total_tokens: int) -> float:
    """d aggregate / d v_it for a policy token of trajectory i."""
    return {
        "sample_mean": 1.0 / (B * LENGTHS[i]),
        "token_mean": 1.0 / total_tokens,
        "seq_mean_token_sum": 1.0 / B,
        "seq_mean_token_sum_norm": 1.0 / (B * T),
    }[mode]


def expected_reinforce_grad(current, behavior, advantages, *, correction, mode, delta, cap=2.0, band=(0.5, 2.0)):
    """−∂L/∂log π_it = keep_it · w_it · A_i · outer weight, written out token by token."""
    lp, blp = current.detach().tolist(), behavior.tolist()
    total = sum(LENGTHS)
    grad = torch.zeros(B, T, dtype=torch.float64)
    for i in range(B):
        kls = [token_kl(lp[i][t], blp[i][t]) for t in range(LENGTHS[i])]
        admitted = sum(kls) / LENGTHS[i] <= delta
        for t in range(LENGTHS[i]):
            rho = math.exp(lp[i][t] - blp[i][t])
            keep, w = True, rho
            if correction == "flash_reinforce":
                keep = admitted
            elif correction == "token_gate":
                keep = kls[t] <= delta
            elif correction == "tis":
                w = min(rho, cap)
            elif correction == "ratio_mask":
                keep = band[0] <= rho <= band[1]
            if keep:
                grad[i, t] = -w * float(advantages[i]) * outer_weight(mode, i, total)
    return grad


def batch_centered_by_hand(rewards):
    mean = sum(rewards.tolist()) / B
    return torch.tensor([r - mean for r in rewards.tolist()], dtype=torch.float64)


@pytest.mark.parametrize("mode", AGGREGATIONS)
@pytest.mark.parametrize("gate", ["sequence", "token", "none"])
def test_flash_reinforce_gradient_matches_the_formula_token_by_token(gate, mode):
    current, behavior, rewards, mask = make_batch(drift=0.08)
    delta = 3e-3
    loss, stats = flash_reinforce_loss(current, behavior, rewards, mask, delta=delta, gate=gate, aggregation=mode)
    (grad,) = torch.autograd.grad(loss, current)
    correction = {"sequence": "flash_reinforce", "token": "token_gate", "none": "no_gate"}[gate]
    expected = expected_reinforce_grad(
        current, behavior, batch_centered_by_hand(rewards), correction=correction, mode=mode, delta=delta
    )
    assert_close(grad, expected, rtol=1e-12, atol=1e-15)
    if gate == "sequence":
        assert 0 < int(stats["admitted"].sum()) < B, "the batch should mix admitted and rejected rows"


def test_flash_reinforce_loss_value_matches_the_paper_formula():
    current, behavior, rewards, mask = make_batch(drift=0.08)
    loss, stats = flash_reinforce_loss(current, behavior, rewards, mask)
    adv = batch_centered_by_hand(rewards).tolist()
    lp, blp = current.detach().tolist(), behavior.tolist()
    total = 0.0
    for i in range(B):
        kls = [token_kl(lp[i][t], blp[i][t]) for t in range(LENGTHS[i])]
        if sum(kls) / LENGTHS[i] <= 3e-3:
            total += adv[i] / LENGTHS[i] * sum(math.exp(lp[i][t] - blp[i][t]) * lp[i][t] for t in range(LENGTHS[i]))
    assert_close(loss, torch.tensor(-total / B, dtype=torch.float64), rtol=1e-12, atol=1e-15)
    expected_kl = [sum(token_kl(lp[i][t], blp[i][t]) for t in range(LENGTHS[i])) / LENGTHS[i] for i in range(B)]
    assert_close(stats["sequence_kl"], torch.tensor(expected_kl, dtype=torch.float64), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("correction", ["tis", "ratio_mask"])
def test_tis_and_ratio_mask_gradients_match_the_formula(correction):
    current, behavior, rewards, mask = make_batch(drift=0.6)
    adv = batch_centered_by_hand(rewards)
    band = {"tis_cap": 1.2} if correction == "tis" else {"ratio_bounds": (0.7, 1.3)}
    loss, stats = correction_loss(current, behavior, mask, adv, correction=correction, **band)
    (grad,) = torch.autograd.grad(loss, current)
    expected = expected_reinforce_grad(
        current, behavior, adv, correction=correction, mode="sample_mean", delta=0.0, cap=1.2, band=(0.7, 1.3)
    )
    assert_close(grad, expected, rtol=1e-12, atol=1e-15)
    if correction == "tis":
        assert 0 < float(stats["tis_capped_fraction"]) < 1 and "clip_fraction" not in stats
    else:
        assert 0 < float(stats["token_acceptance_rate"]) < 1


def group_normalized_by_hand(rewards, groups, scale_by_std=True, eps=1e-6):
    out = []
    for r, g in zip(rewards, groups):
        members = [rr for rr, gg in zip(rewards, groups) if gg == g]
        if len(members) == 1:
            out.append(0.0)
            continue
        mean = sum(members) / len(members)
        std = math.sqrt(sum((m - mean) ** 2 for m in members) / (len(members) - 1))
        out.append((r - mean) / (std + eps) if scale_by_std else r - mean)
    return torch.tensor(out, dtype=torch.float64)


@pytest.mark.parametrize("mode", AGGREGATIONS)
@pytest.mark.parametrize("clip_high", [None, 0.28])
def test_grpo_gradient_is_the_unclipped_ratio_times_advantage_and_zero_where_clipped(mode, clip_high):
    current, behavior, rewards, mask = make_batch(drift=0.4)
    groups = torch.tensor([0, 0, 0, 1, 1, 2])
    loss, stats = grpo_loss(current, behavior, rewards, mask, groups, clip_eps_high=clip_high, aggregation=mode)
    (grad,) = torch.autograd.grad(loss, current)
    adv = group_normalized_by_hand(rewards.tolist(), groups.tolist())
    low, high = 0.2, (0.2 if clip_high is None else clip_high)
    lp, blp = current.detach().tolist(), behavior.tolist()
    expected = torch.zeros(B, T, dtype=torch.float64)
    clipped_count = 0
    for i in range(B):
        for t in range(LENGTHS[i]):
            r, a = math.exp(lp[i][t] - blp[i][t]), float(adv[i])
            clipped = (a > 0 and r > 1 + high) or (a < 0 and r < 1 - low)
            clipped_count += clipped
            if not clipped:
                expected[i, t] = -r * a * outer_weight(mode, i, sum(LENGTHS))
    assert_close(grad, expected, rtol=1e-12, atol=1e-15)
    assert_close(stats["advantages"], adv, rtol=1e-12, atol=1e-15)
    assert clipped_count > 0
    assert_close(stats["clip_fraction"], torch.tensor(clipped_count / sum(LENGTHS), dtype=torch.float64))


def test_grpo_loss_value_is_the_clipped_surrogate_token_mean():
    current, behavior, rewards, mask = make_batch(drift=0.4)
    groups = torch.tensor([0, 0, 0, 1, 1, 2])
    loss, _ = grpo_loss(current, behavior, rewards, mask, groups)
    adv = group_normalized_by_hand(rewards.tolist(), groups.tolist()).tolist()
    lp, blp = current.detach().tolist(), behavior.tolist()
    total = 0.0
    for i in range(B):
        for t in range(LENGTHS[i]):
            r = math.exp(lp[i][t] - blp[i][t])
            total += min(r * adv[i], min(max(r, 0.8), 1.2) * adv[i])
    assert_close(loss, torch.tensor(-total / sum(LENGTHS), dtype=torch.float64), rtol=1e-12, atol=1e-15)


def test_grpo_k3_penalty_adds_beta_times_the_aggregated_k3():
    current, behavior, rewards, mask = make_batch()
    groups = torch.tensor([0, 0, 0, 1, 1, 1])
    reference = torch.where(mask, behavior - 0.1, torch.nan)
    base, _ = grpo_loss(current, behavior, rewards, mask, groups)
    with_kl, stats = grpo_loss(current, behavior, rewards, mask, groups, reference_log_probs=reference, kl_coef=0.5)
    lp = current.detach().tolist()
    k3 = [math.exp(reference[i, t].item() - lp[i][t]) - (reference[i, t].item() - lp[i][t]) - 1
          for i in range(B) for t in range(LENGTHS[i])]
    assert_close(stats["kl_reference"], torch.tensor(sum(k3) / len(k3), dtype=torch.float64))
    assert_close(with_kl - base, 0.5 * stats["kl_reference"])


def test_rloo_and_dr_grpo_use_their_own_advantages_and_aggregations():
    current, behavior, rewards, mask = make_batch()
    groups = torch.tensor([0, 0, 0, 1, 1, 1])
    _, stats = get_loss("rloo")(current, behavior, rewards, mask, groups)
    r = rewards.tolist()
    loo = [r[i] - sum(r[j] for j in range(B) if groups[j] == groups[i] and j != i) / 2 for i in range(B)]
    assert_close(stats["advantages"], torch.tensor(loo, dtype=torch.float64))
    _, stats = get_loss("dr_grpo")(current, behavior, rewards, mask, groups)
    assert_close(stats["advantages"], group_normalized_by_hand(r, groups.tolist(), scale_by_std=False))


def test_positive_only_uses_the_raw_rewards_so_failures_have_zero_gradient():
    current, behavior, rewards, mask = make_batch(drift=0.0)
    loss, stats = get_loss("positive_only")(current, behavior, rewards, mask)
    (grad,) = torch.autograd.grad(loss, current)
    assert_close(stats["advantages"], rewards)
    failed = rewards == 0
    assert torch.all(grad[failed] == 0)
    assert torch.all(grad[~failed][mask[~failed]] < 0)


def test_registry_flash_reinforce_equals_the_named_function():
    current, behavior, rewards, mask = make_batch(drift=0.08)
    a, sa = flash_reinforce_loss(current, behavior, rewards, mask)
    b, sb = get_loss("flash_reinforce")(current, behavior, rewards, mask)
    assert_close(a, b, rtol=0, atol=0)
    assert torch.equal(sa["admitted"], sb["admitted"])


def test_every_registered_loss_runs_and_returns_detached_stats():
    current, behavior, rewards, mask = make_batch(drift=0.08)
    groups = torch.tensor([0, 0, 1, 1, 2, 2])
    for name in LOSSES:
        needs = get_loss(name).needs_entropies()
        extra = {"entropies": torch.where(mask, -behavior, 0.0), "failures": rewards <= 0} if needs else {}
        loss, stats = get_loss(name)(current, behavior, rewards, mask, groups, **extra)
        assert torch.isfinite(loss), name
        assert all(not v.requires_grad for v in stats.values()), name
        if get_loss(name).loss is grpo_loss:  # PPO's clip and no gate
            assert {"advantages", "sequence_kl", "ess", "clip_fraction"} <= stats.keys(), name
            assert not {"admitted", "acceptance_rate", "tis_capped_fraction"} & stats.keys(), name
        else:  # the gate (or its ablation) and the TIS cap
            assert {"advantages", "sequence_kl", "admitted", "acceptance_rate", "ess", "tis_capped_fraction"
                    } <= stats.keys(), name
            assert "clip_fraction" not in stats, name


def test_a_rejected_trajectory_stays_in_the_denominator():
    current, behavior, rewards, mask = make_batch(drift=0.08)
    _, stats = flash_reinforce_loss(current, behavior, rewards, mask)
    admitted = stats["admitted"]
    loss_all, _ = flash_reinforce_loss(current, behavior, rewards, mask)
    adv = stats["advantages"]
    keep_only, _ = flash_reinforce_loss(
        current[admitted], behavior[admitted], None, mask[admitted], advantages=adv[admitted], num_sequences=B
    )
    assert_close(loss_all, keep_only, rtol=1e-13, atol=1e-16)


def test_stats_report_ratio_extremes_ess_and_acceptance():
    current, behavior, rewards, mask = make_batch(drift=0.08)
    _, stats = flash_reinforce_loss(current, behavior, rewards, mask)
    ratios = torch.exp(current.detach() - behavior)[mask]
    assert_close(stats["ratio_min"], ratios.min())
    assert_close(stats["ratio_max"], ratios.max())
    assert_close(stats["ratio_mean"], ratios.mean())
    assert_close(stats["ess"], ratios.sum() ** 2 / (ratios**2).sum())
    assert_close(stats["acceptance_rate"], stats["admitted"].double().mean())


def test_log_ratio_clamp_counts_clamped_tokens_and_keeps_the_loss_finite():
    current, behavior, rewards, mask = make_batch()
    far = behavior.clone()
    far[0, 0] = current[0, 0].detach() - 100.0  # μ(a) ≈ e^-100 π(a): ratio e^100 overflows float32, fine in f64
    loss, stats = flash_reinforce_loss(current, far, rewards, mask, gate="none", log_ratio_clamp=30.0)
    assert torch.isfinite(loss)
    assert int(stats["num_log_ratio_clamped"]) == 1
    assert_close(stats["ratio_max"], torch.tensor(math.exp(30.0), dtype=torch.float64))


def test_an_overflowing_ratio_on_an_admitted_token_raises_floating_point_error():
    current, behavior, rewards, mask = make_batch()
    far = behavior.clone()
    far[0, 0] = current[0, 0].detach() - 800.0
    with pytest.raises(FloatingPointError, match="log_ratio_clamp"):
        flash_reinforce_loss(current, far, rewards, mask, gate="none")


def test_bernoulli_kl_matches_the_closed_form_on_a_grid():
    grid = torch.linspace(0.01, 0.99, 11, dtype=torch.float64)
    p, q = torch.meshgrid(grid, grid, indexing="ij")
    expected = torch.tensor(
        [[pi * math.log(pi / qi) + (1 - pi) * math.log((1 - pi) / (1 - qi)) for qi in grid.tolist()]
         for pi in grid.tolist()],
        dtype=torch.float64,
    )
    assert_close(bernoulli_kl(p, q), expected, rtol=1e-12, atol=1e-15)


def test_aggregate_modes_by_hand():
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, math.inf, -math.inf]], dtype=torch.float64)
    mask = torch.tensor([[True, True, True], [True, False, False]])
    expected = {
        "sample_mean": (2.0 + 4.0) / 2,
        "token_mean": 10.0 / 4,
        "seq_mean_token_sum": 10.0 / 2,
        "seq_mean_token_sum_norm": 10.0 / (2 * 3),
    }
    for mode, value in expected.items():
        assert_close(aggregate(values, mask, mode), torch.tensor(value, dtype=torch.float64))
    assert_close(aggregate(values, mask, "token_mean", num_tokens=8), torch.tensor(10.0 / 8, dtype=torch.float64))
    assert_close(aggregate(values, mask, "sample_mean", num_sequences=4), torch.tensor(6.0 / 4, dtype=torch.float64))
    assert_close(
        aggregate(values, mask, "seq_mean_token_sum_norm", max_tokens=10), torch.tensor(10.0 / 20, dtype=torch.float64)
    )


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_inputs_are_computed_in_float32(dtype):
    current, behavior, rewards, mask = make_batch(drift=0.01)
    lp = current.detach().to(dtype).requires_grad_(True)
    loss, stats = flash_reinforce_loss(lp, behavior.to(dtype), rewards.float(), mask)
    assert loss.dtype == torch.float32 and stats["sequence_kl"].dtype == torch.float32
    (grad,) = torch.autograd.grad(loss, lp)
    assert grad.dtype == dtype and torch.isfinite(grad).all()


def test_float64_stays_float64():
    current, behavior, rewards, mask = make_batch()
    loss, stats = flash_reinforce_loss(current, behavior, rewards, mask)
    assert loss.dtype == torch.float64 and stats["ratio_mean"].dtype == torch.float64


@pytest.mark.parametrize("std_eps", [1e-6, 1e-4, 0.5])
def test_grpo_std_eps_is_the_epsilon_added_to_the_group_std(std_eps):
    current, behavior, rewards, mask = make_batch()
    groups = torch.tensor([0, 0, 0, 1, 1, 2])
    _, stats = grpo_loss(current, behavior, rewards, mask, groups, std_eps=std_eps)
    assert_close(stats["advantages"], group_normalized_by_hand(rewards.tolist(), groups.tolist(), eps=std_eps),
                 rtol=1e-12, atol=1e-15)


def test_get_loss_returns_the_row_that_calls_the_public_function():
    loss_fn = get_loss("dr_grpo")
    assert loss_fn is LOSSES["dr_grpo"] and loss_fn.loss is grpo_loss
    assert loss_fn.resolved()["aggregation"] == "seq_mean_token_sum_norm"
    assert get_loss("flash_reinforce").loss is flash_reinforce_loss and get_loss("flash_reinforce").options == {}


def test_log_ratio_clamp_keeps_the_clamped_weight_for_reinforce_terms_and_zeroes_ppo_outside_the_cap():
    """The cap caps the value: a REINFORCE-style token keeps −clamp(ρ)·A·u; PPO's live ratio has zero gradient."""
    current, behavior, rewards, mask = make_batch()
    far = behavior.clone()
    far[0, 0] = current[0, 0].detach() - 5.0  # log ρ = 5 > cap 2
    adv = batch_centered_by_hand(rewards)
    loss, stats = correction_loss(current, far, mask, adv, correction="no_gate", log_ratio_clamp=2.0)
    (grad,) = torch.autograd.grad(loss, current)
    assert int(stats["num_log_ratio_clamped"]) == 1
    assert_close(grad[0, 0], torch.tensor(-math.exp(2.0) * float(adv[0]) / (B * LENGTHS[0]), dtype=torch.float64))
    loss, _ = correction_loss(current, far, mask, adv, correction="ppo_clip", log_ratio_clamp=2.0, clip_eps=0.99)
    (grad,) = torch.autograd.grad(loss, current)
    assert float(grad[0, 0]) == 0.0 and float(grad[0, 1]) != 0.0


@pytest.mark.parametrize("dtype, bug", [(torch.bfloat16, 4.5e-3), (torch.float16, 4.9e-4)])
def test_half_precision_rewards_are_promoted_before_the_baseline(dtype, bug):
    """The issue's case: 0/1-like rewards in bf16 centred in bf16 were off by up to ``bug``."""
    g = torch.Generator().manual_seed(0)
    rewards = (torch.rand(512, generator=g, dtype=torch.float64) * 3).to(dtype)
    current = torch.full((512, 1), -0.5, dtype=torch.float64)
    _, stats = flash_reinforce_loss(current, current, rewards, torch.ones(512, 1, dtype=torch.bool))
    exact = rewards.double() - rewards.double().mean()
    unpromoted = (rewards - rewards.mean()).double()
    assert float((unpromoted - exact).abs().max()) > bug / 10  # the bug this guards against is visible here
    assert_close(stats["advantages"], exact, rtol=0, atol=1e-12)
