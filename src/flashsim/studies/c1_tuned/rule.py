"""C1 with each arm at its own best learning rate: the tuning protocol, fixed before any run.

The article's headline (C1): FlashREINFORCE reaches GRPO's score with half the rollouts (38.0 at 256K rollouts vs
GRPO's 36.3 at 512K). The full-budget page decided it at one shared learning rate on a grid {0.03, 0.1, 0.3} whose
top was every arm's best (``tuned.at_edge`` listed all four arms). Here every arm gets its own log-spaced grid,
extended by a rule in code until its best rate on the primary measure itself is interior, and the verdict runs on
fresh seeds at each arm's chosen rate. Everything below was committed before any pilot or verdict cell ran.

**Primary measure.** Rollouts spent until the exact train success first reaches 0.9 × the exact optimum
(:func:`~flashsim.experiments.run_cell.rollouts_to`, linear between evaluations after every update), each run capped
at :data:`CAP_ROLLOUTS`; a run that never reaches the level within the cap is **censored** (kept, never dropped).

**Arms** (:data:`TUNED_ARMS`; "GRPO" alone means the registry's ``grpo``, which aggregates DAPO's token-mean):
FlashREINFORCE 128 × 1; GRPO 32 × 4 token-mean; GRPO 64 × 4 token-mean; GRPO 32 × 4 with DeepSeekMath's sample-mean
aggregation (the aggregation FlashREINFORCE itself uses, so this arm separates the baseline from C3's question).
Rollouts to a level do not depend on a budget, so "GRPO with twice the updates" and "GRPO 32 × 4" are the same run.

**Optimizers** (:data:`TUNED_OPTIMIZERS`): Adam as the pages use (confirmatory), plain SGD as an exploratory check with
fewer arms and seeds. **Envs**: ToolGridworld (the pages' C1 env; the headline) and PromptBandit.

**Tuning rule.** Per (optimizer, env, arm) a grid ``centre × 2**k`` (:data:`FACTOR` 2), starting at
``k ∈ {-1, 0, 1, 2}`` (:data:`TUNED_START_EXPONENTS`), run on the pilot seeds. A rate is **ineligible** if at least
:data:`UNSTABLE_FRACTION` of its pilot seeds are censored. Each rate's pilot score is the **censored median**
(:func:`censored_median`: censored runs rank above every finished run; the median is +inf when half or more are
censored); ties go to fewer censored, then to the lower mean with censored runs at the cap. The best is the
eligible rate of lowest score (:func:`best_rate`). It is **interior** when the grid holds a rate on each side of it
(an ineligible or slower neighbour counts: it was tried and lost). Otherwise the grid grows by one factor on the open
side (both sides when no rate is eligible) and the new rate runs on the same pilot seeds, until the best is interior
or :data:`MAX_EXTENSIONS` rates were added on a side; a best still at an edge then is reported as at the edge, not
done (:func:`next_exponents`). A pilot rate stops running seeds once its censored runs make it ineligible
(:func:`settled_ineligible`; added before any run, after a smoke run on a tiny cap showed what censored runs cost).

**Verdict.** Fresh seeds (:data:`VERDICT_SEEDS_FROM` on, disjoint from the pilot's), every arm at its chosen rate,
paired by seed. The factor is GRPO's mean rollouts over FlashREINFORCE's on complete pairs with the delta-method
interval (:func:`~flashsim.experiments.verdict.ratio_interval`) and the project's verdict rule
(:func:`~flashsim.experiments.verdict.paired_verdict`, size 2, threshold pairs: a pair censored in one arm only
makes it inconclusive). The size verdict (:func:`~flashsim.studies.c1_tuned.report.tuned_size_verdict`, the
project's :func:`~flashsim.experiments.summaries.size_position` in this page's words): "claimed size rejected" when
the interval lies below 2, "consistent with the claimed size" when it contains 2, "larger than the claimed size"
when above.
Confirmatory primary: ToolGridworld, Adam, FlashREINFORCE vs GRPO 32 × 4 (token-mean); everything else exploratory.

**Seeds (power).** At least :data:`MIN_VERDICT_SEEDS` per arm, more if :func:`seeds_for_power` asks: from the pilot
seeds at the chosen rates, the per-seed delta-method terms z_s = (b_s − R̂ a_s) / ā of every flash-vs-GRPO pair give
sd(z); the verdict needs (t_{0.975, n−1} + z_{0.90}) · sd(z) / √n ≤ 1, the distance between 1× and 2×, so that with
90 % power an interval around a true 1× excludes 2 (and one around a true 2× excludes 1). Capped at
:data:`MAX_VERDICT_SEEDS` (budget); a cap that binds is reported.

**Budget reduction, fixed before running** (2 cores shared by 8 jobs; deadline 01:00 UTC): SGD runs only
FlashREINFORCE and GRPO 32 × 4, on :data:`SGD_PILOT_SEEDS` and :data:`SGD_VERDICT_SEEDS` seeds; the driver runs
Adam-ToolGridworld, Adam-PromptBandit, SGD-PromptBandit, then SGD-ToolGridworld, and starts no new
(optimizer, env) after :data:`TUNED_STOP_STARTING_UTC`;
what is unfinished then is reported as not done.

**Second reduction, fixed after 3 pilot cells (23:50 UTC) for their cost, not their values** (the machine's load
was ~9 on 2 cores: one ToolGridworld cell took ~50 s wall): Adam's pilot has 4 seeds (3800-3803; one censored
run still makes a rate ineligible), and the driver runs by :data:`STAGES`, the confirmatory arms first.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType

import numpy as np
from scipy import stats

from flashsim.experiments.verdict import ratio_interval

THRESHOLD = 0.9
"""The level: a fraction of the exact optimal train success."""
CAP_ROLLOUTS = 51_200
"""Rollouts after which a run that has not reached the level stops, censored (the full budget's FlashREINFORCE
budget, 400 updates × 128; 3.8× the slowest arm's mean at the full page's lowest rate 0.03)."""
TUNED_ENVS = ("gridworld", "bandit")
"""ToolGridworld (headline) and PromptBandit."""
HEADLINE = ("adam", "gridworld", "grpo")
"""The confirmatory comparison: Adam, ToolGridworld, FlashREINFORCE vs GRPO 32 × 4 (token-mean)."""

TUNED_ARMS: Mapping[str, tuple[str, Mapping[str, object]]] = MappingProxyType({
    "flash": ("FlashREINFORCE (128 × 1)", {"algorithm.loss": "flash_reinforce"}),
    "grpo": ("GRPO 32 × 4, token-mean (DAPO; the registry's grpo)",
             {"algorithm.loss": "grpo", "algorithm.group_size": 4}),
    "grpo_2batch": ("GRPO 64 × 4, token-mean (DAPO)",
                    {"algorithm.loss": "grpo", "algorithm.group_size": 4, "algorithm.batch_size": 256}),
    "grpo_sample": ("GRPO 32 × 4, sample-mean (DeepSeekMath)",
                    {"algorithm.loss": "grpo", "algorithm.group_size": 4,
                     "algorithm.loss_options": {"aggregation": "sample_mean"}}),
})
"""Arm name → (label, dotted TrainConfig overrides)."""
BASELINE = "flash"
"""The arm every GRPO arm's factor is taken against (GRPO's rollouts over FlashREINFORCE's)."""

