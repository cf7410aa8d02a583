"""The verdict rule on constructed data: its five outcomes against hand-computed intervals, and its edge cases.

Hand computation for n = 4 seeds (t_{3, 0.975} = 3.1824463052837078, from any t table: 3.182):
differences 0.05, 0.06, 0.07, 0.06 have mean 0.06 and sd √(2e-4 / 3) = 0.0081649658, so the half-width
is 3.1824463 · 0.0081649658 / 2 = 0.0129922826 and the interval [0.0470077174, 0.0729922826]. Scaled by
1/30 (0.001, 0.002, 0.003, 0.002) it is [0.0007007717, 0.0032992283]; 0.00, 0.02, 0.04, 0.02 give
mean 0.02, sd 0.0163299316, half-width 0.0259845653 and [−0.0059845653, 0.0459845653].
"""

import math

import pytest
from scipy import stats

from flashsim.experiments.verdict import (
    AT_CEILING,
    AT_FLOOR,
    IDENTICAL,
    INCONCLUSIVE,
    NEGLIGIBLE,
    NOT_SUPPORTED,
    SMALLER,
    SUPPORTED,
    Effect,
    Interval,
    at_ceiling,
    decide,
    holm,
    mean_interval,
    paired_verdict,
    ratio_interval,
    with_holm,
)

E = Effect(0.01)
BASELINE = [0.50, 0.60, 0.70, 0.80]  # a large shared seed effect; pairing removes it
CLEAR = [0.05, 0.06, 0.07, 0.06]  # → [0.0470077174, 0.0729922826]
TINY = [0.001, 0.002, 0.003, 0.002]  # → [0.0007007717, 0.0032992283]
WIDE = [0.00, 0.02, 0.04, 0.02]  # → [−0.0059845653, 0.0459845653]


def shifted(differences, sign=1.0):
    return [b + sign * d for b, d in zip(BASELINE, differences)]


def check_interval(verdict, mean, low, high):
    assert verdict.difference.n == 4
    assert verdict.difference.mean == pytest.approx(mean, abs=1e-12)
    assert verdict.difference.low == pytest.approx(low, abs=1e-10)
    assert verdict.difference.high == pytest.approx(high, abs=1e-10)


def test_an_interval_that_clears_the_smallest_effect_on_the_papers_side_is_supported():
    verdict = paired_verdict(shifted(CLEAR), BASELINE, "greater", E)
    check_interval(verdict, 0.06, 0.0470077174, 0.0729922826)
    assert verdict.verdict == SUPPORTED and verdict.effect == 0.01


def test_an_interval_that_clears_it_on_the_other_side_is_not_supported():
    verdict = paired_verdict(shifted(CLEAR, -1.0), BASELINE, "greater", E)
    check_interval(verdict, -0.06, -0.0729922826, -0.0470077174)
    assert verdict.verdict == NOT_SUPPORTED
    assert paired_verdict(shifted(CLEAR, -1.0), BASELINE, "less", E).verdict == SUPPORTED
    assert paired_verdict(shifted(CLEAR), BASELINE, "less", E).verdict == NOT_SUPPORTED


def test_a_tight_interval_inside_the_smallest_effect_is_negligible_even_though_it_excludes_zero():
    verdict = paired_verdict(shifted(TINY), BASELINE, "greater", E)
    check_interval(verdict, 0.002, 0.0007007717, 0.0032992283)
    assert verdict.difference.low > 0  # the old rule called this supported
    assert verdict.verdict == NEGLIGIBLE
    assert paired_verdict(shifted(TINY), BASELINE, "less", E).verdict == NEGLIGIBLE


def test_an_interval_that_straddles_the_smallest_effect_is_inconclusive():
    verdict = paired_verdict(shifted(WIDE), BASELINE, "greater", E)
    check_interval(verdict, 0.02, -0.0059845653, 0.0459845653)
    assert verdict.verdict == INCONCLUSIVE


