"""The loss registry: every entry of ``LOSSES`` runs on any batch of the strategy and keeps its contract."""

import torch
from hypothesis import given
from hypothesis import strategies as st

from flashsim.losses import CORRECTIONS, LOSSES, get_loss
from flashsim.testing import aggregations, evaluate_loss, filter_inputs, loss_batches, loss_names

# The stats documented in flashsim.losses.policy_loss (Returns).
PER_TRAJECTORY_STATS = ("advantages", "sequence_kl", "admitted")
SCALAR_STATS = (
    "loss", "acceptance_rate", "token_acceptance_rate", "ess", "ess_fraction", "clip_fraction",
    "ratio_min", "ratio_mean", "ratio_max", "num_log_ratio_clamped",
)


@given(loss_batches(max_drift=2.0), loss_names(registry_only=True), aggregations() | st.none())
def test_every_registered_loss_gives_a_finite_loss_gradient_and_the_documented_stats(batch, name, aggregation):
    options = {} if aggregation is None else {"aggregation": aggregation}
    loss, gradient, stats = evaluate_loss(name, batch, **options)
    assert loss.dim() == 0 and torch.isfinite(loss)
    assert gradient.shape == batch.log_probs.shape and torch.isfinite(gradient).all()
    assert set(PER_TRAJECTORY_STATS + SCALAR_STATS) | {"token_kept"} <= stats.keys()
    for key in PER_TRAJECTORY_STATS:
        assert stats[key].shape == (batch.batch_size,), key
    for key in SCALAR_STATS:
        assert stats[key].dim() == 0, key
    assert stats["token_kept"].shape == batch.action_mask.shape
    assert not any(value.requires_grad for value in stats.values())
    assert torch.equal(stats["loss"], loss)
    assert 0.0 <= float(stats["acceptance_rate"]) <= 1.0 and 0.0 <= float(stats["clip_fraction"]) <= 1.0
    assert 0.0 < float(stats["ess_fraction"]) <= 1.0 + 1e-12


@given(loss_batches(), loss_names(registry_only=True), st.sampled_from(CORRECTIONS), aggregations())
def test_every_registered_loss_accepts_any_correction_and_aggregation_override(batch, name, correction, aggregation):
    loss, _, stats = evaluate_loss(name, batch, correction=correction, aggregation=aggregation)
    assert torch.isfinite(loss)
    assert stats["advantages"].shape == (batch.batch_size,)


COMPOSED = {("batch_centered", "sequence_gate"): "flash_reinforce_loss", ("group_normalized", "ppo_clip"): "grpo_loss"}
SAME_AXES = [name for name, spec in LOSSES.items() if (spec.advantage, spec.correction) in COMPOSED]


@given(loss_batches(), st.sampled_from(SAME_AXES))
def test_a_registered_loss_is_the_composed_loss_with_the_same_axes(batch, name):
    """The registry only picks a combination of axes: the same axes through flash/grpo give the same loss."""
    spec = get_loss(name).spec
    assert spec is LOSSES[name]
    same_filter = {"negative_token_fraction": spec.negative_token_fraction, **filter_inputs(batch)}
    expected_loss, expected_gradient, _ = evaluate_loss(
        COMPOSED[spec.advantage, spec.correction], batch, aggregation=spec.aggregation,
        **(same_filter if spec.needs_entropies else {}),
    )
    loss, gradient, _ = evaluate_loss(name, batch)
    assert torch.equal(loss, expected_loss) and torch.equal(gradient, expected_gradient)


def test_the_registry_has_losses_that_match_each_composed_loss():
    assert {"flash_reinforce", "token_mean", "grpo"} <= set(SAME_AXES)
