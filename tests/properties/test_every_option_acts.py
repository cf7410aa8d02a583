"""Every option a registry row offers acts, on the trainers' path exactly as in a direct call of its loss.

The trainers compute the advantages once per batch with the row's estimator
(:meth:`~flashsim.losses.LossSpec.compute_advantages`) and pass them with ``advantages=``. An option
that shapes the advantage must reach the estimator there too, or calling a row with it would silently
differ from calling the loss function with it (GRPO's ``scale_by_std``). For every row and every
option it offers (:func:`~flashsim.losses.check_loss_options` accepts it), one non-default value
must change the loss or its gradient on a fixed float64 batch, and the trainers' path, the row's own
path and the direct call must give bit-identical losses and gradients.
"""

import pytest
import torch

from flashsim.losses import (
    LOSSES,
    batch_centered,
    check_loss_options,
    flash_reinforce_loss,
    group_normalized,
    grpo_loss,
    inert_options,
)

OWN_ESTIMATOR = {flash_reinforce_loss: batch_centered, grpo_loss: group_normalized}
"""The advantage each loss computes itself from ``rewards`` (rows with another estimator pass ``advantages=``)."""


def non_default(name: str, current: object) -> object:
    """A value of option ``name`` other than ``current`` that acts on :func:`drifted_batch`."""
    others = {
        "delta": 0.0, "importance_sampling": False, "tis_cap": 1.002, "ratio_bounds": (0.998, 1.002),
        "max_tokens": 50, "log_ratio_clamp": 0.01, "negative_token_fraction": 0.5, "clip_eps": 0.05,
        "clip_eps_high": 0.01, "scale_by_std": False, "std_eps": 0.5,
        "gate": {"sequence": "token", "token": "none", "none": "sequence"}.get(current),
        "aggregation": "token_mean" if current != "token_mean" else "sample_mean",
    }
    value = others[name]
    return 0.6 if name == "negative_token_fraction" and current == 0.5 else value


def drifted_batch(seed: int = 0):
    """8 trajectories in 2 groups of 4, ragged lengths, a learner that drifted from μ by e^±0.005 to e^±0.4."""
    generator = torch.Generator().manual_seed(seed)
    B, T = 8, 6
    mu = torch.rand(B, T, generator=generator, dtype=torch.float64) * 0.9 + 0.05
    size = torch.tensor([0.02, 0.8, 0.05, 0.4, 0.01, 0.03, 0.8, 0.04], dtype=torch.float64)[:, None]
    drift = (torch.rand(B, T, generator=generator, dtype=torch.float64) - 0.5) * size  # some rows pass δ
    pi = (mu * drift.exp()).clamp(max=0.99)
    lengths = torch.tensor([6, 3, 5, 1, 4, 6, 2, 5])
    mask = torch.arange(T) < lengths[:, None]
    rewards = torch.rand(B, generator=generator, dtype=torch.float64) * 2 - 0.5
    return {
        "log_probs": pi.log(), "behavior_log_probs": mu.log(), "rewards": rewards, "action_mask": mask,
        "group_ids": torch.arange(B) // 4,
        "entropies": torch.rand(B, T, generator=generator, dtype=torch.float64),
        "failures": rewards < rewards.median(),
    }


def loss_and_gradient(call, batch, **keywords):
    leaf = batch["log_probs"].clone().requires_grad_(True)
    loss, _ = call(leaf, **keywords)
    (gradient,) = torch.autograd.grad(loss, leaf)
    return loss.detach(), gradient


def three_paths(name: str, options: dict, batch: dict):
    """(trainers' path, the row called with rewards, the loss function called directly), each (loss, gradient)."""
    spec = LOSSES[name]
    mu, rewards, mask, ids = batch["behavior_log_probs"], batch["rewards"], batch["action_mask"], batch["group_ids"]
    extra = {"entropies": batch["entropies"], "failures": batch["failures"]} if spec.needs_entropies(options) else {}
    advantages = spec.compute_advantages(rewards, ids, options)
    trainer = loss_and_gradient(lambda lp, **k: spec(lp, mu, rewards, mask, ids, advantages=advantages, **k),
                                batch, **options, **extra)
    row = loss_and_gradient(lambda lp, **k: spec(lp, mu, rewards, mask, ids, **k), batch, **options, **extra)
    groups = (ids,) if spec.loss is grpo_loss else ()
    if OWN_ESTIMATOR[spec.loss] is spec.advantage:
        direct = loss_and_gradient(lambda lp, **k: spec.loss(lp, mu, rewards, mask, *groups, **k), batch,
                                   **{**spec.options, **options}, **extra)
    else:  # an estimator the function has no option for: the same advantages, given
        given = spec.advantage(rewards, ids)
        direct = loss_and_gradient(lambda lp, **k: spec.loss(lp, mu, None, mask, *groups, advantages=given, **k),
                                   batch, **{**spec.options, **options}, **extra)
    return trainer, row, direct


CASES = [(name, option) for name, spec in LOSSES.items() for option in spec.configurable()
         if option not in inert_options(spec.resolved())]


@pytest.mark.parametrize(("name", "option"), CASES, ids=[f"{n}-{o}" for n, o in CASES])
def test_an_offered_option_changes_the_loss_as_a_direct_call_does_on_every_path(name, option):
    spec, batch = LOSSES[name], drifted_batch()
    value = non_default(option, spec.resolved()[option])
    options = check_loss_options(name, {option: value})
    trainer, row, direct = three_paths(name, options, batch)
    for path in (trainer, row):
        assert torch.equal(path[0], direct[0]) and torch.equal(path[1], direct[1])
    default = three_paths(name, {}, batch)[2]
    assert not (torch.equal(default[0], direct[0]) and torch.equal(default[1], direct[1])), (
        f"{name}: {option}={value!r} changed neither the loss nor its gradient")


def test_every_row_offers_options_and_every_loss_option_is_offered_somewhere():
    offered = {option for name, _ in CASES for option in [_]}
    assert {name for name, _ in CASES} == set(LOSSES)
    every = {"delta", "gate", "aggregation", "importance_sampling", "tis_cap", "ratio_bounds", "max_tokens",
             "log_ratio_clamp", "negative_token_fraction", "clip_eps", "clip_eps_high", "scale_by_std", "std_eps"}
    assert offered == every
