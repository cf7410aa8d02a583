"""The loss is its formula: plain autograd, checked against a second, independent transcription.

Converted from the tests of the former fast path (a fused token pass with a closed-form gradient in a
custom autograd Function, removed in issue 9). What still means something without it is kept:

- every correction × aggregation equals ``plain_autograd_loss`` below (DESIGN.md's formulas written
  once more, op by op) to 1e-12 in float64, loss and gradient;
- ``torch.autograd.gradcheck`` accepts the loss wherever its value and its gradient agree;
- rejected rows, empty rows and overflowing ratios of rejected rows leave no trace in the gradient;
- the stats equal the public helpers that define them.

What no longer applies was deleted: the bit-select and log-domain-KL helpers, the row blocking, and
the refusal of double backward (plain autograd supports it; a test now says so).
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest
import torch
from torch.testing import assert_close

from flashsim.losses import AGGREGATIONS, bernoulli_kl, sampled_action_kl, sequence_mean
from flashsim.testing import random_loss_batch
from tests.corrections import CORRECTIONS, correction_loss

TIGHT = {"rtol": 1e-12, "atol": 1e-15}
DELTA, CLIP, TIS_CAP, BAND = 4e-3, 0.2, 1.2, (0.8, 1.25)


def plain_autograd_loss(log_probs, behavior, mask, advantages, *, correction, aggregation, importance_sampling=True):
    """DESIGN.md's formula op by op: ratio, KL, gate or clip, aggregation weights, loss (autograd does ∇)."""
    lp = torch.where(mask, log_probs, 0.0)
    blp = torch.where(mask, behavior, 0.0)
    ratio = torch.exp(lp.detach() - blp)
    token_kl = torch.where(mask, bernoulli_kl(torch.exp(blp), torch.exp(lp.detach())), 0.0)
    lengths = mask.sum(dim=1).to(lp.dtype)
    batch = mask.shape[0]
    outer = {
        "sample_mean": 1 / (lengths * batch), "token_mean": torch.ones(batch, dtype=lp.dtype) / lengths.sum(),
        "seq_mean_token_sum": torch.ones(batch, dtype=lp.dtype) / batch,
        "seq_mean_token_sum_norm": torch.ones(batch, dtype=lp.dtype) / (batch * mask.shape[1]),
    }[aggregation][:, None]
    adv = advantages[:, None]
    if correction == "ppo_clip":
        ratio = torch.exp(lp - blp)  # PPO's ratio carries the gradient
        surrogate = torch.minimum(ratio * adv, ratio.clamp(1 - CLIP, 1 + CLIP) * adv)
        return -torch.where(mask, surrogate * outer, 0.0).sum()
    weight = ratio if importance_sampling else torch.ones_like(ratio)
    keep = mask
    if correction == "flash_reinforce":
        keep = mask & ((token_kl.sum(dim=1) / lengths) <= DELTA)[:, None]
    elif correction == "token_gate":
        keep = mask & (token_kl <= DELTA)
    elif correction == "tis":
        weight = ratio.clamp(max=TIS_CAP)
    elif correction == "ratio_mask":
        keep = mask & (ratio >= BAND[0]) & (ratio <= BAND[1])
    return -torch.where(keep, weight * adv * lp * outer, 0.0).sum()


def library_loss(log_probs, behavior, mask, advantages, *, correction, aggregation, **options):
    return correction_loss(log_probs, behavior, mask, advantages, correction=correction, aggregation=aggregation,
                           **knobs(correction, delta=DELTA, tis_cap=TIS_CAP, ratio_bounds=BAND), **options)


def knobs(correction, *, delta, tis_cap=2.0, ratio_bounds=(0.5, 2.0)):
    """The hyperparameters that ``correction`` takes: PPO's clip, or δ plus its own cap or band."""
    if correction == "ppo_clip":
        return {"clip_eps": CLIP}
    return {"delta": delta} | {"tis": {"tis_cap": tis_cap}, "ratio_mask": {"ratio_bounds": ratio_bounds}}.get(
        correction, {})


