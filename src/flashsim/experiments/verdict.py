"""The verdict rule, fixed before any run: the paired 95 % confidence interval of the difference.

For a comparison "metric of arm a is greater (less) than that of arm b", with both arms run on the
same seeds s = 1..n, take the paired differences d_s = m_a(s) − m_b(s) and Student's t interval

    d̄ ± t_{n−1, 1−(1−c)/2} · sd(d) / √n          (c = 0.95)

and decide:

- **supported** — the interval excludes 0 on the paper's side (low > 0 for ``greater``, high < 0 for ``less``);
- **not supported** — it excludes 0 on the other side (the data say the opposite);
- **inconclusive** — it contains 0, or fewer than two seeds have finite values for both arms.

Pairing removes what the seed shares between arms (prompt draws of the same generator state, the
initial policy), so the interval is usually narrower than that of two independent means. No
correction for multiple comparisons is made: each claim has one primary comparison at one headline
setting; the others are reported as context, and a reader should expect about one spurious decision in
twenty of those where no effect exists.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from flashsim.experiments.design import DIRECTIONS

SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE = "supported", "not supported", "inconclusive"
VERDICTS = (SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE)
CONFIDENCE = 0.95


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
    """``supported``, ``not supported`` or ``inconclusive``."""

    def to_dict(self) -> dict[str, object]:
        return {"difference": self.difference.to_dict(), "direction": self.direction, "verdict": self.verdict}


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
    arm: Sequence[float], baseline: Sequence[float], direction: str, confidence: float = CONFIDENCE
) -> Verdict:
    """Decide "arm ``direction`` baseline" from per-seed values (index i of both = seed i).

    Pairs where either value is missing (None or NaN) are dropped.

    >>> paired_verdict([0.9, 0.8, 0.85], [0.5, 0.45, 0.55], "greater").verdict
    'supported'
    >>> paired_verdict([0.9, 0.8, 0.85], [0.5, 0.45, 0.55], "less").verdict
    'not supported'
    >>> paired_verdict([0.5, 0.6, 0.4], [0.55, 0.45, 0.5], "greater").verdict
    'inconclusive'
    """
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    if len(arm) != len(baseline):
        raise ValueError(f"arm and baseline need one value per seed each; got {len(arm)} and {len(baseline)}")
    differences = [
        a - b for a, b in zip(arm, baseline)
        if a is not None and b is not None and math.isfinite(a) and math.isfinite(b)
    ]
    interval = mean_interval(differences, confidence)
    return Verdict(interval, direction, decide(interval, direction))


def decide(difference: Interval, direction: str) -> str:
    """The rule on an interval of arm − baseline (see the module docstring)."""
    if difference.n < 2 or not (math.isfinite(difference.low) and math.isfinite(difference.high)):
        return INCONCLUSIVE
    above, below = difference.low > 0, difference.high < 0
    if direction == "greater":
        return SUPPORTED if above else NOT_SUPPORTED if below else INCONCLUSIVE
    return SUPPORTED if below else NOT_SUPPORTED if above else INCONCLUSIVE