TUNED_OPTIMIZERS: Mapping[str, Mapping[str, object]] = MappingProxyType({
    "adam": {"arms": ("flash", "grpo", "grpo_2batch", "grpo_sample"), "centre": 0.3, "pilot_seeds": 4,
             "confirmatory": True},
    "sgd": {"arms": ("flash", "grpo"), "centre": 100.0, "pilot_seeds": 3, "confirmatory": False},
})
"""Per optimizer: its arms, its grid centre, its number of pilot seeds, whether it is confirmatory. Adam's centre
0.3 is the full page's best (the top of its grid); SGD's 100 came from one calibration run per rate (seed 9999,
FlashREINFORCE, lr 1 / 10 / 100: 0.9 × optimum reached only at 100 on ToolGridworld within 200 updates)."""
FACTOR = 2.0
"""Spacing of every grid (log-spaced: centre × FACTOR**k)."""
TUNED_START_EXPONENTS = (-1, 0, 1, 2)
"""The first grid's exponents k (Adam: 0.15, 0.3, 0.6, 1.2)."""
MAX_EXTENSIONS = 6
"""Rates the rule may add on one side of the start grid before the arm is reported at the edge."""
UNSTABLE_FRACTION = 0.2
"""A rate with at least this fraction of pilot seeds censored is ineligible."""