def stale_batch(seed=0, batch_size=12, width=9, drift=0.5):
    batch = random_loss_batch(torch.Generator().manual_seed(seed), batch_size=batch_size, width=width, drift=drift)
    advantages = batch.rewards - batch.rewards.mean() + 0.1 * torch.arange(batch_size, dtype=torch.float64)
    return batch, advantages


def gradient_of(loss_fn, batch, advantages, **options):
    leaf = batch.leaf()
    loss = loss_fn(leaf, batch.behavior_log_probs, batch.action_mask, advantages, **options)
    loss = loss[0] if isinstance(loss, tuple) else loss
    (gradient,) = torch.autograd.grad(loss, leaf)
    return loss.detach(), gradient


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
@pytest.mark.parametrize("correction", CORRECTIONS)
def test_the_loss_equals_the_plain_autograd_formula_in_float64(correction, aggregation):
    batch, advantages = stale_batch()
    options = {"correction": correction, "aggregation": aggregation}
    loss, gradient = gradient_of(library_loss, batch, advantages, **options)
    expected_loss, expected_gradient = gradient_of(plain_autograd_loss, batch, advantages, **options)
    assert_close(loss, expected_loss, **TIGHT)
    assert_close(gradient, expected_gradient, **TIGHT)


@pytest.mark.parametrize("correction", ["flash_reinforce", "token_gate", "no_gate", "ratio_mask"])
def test_the_loss_equals_the_plain_formula_without_importance_sampling(correction):
    batch, advantages = stale_batch(seed=1)
    options = {"correction": correction, "aggregation": "sample_mean", "importance_sampling": False}
    loss, gradient = gradient_of(library_loss, batch, advantages, **options)
    expected_loss, expected_gradient = gradient_of(plain_autograd_loss, batch, advantages, **options)
    assert_close(loss, expected_loss, **TIGHT)
    assert_close(gradient, expected_gradient, **TIGHT)


def test_the_test_batch_exercises_rejection_clipping_capping_and_padding_junk():
    batch, advantages = stale_batch()
    _, gate = library_loss(batch.log_probs, batch.behavior_log_probs, batch.action_mask, advantages,
                           correction="flash_reinforce", aggregation="sample_mean")
    _, clip = library_loss(batch.log_probs, batch.behavior_log_probs, batch.action_mask, advantages,
                           correction="ppo_clip", aggregation="sample_mean")
    _, tis = library_loss(batch.log_probs, batch.behavior_log_probs, batch.action_mask, advantages,
                          correction="tis", aggregation="sample_mean")
    assert 0 < int(gate["admitted"].sum()) < batch.batch_size
    assert 0 < float(clip["clip_fraction"]) < 1 and 0 < float(tis["tis_capped_fraction"]) < 1
    assert not bool(torch.isfinite(batch.log_probs[~batch.action_mask]).all())


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
@pytest.mark.parametrize(
    "correction, options",
    [
        ("ppo_clip", {}),  # the ratio carries the gradient: value and gradient agree away from the clip's kinks
        ("ppo_clip", {"log_ratio_clamp": 0.3}),
        ("flash_reinforce", {"importance_sampling": False}),  # without IS the loss is linear in log π
        ("token_gate", {"importance_sampling": False}),
        ("no_gate", {"importance_sampling": False}),
        ("ratio_mask", {"importance_sampling": False}),
        ("tis", {"tis_cap": 1e-3}),  # every ratio capped: the weight is the constant C
    ],
    ids=["ppo_clip", "ppo_clip-log-ratio-clamp", "flash_reinforce", "token_gate", "no_gate", "ratio_mask",
         "tis-capped"],
)
def test_gradcheck_accepts_the_loss_wherever_its_value_and_gradient_agree(correction, options, aggregation):
    batch, advantages = stale_batch(seed=2, batch_size=5, width=4, drift=0.4)
    behavior, mask = batch.behavior_log_probs, batch.action_mask

    def loss(log_probs):
        return correction_loss(log_probs, behavior, mask, advantages, correction=correction, aggregation=aggregation,
                               **(knobs(correction, delta=0.05, ratio_bounds=(0.7, 1.4)) | options))[0]

    assert torch.autograd.gradcheck(loss, (batch.leaf(),), eps=1e-7, atol=1e-9)


