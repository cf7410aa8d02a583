"""The sampled-action Bernoulli KL and the gates built on it: DESIGN.md invariants 7 and 8."""

import math

import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.testing import assert_close

from flashsim.losses import bernoulli_kl, negative_token_filter, sampled_action_kl, sequence_mean
from flashsim.testing import aggregations, evaluate_loss, loss_batches

CLAMP = 1e-6  # DESIGN.md: p and q are clamped to [1e-6, 1 − 1e-6] before the KL
EPS = torch.finfo(torch.float64).eps
probabilities = st.floats(0.0, 1.0) | st.sampled_from([0.0, 1e-7, CLAMP, 0.5, 1 - CLAMP, 1.0])


@st.composite
def nearly_equal_probabilities(draw) -> tuple[float, float]:
    """(p, q) a few ulps apart: the rounding of the two log terms can then outweigh the true KL."""
    p = draw(st.floats(CLAMP, 1 - CLAMP))
    return p, p * (1 + draw(st.integers(-64, 64)) * EPS)
thresholds = st.floats(0.0, 0.5) | st.sampled_from([0.0, 3e-3, math.inf])


def clamp(x: float) -> float:
    return min(max(x, CLAMP), 1 - CLAMP)


def closed_form_terms(p: float, q: float) -> tuple[float, float]:
    """The two terms of KL(Bern(p) ‖ Bern(q)) in plain Python floats, after clamping."""
    p, q = clamp(p), clamp(q)
    return p * math.log(p / q), (1 - p) * math.log((1 - p) / (1 - q))


def rounding_bound(p: float, q: float) -> float:
    """Error bound of a float64 evaluation: a few ulps of every log that enters, weighted as it enters.

    The two terms can cancel and log p − log q can cancel, so the bound is in ulps of the parts
    (|log p| ≤ 13.8 after clamping), not of the result.
    """
    p, q = clamp(p), clamp(q)
    logs = p * (abs(math.log(p)) + abs(math.log(q))) + (1 - p) * (abs(math.log1p(-p)) + abs(math.log1p(-q)))
    first, second = closed_form_terms(p, q)
    return 8 * EPS * (logs + abs(first) + abs(second))


@given(probabilities, probabilities)
def test_bernoulli_kl_equals_the_closed_form(p, q):
    """Invariant 8: KL = p log(p/q) + (1 − p) log((1 − p)/(1 − q)) with p, q clamped to [1e-6, 1 − 1e-6]."""
    kl = float(bernoulli_kl(torch.tensor(p, dtype=torch.float64), torch.tensor(q, dtype=torch.float64)))
    assert abs(kl - sum(closed_form_terms(p, q))) <= rounding_bound(p, q)


@given(probabilities, probabilities)
def test_bernoulli_kl_is_non_negative_and_zero_exactly_when_p_equals_q(p, q):
    """Invariant 8: KL ≥ 0 (exactly: rounding must not push a divergence below zero), exactly 0 when
    p = q, and > 0 when they differ by ≥ 1e-4."""
    kl = float(bernoulli_kl(torch.tensor(p, dtype=torch.float64), torch.tensor(q, dtype=torch.float64)))
    assert kl >= 0.0
    if clamp(p) == clamp(q):
        assert kl == 0.0
    if abs(clamp(p) - clamp(q)) >= 1e-4:
        assert kl > 0.0


@given(nearly_equal_probabilities())
def test_bernoulli_kl_of_nearly_equal_probabilities_is_not_negative(pair):
    p, q = pair
    assert float(bernoulli_kl(torch.tensor(p, dtype=torch.float64), torch.tensor(q, dtype=torch.float64))) >= 0.0


@given(st.floats(0.0, 1.0), st.floats(0.0, 1.0))
def test_bernoulli_kl_is_symmetric_in_the_roles_of_success_and_failure(p, q):
    """KL(Bern(p) ‖ Bern(q)) = KL(Bern(1−p) ‖ Bern(1−q)): relabelling the outcomes changes nothing."""
    t = lambda x: torch.tensor(x, dtype=torch.float64)  # noqa: E731
    assert_close(bernoulli_kl(t(p), t(q)), bernoulli_kl(t(1 - p), t(1 - q)), rtol=1e-9, atol=1e-15)


