"""The loss registry: every entry of ``LOSSES`` runs on any batch of the strategy and keeps its contract."""

import torch
from hypothesis import given
from hypothesis import strategies as st

from flashsim.losses import GATES, LOSSES, flash_reinforce_loss, get_loss, grpo_loss
from flashsim.testing import aggregations, evaluate_loss, filter_inputs, loss_batches, loss_names

# The stats documented in flashsim.losses.flash_reinforce_loss and grpo_loss (Returns): GRPO has PPO's clip
# and no gate, FlashREINFORCE a gate and the TIS cap.
SHARED_SCALARS = ("loss", "token_acceptance_rate", "ess", "ess_fraction", "ratio_min", "ratio_mean", "ratio_max",
                  "num_log_ratio_clamped")
PER_TRAJECTORY_STATS = {flash_reinforce_loss: ("advantages", "sequence_kl", "admitted"),
                        grpo_loss: ("advantages", "sequence_kl")}
SCALAR_STATS = {flash_reinforce_loss: (*SHARED_SCALARS, "acceptance_rate", "tis_capped_fraction"),
                grpo_loss: (*SHARED_SCALARS, "clip_fraction")}


@given(loss_batches(max_drift=2.0), loss_names(registry_only=True), aggregations() | st.none())
def test_every_registered_loss_gives_a_finite_loss_gradient_and_the_documented_stats(batch, name, aggregation):
    options = {} if aggregation is None else {"aggregation": aggregation}
    loss, gradient, stats = evaluate_loss(name, batch, **options)
    assert loss.dim() == 0 and torch.isfinite(loss)
    assert gradient.shape == batch.log_probs.shape and torch.isfinite(gradient).all()
    function = LOSSES[name].loss
    assert set(PER_TRAJECTORY_STATS[function] + SCALAR_STATS[function]) | {"token_kept"} == stats.keys()
    for key in PER_TRAJECTORY_STATS[function]:
        assert stats[key].shape == (batch.batch_size,), key
    for key in SCALAR_STATS[function]:
        assert stats[key].dim() == 0, key
    assert stats["token_kept"].shape == batch.action_mask.shape
    assert not any(value.requires_grad for value in stats.values())
    assert torch.equal(stats["loss"], loss)
    for key in ("acceptance_rate", "clip_fraction", "tis_capped_fraction"):
        assert key not in stats or 0.0 <= float(stats[key]) <= 1.0, key
    assert 0.0 < float(stats["ess_fraction"]) <= 1.0 + 1e-12


@given(loss_batches(), loss_names(registry_only=True), st.sampled_from(GATES), aggregations())
def test_every_registered_loss_accepts_an_aggregation_override_and_flash_rows_a_gate(batch, name, gate, aggregation):
    options = {"aggregation": aggregation} | ({"gate": gate} if LOSSES[name].loss is flash_reinforce_loss else {})
    loss, _, stats = evaluate_loss(name, batch, **options)
    assert torch.isfinite(loss)
    assert stats["advantages"].shape == (batch.batch_size,)


@given(loss_batches(), loss_names(registry_only=True))
def test_a_registered_loss_is_its_public_function_with_its_options_and_advantages(batch, name):
    """A row is data: calling it is calling flash_reinforce_loss or grpo_loss, bit for bit."""
    spec = get_loss(name)
    leaf = batch.leaf()
    extra = filter_inputs(batch) if spec.needs_entropies() else {}
    advantages = spec.advantage(batch.rewards, batch.group_ids)
    expected, _ = spec.loss(leaf, batch.behavior_log_probs, None, batch.action_mask, advantages=advantages,
                            **spec.options, **extra)
    (expected_gradient,) = torch.autograd.grad(expected, leaf)
    loss, gradient, _ = evaluate_loss(name, batch)
    assert torch.equal(loss, expected.detach()) and torch.equal(gradient, expected_gradient)


def test_every_row_calls_one_of_the_two_public_losses():
    assert {spec.loss for spec in LOSSES.values()} == {flash_reinforce_loss, grpo_loss}
