"""The verdict rule on constructed data: supported, not supported, inconclusive, and its edge cases."""

import math

import pytest
from scipy import stats

from flashsim.experiments.verdict import (
    INCONCLUSIVE,
    NOT_SUPPORTED,
    SUPPORTED,
    decide,
    mean_interval,
    paired_verdict,
)

ARM = [0.80, 0.85, 0.90, 0.82, 0.88]
BASELINE = [0.60, 0.70, 0.65, 0.62, 0.71]


def test_a_clear_difference_in_the_papers_direction_is_supported():
    assert paired_verdict(ARM, BASELINE, "greater").verdict == SUPPORTED


def test_a_clear_difference_in_the_opposite_direction_is_not_supported():
    assert paired_verdict(BASELINE, ARM, "greater").verdict == NOT_SUPPORTED
    assert paired_verdict(ARM, BASELINE, "less").verdict == NOT_SUPPORTED


def test_direction_less_is_supported_when_the_arm_is_lower():
    assert paired_verdict(BASELINE, ARM, "less").verdict == SUPPORTED


def test_an_interval_that_contains_zero_is_inconclusive():
    arm = [0.70, 0.62, 0.75, 0.60, 0.68]
    baseline = [0.66, 0.69, 0.64, 0.67, 0.63]  # differences +0.04 -0.07 +0.11 -0.07 +0.05
    verdict = paired_verdict(arm, baseline, "greater")
    assert verdict.difference.low < 0 < verdict.difference.high
    assert verdict.verdict == INCONCLUSIVE
    assert paired_verdict(arm, baseline, "less").verdict == INCONCLUSIVE


def test_pairing_decides_where_unpaired_intervals_overlap():
    # a large shared seed effect, a small consistent difference: the paired interval excludes 0
    shared = [0.1, 0.5, 0.9, 0.3, 0.7]
    arm = [s + 0.02 for s in shared]
    assert mean_interval(arm).low < mean_interval(shared).high  # unpaired intervals overlap
    assert paired_verdict(arm, shared, "greater").verdict == SUPPORTED


def test_the_interval_is_students_t_on_the_paired_differences_in_float64():
    differences = [a - b for a, b in zip(ARM, BASELINE)]
    n = len(differences)
    mean = sum(differences) / n
    sd = math.sqrt(sum((d - mean) ** 2 for d in differences) / (n - 1))
    half = stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)
    interval = paired_verdict(ARM, BASELINE, "greater").difference
    assert interval.n == n
    assert interval.mean == pytest.approx(mean, rel=1e-12)
    assert interval.low == pytest.approx(mean - half, rel=1e-12)
    assert interval.high == pytest.approx(mean + half, rel=1e-12)


def test_missing_values_drop_their_pair():
    arm = [0.9, math.nan, 0.8, None, 0.85]
    baseline = [0.5, 0.5, math.nan, 0.4, 0.45]
    verdict = paired_verdict(arm, baseline, "greater")
    assert verdict.difference.n == 2  # seeds 0 and 4 only


@pytest.mark.parametrize(
    "arm, baseline",
    [([0.9], [0.1]), ([0.9, math.nan], [0.1, 0.2]), ([], [])],
    ids=["one-seed", "one-complete-pair", "no-seeds"],
)
def test_fewer_than_two_pairs_is_inconclusive(arm, baseline):
    assert paired_verdict(arm, baseline, "greater").verdict == INCONCLUSIVE


def test_identical_arms_are_inconclusive_and_a_constant_nonzero_difference_is_decided():
    values = [0.3, 0.5, 0.7]
    assert paired_verdict(values, values, "greater").verdict == INCONCLUSIVE
    assert paired_verdict([v + 0.1 for v in values], values, "greater").verdict == SUPPORTED


def test_an_interval_touching_zero_is_inconclusive():
    interval = mean_interval([0.0, 0.2])
    shifted = type(interval)(mean=0.1, low=0.0, high=0.2, n=2)
    assert decide(shifted, "greater") == INCONCLUSIVE


@pytest.mark.parametrize(
    "arm, baseline, direction, message",
    [([1.0, 2.0], [1.0], "greater", "one value per seed"), ([1.0, 2.0], [1.0, 2.0], "higher", "direction")],
    ids=["length-mismatch", "unknown-direction"],
)
def test_bad_input_raises_value_error_naming_the_problem(arm, baseline, direction, message):
    with pytest.raises(ValueError, match=message):
        paired_verdict(arm, baseline, direction)
