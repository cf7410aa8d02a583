"""flashsim's own losses against ``flashsim.testing``'s invariants: every registry row, every aggregation.

The invariants are written once, in :mod:`flashsim.testing.invariants`, where ``check_loss`` runs them on
a user's loss. Here they run on every row of ``LOSSES`` under every aggregation mode, for the invariants
that hold whatever the formula (the formula-specific ones, on-policy and off-policy gradients, run on
``flash_reinforce_loss`` and ``grpo_loss`` in ``tests/testing/test_check_loss.py``). The other files of
this folder keep what the invariants do not say: the stats, exact zeros, the helpers.
"""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from flashsim.losses import (
    AGGREGATIONS,
    LOSSES,
    batch_centered,
    group_centered,
    group_normalized,
    leave_one_out,
    positive_only,
)
from flashsim.testing import INVARIANTS, get_convention
from flashsim.testing.declared import declared
from flashsim.testing.invariants import Case, Context

ESTIMATOR_NAMES = {batch_centered: "batch_mean", group_normalized: "group_mean_std", group_centered: "group_mean",
                   leave_one_out: "rloo", positive_only: "none"}
"""Each registry estimator by its name in ``flashsim.testing.declared`` (a row declares what it computes)."""

WITH_BASELINE = [name for name in LOSSES if name != "positive_only"]  # A = R: constant R is a signal by design
GROUPED = [name for name, spec in LOSSES.items() if spec.group_size > 1]
APPLIES_TO = {
    "permutation": list(LOSSES),
    "padding": list(LOSSES),
    "shards": list(LOSSES),
    "precision": list(LOSSES),
    "no_gradient_to_behavior": list(LOSSES),
    "constant_rewards": WITH_BASELINE,
    "single_rollout_groups": GROUPED,
}
CASES = [(invariant, name) for invariant in INVARIANTS if invariant.name in APPLIES_TO
         for name in APPLIES_TO[invariant.name]]


def row(name: str, aggregation: str):
    """Registry row ``name`` with ``aggregation``, called as a user's flashsim-convention loss would be."""
    spec = LOSSES[name]

    def loss(log_probs, behavior_log_probs, rewards, action_mask, group_ids=None, **options):
        if spec.needs_entropies():  # the entropy filter's inputs, each row's from that row alone
            options |= {"entropies": torch.where(action_mask, -behavior_log_probs.detach(), 0.0),
                        "failures": rewards.detach() <= 0}
        return spec(log_probs, behavior_log_probs, rewards, action_mask, group_ids, aggregation=aggregation,
                    **options)

    return loss


def test_every_formula_free_invariant_is_run_and_every_row_is_covered():
    assert set(APPLIES_TO) <= {invariant.name for invariant in INVARIANTS}
    assert {name for _, name in CASES} == set(LOSSES)


@pytest.mark.parametrize("invariant, name", CASES, ids=[f"{i.name}-{n}" for i, n in CASES])
@given(data=st.data(), aggregation=st.sampled_from(AGGREGATIONS))
def test_every_registered_loss_keeps_the_invariants_that_hold_whatever_the_formula(invariant, name, data,
                                                                                   aggregation):
    promise = declared(name, None, aggregation, ESTIMATOR_NAMES[LOSSES[name].advantage], 1e-6)
    context = Context(row(name, aggregation), get_convention("flashsim"), name, delta=3e-3, clip_eps=0.2,
                      std_eps=1e-6, declared=promise)
    invariant.check(context, Case(data))
