"""The verdict rule, fixed before any run: a paired 95 % interval against a smallest effect of interest.

For a comparison "metric of arm a is greater (less) than that of arm b", with both arms run on the
same seeds s = 1..n, take the paired differences d_s = m_a(s) − m_b(s) and Student's t interval

    [lo, hi] = d̄ ± t_{n−1, 0.975} · sd(d) / √n

Each comparison has a pre-registered **smallest effect of interest** e > 0 (:data:`SMALLEST_EFFECTS`:
0.01 absolute for success-like measures, 5 % of the baseline's mean for rollouts, lengths and times),
and final-success measures have a pre-registered **ceiling margin** ε = :data:`CEILING_EPSILON`. In order:

1. **at the ceiling** — the metric is a final success, and both arms' mean success is within ε of the
   exact optimum: nothing is decided (a difference at the ceiling says nothing about learning);
2. **supported** — the interval clears e on the paper's side (lo > e for ``greater``, hi < −e for ``less``);
3. **not supported** — it clears e on the other side;
4. **negligible** — it lies inside (−e, e): two one-sided tests (TOST) at 2.5 % each reject both
   "at least e better" and "at least e worse";
5. **inconclusive** — anything else, or fewer than two seeds with finite values for both arms.

Pairing removes what the seed shares between arms (prompt draws, the initial policy), so the interval
is usually narrower than that of two independent means. Each claim has one primary comparison at one
headline setting; its verdict is the claim's. Every other comparison-setting is **exploratory**: it is
tabulated, uncorrected for multiplicity, and kept out of the summaries.
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
NEGLIGIBLE, AT_CEILING = "negligible", "at the ceiling"
VERDICTS = (AT_CEILING, SUPPORTED, NOT_SUPPORTED, NEGLIGIBLE, INCONCLUSIVE)
CONFIDENCE = 0.95
CEILING_EPSILON = 0.01
"""ε: both arms' mean final success within this of the exact optimum → at the ceiling."""


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
    "length": Effect(0.05, relative=True), "entropy_final": Effect(0.05, relative=True),
    "seconds_per_update": Effect(0.05, relative=True), "sequence_kl": Effect(0.05, relative=True),
}
"""The pre-registered smallest effect of each metric a comparison may use (a design may override one)."""

CEILINGS = {"success_train": "optimum", "success_peak": "optimum", "success_heldout": "optimum_heldout"}
"""Final-success metrics and the cell metric holding their exact optimum (the ceiling rule applies to these)."""


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
    """The outcome of :func:`paired_verdict`: the paired difference's interval and the decision."""

    difference: Interval
    """Interval of mean(arm − baseline)."""
    direction: str
    """The paper's direction (``greater`` or ``less``)."""
    verdict: str
    """One of :data:`VERDICTS`."""
    effect: float = math.nan
    """The smallest effect of interest in the metric's units."""

    def to_dict(self) -> dict[str, object]:
        return {"difference": self.difference.to_dict(), "direction": self.direction, "verdict": self.verdict,
                "effect": self.effect}


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


def paired_verdict(
    arm: Sequence[float], baseline: Sequence[float], direction: str, effect: Effect, *,
    gaps: tuple[Sequence[float], Sequence[float]] | None = None, epsilon: float = CEILING_EPSILON,
    confidence: float = CONFIDENCE,
) -> Verdict:
    """Decide "arm ``direction`` baseline" from per-seed values (index i of both = seed i).

    ``effect`` is the smallest effect of interest; ``gaps`` (per seed, optimum − final success of the
    arm and of the baseline) turns on the ceiling rule. Pairs where either value is missing (None or
    NaN) are dropped.

    >>> paired_verdict([0.9, 0.8, 0.85], [0.5, 0.45, 0.55], "greater", Effect(0.01)).verdict
    'supported'
    >>> paired_verdict([0.9, 0.8, 0.85], [0.5, 0.45, 0.55], "less", Effect(0.01)).verdict
    'not supported'
    >>> paired_verdict([0.5, 0.6, 0.4], [0.55, 0.45, 0.5], "greater", Effect(0.01)).verdict
    'inconclusive'
    """
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    if not isinstance(effect, Effect):
        raise TypeError(f"effect must be an Effect, got {type(effect).__name__}")
    if len(arm) != len(baseline):
        raise ValueError(f"arm and baseline need one value per seed each; got {len(arm)} and {len(baseline)}")
    pairs = [(a, b) for a, b in zip(arm, baseline)
             if a is not None and b is not None and math.isfinite(a) and math.isfinite(b)]
    interval = mean_interval([a - b for a, b in pairs], confidence)
    size = effect.size(float(np.mean([b for _, b in pairs])) if pairs else math.nan)
    if gaps is not None and at_ceiling(*gaps, epsilon=epsilon):
        return Verdict(interval, direction, AT_CEILING, size)
    return Verdict(interval, direction, decide(interval, direction, size), size)


def at_ceiling(arm_gaps: Sequence[float], baseline_gaps: Sequence[float], epsilon: float = CEILING_EPSILON) -> bool:
    """Whether both arms' mean gap to the optimum (optimum − final success, per seed) is at most ``epsilon``.

    >>> at_ceiling([0.001, 0.003], [0.009, 0.011])
    True
    """
    means = [mean_interval(gaps).mean for gaps in (arm_gaps, baseline_gaps)]
    return all(math.isfinite(m) and m <= epsilon for m in means)


def decide(difference: Interval, direction: str, effect: float) -> str:
    """The rule on an interval of arm − baseline and a smallest effect (see the module docstring)."""
    finite = math.isfinite(difference.low) and math.isfinite(difference.high) and math.isfinite(effect)
    if difference.n < 2 or not finite:
        return INCONCLUSIVE
    above, below = difference.low > effect, difference.high < -effect
    if above or below:
        return SUPPORTED if above == (direction == "greater") else NOT_SUPPORTED
    if -effect < difference.low and difference.high < effect:
        return NEGLIGIBLE
    return INCONCLUSIVE
