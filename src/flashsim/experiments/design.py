"""An experiment's design as plain data: arms, knobs, comparisons, and the cells they make.

A claim of the paper becomes a :class:`ClaimDesign`: a base simulator config
(:class:`~flashsim.sim.config.TrainConfig`: env, policy, algorithm, lag, budget), the **arms** that
differ in what the claim is about (sequence gate vs token gate ...), a **knob** whose values the claim
may depend on (lag, learning rate, env, budget ...), the **comparisons** the paper makes (arm a beats
arm b on metric m), fixed before anything runs, and the seeds. Arms and knob values override dotted
``TrainConfig`` paths (``{"algorithm.loss": "grpo", "lag": "workers:64"}``) through
:func:`flashsim.config.load`, the load order of ``flashsim train``. The cross product arm × knob value ×
seed gives the **cells**; each cell is one simulated training run whose ``TrainConfig`` (seed included)
is fully resolved, so a cell's result depends on nothing but its config.

A design and a cell's config are written as plain JSON (:func:`flashsim.config.to_dict`, the format of a
run's ``config.json``) beside the results and compared on resume; nothing is ever pickled.

Glossary: B trajectories per batch, G group size, L lag, δ gate threshold, m minibatches.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TypeVar

from flashsim.config import load, to_dict
from flashsim.experiments.verdict import DIRECTIONS, SMALLEST_EFFECTS, Effect
from flashsim.sim.config import TrainConfig
from flashsim.validation import check_choice, check_int

T = TypeVar("T")

SOURCES = ("article", "reference implementation", "other systems", "none")
"""Where a comparison's quoted number comes from: the source article about the paper, the FlashREINFORCE
reference implementation, other systems (not FlashREINFORCE), or nowhere (no number is quoted)."""

TIME_AXES = ("update", "sim_clock")
"""What a design's learning curves are drawn against: learner updates, or simulated seconds (a claim about time)."""
RUN_ONLY = ("probed", "time_axis")
""":class:`ClaimDesign` fields that say how ``flashsim reproduce`` runs and draws a design, not which cells it has
or how they are judged: left out of ``design.json``, which so stays what it was before they existed."""

_NAME = re.compile(r"^[A-Za-z0-9_.+-]+$")  # names become file names


def _freeze(mapping: Mapping) -> dict:
    # a plain dict copy (as AlgorithmConfig does): picklable for the worker processes, never shared
    return dict(mapping)


def _check_name(what: str, name: object) -> None:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"{what} must be a non-empty name of letters, digits and _.+- (a file name), got {name!r}")


def with_overrides(config: T, *overrides: Mapping[str, object]) -> T:
    """``config`` (a ``TrainConfig``, or any frozen config dataclass such as ``scale``'s ``Config``) with the
    dotted-path ``overrides`` applied in order (later ones win), strictly: an unknown
    path raises ``ValueError`` listing the valid keys, a bad value the config's own error naming it.

    >>> with_overrides(TrainConfig(), {"algorithm.loss": "grpo", "algorithm.group_size": 4}, {"lag": "8"}).lag
    FixedLag(lag=8)
    """
    flags = [(path, value, False) for mapping in overrides for path, value in mapping.items()]
    return load(type(config), flags=flags, base=config)


@dataclass(frozen=True)
class Arm:
    """One side of a comparison: a name, a label for tables, and its overrides of the base spec."""

    name: str
    """Short identifier (used in file names), e.g. ``sequence_gate``."""
    label: str
    """Human label for tables and figures."""
    overrides: Mapping[str, object] = field(default_factory=dict)
    """Dotted ``TrainConfig`` paths this arm sets (e.g. ``{"algorithm.loss": "token_gate"}``)."""

    def __post_init__(self) -> None:
        _check_name("arm name", self.name)
        object.__setattr__(self, "overrides", _freeze(self.overrides))


@dataclass(frozen=True)
class KnobValue:
    """One setting of the claim's knob: overrides for every arm, plus per-arm overrides."""

    name: str
    """Short identifier (used in file names), e.g. ``lag8``."""
    label: str
    """Human label, e.g. ``L = 8``."""
    overrides: Mapping[str, object] = field(default_factory=dict)
    """Dotted ``TrainConfig`` paths set for every arm."""
    arm_overrides: Mapping[str, Mapping[str, object]] = field(default_factory=dict)
    """Dotted ``TrainConfig`` paths set for one arm only, by arm name (applied last)."""
    value: float | None = None
    """The knob's numeric value where it has one (the x axis of the figures)."""

    def __post_init__(self) -> None:
        _check_name("knob value name", self.name)
        object.__setattr__(self, "overrides", _freeze(self.overrides))
        object.__setattr__(self, "arm_overrides", _freeze({k: _freeze(v) for k, v in self.arm_overrides.items()}))