TUNED_PILOT_SEEDS = tuple(range(3800, 3805))
"""Pilot seeds (Adam: the first four, SGD: the first three; 3804 is left unused by the second reduction). No
earlier run used 3800-3999."""
SGD_PILOT_SEEDS = 3
VERDICT_SEEDS_FROM = 3900
"""Verdict seeds are 3900, 3901, ... (disjoint from the pilot's)."""
MIN_VERDICT_SEEDS = 20
MAX_VERDICT_SEEDS = 40
SGD_VERDICT_SEEDS = 10
"""SGD (exploratory) runs this many verdict seeds, no power rule."""
POWER = 0.9
TUNED_STOP_STARTING_UTC = "00:50"
"""The committed run started no new stage after this time (UTC, the session's night; the driver's
``--stop-starting``, which has no limit by default)."""


def is_clock_time(text: str) -> bool:
    """Whether ``text`` is a 24-hour ``HH:MM`` (the drivers' ``--stop-starting``).

    >>> is_clock_time("00:50"), is_clock_time("24:00"), is_clock_time("0050")
    (True, False, False)
    """
    hour, _, minute = text.partition(":")
    return hour.isdigit() and minute.isdigit() and len(minute) == 2 and int(hour) < 24 and int(minute) < 60


def parse_with_stop_starting(parser: argparse.ArgumentParser, argv: Sequence[str] | None, committed: str,
                             what: str) -> argparse.Namespace:
    """``parser``'s arguments with the drivers' ``--stop-starting HH:MM`` added (no new ``what`` starts after it;
    ``committed`` is the committed run's time, for the help); a malformed time exits 2 naming the flag."""
    parser.add_argument("--stop-starting", default=None, metavar="HH:MM",
                        help=f"UTC time after which no new {what} starts (the committed run: {committed}); "
                             "default: no limit")
    args = parser.parse_args(argv)
    if args.stop_starting is not None and not is_clock_time(args.stop_starting):
        parser.error(f"--stop-starting: expected HH:MM (UTC), got {args.stop_starting!r}")
    return args


def past_stop_time(stop: str | None, now: dt.datetime) -> bool:
    """Whether ``now`` (UTC) is at or past the drivers' ``--stop-starting`` ``HH:MM`` (None: never). A run started
    in the evening means the night: from noon on, a stop time before 12:00 is the next day's.

    >>> at = dt.datetime(2026, 12, 6, 23, 0, tzinfo=dt.timezone.utc)
    >>> past_stop_time("00:50", at), past_stop_time("22:00", at), past_stop_time(None, at)
    (False, True, False)
    """
    if stop is None:
        return False
    hour, minute = (int(x) for x in stop.split(":"))
    day = now.date() if now.hour < 12 or hour >= 12 else now.date() + dt.timedelta(days=1)
    return now >= dt.datetime(day.year, day.month, day.day, hour, minute, tzinfo=dt.timezone.utc)


STAGES = (
    ("adam", "gridworld", ("flash", "grpo")),
    ("adam", "bandit", ("flash", "grpo")),
    ("adam", "gridworld", ("flash", "grpo_sample", "grpo_2batch")),
    ("adam", "bandit", ("flash", "grpo_sample", "grpo_2batch")),
    ("sgd", "bandit", ("flash", "grpo")),
    ("sgd", "gridworld", ("flash", "grpo")),
)
"""The order of the runs (second reduction): the confirmatory pair first, then the other GRPO arms, then SGD. A
stage's verdict seeds follow the power rule on its own arms (at least :data:`MIN_VERDICT_SEEDS`); FlashREINFORCE
runs the most any stage asks, and each comparison pairs the seeds both arms ran."""