def test_double_backward_works_and_a_loss_linear_in_log_pi_has_zero_second_derivative():
    """Plain autograd supports a Hessian-vector product (the former fused Function refused it)."""
    batch, advantages = stale_batch()
    leaf = batch.leaf()
    loss, _ = correction_loss(leaf, batch.behavior_log_probs, batch.action_mask, advantages,
                              correction="flash_reinforce", importance_sampling=False)
    (gradient,) = torch.autograd.grad(loss, leaf, create_graph=True)
    assert not gradient.requires_grad  # w · A · u does not depend on log π: the Hessian is zero
    loss, _ = correction_loss(leaf, batch.behavior_log_probs, batch.action_mask, advantages, correction="ppo_clip")
    (gradient,) = torch.autograd.grad(loss, leaf, create_graph=True)
    (second,) = torch.autograd.grad(gradient.sum(), leaf)
    assert_close(second, gradient, **TIGHT)  # d/dℓ (−r A u) = −r A u where the clip is inactive, 0 where active


def test_a_row_without_policy_tokens_adds_nothing_when_validation_is_off():
    batch, advantages = stale_batch()
    mask = batch.action_mask.clone()
    mask[3] = False
    leaf = batch.leaf()
    loss, stats = correction_loss(leaf, batch.behavior_log_probs, mask, advantages, correction="flash_reinforce",
                                  validate=False)
    loss.backward()
    assert torch.isfinite(loss) and bool(torch.isfinite(leaf.grad).all())
    assert torch.equal(leaf.grad[3], torch.zeros_like(leaf.grad[3]))
    assert math.isnan(float(stats["sequence_kl"][3]))


def test_an_overflowing_ratio_on_a_rejected_trajectory_gives_it_zero_gradient():
    """The gate must shield the update from a trajectory it rejects, even one whose ratio is inf."""
    batch, advantages = stale_batch()
    behavior = batch.behavior_log_probs.clone()
    row, token = 0, int(batch.action_mask[0].nonzero()[0])
    behavior[row, token] = batch.log_probs[row, token] - 800.0  # ρ = e^800 = inf, KL huge: rejected
    leaf = batch.leaf()
    loss, stats = correction_loss(leaf, behavior, batch.action_mask, advantages, correction="flash_reinforce")
    loss.backward()
    assert not bool(stats["admitted"][row]) and torch.isfinite(loss)
    assert torch.equal(leaf.grad[row], torch.zeros_like(leaf.grad[row]))


def test_sampled_action_kl_and_sequence_mean_reproduce_the_loss_stats_exactly():
    batch, advantages = stale_batch(batch_size=7)
    _, stats = correction_loss(batch.log_probs, batch.behavior_log_probs, batch.action_mask, advantages,
                               correction="flash_reinforce")
    token_kl = sampled_action_kl(batch.log_probs, batch.behavior_log_probs, batch.action_mask)
    assert torch.equal(sequence_mean(token_kl, batch.action_mask), stats["sequence_kl"])


def test_the_loss_benchmark_runs_and_checks_the_formula_against_the_previous_loss(capsys):
    """benchmarks/bench_losses.py at a tiny size: it must check both losses agree before timing them."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_losses.py"
    spec = importlib.util.spec_from_file_location("bench_losses", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    bench.main(["loss", "--batch", "16", "--tokens", "64", "--repeats", "1", "--warmup", "0", "--calls", "1"])
    output = capsys.readouterr().out
    assert "| flash formula validate=False |" in output and "| grpo formula validate=True |" in output