@dataclass(frozen=True)
class Panel:
    """Knob values that share one x axis in the knob figure, when a knob mixes several kinds of setting."""

    title: str
    """What the axis varies, e.g. ``learning rate, 25,600 rollouts``."""
    knobs: tuple[str, ...]
    """The knob value names, in axis order."""
    ticks: tuple[str, ...] = ()
    """Tick labels, one per knob value (default: the knob values' labels)."""
    lines: bool = True
    """Join an arm's points with lines (False for unordered settings, where a line would suggest a trend)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "knobs", tuple(self.knobs))
        object.__setattr__(self, "ticks", tuple(self.ticks))
        if not self.knobs:
            raise ValueError(f"panel {self.title!r} must name at least one knob value")
        if self.ticks and len(self.ticks) != len(self.knobs):
            raise ValueError(f"panel {self.title!r} has {len(self.ticks)} ticks for {len(self.knobs)} knob values")


@dataclass(frozen=True)
class Comparison:
    """A direction the paper asserts: ``metric`` of ``arm`` is ``direction`` than that of ``baseline``.

    The verdict (:func:`flashsim.experiments.verdict.paired_verdict`) is on the paired difference
    ``metric(arm) − metric(baseline)`` across seeds.
    """

    metric: str
    """Per-cell metric (see :data:`flashsim.experiments.run_cell.CELL_METRICS`)."""
    arm: str
    """The arm the paper favours."""
    baseline: str
    """The arm it is compared with."""
    direction: str = "greater"
    """``greater``: the paper says arm > baseline; ``less``: arm < baseline."""
    paper: str = ""
    """The quoted numbers for this comparison, as their source states them."""
    knobs: tuple[str, ...] | None = None
    """Knob values where the comparison applies (None: all)."""
    source: str = "article"
    """Where ``paper`` comes from (one of :data:`SOURCES`)."""
    effect: Effect | None = None
    """The smallest effect of interest (None: the metric's pre-registered one in ``SMALLEST_EFFECTS``)."""
    size: float | None = None
    """The claimed ratio K > 1 where the quoted number is a size (the favoured arm's factor: C1's 2× fewer
    rollouts); the verdict then also tests the ratio's interval against it (None: a direction only)."""

    def __post_init__(self) -> None:
        check_choice("direction", self.direction, DIRECTIONS)
        if self.size is not None and not (isinstance(self.size, (int, float)) and math.isfinite(self.size)
                                          and self.size > 1):
            raise ValueError(f"size (a claimed ratio) must be a finite number > 1, got {self.size!r}")
        check_choice("source", self.source, SOURCES)
        if self.arm == self.baseline:
            raise ValueError(f"a comparison needs two different arms, got {self.arm!r} twice")
        if self.effect is None and self.metric not in SMALLEST_EFFECTS:
            raise ValueError(f"metric {self.metric!r} has no pre-registered smallest effect; pass effect= "
                             f"or use one of {sorted(SMALLEST_EFFECTS)}")

    @property
    def smallest_effect(self) -> Effect:
        """The effect the verdict must clear."""
        return self.effect or SMALLEST_EFFECTS[self.metric]


@dataclass(frozen=True)
class Cell:
    """One run of a sweep: claim × arm × knob value × seed, with its fully resolved config (seed included)."""

    claim: str
    arm: str
    knob: str
    seed: int
    config: TrainConfig

    @property
    def key(self) -> str:
        """File-name key, unique within a claim: ``<arm>__<knob>__s<seed>``."""
        return f"{self.arm}__{self.knob}__s{self.seed:03d}"


@dataclass(frozen=True)
class ClaimDesign:
    """One claim of the paper as an experiment (see the module docstring)."""

    claim: str
    """``C1`` … ``C7``."""
    title: str
    """One line: what is compared."""
    paper: str
    """What the paper (or the article about it) reports, with its numbers."""
    question: str
    """The question the simulation asks, and why this design answers it."""
    base: TrainConfig
    """Settings shared by every cell (its seed is replaced by each cell's)."""
    arms: tuple[Arm, ...]
    """The arms (at least two)."""
    knob_name: str
    """What the knob is (``lag``, ``env``, ``learning rate`` ...)."""
    knob: tuple[KnobValue, ...]
    """The knob's values."""
    comparisons: tuple[Comparison, ...]
    """The paper's assertions; the first is the primary one (the claim's headline verdict)."""
    headline: str
    """Knob value name of the headline verdict (the setting closest to the paper's)."""
    seeds: tuple[int, ...]
    """Seeds; every arm and knob value runs every seed (paired)."""
    profile: str = "full"
    """Which budget built it: ``smoke``, ``quick`` or ``full``."""
    metrics: tuple[str, ...] = ()
    """Extra metrics to tabulate (beside those of the comparisons)."""
    tuning: tuple[str, ...] = ()
    """Knob values forming a pre-registered tuning grid (e.g. learning rates at the headline budget): each
    arm is also compared at its own best one (highest mean ``auc``), an exploratory comparison."""
    panels: tuple[Panel, ...] = ()
    """Groups of knob values that share an x axis in the knob figure, when the knob mixes several kinds of
    setting (C1: budgets, a learning-rate grid, a harder task); () puts every value on one axis."""
    vary_instance: bool = True
    """Seed the task instance too (``env_options["seed"]`` = the cell's seed: another layout, other prompt
    probabilities), so the intervals cover the task, not only the optimisation."""
    probed: bool = False
    """Also measure each arm's update direction against the exact ∇J at the headline setting
    (:mod:`~flashsim.experiments.probes`; ``flashsim reproduce`` runs them as a sweep of their own)."""
    time_axis: str = "update"
    """What the learning curves are drawn against (one of :data:`TIME_AXES`): ``sim_clock`` for a claim about
    simulated time (C7)."""

    def __post_init__(self) -> None:
        _check_name("claim", self.claim)
        check_choice("time_axis", self.time_axis, TIME_AXES)
        arms = [arm.name for arm in self.arms]
        knobs = [value.name for value in self.knob]
        if len(arms) < 2 or len(set(arms)) != len(arms):
            raise ValueError(f"a claim needs at least two distinct arms, got {arms}")
        if not knobs or len(set(knobs)) != len(knobs):
            raise ValueError(f"knob values must be distinct and at least one, got {knobs}")
        if self.headline not in knobs:
            raise ValueError(f"headline {self.headline!r} is not a knob value; valid: {knobs}")
        if not self.comparisons:
            raise ValueError("a claim needs at least one comparison (the primary one first)")
        for comparison in self.comparisons:
            for name in (comparison.arm, comparison.baseline):
                if name not in arms:
                    raise ValueError(f"comparison names arm {name!r}; valid arms: {arms}")
            unknown = set(comparison.knobs or ()) - set(knobs)
            if unknown:
                raise ValueError(f"comparison names knob values {sorted(unknown)}; valid: {knobs}")
        unknown = set(self.tuning) - set(knobs)
        if unknown:
            raise ValueError(f"tuning names knob values {sorted(unknown)}; valid: {knobs}")
        unknown = {name for panel in self.panels for name in panel.knobs} - set(knobs)
        if unknown:
            raise ValueError(f"panels name knob values {sorted(unknown)}; valid: {knobs}")
        if len(self.seeds) < 2 or len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds must be at least two distinct ints (paired CI), got {self.seeds}")

    def arm(self, name: str) -> Arm:
        return next(arm for arm in self.arms if arm.name == name)

    def knob_value(self, name: str) -> KnobValue:
        return next(value for value in self.knob if value.name == name)

    def config(self, arm: Arm, knob: KnobValue) -> TrainConfig:
        """``arm`` at ``knob``: the base, then the arm's, the knob's and the knob's per-arm overrides."""
        return with_overrides(self.base, arm.overrides, knob.overrides, knob.arm_overrides.get(arm.name, {}))

    def cells(self) -> list[Cell]:
        """Every cell, seed-major (an interrupted sweep has whole seeds done first); the seed sets the run's
        random streams and, with :attr:`vary_instance`, the task instance."""
        configs = {(arm.name, knob.name): self.config(arm, knob) for knob in self.knob for arm in self.arms}
        return [
            Cell(self.claim, arm.name, knob.name, seed, self._seeded(configs[(arm.name, knob.name)], seed))
            for seed in self.seeds for knob in self.knob for arm in self.arms
        ]

    def _seeded(self, config: TrainConfig, seed: int) -> TrainConfig:
        if not self.vary_instance:
            return replace(config, seed=seed)
        return replace(config, seed=seed, env_options={**config.env_options, "seed": seed})

    def with_seeds(self, seeds: tuple[int, ...]) -> ClaimDesign:
        return replace(self, seeds=tuple(seeds))

    def with_seed_count(self, count: int) -> ClaimDesign:
        """``count`` seeds from the design's first (a paired interval needs two)."""
        count = check_int("seeds", count, low=2)
        return replace(self, seeds=tuple(range(self.seeds[0], self.seeds[0] + count)))

    def to_dict(self) -> dict[str, object]:
        """The design as plain JSON-able data (written beside the cells as ``design.json``; :data:`RUN_ONLY` left
        out)."""
        data = to_dict(self)
        for name in RUN_ONLY:
            del data[name]
        return data

    @property
    def metric_names(self) -> tuple[str, ...]:
        """Every metric the claim tabulates: the comparisons' first, then the extra ones."""
        names = [comparison.metric for comparison in self.comparisons] + list(self.metrics)
        return tuple(dict.fromkeys(names))
