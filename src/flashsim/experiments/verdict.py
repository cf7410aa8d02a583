"""The verdict rule: a paired 95 % interval against a smallest effect of interest and, where the paper states
a size, an interval of the ratio against that size; Holm across a page's confirmatory primaries.

For a comparison "metric of arm a is greater (less) than that of arm b", with both arms run on the
same seeds s = 1..n, take the complete pairs (both values finite), the paired differences
d_s = m_a(s) − m_b(s) and Student's t interval

    [lo, hi] = d̄ ± t_{n−1, 0.975} · sd(d) / √n

Each comparison has a pre-registered **smallest effect of interest** e > 0 (:data:`SMALLEST_EFFECTS`:
0.01 absolute for success-like measures, 5 % of the baseline's mean for rollouts, lengths and times).
A comparison whose quoted number is a size (C1 "half the rollouts": a ratio of 2; C3 "36 % shorter": 3,947 /
2,518 = 1.57; C7's pre-registered 2×) also carries that **claimed ratio** K > 1, the factor by which the paper's
favoured arm beats the other: R = ā / b̄ for ``greater``, b̄ / ā for ``less``. Its interval is the delta
method's on the same pairs: with z_s = (b_s − R̂ a_s) / ā for ``less`` (a and b swapped for ``greater``),

    [R_lo, R_hi] = R̂ ± t_{n−1, 0.975} · sd(z) / √n.

Final-success measures have a ceiling (:data:`CEILINGS`), falls and fractions a floor at 0
(:data:`FLOORS`), both with margin ε = :data:`CEILING_EPSILON`; threshold measures (:data:`THRESHOLDS`: the
rollouts spent until a level is first reached, NaN where a run never reaches it) count their complete pairs.
The outcomes, in order (the first that applies):

1. **at the ceiling** — a final success, and both arms' mean is within ε of the exact optimum;
2. **at the floor** — a measure bounded below by 0, and both arms' mean is within ε of 0 (a fall that
   neither arm shows decides nothing);
3. **identical arms** — every complete pair is equal (d_s = 0 for all s): the two arms ran the same thing,
   or the measure does not move between them;
4. **inconclusive** — fewer than two complete pairs, or a threshold measure with a pair dropped by one arm
   only (one arm reached the level on that seed, the other did not: dropping the pair would hide the
   difference);
5. **supported** — the interval clears e on the paper's side (lo > e for ``greater``, hi < −e for
   ``less``), and, where a size K is claimed, the ratio's interval clears it (R_lo > K);
6. **smaller than claimed** — a size K is claimed, the interval clears e on the paper's side (the
   direction is right) and the ratio's interval lies below K (R_hi < K: the size is rejected);
7. **not supported** — the interval clears e on the other side;
8. **negligible** — it lies inside (−e, e): two one-sided tests (TOST) at 2.5 % each reject both
   "at least e better" and "at least e worse";
9. **inconclusive** — anything else (among it: the direction is right and K lies inside [R_lo, R_hi]).

Each outcome 5–8 is a one-sided test at 2.5 % (an interval bound clearing a value is exactly p < 0.025),
and :attr:`Verdict.p` is its p-value (the largest of the tests it needs: direction and size, or TOST's
two); for 9 it is the p of the paper's direction against e, for 1–4 NaN. Each claim has one primary
comparison at one headline setting, the claim's only confirmatory verdict. Across a page's confirmatory
primaries the p-values are adjusted by Holm's step-down (:func:`holm`), and a decision (5–8) whose
adjusted p exceeds 0.025 becomes **inconclusive** (:func:`with_holm`). Every other comparison-setting is
**exploratory**: tabulated with its p and the Holm-adjusted p over that comparison's settings, never
quoted in a summary. Settings whose values are identical, seed for seed, for both arms (the same runs, e.g.
a threshold reached before any of several budgets ends) get one verdict, not one each.

This rule replaced one without sizes, floors, identical arms, dropped-pair checks or Holm after
the results it now judges had been seen; the pages say so where it changes a verdict.

Pairing removes what the seed shares between arms (prompt draws, the initial policy), so the interval
is usually narrower than that of two independent means.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

DIRECTIONS = ("greater", "less")
"""How the paper orders two arms on a metric: ``greater`` (a > b) or ``less`` (a < b)."""

SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE = "supported", "not supported", "inconclusive"
NEGLIGIBLE, AT_CEILING, AT_FLOOR = "negligible", "at the ceiling", "at the floor"
IDENTICAL, SMALLER = "identical arms", "smaller than claimed"
VERDICTS = (AT_CEILING, AT_FLOOR, IDENTICAL, SUPPORTED, SMALLER, NOT_SUPPORTED, NEGLIGIBLE, INCONCLUSIVE)
DECISIONS = (SUPPORTED, SMALLER, NOT_SUPPORTED, NEGLIGIBLE)
"""The outcomes that reject a hypothesis (Holm can turn them into inconclusive)."""
CONFIDENCE = 0.95
ALPHA = (1 - CONFIDENCE) / 2
"""The level of each one-sided test: an interval bound of a 95 % two-sided interval clearing a value."""
CEILING_EPSILON = 0.01
"""ε: both arms' mean final success within this of the exact optimum → at the ceiling (and within this of 0
for a measure in :data:`FLOORS` → at the floor)."""

@dataclass(frozen=True)
class Effect:
    """A smallest effect of interest: ``value`` in the metric's units, or a fraction of the baseline's mean."""

    value: float
    relative: bool = False

    def __post_init__(self) -> None:
        if not (isinstance(self.value, (int, float)) and math.isfinite(self.value) and self.value > 0):
            raise ValueError(f"a smallest effect must be a finite number > 0, got {self.value!r}")

    def size(self, baseline_mean: float) -> float:
        """The effect in the metric's units (NaN for a relative effect of a missing baseline)."""
        return self.value * abs(baseline_mean) if self.relative else float(self.value)

    def __str__(self) -> str:
        return f"{self.value:.0%} of the baseline" if self.relative else f"{self.value:g}"


