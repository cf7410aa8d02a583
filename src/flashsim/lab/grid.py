"""The lab's grid: which settings the documentation's lab page can show, and the cells that compute them.

A *setting* is one choice of the page's controls: env × algorithm × gate threshold δ × policy lag L ×
batch design (B/G prompts × G rollouts per prompt at one budget B). Each setting has

- a learning curve per seed: exact train success against rollouts spent, and the gate's acceptance
  rate, from one simulated run (:class:`~flashsim.sim.TrainConfig` with a fixed lag L);
- one update-quality measurement at a fixed policy: cosine of ĝ to ∇J, the bias ‖E ĝ − ∇J‖ and the
  variance, as ``flashsim variance`` measures them (:func:`flashsim.variance.measure_gradient` at the
  point θ_N of the exact-ascent trajectory, behaviour policy θ_{N−L}).

δ only exists for the gated losses (``flash_reinforce``, ``token_gate``): the others have the single
δ label ``none``, and "δ = none" of a gated loss is the ``no_gate`` row of the registry (the page shows
that series). A grouped-only loss (GRPO) has no single-rollout design (one rollout per prompt gives
every advantage 0), so its G = 1 settings do not exist.

Glossary: B rollouts per batch, G rollouts per prompt, L policy lag, δ gate threshold, N ascent steps.
"""

from __future__ import annotations

from dataclasses import dataclass

from flashsim.losses import DEFAULT_DELTA, LOSSES
from flashsim.validation import check_choice, check_int, check_nonempty, check_real
from flashsim.variance.sweep import options_for

NO_GATE = "none"
"""The δ label of a setting without a sequence gate."""


@dataclass(frozen=True)
class LabConfig:
    """The lab's grid; the field docstrings are the ``flashsim lab`` help text."""

    envs: tuple[str, ...] = ("bandit", "gridworld")
    """Env presets with exact tables (bandit, gridworld, chain, ...)."""
    algorithms: tuple[str, ...] = ("flash_reinforce", "grpo", "token_gate", "no_gate")
    """Registry losses the page offers."""
    lags: tuple[int, ...] = (0, 1, 2, 4, 8, 16)
    """Fixed policy lags L (learner updates between sampling and use)."""
    deltas: tuple[float, ...] = (1e-3, DEFAULT_DELTA, 1e-2)
    """Gate thresholds δ of the gated losses (δ = none, no gate, is always in the grid)."""
    budget: int = 128
    """Rollouts per batch B, the same for every batch design."""
    group_sizes: tuple[int, ...] = (1, 4)
    """Rollouts per prompt G of the batch designs (B/G prompts x G)."""
    seeds: int = 5
    """Seeds per learning curve (seeds 0 .. seeds-1)."""
    updates: int = 100
    """Learner updates per run."""
    eval_every: int = 5
    """Exact success every this many updates (and after update 0)."""
    learning_rate: float = 0.1
    """Adam step size of every run."""
    quality_batches: int = 1000
    """Batches M per update-quality measurement (a multiple of 2)."""
    quality_steps: int = 32
    """Exact-ascent steps N to the fixed policy θ_N of the quality measurements (>= the largest lag)."""
    quality_step_size: float = 0.2
    """Step length η of that exact ascent."""

    def __post_init__(self) -> None:
        for name in ("envs", "algorithms", "lags", "deltas", "group_sizes"):
            check_nonempty(name, getattr(self, name))
        for index, name in enumerate(self.algorithms):
            check_choice(f"algorithms[{index}]", name, LOSSES)
        check_int("quality_steps", self.quality_steps, low=0)
        for index, lag in enumerate(self.lags):
            check_int(f"lags[{index}]", lag, low=0, high=self.quality_steps)
        for index, delta in enumerate(self.deltas):
            check_real(f"deltas[{index}]", delta, low=0.0, low_inclusive=False)
        check_int("budget", self.budget, low=1)
        for index, size in enumerate(self.group_sizes):
            check_int(f"group_sizes[{index}]", size, low=1)
            if self.budget % size:
                raise ValueError(f"group_sizes[{index}] ({size}) must divide budget ({self.budget})")
        for name in ("seeds", "updates", "eval_every"):
            check_int(name, getattr(self, name), low=1)
        check_int("quality_batches", self.quality_batches, low=4)
        if self.quality_batches % 2:
            raise ValueError(f"quality_batches must be even (two rollout sets per prompt draw), "
                             f"got {self.quality_batches}")
        check_real("learning_rate", self.learning_rate, low=0.0, low_inclusive=False)
        check_real("quality_step_size", self.quality_step_size, low=0.0, low_inclusive=False)


@dataclass(frozen=True)
class Setting:
    """One choice of the page's controls (δ None: no gate)."""

    env: str
    algorithm: str
    delta: float | None
    lag: int
    group_size: int

    @property
    def key(self) -> str:
        """``env|algorithm|δ|L|G``, the data file's key (δ as :func:`delta_label` writes it)."""
        return "|".join((self.env, self.algorithm, delta_label(self.delta), str(self.lag), str(self.group_size)))

    @property
    def loss_options(self) -> dict[str, float]:
        return {} if self.delta is None else {"delta": self.delta}


def delta_label(delta: float | None) -> str:
    """δ as the page spells it (``%g``: ``0.001``, ``0.01``); ``none`` for no gate.

    >>> delta_label(1e-3), delta_label(None)
    ('0.001', 'none')
    """
    return NO_GATE if delta is None else format(delta, "g")


def is_gated(algorithm: str) -> bool:
    """Whether δ acts on the loss ``algorithm`` (its row has a sequence gate).

    >>> is_gated("flash_reinforce"), is_gated("token_gate"), is_gated("no_gate"), is_gated("grpo")
    (True, True, False, False)
    """
    return "delta" in options_for(algorithm, {"delta": 1e-3})


def settings(config: LabConfig) -> list[Setting]:
    """Every setting of the grid, in the data file's order."""
    found = []
    for env in config.envs:
        for group_size in config.group_sizes:
            for algorithm in config.algorithms:
                if group_size == 1 and LOSSES[algorithm].needs_groups:
                    continue
                for delta in config.deltas if is_gated(algorithm) else (None,):
                    found += [Setting(env, algorithm, delta, lag, group_size) for lag in config.lags]
    return found
