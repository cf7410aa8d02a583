"""An experiment's design as plain data: runs, arms, knobs, comparisons, and the cells they make.

A claim of the paper becomes a :class:`ClaimDesign`: a base :class:`RunSpec` (env, policy, algorithm,
lag, budget), the **arms** that differ in what the claim is about (sequence gate vs token gate ...),
a **knob** whose values the claim may depend on (lag, learning rate, env, budget ...), the
**comparisons** the paper makes (arm a beats arm b on metric m), fixed before anything runs, and the
seeds. The cross product arm × knob value × seed gives the **cells**; each cell is one simulated
training run whose :class:`RunSpec` is fully resolved, so a cell's result depends on nothing but
its spec and seed.

Every value here is a frozen dataclass of JSON-able fields (str, int, float, dict): a cell's spec is
written beside its result and compared on resume, and nothing is ever pickled.

Glossary: B trajectories per batch, G group size, L lag, δ gate threshold, m minibatches.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, is_dataclass, replace

from flashsim.validation import check_choice, check_instance, check_int

DIRECTIONS = ("greater", "less")
"""How the paper orders two arms on a metric: ``greater`` (a > b) or ``less`` (a < b)."""

_NAME = re.compile(r"^[A-Za-z0-9_.+-]+$")  # names become file names


def _freeze(mapping: Mapping) -> dict:
    # a plain dict copy (as AlgorithmConfig does): picklable for the worker processes, never shared
    return dict(mapping)


def _plain(value: object) -> object:
    """Dataclasses, mappings and tuples as dicts and lists, recursively."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def _check_name(what: str, name: object) -> None:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"{what} must be a non-empty name of letters, digits and _.+- (a file name), got {name!r}")


@dataclass(frozen=True)
class RunSpec:
    """One simulated training run, as plain data (the adapter :mod:`~flashsim.experiments.run_cell` builds it).

    Fields mirror ``flashsim.sim.TrainConfig`` / ``AlgorithmConfig``; ``lag`` uses the ``--lag`` syntax.
    """

    env: str = "gridworld"
    """Env preset of ``flashsim.sim.ENVS``."""
    env_options: Mapping[str, object] = field(default_factory=dict)
    """Keyword arguments overriding the env preset's."""
    policy: str = "tabular"
    """``tabular``, ``linear`` or ``mlp``."""
    loss: str = "flash_reinforce"
    """Name in ``flashsim.losses.LOSSES``."""
    batch_size: int = 128
    """Trajectories per collected batch B."""
    group_size: int = 1
    """Siblings per prompt G."""
    minibatches: int = 1
    """Sequential optimizer steps per collected batch m."""
    learning_rate: float = 0.1
    """Adam step size."""
    optimizer: str = "adam"
    """``adam`` or ``sgd``."""
    loss_options: Mapping[str, object] = field(default_factory=dict)
    """Keyword options of the loss (``delta`` ...)."""
    lag: str = "0"
    """Lag model in the ``--lag`` syntax: ``L``, ``random:MAX[...]``, ``workers:N[:sync]``."""
    timing: Mapping[str, float] = field(default_factory=dict)
    """Overrides of the env preset's ``TimingModel`` fields (``tool_latency_sigma``, ``straggler_prob`` ...)."""
    updates: int = 100
    """Learner updates."""
    eval_every: int = 10
    """Exact evaluation every this many updates (the learning curve's resolution)."""
    logprob_noise: float = 0.0
    """Std of the noise on stored behaviour log-probs."""

    def __post_init__(self) -> None:
        for name in ("env_options", "loss_options", "timing"):
            object.__setattr__(self, name, _freeze(check_instance(name, getattr(self, name), Mapping)))
        for name in ("batch_size", "group_size", "minibatches", "updates", "eval_every"):
            check_int(name, getattr(self, name), low=1)

    def with_overrides(self, overrides: Mapping[str, object]) -> RunSpec:
        """This spec with ``overrides`` (field → value); unknown fields raise ``ValueError`` listing the valid ones."""
        valid = {f.name for f in fields(self)}
        unknown = sorted(set(overrides) - valid)
        if unknown:
            raise ValueError(f"unknown RunSpec fields {unknown}; valid fields: {', '.join(sorted(valid))}")
        return replace(self, **dict(overrides))

    def to_dict(self) -> dict[str, object]:
        """Plain JSON-able dict (mappings as dicts)."""
        return _plain(self)


@dataclass(frozen=True)
class Arm:
    """One side of a comparison: a name, a label for tables, and its overrides of the base spec."""

    name: str
    """Short identifier (used in file names), e.g. ``sequence_gate``."""
    label: str
    """Human label for tables and figures."""
    overrides: Mapping[str, object] = field(default_factory=dict)
    """RunSpec fields this arm sets (e.g. ``{"loss": "token_gate"}``)."""

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
    """RunSpec fields set for every arm."""
    arm_overrides: Mapping[str, Mapping[str, object]] = field(default_factory=dict)
    """RunSpec fields set for one arm only, by arm name (applied last)."""
    value: float | None = None
    """The knob's numeric value where it has one (the x axis of the figures)."""

    def __post_init__(self) -> None:
        _check_name("knob value name", self.name)
        object.__setattr__(self, "overrides", _freeze(self.overrides))
        object.__setattr__(self, "arm_overrides", _freeze({k: _freeze(v) for k, v in self.arm_overrides.items()}))


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
    """The paper's numbers for this comparison, as it states them."""
    knobs: tuple[str, ...] | None = None
    """Knob values where the comparison applies (None: all)."""

    def __post_init__(self) -> None:
        check_choice("direction", self.direction, DIRECTIONS)
        if self.arm == self.baseline:
            raise ValueError(f"a comparison needs two different arms, got {self.arm!r} twice")


@dataclass(frozen=True)
class Cell:
    """One run of a sweep: claim × arm × knob value × seed, with its fully resolved spec."""

    claim: str
    arm: str
    knob: str
    seed: int
    spec: RunSpec

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
    base: RunSpec
    """Settings shared by every cell."""
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

    def __post_init__(self) -> None:
        _check_name("claim", self.claim)
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
        if len(self.seeds) < 2 or len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds must be at least two distinct ints (paired CI), got {self.seeds}")

    def arm(self, name: str) -> Arm:
        return next(arm for arm in self.arms if arm.name == name)

    def knob_value(self, name: str) -> KnobValue:
        return next(value for value in self.knob if value.name == name)

    def spec(self, arm: Arm, knob: KnobValue) -> RunSpec:
        """The resolved spec of ``arm`` at ``knob``: base, then the arm's, the knob's, the knob's per-arm overrides."""
        spec = self.base.with_overrides(arm.overrides).with_overrides(knob.overrides)
        return spec.with_overrides(knob.arm_overrides.get(arm.name, {}))

    def cells(self) -> list[Cell]:
        """Every cell, seed-major (an interrupted sweep has whole seeds done first)."""
        return [
            Cell(self.claim, arm.name, knob.name, seed, self.spec(arm, knob))
            for seed in self.seeds for knob in self.knob for arm in self.arms
        ]

    def with_seeds(self, seeds: tuple[int, ...]) -> ClaimDesign:
        return replace(self, seeds=tuple(seeds))

    def to_dict(self) -> dict[str, object]:
        """The design as plain JSON-able data (written beside the cells as ``design.json``)."""
        return _plain(self)

    @property
    def metric_names(self) -> tuple[str, ...]:
        """Every metric the claim tabulates: the comparisons' first, then the extra ones."""
        names = [comparison.metric for comparison in self.comparisons] + list(self.metrics)
        return tuple(dict.fromkeys(names))