SMALLEST_EFFECTS: dict[str, Effect] = {
    "success_train": Effect(0.01), "success_heldout": Effect(0.01), "success_peak": Effect(0.01),
    "auc": Effect(0.01), "collapse": Effect(0.01), "drawdown": Effect(0.01), "truncation": Effect(0.01),
    "acceptance_rate": Effect(0.01), "token_acceptance_rate": Effect(0.01), "worker_idle": Effect(0.01),
    "learner_idle": Effect(0.01), "tool_calls": Effect(0.1),
    "rollouts_to_90": Effect(0.05, relative=True), "rollouts_to_95": Effect(0.05, relative=True),
    "rollouts_to_60": Effect(0.05, relative=True), "rollouts_to_70": Effect(0.05, relative=True),
    "updates_to_90": Effect(0.05, relative=True),
    "length": Effect(0.05, relative=True), "entropy_final": Effect(0.05, relative=True),
    "seconds_per_update": Effect(0.05, relative=True), "sequence_kl": Effect(0.05, relative=True),
}
"""The pre-registered smallest effect of each metric a comparison may use (a design may override one)."""

CEILINGS = {"success_train": "optimum", "success_peak": "optimum", "success_heldout": "optimum_heldout"}
"""Final-success metrics and the cell metric holding their exact optimum (the ceiling rule applies to these)."""

FLOORS = frozenset({"drawdown", "collapse", "truncation", "worker_idle", "learner_idle"})
"""Measures bounded below by 0 (a fall, a share of truncated runs, an idle fraction): the floor rule applies."""

THRESHOLDS = frozenset({"rollouts_to_60", "rollouts_to_70", "rollouts_to_90", "rollouts_to_95", "updates_to_90"})
"""Threshold measures (NaN where a run never reaches the level): a pair dropped by one arm is inconclusive."""