def test_both_arms_within_epsilon_of_the_optimum_is_at_the_ceiling_whatever_the_interval():
    arm, baseline = [0.999, 0.998, 0.999, 0.997], [0.992, 0.993, 0.991, 0.994]
    gaps = ([1 - a for a in arm], [1 - b for b in baseline])  # mean gaps 0.00175 and 0.0075 ≤ ε = 0.01
    verdict = paired_verdict(arm, baseline, "greater", Effect(0.001), gaps=gaps)
    assert verdict.difference.low > 0.001  # decisive without the ceiling rule
    assert verdict.verdict == AT_CEILING
    far = ([1 - a for a in arm], [1.02 - b for b in baseline])  # baseline's mean gap 0.0275 > ε
    assert paired_verdict(arm, baseline, "greater", Effect(0.001), gaps=far).verdict == SUPPORTED


def test_the_ceiling_takes_each_arms_mean_gap():
    assert at_ceiling([0.0, 0.02], [0.01, 0.01])  # means 0.01 and 0.01
    assert not at_ceiling([0.0, 0.0201], [0.0, 0.0])  # mean 0.01005
    assert not at_ceiling([math.nan], [0.0])


def test_a_relative_effect_scales_with_the_baselines_mean():
    rollouts_flash, rollouts_grpo = [900.0, 1000.0, 1100.0], [1200.0, 1300.0, 1400.0]
    verdict = paired_verdict(rollouts_flash, rollouts_grpo, "less", Effect(0.05, relative=True))
    assert verdict.effect == pytest.approx(0.05 * 1300.0, rel=1e-12)
    assert verdict.verdict == SUPPORTED  # −300 exactly on every seed: the interval is a point below −65
    almost = [1280.0, 1290.0, 1300.0]
    assert paired_verdict(almost, rollouts_grpo, "less", Effect(0.05, relative=True)).verdict != SUPPORTED


def test_the_interval_is_students_t_on_the_paired_differences_in_float64():
    differences = CLEAR
    n = len(differences)
    mean = sum(differences) / n
    sd = math.sqrt(sum((d - mean) ** 2 for d in differences) / (n - 1))
    half = stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)
    interval = paired_verdict(shifted(CLEAR), BASELINE, "greater", E).difference
    assert interval.mean == pytest.approx(mean, rel=1e-12)
    assert interval.low == pytest.approx(mean - half, rel=1e-12)
    assert interval.high == pytest.approx(mean + half, rel=1e-12)


def test_pairing_decides_where_unpaired_intervals_overlap():
    shared = [0.1, 0.5, 0.9, 0.3, 0.7]
    arm = [s + 0.02 for s in shared]
    assert mean_interval(arm).low < mean_interval(shared).high  # unpaired intervals overlap
    assert paired_verdict(arm, shared, "greater", E).verdict == SUPPORTED


def test_missing_values_drop_their_pair():
    arm = [0.9, math.nan, 0.8, None, 0.85]
    baseline = [0.5, 0.5, math.nan, 0.4, 0.45]
    assert paired_verdict(arm, baseline, "greater", E).difference.n == 2  # seeds 0 and 4 only


@pytest.mark.parametrize(
    "arm, baseline",
    [([0.9], [0.1]), ([0.9, math.nan], [0.1, 0.2]), ([], [])],
    ids=["one-seed", "one-complete-pair", "no-seeds"],
)
def test_fewer_than_two_pairs_is_inconclusive(arm, baseline):
    assert paired_verdict(arm, baseline, "greater", E).verdict == INCONCLUSIVE


def test_identical_arms_are_their_own_outcome_and_an_interval_on_the_effect_is_not_decided():
    values = [0.3, 0.5, 0.7]
    verdict = paired_verdict(values, values, "greater", E)
    assert verdict.verdict == IDENTICAL  # an interval [0, 0] is not evidence of equivalence between two methods
    assert (verdict.difference.low, verdict.difference.high) == (0.0, 0.0) and math.isnan(verdict.p)
    on_the_edge = Interval(mean=0.02, low=0.01, high=0.03, n=3)
    assert decide(on_the_edge, "greater", 0.01) == INCONCLUSIVE  # lo must exceed e strictly
    touching = Interval(mean=0.0, low=-0.01, high=0.005, n=3)
    assert decide(touching, "greater", 0.01) == INCONCLUSIVE  # negligible needs lo > −e strictly


