"""What a loss must not notice, beyond the invariants: DESIGN.md 3 (trajectory order) and 4 (padding).

The ``permutation`` and ``padding`` invariants check loss and gradient for every registry row
(``test_invariants_on_every_loss.py``); this file checks what they do not: the stats, and padding
columns added along the time axis. Run over every loss in :data:`flashsim.testing.LOSS_FUNCTIONS`
and every aggregation mode.
"""

import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.testing import assert_close

from flashsim.testing import PADDING_JUNK, aggregations, evaluate_loss, loss_batches, loss_names

PER_TRAJECTORY = ("advantages", "sequence_kl", "admitted")


@given(loss_batches(), loss_names(), aggregations(), st.data())
def test_permuting_trajectories_permutes_their_stats(batch, name, aggregation, data):
    """Invariant 3 for the stats (loss and gradient: the ``permutation`` invariant, test_invariants_on_every_loss)."""
    order = torch.tensor(data.draw(st.permutations(range(batch.batch_size)), label="order"))
    _, _, stats = evaluate_loss(name, batch, aggregation=aggregation)
    _, _, stats_p = evaluate_loss(name, batch.select(order), aggregation=aggregation)
    assert stats_p.keys() == stats.keys()
    for key in set(PER_TRAJECTORY) & stats.keys():  # GRPO has no gate: no admitted
        assert_close(stats_p[key], stats[key][order], rtol=1e-12, atol=1e-15)
    for key in ("acceptance_rate", "token_acceptance_rate", "clip_fraction", "tis_capped_fraction", "ess", "ratio_min",
                "ratio_max"):
        if key in stats:
            assert_close(stats_p[key], stats[key], rtol=1e-12, atol=1e-15)


@given(loss_batches(padding="junk"), loss_names(), aggregations(), st.sampled_from(PADDING_JUNK))
def test_whatever_padding_slots_hold_changes_no_stat(batch, name, aggregation, fill):
    """Invariant 4 for the stats: junk padding (NaN, ±inf, 1e30 ...) against the batch padded with ``fill``
    (loss and gradient: the ``padding`` invariant)."""
    _, _, stats = evaluate_loss(name, batch, aggregation=aggregation)
    _, _, stats_f = evaluate_loss(name, batch.with_padding(fill), aggregation=aggregation)
    assert stats.keys() == stats_f.keys()
    for key in stats:
        assert torch.equal(stats[key], stats_f[key]), key


@given(loss_batches(padding="zeros"), loss_names(), aggregations(), st.integers(1, 3))
def test_extra_padding_columns_change_neither_loss_nor_gradient(batch, name, aggregation, extra):
    """Invariant 4 along the time axis: wider tensors with junk-filled, masked-out slots."""
    def widen(x, fill):
        return torch.cat([x, torch.full((batch.batch_size, extra), fill, dtype=x.dtype)], dim=1)

    wide = type(batch)(
        widen(batch.log_probs, float("nan")), widen(batch.behavior_log_probs, float("inf")), batch.rewards,
        widen(batch.action_mask, False), batch.group_ids,
    )
    # seq_mean_token_sum_norm's T_max defaults to the width: pass the generation budget explicitly.
    options = {"aggregation": aggregation, "max_tokens": float(batch.width)}
    loss, gradient, _ = evaluate_loss(name, batch, **options)
    loss_w, gradient_w, _ = evaluate_loss(name, wide, **options)
    assert_close(loss_w, loss, rtol=1e-14, atol=1e-16)  # the sum over a wider tensor runs in another order
    assert torch.equal(gradient_w[:, : batch.width], gradient)
    assert torch.equal(gradient_w[:, batch.width :], torch.zeros_like(gradient_w[:, batch.width :]))