@given(loss_batches(max_drift=2.0))
def test_sequence_kl_is_the_mean_over_policy_tokens_of_the_sampled_action_kl(batch):
    """D̄_i = (1/T_i) Σ_t KL(Bern(μ(a_it)) ‖ Bern(π(a_it))), computed token by token in plain Python."""
    _, _, stats = evaluate_loss("flash_reinforce_loss", batch, delta=math.inf)
    token_kl = sampled_action_kl(batch.log_probs, batch.behavior_log_probs, batch.action_mask)
    expected = []
    for i in range(batch.batch_size):
        terms = [
            sum(closed_form_terms(math.exp(batch.behavior_log_probs[i, t]), math.exp(batch.log_probs[i, t])))
            for t in range(batch.width) if batch.action_mask[i, t]
        ]
        expected.append(sum(terms) / len(terms))
    assert_close(stats["sequence_kl"], torch.tensor(expected, dtype=torch.float64), rtol=1e-9, atol=1e-14)
    assert_close(sequence_mean(token_kl, batch.action_mask), stats["sequence_kl"], rtol=0, atol=0)
    assert torch.equal(token_kl[~batch.action_mask], torch.zeros_like(token_kl[~batch.action_mask]))


@given(loss_batches(max_drift=1.0), thresholds, thresholds, aggregations())
def test_the_admitted_set_grows_monotonically_with_delta_and_infinity_admits_all(batch, a, b, aggregation):
    """Invariant 7, for the sequence gate (trajectories) and the token gate (tokens)."""
    low, high = min(a, b), max(a, b)
    admitted, kept = {}, {}
    for delta in (low, high, math.inf):
        for gate in ("sequence", "token"):
            _, _, stats = evaluate_loss("flash_reinforce_loss", batch, delta=delta, gate=gate, aggregation=aggregation)
            admitted[delta, gate], kept[delta, gate] = stats["admitted"], stats["token_kept"]
    assert bool((admitted[low, "sequence"] <= admitted[high, "sequence"]).all())
    assert bool((kept[low, "token"] <= kept[high, "token"]).all())
    assert bool(admitted[math.inf, "sequence"].all())
    assert torch.equal(kept[math.inf, "token"], batch.action_mask)


@given(loss_batches(max_drift=1.0), thresholds)
def test_the_sequence_gate_admits_exactly_the_trajectories_whose_mean_kl_is_at_most_delta(batch, delta):
    _, _, stats = evaluate_loss("flash_reinforce_loss", batch, delta=delta)
    assert torch.equal(stats["admitted"], stats["sequence_kl"] <= delta)
    assert torch.equal(stats["token_kept"], batch.action_mask & stats["admitted"][:, None])


@given(loss_batches(), st.floats(0.0, 1.0), st.data())
def test_the_entropy_filter_keeps_the_top_ceil_q_t_tokens_of_every_failed_row_and_all_others(batch, q, data):
    """A failed row keeps exactly ⌈q·T_i⌉ policy tokens, none with lower entropy than a dropped one and,
    among equal entropies, the earlier ones; a successful row keeps all its policy tokens."""
    size = batch.batch_size * batch.width
    levels = st.sampled_from([0.0, 0.5, 1.0, 2.0])  # few levels: many ties
    entropies = torch.tensor(data.draw(st.lists(levels, min_size=size, max_size=size)), dtype=torch.float64)
    entropies = entropies.view(batch.batch_size, batch.width)
    failures = torch.tensor(data.draw(st.lists(st.booleans(), min_size=batch.batch_size, max_size=batch.batch_size)))
    kept = negative_token_filter(entropies, failures, batch.action_mask, q)
    assert not bool((kept & ~batch.action_mask).any())
    for i in range(batch.batch_size):
        tokens = batch.action_mask[i].nonzero().flatten().tolist()
        if not failures[i]:
            assert kept[i].nonzero().flatten().tolist() == tokens
            continue
        assert int(kept[i].sum()) == math.ceil(q * len(tokens))
        ranked = sorted(tokens, key=lambda t: (-float(entropies[i, t]), t))  # highest first, then earliest
        assert kept[i].nonzero().flatten().tolist() == sorted(ranked[: math.ceil(q * len(tokens))])