@dataclass(frozen=True)
class Interval:
    """A mean and its two-sided Student-t confidence interval over ``n`` values."""

    mean: float
    low: float
    high: float
    n: int

    def to_dict(self) -> dict[str, float | int]:
        return {"mean": self.mean, "low": self.low, "high": self.high, "n": self.n}


@dataclass(frozen=True)
class Verdict:
    """The outcome of :func:`paired_verdict`: the paired difference's interval, the ratio's, and the decision."""

    difference: Interval
    """Interval of mean(arm − baseline) over the complete pairs."""
    direction: str
    """The paper's direction (``greater`` or ``less``)."""
    verdict: str
    """One of :data:`VERDICTS`."""
    effect: float = math.nan
    """The smallest effect of interest in the metric's units."""
    ratio: Interval = Interval(math.nan, math.nan, math.nan, 0)
    """Delta-method interval of the favoured arm's factor R (ā/b̄ for ``greater``, b̄/ā for ``less``)."""
    size: float | None = None
    """The claimed ratio K (None: the paper states no size)."""
    p: float = math.nan
    """The p-value of the test behind the verdict (see the module docstring; NaN for outcomes 1–4)."""
    pairs: int = 0
    """Complete pairs (both arms finite)."""
    dropped_by_arm: int = 0
    """Seeds where exactly one arm has a value (for a threshold measure: one arm never reached the level)."""

    def to_dict(self) -> dict[str, object]:
        return {"difference": self.difference.to_dict(), "direction": self.direction, "verdict": self.verdict,
                "effect": self.effect, "ratio": self.ratio.to_dict(), "size": self.size, "p": self.p,
                "pairs": self.pairs, "dropped_by_arm": self.dropped_by_arm}