@pytest.mark.parametrize(
    "arm, baseline, direction, effect, error, message",
    [([1.0, 2.0], [1.0], "greater", E, ValueError, "one value per seed"),
     ([1.0, 2.0], [1.0, 2.0], "higher", E, ValueError, "direction"),
     ([1.0, 2.0], [1.0, 2.0], "greater", 0.01, TypeError, "effect must be an Effect")],
    ids=["length-mismatch", "unknown-direction", "bare-float-effect"],
)
def test_bad_input_raises_naming_the_problem(arm, baseline, direction, effect, error, message):
    with pytest.raises(error, match=message):
        paired_verdict(arm, baseline, direction, effect)


@pytest.mark.parametrize("value", [0, -0.1, math.nan, math.inf])
def test_a_smallest_effect_must_be_positive_and_finite(value):
    with pytest.raises(ValueError, match="smallest effect"):
        Effect(value)


# A size test by hand (n = 4, t_{3, 0.975} = 3.1824463052837078). FlashREINFORCE's rollouts a = 100, 110, 90, 100
# and GRPO's b = 120, 133, 107, 120 (means 100 and 120): the factor R = b̄ / ā = 1.2. Delta method:
# z_s = (b_s − 1.2 a_s) / 100 = 0, 0.01, −0.01, 0, sd 0.0081649658, half-width 0.0129922826, so
# R ∈ [1.1870077174, 1.2129922826]. Differences a − b = −20, −23, −17, −20: mean −20, sd √6 = 2.4494897428,
# half-width 3.8976848, interval [−23.8976848, −16.1023152], clearing −e = −0.05 · 120 = −6.
ROLLOUTS_FLASH, ROLLOUTS_GRPO = [100.0, 110.0, 90.0, 100.0], [120.0, 133.0, 107.0, 120.0]
RELATIVE = Effect(0.05, relative=True)


def test_the_ratio_interval_is_the_delta_methods_on_the_pairs():
    ratio = ratio_interval(ROLLOUTS_FLASH, ROLLOUTS_GRPO, "less")
    assert ratio.n == 4 and ratio.mean == pytest.approx(1.2, rel=1e-14)
    assert ratio.low == pytest.approx(1.1870077174, abs=1e-10)
    assert ratio.high == pytest.approx(1.2129922826, abs=1e-10)
    swapped = ratio_interval(ROLLOUTS_GRPO, ROLLOUTS_FLASH, "greater")  # the same factor, named the other way
    assert (swapped.mean, swapped.low, swapped.high) == (ratio.mean, ratio.low, ratio.high)


@pytest.mark.parametrize("size, expected", [(2.0, SMALLER), (1.1, SUPPORTED), (1.2, INCONCLUSIVE)],
                         ids=["size-rejected", "size-cleared", "size-inside"])
def test_a_claimed_size_is_judged_by_the_ratios_interval(size, expected):
    verdict = paired_verdict(ROLLOUTS_FLASH, ROLLOUTS_GRPO, "less", RELATIVE, size=size)
    assert verdict.difference.mean == pytest.approx(-20.0, rel=1e-14)
    assert verdict.difference.high == pytest.approx(-16.1023152, abs=1e-6) and verdict.effect == pytest.approx(6.0)
    assert verdict.verdict == expected
    # without a size the same data is simply supported: the direction is right
    assert paired_verdict(ROLLOUTS_FLASH, ROLLOUTS_GRPO, "less", RELATIVE).verdict == SUPPORTED


def test_the_p_value_is_that_of_the_test_behind_the_verdict():
    se_d, se_r = math.sqrt(6.0) / 2, 0.0081649658092772603 / 2
    direction = stats.t.sf((20.0 - 6.0) / se_d, 3)  # H0: GRPO − FlashREINFORCE ≤ e
    below = stats.t.cdf((1.2 - 2.0) / se_r, 3)  # H0: R ≥ 2
    smaller = paired_verdict(ROLLOUTS_FLASH, ROLLOUTS_GRPO, "less", RELATIVE, size=2.0)
    assert smaller.p == pytest.approx(max(direction, below), rel=1e-9)
    above = stats.t.sf((1.2 - 1.1) / se_r, 3)  # H0: R ≤ 1.1
    supported = paired_verdict(ROLLOUTS_FLASH, ROLLOUTS_GRPO, "less", RELATIVE, size=1.1)
    assert supported.p == pytest.approx(max(direction, above), rel=1e-9)
    # an interval bound clearing a value is p < 0.025: the CLEAR data against e = 0.01 (se = 0.0040824829)
    clear = paired_verdict(shifted(CLEAR), BASELINE, "greater", E)
    assert clear.p == pytest.approx(stats.t.sf((0.06 - 0.01) / 0.0040824829046386, 3), rel=1e-9) and clear.p < 0.025
    tiny = paired_verdict(shifted(TINY), BASELINE, "greater", E)  # TOST: the larger of the two one-sided p
    se = 0.0040824829046386 / 10  # TINY: sd 0.00081649658
    assert tiny.p == pytest.approx(max(stats.t.sf((0.002 + 0.01) / se, 3), stats.t.cdf((0.002 - 0.01) / se, 3)),
                                   rel=1e-9)
    wide = paired_verdict(shifted(WIDE), BASELINE, "greater", E)  # inconclusive: the paper's direction against e
    assert wide.p == pytest.approx(stats.t.sf((0.02 - 0.01) / 0.0081649658092773, 3), rel=1e-9) and wide.p > 0.025


