"""A grid of gradient measurements: estimators × lags × rollout budgets × group sizes, as tidy rows.

For one env and one policy kind, the learner θ_N and the behaviour policies θ_{N−L} come from
:func:`flashsim.variance.lag.lagged_policies`; every cell of the grid is one
:func:`flashsim.variance.measure_gradient` call with the same seed (common random numbers across
cells, so differences between lags or estimators are not differences of luck in the prompt draws).
Single-rollout estimators ignore the group size (their rows have ``config/group_size`` 1).

An estimator is a registry name, or ``NAME:groups`` to sample grouped batches for an estimator that
does not need them (``rloo:groups`` is RLOO with a leave-one-out baseline among G siblings). User
loss functions (``losses``: ``flashsim variance --loss MODULE:FUNCTION``) are measured after them at
every lag.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from flashsim.config import FORMER
from flashsim.losses import LOSSES, check_loss_options, get_loss, inert_options
from flashsim.policies import make_policy
from flashsim.sim.config import build_tables
from flashsim.testing import ALGORITHMS, CONVENTIONS
from flashsim.testing.conventions import load_function
from flashsim.validation import check_choice, check_instance, check_int, check_nonempty, check_real
from flashsim.variance.lag import lagged_policies
from flashsim.variance.measure import measure_gradient

GROUPED_SUFFIX = ":groups"


@dataclass(frozen=True)
class SweepConfig:
    """One sweep; the field docstrings are the ``flashsim variance`` help text."""

    env: str = "gridworld"
    """Env preset (bandit, bandit_tiny, bandit_hard, gridworld, chain) or a gymnasium id with exact tables."""
    policy: str = "tabular"
    """Policy kind: tabular or linear (uniform start, then exact ascent)."""
    estimators: tuple[str, ...] = ("flash_reinforce", "grpo")
    """Registry losses to measure; NAME:groups samples grouped batches for it (e.g. rloo:groups)."""
    budgets: tuple[int, ...] = (128,)
    """Rollout budgets B per batch (FlashREINFORCE: B prompts x 1; GRPO: B/G prompts x G)."""
    group_sizes: tuple[int, ...] = (4,)
    """Group sizes G of the grouped estimators."""
    lags: tuple[int, ...] = (0, 2, 4, 8)
    """Policy lags L: the behaviour policy is L exact-ascent steps behind the learner."""
    batches: int = 2000
    """Batches M per measurement (a multiple of replicates)."""
    steps: int = 32
    """Exact-ascent steps N from the uniform policy to the measurement point θ_N (lags must be <= N)."""
    step_size: float = 0.2
    """Step length η of the normalised exact gradient ascent (parameter-space L2 norm)."""
    loss_options: Mapping[str, object] = field(default_factory=dict, metadata={FORMER: {"delta": "loss_options.delta"}})
    """Keyword options of the registry estimators (delta, clip_eps, ...), as algorithm.loss_options of flashsim train;
    each goes to the estimators that take it (delta to the gated ones), and each must be taken by one."""
    seed: int = 0
    """Seed of every measurement (the same for all cells: common random numbers)."""
    bootstrap: int = 200
    """Cluster-bootstrap resamples for the confidence intervals (0: none)."""
    replicates: int = 2
    """Rollout sets per prompt draw (for the between/within-prompt split)."""
    losses: tuple[str, ...] = ()
    """Loss functions of yours, MODULE:FUNCTION (imported: your own modules only), measured after the estimators."""
    loss_algorithm: str = "flash_reinforce"
    """The algorithm the losses implement: flash_reinforce, or grpo (grouped batches, every group size)."""
    loss_convention: str = "flashsim"
    """How the losses are called: flashsim, verl or trl (see flashsim check-loss)."""

    def __post_init__(self) -> None:
        check_choice("policy", self.policy, ("tabular", "linear"))
        for name in ("estimators", "budgets", "group_sizes", "lags"):
            check_nonempty(name, getattr(self, name))
        for estimator in self.estimators:
            parse_estimator(estimator)
        check_int("steps", self.steps, low=0)
        for name, low, high in (("budgets", 1, None), ("group_sizes", 1, None), ("lags", 0, self.steps)):
            for index, value in enumerate(getattr(self, name)):
                check_int(f"{name}[{index}]", value, low=low, high=high)
        for name, low in (("batches", 1), ("seed", 0), ("bootstrap", 0), ("replicates", 1)):
            check_int(name, getattr(self, name), low=low)
        check_real("step_size", self.step_size, low=0.0, low_inclusive=False)
        check_instance("loss_options", self.loss_options, Mapping)
        names = [parse_estimator(e)[0] for e in self.estimators]
        for name in names:
            check_loss_options(name, options_for(name, self.loss_options), "loss_options")
        untaken = sorted(set(self.loss_options) - {k for name in names for k in options_for(name, self.loss_options)})
        if untaken:
            raise ValueError(f"loss_options {', '.join(map(repr, untaken))} changes none of the estimators "
                             f"{', '.join(self.estimators)}")
        check_choice("loss_algorithm", self.loss_algorithm, ALGORITHMS)
        check_choice("loss_convention", self.loss_convention, CONVENTIONS)
        grouped = [e for e in self.estimators if parse_estimator(e)[1]]
        grouped += list(self.losses) if self.loss_algorithm == "grpo" else []
        bad = [(b, g) for b in self.budgets for g in self.group_sizes if b % g]
        if grouped and bad:
            raise ValueError(
                f"every budget must be divisible by every group size for {', '.join(grouped)}; "
                f"not so for (budget, group_size) = {bad}"
            )


def options_for(name: str, loss_options: Mapping[str, object]) -> dict[str, object]:
    """The options of ``loss_options`` that the registry loss ``name`` takes and that act on it (δ for a gated row,
    not for ``no_gate``), as :func:`~flashsim.losses.check_loss_options` would accept them."""
    spec = get_loss(name)
    taken = {key: value for key, value in loss_options.items() if key in spec.configurable()}
    inert = inert_options(spec.resolved(taken))
    return {key: value for key, value in taken.items() if key not in inert}


def parse_estimator(text: str) -> tuple[str, bool]:
    """``"rloo:groups"`` → ``("rloo", True)``; ``"grpo"`` → ``("grpo", True)`` (it needs groups)."""
    name, grouped = (text[: -len(GROUPED_SUFFIX)], True) if text.endswith(GROUPED_SUFFIX) else (text, False)
    if name not in LOSSES:
        get_loss(name)  # raises the registry's error listing the valid names
    return name, grouped or LOSSES[name].needs_groups


def sweep_cells(config: SweepConfig) -> list[dict[str, object]]:
    """The grid, one dict of measurement arguments per cell, in output order."""
    cells = []
    for lag in config.lags:
        for label in config.estimators:
            name, grouped = parse_estimator(label)
            for budget in config.budgets:
                for group_size in config.group_sizes if grouped else (1,):
                    cells.append(dict(label=label, estimator=name, grouped=grouped, lag=lag, budget=budget,
                                      group_size=group_size))
    return cells


def measure_sweep(
    config: SweepConfig, progress: Callable[[int, int, dict[str, object]], None] | None = None
) -> list[dict[str, object]]:
    """Measure every cell; return one flat row per cell (``config/…``, ``grad/…``, ``trust/…`` keys).

    ``progress(done, total, row)`` is called after each cell (the CLI prints a line). The user losses
    of ``config.losses`` are imported first (an ``ImportError`` before any measurement), then measured
    at every lag and budget (grpo ones at every group size), after the registry estimators.
    """
    user_losses = {spec: load_function(spec) for spec in config.losses}
    tables = build_tables(config.env)
    start = make_policy(config.policy, tables)
    learner, behaviors = lagged_policies(
        tables, start, steps=config.steps, lags=sorted(set(config.lags)), step_size=config.step_size
    )
    cells = sweep_cells(config) + _user_cells(config, user_losses)
    rows = []
    for index, cell in enumerate(cells):
        options = options_for(cell["estimator"], config.loss_options) if isinstance(cell["estimator"], str) else {
            "algorithm": config.loss_algorithm, "convention": config.loss_convention}
        report = measure_gradient(
            tables, learner, estimator=cell["estimator"], budget=cell["budget"], num_batches=config.batches,
            seed=config.seed, group_size=cell["group_size"], behavior_policy=behaviors[cell["lag"]],
            grouped=cell["grouped"], replicates=config.replicates, bootstrap=config.bootstrap, **options,
        )
        row = {"config/env": config.env, "config/policy": config.policy, "config/lag": cell["lag"],
               "config/label": cell["label"], **report.to_dict()}
        rows.append(row)
        if progress is not None:
            progress(index + 1, len(cells), row)
    return rows


def _user_cells(config: SweepConfig, user_losses: dict[str, Callable]) -> list[dict[str, object]]:
    cells = []
    grouped = config.loss_algorithm == "grpo"
    for lag in config.lags:
        for label, fn in user_losses.items():
            for budget in config.budgets:
                for group_size in config.group_sizes if grouped else (1,):
                    cells.append(dict(label=label, estimator=fn, grouped=grouped, lag=lag, budget=budget,
                                      group_size=group_size))
    return cells


def series_label(row: dict[str, object], varying: Sequence[str] = ()) -> str:
    """A legend label such as ``grpo G=4`` (plus ``B=…`` / ``L=…`` when those vary across lines)."""
    label = str(row["config/label"])
    if int(row["config/group_size"]) > 1:
        label += f" G={row['config/group_size']}"
    if "budget" in varying:
        label += f" B={row['config/budget']}"
    if "lag" in varying:
        label += f" L={row['config/lag']}"
    return label