def mean_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
    """Mean of the finite ``values`` and its t interval (NaN bounds with fewer than two values).

    >>> interval = mean_interval([1.0, 2.0, 3.0])
    >>> interval.mean, round(interval.low, 4), round(interval.high, 4), interval.n
    (2.0, -0.4841, 4.4841, 3)
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    x = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=np.float64)
    n = int(x.size)
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, 0)
    mean = float(x.mean())
    if n < 2:
        return Interval(mean, math.nan, math.nan, n)
    half = float(stats.t.ppf(0.5 + confidence / 2, n - 1) * x.std(ddof=1) / math.sqrt(n))
    return Interval(mean, mean - half, mean + half, n)


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def ratio_interval(arm: Sequence[float], baseline: Sequence[float], direction: str,
                   confidence: float = CONFIDENCE) -> Interval:
    """The favoured arm's factor R on complete pairs and its delta-method t interval (module docstring).

    >>> r = ratio_interval([100.0, 110.0, 90.0], [200.0, 230.0, 170.0], "less")
    >>> round(r.mean, 6), round(r.low, 4), round(r.high, 4), r.n
    (2.0, 1.7516, 2.2484, 3)
    """
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    pairs = [(a, b) for a, b in zip(arm, baseline) if _finite(a) and _finite(b)]
    favoured, other = ([a for a, _ in pairs], [b for _, b in pairs])
    if direction == "less":
        favoured, other = other, favoured
    n = len(pairs)
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, 0)
    top, bottom = float(np.mean(favoured)), float(np.mean(other))
    if bottom == 0:
        return Interval(math.nan, math.nan, math.nan, n)
    ratio = top / bottom
    if n < 2:
        return Interval(ratio, math.nan, math.nan, n)
    z = (np.asarray(favoured, dtype=np.float64) - ratio * np.asarray(other, dtype=np.float64)) / bottom
    half = float(stats.t.ppf(0.5 + confidence / 2, n - 1) * z.std(ddof=1) / math.sqrt(n))
    return Interval(ratio, ratio - half, ratio + half, n)


def _upper_p(estimate: float, null: float, interval: Interval, confidence: float) -> float:
    """One-sided p of "the true value exceeds ``null``" from a t interval (its half-width gives the se)."""
    half = (interval.high - interval.low) / 2
    if interval.n < 2 or not math.isfinite(half):
        return math.nan
    t = stats.t.ppf(0.5 + confidence / 2, interval.n - 1)
    se = half / t
    if se == 0:
        return 0.0 if estimate > null else 1.0
    return float(stats.t.sf((estimate - null) / se, interval.n - 1))


def paired_verdict(
    arm: Sequence[float], baseline: Sequence[float], direction: str, effect: Effect, *,
    gaps: tuple[Sequence[float], Sequence[float]] | None = None, epsilon: float = CEILING_EPSILON,
    confidence: float = CONFIDENCE, size: float | None = None, floor: bool = False, threshold: bool = False,
) -> Verdict:
    """Decide "arm ``direction`` baseline" from per-seed values (index i of both = seed i).

    ``effect`` is the smallest effect of interest; ``size`` the claimed ratio K (> 1) where the paper states
    one; ``gaps`` (per seed, optimum − final success of the arm and of the baseline) turns on the ceiling
    rule, ``floor`` the floor rule (a measure bounded below by 0), ``threshold`` the dropped-pair rule.
    Pairs where either value is missing (None or NaN) are dropped and counted.

    >>> paired_verdict([0.9, 0.8, 0.85], [0.5, 0.45, 0.55], "greater", Effect(0.01)).verdict
    'supported'
    >>> paired_verdict([0.9, 0.8, 0.85], [0.5, 0.45, 0.55], "less", Effect(0.01)).verdict
    'not supported'
    >>> paired_verdict([0.5, 0.6, 0.4], [0.55, 0.45, 0.5], "greater", Effect(0.01)).verdict
    'inconclusive'
    >>> paired_verdict([90.0, 100.0, 110.0], [110.0, 121.0, 129.0], "less", Effect(0.05, relative=True),
    ...                size=2.0).verdict
    'smaller than claimed'
    """
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    if not isinstance(effect, Effect):
        raise TypeError(f"effect must be an Effect, got {type(effect).__name__}")
    if len(arm) != len(baseline):
        raise ValueError(f"arm and baseline need one value per seed each; got {len(arm)} and {len(baseline)}")
    if size is not None and not (isinstance(size, (int, float)) and math.isfinite(size) and size > 1):
        raise ValueError(f"size (a claimed ratio) must be a finite number > 1, got {size!r}")
    pairs = [(a, b) for a, b in zip(arm, baseline) if _finite(a) and _finite(b)]
    dropped = sum(_finite(a) != _finite(b) for a, b in zip(arm, baseline))
    interval = mean_interval([a - b for a, b in pairs], confidence)
    ratio = ratio_interval(arm, baseline, direction, confidence) if size is not None else \
        Interval(math.nan, math.nan, math.nan, 0)
    value = effect.size(float(np.mean([b for _, b in pairs])) if pairs else math.nan)

    def verdict(outcome: str, p: float = math.nan) -> Verdict:
        return Verdict(interval, direction, outcome, value, ratio, size, p, len(pairs), dropped)

    if gaps is not None and at_ceiling(*gaps, epsilon=epsilon):
        return verdict(AT_CEILING)
    if floor and at_floor([a for a, _ in pairs], [b for _, b in pairs], epsilon):
        return verdict(AT_FLOOR)
    if pairs and all(a == b for a, b in pairs):
        return verdict(IDENTICAL)
    if len(pairs) < 2 or (threshold and dropped):
        return verdict(INCONCLUSIVE)
    outcome = decide(interval, direction, value, ratio if size is not None else None, size)
    return verdict(outcome, _p_value(outcome, interval, direction, value, ratio, size, confidence))


def _p_value(outcome: str, difference: Interval, direction: str, effect: float, ratio: Interval,
             size: float | None, confidence: float) -> float:
    """The p of the test behind ``outcome`` (module docstring): one-sided tests at ``effect`` and ``size``."""
    sign = 1.0 if direction == "greater" else -1.0
    # the paper's direction as "greater": flip the difference's sign for ``less``
    d = Interval(sign * difference.mean, min(sign * difference.low, sign * difference.high),
                 max(sign * difference.low, sign * difference.high), difference.n)
    toward = _upper_p(d.mean, effect, d, confidence)  # H0: d ≤ e
    against = 1 - _upper_p(d.mean, -effect, d, confidence)  # H0: d ≥ −e
    if outcome == SUPPORTED:
        return max(toward, _upper_p(ratio.mean, size, ratio, confidence)) if size is not None else toward
    if outcome == SMALLER:
        return max(toward, 1 - _upper_p(ratio.mean, size, ratio, confidence))
    if outcome == NOT_SUPPORTED:
        return against
    if outcome == NEGLIGIBLE:
        return max(_upper_p(d.mean, -effect, d, confidence), 1 - _upper_p(d.mean, effect, d, confidence))
    return toward


def at_floor(arm: Sequence[float], baseline: Sequence[float], epsilon: float = CEILING_EPSILON) -> bool:
    """Whether both arms' mean of a measure bounded below by 0 is at most ``epsilon``.

    >>> at_floor([0.0, 0.0, 0.0], [0.0, 0.004, 0.0])
    True
    """
    means = [mean_interval(values).mean for values in (arm, baseline)]
    return all(math.isfinite(m) and m <= epsilon for m in means)


def at_ceiling(arm_gaps: Sequence[float], baseline_gaps: Sequence[float], epsilon: float = CEILING_EPSILON) -> bool:
    """Whether both arms' mean gap to the optimum (optimum − final success, per seed) is at most ``epsilon``.

    >>> at_ceiling([0.001, 0.003], [0.009, 0.011])
    True
    """
    means = [mean_interval(gaps).mean for gaps in (arm_gaps, baseline_gaps)]
    return all(math.isfinite(m) and m <= epsilon for m in means)


def decide(difference: Interval, direction: str, effect: float, ratio: Interval | None = None,
           size: float | None = None) -> str:
    """Outcomes 5–9 of the rule (module docstring) on an interval of arm − baseline, a smallest effect and,
    where a size K is claimed, the ratio's interval."""
    finite = math.isfinite(difference.low) and math.isfinite(difference.high) and math.isfinite(effect)
    if difference.n < 2 or not finite:
        return INCONCLUSIVE
    above, below = difference.low > effect, difference.high < -effect
    if above or below:
        if above != (direction == "greater"):
            return NOT_SUPPORTED
        if size is None:
            return SUPPORTED
        if ratio is not None and math.isfinite(ratio.low) and ratio.low > size:
            return SUPPORTED
        if ratio is not None and math.isfinite(ratio.high) and ratio.high < size:
            return SMALLER
        return INCONCLUSIVE
    if -effect < difference.low and difference.high < effect:
        return NEGLIGIBLE
    return INCONCLUSIVE


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input's order (NaN stays NaN and is not counted).

    >>> [round(p, 4) for p in holm([0.01, 0.04, 0.03, math.nan])]
    [0.03, 0.06, 0.06, nan]
    """
    indexed = sorted((p, i) for i, p in enumerate(p_values) if _finite(p))
    m = len(indexed)
    adjusted = [math.nan] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(indexed):
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[i] = running
    return adjusted


def with_holm(verdict: str, adjusted_p: float, alpha: float = ALPHA) -> str:
    """The verdict after Holm: a decision (5–8) whose adjusted p exceeds ``alpha`` becomes inconclusive.

    >>> with_holm("supported", 0.0083 * 6), with_holm("supported", 0.0042 * 5), with_holm("identical arms", 1.0)
    ('inconclusive', 'supported', 'identical arms')
    """
    if verdict in DECISIONS and not (_finite(adjusted_p) and adjusted_p <= alpha):
        return INCONCLUSIVE
    return verdict