def test_both_arms_at_zero_on_a_fall_is_at_the_floor_not_negligible():
    zeros = [0.0, 0.0, 0.0, 0.0]
    assert paired_verdict(zeros, zeros, "less", E, floor=True).verdict == AT_FLOOR
    assert paired_verdict(zeros, zeros, "less", E).verdict == IDENTICAL
    small = [0.0, 0.004, 0.0, 0.012]  # mean 0.004 ≤ ε
    assert paired_verdict(small, zeros, "less", E, floor=True).verdict == AT_FLOOR
    falls = [0.0, 0.05, 0.0, 0.01]  # mean 0.015 > ε: decided by the interval
    assert paired_verdict(falls, zeros, "less", E, floor=True).verdict not in (AT_FLOOR, IDENTICAL)


def test_a_threshold_pair_dropped_by_one_arm_is_inconclusive_and_counted():
    flash = [100.0, 110.0, 90.0, 100.0, 95.0, math.nan]
    grpo = [200.0, 230.0, 170.0, 200.0, math.nan, math.nan]  # seed 4: GRPO never reached it; seed 5: neither
    verdict = paired_verdict(flash, grpo, "less", RELATIVE, threshold=True)
    assert (verdict.pairs, verdict.dropped_by_arm, verdict.verdict) == (4, 1, INCONCLUSIVE)
    assert paired_verdict(flash, grpo, "less", RELATIVE).verdict == SUPPORTED  # what dropping the pair would say
    both = paired_verdict(flash[:4] + [math.nan], grpo[:5], "less", RELATIVE, threshold=True)
    assert (both.pairs, both.dropped_by_arm, both.verdict) == (4, 0, SUPPORTED)  # neither reached: no arm favoured


def test_holm_adjusts_a_pages_primaries_and_turns_a_failed_decision_inconclusive():
    # nine primaries; C1's p = 0.0083 is the fourth smallest, so it is multiplied by 9 − 3 = 6: 0.0498 > 0.025
    p = [1e-6, 1e-5, 0.002, 0.0083, 0.2, 0.3, 0.5, 0.6, 0.7]
    adjusted = holm(p)
    assert adjusted[:4] == pytest.approx([9e-6, 8e-5, 0.014, 0.0498], rel=1e-12)
    assert adjusted[4:] == [1.0] * 5  # 0.2 × 5 capped at 1, and the step-down keeps the rest there
    with_missing = holm([0.01, math.nan, 0.02])  # NaN (no test) is neither adjusted nor counted
    assert with_missing[0] == pytest.approx(0.02) and math.isnan(with_missing[1]) and with_missing[2] == 0.02
    assert holm([0.04, 0.01]) == pytest.approx([0.04, 0.02], rel=1e-12)  # step-down keeps the order monotone
    assert with_holm(SUPPORTED, adjusted[3]) == INCONCLUSIVE
    assert with_holm(NEGLIGIBLE, adjusted[2]) == NEGLIGIBLE
    assert with_holm(AT_CEILING, math.nan) == AT_CEILING and with_holm(INCONCLUSIVE, 1e-9) == INCONCLUSIVE


@pytest.mark.parametrize("size", [1.0, 0.5, math.nan, math.inf])
def test_a_claimed_size_must_be_a_finite_ratio_above_one(size):
    with pytest.raises(ValueError, match="size"):
        paired_verdict(ROLLOUTS_FLASH, ROLLOUTS_GRPO, "less", RELATIVE, size=size)