def tuned_rate(optimizer: str, exponent: int) -> float:
    """The learning rate of grid point ``exponent`` for ``optimizer``: centre × FACTOR**exponent."""
    if optimizer not in TUNED_OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {tuple(TUNED_OPTIMIZERS)}, got {optimizer!r}")
    return float(TUNED_OPTIMIZERS[optimizer]["centre"]) * FACTOR ** int(exponent)


def censored_median(values: Sequence[float]) -> float:
    """Median of rollouts-to-level with censored runs (NaN) ranked above every finished one.

    +inf when half or more of the runs are censored; NaN for no runs.

    >>> censored_median([300.0, float("nan"), 100.0, 200.0, 500.0])
    300.0
    >>> censored_median([300.0, float("nan"), 100.0, float("nan")])
    inf
    """
    if len(values) == 0:
        return math.nan
    x = np.sort(np.asarray([v if math.isfinite(v) else math.inf for v in values], dtype=np.float64))
    n = x.size
    middle = x[n // 2] if n % 2 else (x[n // 2 - 1] + x[n // 2]) / 2  # inf + finite = inf: censored stays censored
    return float(middle)


def censored(values: Sequence[float]) -> int:
    """How many runs never reached the level (NaN)."""
    return sum(not math.isfinite(v) for v in values)


def settled_ineligible(values: Sequence[float], seeds: int) -> bool:
    """True once the censored runs among ``values`` already reach :data:`UNSTABLE_FRACTION` of all ``seeds``
    pilot seeds: the rate is ineligible whatever the other seeds do, so the driver runs no more of them.

    >>> settled_ineligible([float("nan")], 5), settled_ineligible([100.0, 200.0], 5)
    (True, False)
    """
    return censored(values) >= UNSTABLE_FRACTION * seeds


def eligible(values: Sequence[float]) -> bool:
    """A rate is eligible when fewer than :data:`UNSTABLE_FRACTION` of its pilot runs are censored."""
    return len(values) > 0 and censored(values) < UNSTABLE_FRACTION * len(values)


def rate_score(values: Sequence[float]) -> tuple[float, int, float]:
    """Sort key of a rate (lower is better): censored median, censored count, mean with censored at the cap."""
    capped = [v if math.isfinite(v) else float(CAP_ROLLOUTS) for v in values]
    return censored_median(values), censored(values), float(np.mean(capped))


def best_rate(grid: Mapping[int, Sequence[float]]) -> int | None:
    """The eligible exponent of lowest :func:`rate_score` (None when no rate is eligible)."""
    ok = [k for k, values in grid.items() if eligible(values)]
    return min(ok, key=lambda k: (rate_score(grid[k]), k)) if ok else None


def next_exponents(grid: Mapping[int, Sequence[float]]) -> tuple[str, tuple[int, ...]]:
    """The rule's next step for one arm: ``("interior", ())``, ``("extend", new exponents)`` or
    ``("at edge", ())`` when the side to extend has used its :data:`MAX_EXTENSIONS`.

    >>> next_exponents({-1: [900.0], 0: [500.0], 1: [700.0]})
    ('interior', ())
    >>> next_exponents({-1: [900.0], 0: [700.0], 1: [500.0]})
    ('extend', (2,))
    """
    if not grid:
        return "extend", tuple(TUNED_START_EXPONENTS)
    low, high = min(grid), max(grid)
    best = best_rate(grid)
    want = []
    if best is None or best == low:
        want.append(low - 1)
    if best is None or best == high:
        want.append(high + 1)
    if not want:
        return "interior", ()
    allowed = tuple(k for k in want
                    if min(TUNED_START_EXPONENTS) - MAX_EXTENSIONS <= k <= max(TUNED_START_EXPONENTS) + MAX_EXTENSIONS)
    return ("extend", allowed) if allowed else ("at edge", ())


def rate_cell_path(folder: Path | str, exponent: int, seed: int) -> Path:
    """The file of one tuning cell in an arm's ``folder``: ``k<exponent>_s<seed>.json``."""
    return Path(folder) / f"k{exponent}_s{seed}.json"


def pilot_grid(folder: Path | str, seeds: Sequence[int], value: Callable[[Path], float]) -> dict[int, list[float]]:
    """The pilot cells of one arm on disk: exponent → ``value(cell file)`` per pilot seed, for each rate whose every
    seed has run or whose seeds run so far already make it ineligible (:func:`settled_ineligible`)."""
    folder = Path(folder)
    exponents = {int(p.name[1:].split("_s")[0]) for p in folder.glob("k*_s*.json")} if folder.exists() else set()
    grid = {}
    for k in sorted(exponents):
        values = [value(rate_cell_path(folder, k, s)) for s in seeds if rate_cell_path(folder, k, s).exists()]
        if len(values) == len(seeds) or settled_ineligible(values, len(seeds)):
            grid[k] = values
    return grid


def tune(start: Sequence[int], run_rate: Callable[[int], bool],
         grid: Callable[[], Mapping[int, Sequence[float]]]) -> tuple[str, int | None]:
    """The tuning loop of one arm: run the ``start`` exponents, then extend by :func:`next_exponents` until the
    best rate is interior or a side is exhausted. ``run_rate(k)`` runs the missing pilot cells of exponent ``k``
    (False: stopped before finishing, e.g. by a stop time); ``grid()`` reads the pilot grid back from disk.

    Returns the status (``interior``, ``at edge``, or ``stopped``) and the best exponent (None if no rate is
    eligible, or stopped). The toy driver (:mod:`flashsim.studies.c1_tuned.run`) and the transformer's
    (``scale.studies.c1_tuned``) both run this loop.
    """
    for k in start:
        if not run_rate(k):
            return "stopped", None
    while True:
        current = grid()
        status, new = next_exponents(current)
        if status != "extend":
            return status, best_rate(current)
        for k in new:
            if not run_rate(k):
                return "stopped", None


def verdict_seeds(count: int) -> tuple[int, ...]:
    """The first ``count`` verdict seeds."""
    return tuple(range(VERDICT_SEEDS_FROM, VERDICT_SEEDS_FROM + count))


def delta_terms(grpo: Sequence[float], flash: Sequence[float]) -> np.ndarray:
    """Per-seed delta-method terms z_s = (b_s − R̂ a_s) / ā of GRPO's factor R̂ = b̄ / ā on complete pairs
    (a FlashREINFORCE, b GRPO), whose sd sets the ratio interval's width (as ``verdict.ratio_interval``)."""
    pairs = [(a, b) for a, b in zip(flash, grpo) if math.isfinite(a) and math.isfinite(b)]
    a = np.asarray([p[0] for p in pairs], dtype=np.float64)
    b = np.asarray([p[1] for p in pairs], dtype=np.float64)
    ratio = b.mean() / a.mean()
    return (b - ratio * a) / a.mean()


def seeds_for_power(sd_z: float, gap: float = 1.0, power: float = POWER) -> int:
    """Smallest n ≥ :data:`MIN_VERDICT_SEEDS` with (t_{0.975, n−1} + z_power) · sd_z / √n ≤ ``gap``, capped at
    :data:`MAX_VERDICT_SEEDS` (returned as the cap + 1 when the cap binds, so a caller can say so).

    >>> seeds_for_power(0.8)
    20
    >>> seeds_for_power(2.0)
    41
    """
    if not (math.isfinite(sd_z) and sd_z >= 0):
        raise ValueError(f"sd_z must be a finite number >= 0, got {sd_z!r}")
    for n in range(MIN_VERDICT_SEEDS, MAX_VERDICT_SEEDS + 1):
        if (stats.t.ppf(0.975, n - 1) + stats.norm.ppf(power)) * sd_z / math.sqrt(n) <= gap:
            return n
    return MAX_VERDICT_SEEDS + 1


def factor(grpo: Sequence[float], flash: Sequence[float]):
    """GRPO's rollouts over FlashREINFORCE's on complete pairs, with the delta-method interval."""
    return ratio_interval(flash, grpo, "less")
