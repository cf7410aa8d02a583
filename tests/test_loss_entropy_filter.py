"""The negative-token entropy filter: hand-computed float64 cases, ties, rejected rows, shards, bad input.

With q = ``negative_token_fraction`` < 1, a failed trajectory keeps only its ⌈q·T_i⌉ highest-entropy
policy tokens (equal entropies: the earlier position first); the dropped tokens get weight 0, the
trajectory keeps its 1/T_i and its place in B. The expectations below are written token by token.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from flashsim.losses import batch_centered, flash_reinforce_loss, get_loss, negative_token_filter
from flashsim.testing import evaluate_loss, evaluate_sharded_loss, filter_inputs, random_loss_batch
from tests.corrections import correction_loss

TIGHT = {"rtol": 1e-12, "atol": 1e-15}
NAN = math.nan
LENGTHS = [5, 3, 4]
ENTROPIES = torch.tensor([
    [0.5, 0.9, 0.1, 0.9, 0.3],  # failed: two tokens tie at the top
    [0.1, 0.2, 0.3, NAN, NAN],  # succeeded: always keeps all three
    [0.2, 0.2, 0.2, 0.2, NAN],  # failed: four equal entropies
], dtype=torch.float64)
FAILURES = torch.tensor([True, False, True])
MASK = torch.arange(5)[None, :] < torch.tensor(LENGTHS)[:, None]

# Kept positions of each row, by hand: ⌈q·T_i⌉ of a failed row, the highest entropies, ties by position.
KEPT_BY_HAND = {
    0.0: [[], [0, 1, 2], []],
    0.2: [[1], [0, 1, 2], [0]],  # ⌈1.0⌉ = 1 and ⌈0.8⌉ = 1: of the tied 0.9s the earlier (position 1)
    0.3: [[1, 3], [0, 1, 2], [0, 1]],  # ⌈1.5⌉ = 2, ⌈1.2⌉ = 2
    1.0: [[0, 1, 2, 3, 4], [0, 1, 2], [0, 1, 2, 3]],
}


def batch(drift: float = 0.05, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    behavior = torch.log(torch.rand(3, 5, generator=g, dtype=torch.float64) * 0.8 + 0.1)
    current = (behavior + drift * torch.randn(3, 5, generator=g, dtype=torch.float64)).clamp(max=-1e-3)
    behavior = torch.where(MASK, behavior, NAN)
    current = torch.where(MASK, current, NAN).requires_grad_(True)
    rewards = torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64)
    return current, behavior, rewards


def expected_gradient(current, behavior, kept_rows, admitted=(True, True, True)):
    """−∂L/∂log π_it = ρ_it · A_i / (B · T_i) on kept tokens of admitted rows (sample-mean, batch-centred A)."""
    advantages = [-1 / 3, 2 / 3, -1 / 3]
    grad = torch.zeros(3, 5, dtype=torch.float64)
    for i, positions in enumerate(kept_rows):
        for t in positions if admitted[i] else []:
            rho = math.exp(float(current[i, t]) - float(behavior[i, t]))
            grad[i, t] = -rho * advantages[i] / (3 * LENGTHS[i])
    return grad


@pytest.mark.parametrize("q", sorted(KEPT_BY_HAND))
def test_the_filter_keeps_the_hand_counted_tokens(q):
    kept = negative_token_filter(ENTROPIES, FAILURES, MASK, q)
    expected = torch.zeros(3, 5, dtype=torch.bool)
    for i, positions in enumerate(KEPT_BY_HAND[q]):
        expected[i, positions] = True
    assert torch.equal(kept, expected)


@pytest.mark.parametrize("q", sorted(KEPT_BY_HAND))
def test_the_gradient_of_a_filtered_loss_matches_the_formula_token_by_token(q):
    current, behavior, rewards = batch()
    loss, stats = flash_reinforce_loss(
        current, behavior, rewards, MASK, delta=math.inf, negative_token_fraction=q, entropies=ENTROPIES,
        failures=FAILURES,
    )
    (grad,) = torch.autograd.grad(loss, current)
    assert_close(grad, expected_gradient(current.detach(), behavior, KEPT_BY_HAND[q]), **TIGHT)
    kept_count = sum(len(positions) for positions in KEPT_BY_HAND[q])
    assert_close(stats["token_acceptance_rate"], torch.tensor(kept_count / sum(LENGTHS), dtype=torch.float64))


def test_q_of_one_is_the_base_method_and_needs_no_entropies():
    current, behavior, rewards = batch()
    base, _ = flash_reinforce_loss(current, behavior, rewards, MASK)
    with_inputs, _ = flash_reinforce_loss(current, behavior, rewards, MASK, negative_token_fraction=1.0,
                                          entropies=ENTROPIES, failures=FAILURES)
    assert torch.equal(base, with_inputs)


def test_a_rejected_failed_row_stays_rejected_and_the_others_keep_their_filtered_gradient():
    current, behavior, rewards = batch(drift=0.0)
    current = (current.detach() - 0.5 * torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64)[:, None]).requires_grad_()
    _, stats = flash_reinforce_loss(current, behavior, rewards, MASK, delta=math.inf)
    delta = float(stats["sequence_kl"][0]) / 2  # row 0 (failed, drifted) is rejected; rows 1, 2 are on-policy
    loss, stats = flash_reinforce_loss(current, behavior, rewards, MASK, delta=delta, negative_token_fraction=0.3,
                                       entropies=ENTROPIES, failures=FAILURES)
    (grad,) = torch.autograd.grad(loss, current)
    assert stats["admitted"].tolist() == [False, True, True]
    expected = expected_gradient(current.detach(), behavior, KEPT_BY_HAND[0.3], admitted=(False, True, True))
    assert_close(grad, expected, **TIGHT)


@pytest.mark.parametrize("correction", ["tis", "token_gate", "ratio_mask", "no_gate"])
def test_every_correction_gives_dropped_tokens_exactly_zero_gradient(correction):
    current, behavior, rewards = batch(drift=0.3)
    advantages = torch.tensor([-0.5, 1.0, -0.5], dtype=torch.float64)
    loss, stats = correction_loss(current, behavior, MASK, advantages, correction=correction,
                                  negative_token_fraction=0.3, entropies=ENTROPIES, failures=FAILURES)
    (grad,) = torch.autograd.grad(loss, current)
    dropped = MASK & ~negative_token_filter(ENTROPIES, FAILURES, MASK, 0.3)
    assert torch.equal(grad[dropped], torch.zeros_like(grad[dropped]))
    assert not bool((stats["token_kept"] & dropped).any())


def test_shards_with_global_advantages_and_denominators_add_up_with_the_filter():
    data = random_loss_batch(torch.Generator().manual_seed(3), batch_size=10, width=6, drift=0.3, group_size=2)
    shards = [torch.tensor([0, 7, 3]), torch.tensor([1, 2]), torch.tensor([4, 5, 6, 8, 9])]
    for aggregation in ("sample_mean", "token_mean"):
        loss, gradient, stats = evaluate_loss("entropy_filter", data, aggregation=aggregation, delta=math.inf)
        total, shard_gradient, _ = evaluate_sharded_loss("entropy_filter", data, shards, aggregation=aggregation,
                                                         delta=math.inf)
        assert_close(total, loss, **TIGHT)
        assert_close(shard_gradient, gradient, **TIGHT)
    assert float(stats["token_acceptance_rate"]) < 1  # the filter did drop tokens


def test_the_registry_entry_is_flash_reinforce_with_q_of_one_fifth():
    data = random_loss_batch(torch.Generator().manual_seed(4), batch_size=8, width=5, drift=0.1)
    spec = get_loss("entropy_filter")
    assert (spec.loss, spec.advantage, spec.options) == (flash_reinforce_loss, batch_centered,
                                                         {"negative_token_fraction": 0.2})
    loss, gradient, _ = evaluate_loss("entropy_filter", data)
    expected, expected_gradient, _ = evaluate_loss("flash_reinforce_loss", data, negative_token_fraction=0.2,
                                                   **filter_inputs(data))
    assert torch.equal(loss, expected) and torch.equal(gradient, expected_gradient)


BAD = [
    ("q above one", {"negative_token_fraction": 1.5}, ValueError, "negative_token_fraction must lie in"),
    ("q negative", {"negative_token_fraction": -0.1}, ValueError, "negative_token_fraction must lie in"),
    ("no entropies", {"negative_token_fraction": 0.3, "entropies": None}, ValueError,
     "needs entropies .* entropies not given"),
    ("no failures", {"negative_token_fraction": 0.3, "failures": None}, ValueError, "failures not given"),
    ("failures not bool", {"failures": torch.tensor([1.0, 0.0, 1.0], dtype=torch.float64)}, TypeError,
     "failures must have dtype torch.bool"),
    ("failures wrong shape", {"failures": torch.tensor([True, False])}, ValueError, r"failures must have shape \[B\]"),
    ("entropies wrong shape", {"entropies": torch.zeros(3, 4)}, ValueError, "entropies must have the shape"),
    ("NaN entropy on a policy token", {"entropies": torch.where(MASK, NAN, 0.0)}, ValueError,
     "entropies must be finite on policy tokens"),
]


@pytest.mark.parametrize("change, error, message", [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_bad_filter_inputs_are_named(change, error, message):
    current, behavior, rewards = batch()
    options = {"negative_token_fraction": 0.3, "entropies": ENTROPIES, "failures": FAILURES} | change
    with pytest.raises(error, match=message):
        flash_reinforce_loss(current, behavior, rewards, MASK, **options)


def test_the_registry_entry_without_entropies_says_what_it_needs():
    current, behavior, rewards = batch()
    with pytest.raises(ValueError, match="negative_token_fraction=0.2 < 1 needs entropies"):
        get_loss("entropy_filter")(current, behavior, rewards, MASK)
