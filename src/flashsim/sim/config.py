"""Configuration of a simulated training run: frozen dataclasses, the ``--lag`` syntax, and the environments.

Every field carries a docstring, which :mod:`flashsim.config` makes the ``flashsim train --help`` text
(one source of truth, as in CleanRL); the same module loads these classes from YAML and ``--set``.
Derived values are properties. An algorithm is a loss of :data:`flashsim.losses.LOSSES` (its row
gives the group size, :meth:`AlgorithmConfig.for_loss`) plus how batches are collected and used.

``--env`` is either a preset name of :data:`ENVS` (a toy env id with keyword options) or any
registered gymnasium id with ``Discrete`` observations and actions. :func:`make_env` builds the
vector env with ``gymnasium.make_vec`` (the env's own ``vector_entry_point`` when it has one — the
toy envs' native numpy vector env — else gymnasium's synchronous vector env) and asks
:func:`toy_envs.exact_tables` for exact tables (``env.unwrapped.tables()``, or the ``P`` table of
gymnasium's toy-text envs such as ``FrozenLake-v1``). Without tables the simulator still trains and
reports Monte Carlo success with its standard error.

Durations: the toy envs report each step's simulated seconds in ``info["duration"]`` from their
:class:`toy_envs.Latency` (the only latency model); a :class:`TimingModel` given in the config is
passed to the env as its ``Latency``. Envs without ``info["duration"]`` take
``TimingModel.step_duration`` per step.

Glossary: B trajectories per collected batch, G trajectories per group (prompt), L policy lag in
learner updates, δ the sequence-gate threshold, N rollout workers.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

import gymnasium as gym
import numpy as np

import toy_envs
from flashsim.config import PARSE, SECTION_BASE
from flashsim.losses.registry import LOSSES, check_loss_options
from flashsim.validation import check_choice, check_instance, check_int, check_probability, check_real


@dataclass(frozen=True)
class FixedLag:
    """Every trajectory consumed by update k was sampled by snapshot θ_{max(k − L, 0)}."""

    lag: int = 0
    """The policy lag L in learner updates (0 is on-policy)."""

    def __post_init__(self) -> None:
        check_int("lag", self.lag, low=0)

    @property
    def max_lag(self) -> int:
        """The largest lag this model can produce (how many old snapshots must be kept)."""
        return self.lag


@dataclass(frozen=True)
class RandomLag:
    """Each trajectory (each group, for G > 1) draws its own lag L from a distribution, capped at ``max_lag``."""

    max_lag: int = 8
    """Largest lag; draws above it are capped."""
    distribution: str = "uniform"
    """``uniform`` on {0..max_lag}, ``geometric`` (on {0, 1, ..}) or ``poisson``, both with mean ``mean``."""
    mean: float = 2.0
    """Mean lag of the geometric and Poisson distributions (before capping)."""

    def __post_init__(self) -> None:
        check_int("max_lag", self.max_lag, low=0)
        check_choice("distribution", self.distribution, ("uniform", "geometric", "poisson"))
        check_real("mean", self.mean, low=0.0)


@dataclass(frozen=True)
class AsyncWorkers:
    """N rollout workers and one learner in simulated time; the lag *emerges* from the timing.

    Each worker starts a trajectory with the newest published snapshot, finishes it after its simulated
    duration (see :class:`TimingModel`) and starts the next. The learner takes the next B completed
    trajectories (or B/G complete groups) in completion order, spends ``TimingModel.update_time`` on
    the update, then publishes the new snapshot.
    """

    num_workers: int = 64
    """Number of rollout workers N."""
    max_queued: int | None = None
    """Backpressure: a worker pauses while this many completed trajectories wait for the learner
    (default: one batch, B). Must be >= B."""
    synchronous: bool = False
    """Synchronous baseline: each version generates exactly one batch, then workers wait for the
    learner (lag 0, a barrier per update)."""
    crash_prob: float = 0.0
    """Probability that a worker crashes during a trajectory; the trajectory is dropped, counted, and
    its task (prompt, group) is issued again."""
    restart_time: float = 5.0
    """Simulated seconds a crashed worker needs to come back."""

    def __post_init__(self) -> None:
        check_int("num_workers", self.num_workers, low=1)
        if self.max_queued is not None:
            check_int("max_queued", self.max_queued, low=1)
        check_probability("crash_prob", self.crash_prob)
        check_real("restart_time", self.restart_time, low=0.0)


LagModel = FixedLag | RandomLag | AsyncWorkers


def parse_lag(spec: str) -> LagModel:
    """Parse the ``--lag`` syntax.

    ``L`` (an integer) is :class:`FixedLag`; ``random:MAX[:DIST[:MEAN]]`` is :class:`RandomLag`;
    ``workers:N[:sync]`` is :class:`AsyncWorkers` with N workers (``sync`` for the synchronous barrier).

    >>> parse_lag("8"), parse_lag("random:4:geometric:1.5").distribution, parse_lag("workers:16").num_workers
    (FixedLag(lag=8), 'geometric', 16)
    """
    if not isinstance(spec, str):
        raise TypeError(f"lag spec must be a string, got {type(spec).__name__}")
    parts = spec.strip().split(":")
    try:
        if len(parts) == 1:
            return FixedLag(int(parts[0]))
        if parts[0] == "random" and 2 <= len(parts) <= 4:
            options = {"max_lag": int(parts[1])}
            if len(parts) > 2:
                options["distribution"] = parts[2]
            if len(parts) > 3:
                options["mean"] = float(parts[3])
            return RandomLag(**options)
        if parts[0] == "workers" and len(parts) in (2, 3) and parts[2:] in ([], ["sync"]):
            return AsyncWorkers(num_workers=int(parts[1]), synchronous=len(parts) == 3)
    except ValueError as error:
        raise ValueError(f"invalid --lag {spec!r}: {error}") from None
    raise ValueError(
        f"invalid --lag {spec!r}; expected an integer L, 'random:MAX[:uniform|geometric|poisson[:MEAN]]' "
        "or 'workers:N[:sync]'"
    )


@dataclass(frozen=True)
class TimingModel(toy_envs.Latency):
    """Simulated durations: the toy envs' :class:`toy_envs.Latency` (its four fields, under its names) plus
    the learner's update time and stragglers.

    A trajectory of T steps with C tool calls lasts
    ``Σ_t step_duration·e^{σ_s z_t} + Σ_c tool_latency·e^{σ_t z_c}`` with independent standard normals z
    (σ_s = ``step_duration_sigma``, σ_t = ``tool_latency_sigma``; the durations are medians); a straggler
    lasts ``straggler_factor`` times that. The env computes the durations; the simulator schedules with them.
    """

    update_time: float = 1.0
    """Simulated seconds one learner update takes."""
    straggler_prob: float = 0.0
    """Probability that a trajectory is a straggler."""
    straggler_factor: float = 10.0
    """How many times longer a straggler takes."""

    def __post_init__(self) -> None:
        for name in (*(f.name for f in fields(toy_envs.Latency)), "update_time"):  # Latency's checks, as TypeErrors
            check_real(name, getattr(self, name), low=0.0)
        check_probability("straggler_prob", self.straggler_prob)
        check_real("straggler_factor", self.straggler_factor, low=1.0)

    @property
    def latency(self) -> toy_envs.Latency:
        """The env's part: what a toy env is built with."""
        return toy_envs.Latency(**{f.name: getattr(self, f.name) for f in fields(toy_envs.Latency)})


@dataclass(frozen=True)
class AlgorithmConfig:
    """An algorithm is a loss of :data:`flashsim.losses.LOSSES` plus how batches are collected and used."""

    loss: str = "flash_reinforce"
    """Name in the loss registry (``flashsim.losses.LOSSES``)."""
    batch_size: int = 128
    """Trajectories per collected batch B (GRPO: B/G prompts × G siblings)."""
    group_size: int = 1
    """Siblings per prompt G; the learner waits for whole groups when G > 1."""
    epochs: int = 1
    """Passes over each collected batch (PPO epochs)."""
    minibatches: int = 1
    """Sequential optimizer steps per pass, each on one of m equal slices of the batch."""
    optimizer: str = "adam"
    """``adam`` or ``sgd``."""
    learning_rate: float = 0.1
    """Optimizer step size."""
    loss_options: Mapping[str, object] = field(default_factory=dict)
    """Keyword options of the loss (``delta``, ``clip_eps``, ``tis_cap`` ...)."""

    def __post_init__(self) -> None:
        check_choice("loss", self.loss, LOSSES)
        options = check_loss_options(self.loss, self.loss_options, "algorithm.loss_options")
        for name in ("batch_size", "group_size", "epochs", "minibatches"):
            check_int(name, getattr(self, name), low=1)
        check_choice("optimizer", self.optimizer, ("adam", "sgd"))
        check_real("learning_rate", self.learning_rate, low=0.0, low_inclusive=False)
        if self.batch_size % self.group_size:
            raise ValueError(f"batch_size ({self.batch_size}) must be a multiple of group_size ({self.group_size})")
        if self.batch_size % self.minibatches or (self.batch_size // self.minibatches) % self.group_size:
            raise ValueError(
                f"batch_size ({self.batch_size}) must split into minibatches ({self.minibatches}) of whole "
                f"groups (group_size {self.group_size})"
            )
        object.__setattr__(self, "loss_options", options)

    @classmethod
    def for_loss(cls, loss: str, **fields: Any) -> AlgorithmConfig:
        """The algorithm ``--algo loss``: that loss with its group size (``LOSSES[loss].group_size``: 8 for
        GRPO, RLOO and Dr. GRPO, 1 otherwise); ``fields`` set the others.

        >>> grpo, minibatches = AlgorithmConfig.for_loss("grpo"), AlgorithmConfig.for_loss("tis", minibatches=4)
        >>> grpo.loss, grpo.group_size, minibatches.group_size, minibatches.minibatches
        ('grpo', 8, 1, 4)
        """
        check_choice("loss", loss, LOSSES)
        return cls(loss, **{"group_size": LOSSES[loss].group_size, **fields})

    @property
    def updates_per_batch(self) -> int:
        """Optimizer steps taken on one collected batch (epochs × minibatches)."""
        return self.epochs * self.minibatches

    @property
    def prompts_per_batch(self) -> int:
        """Distinct prompts (groups) per collected batch, B/G."""
        return self.batch_size // self.group_size


@dataclass(frozen=True)
class TrainConfig:
    """One simulated training run: environment, algorithm, lag, timing, budget, seed."""

    env: str = "bandit"
    """Environment: a preset (``bandit``, ``gridworld``, ``chain``; see :data:`ENVS`) or any
    registered gymnasium id with Discrete observations and actions (e.g. ``FrozenLake-v1``)."""
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    """Loss and batching (``--algo NAME`` is :meth:`AlgorithmConfig.for_loss`)."""
    lag: LagModel = field(default_factory=FixedLag, metadata={PARSE: parse_lag})
    """Policy lag: L (fixed), random:MAX[:uniform|geometric|poisson[:MEAN]], or workers:N[:sync] (emergent,
    event-driven); in a file also a mapping with ``type: FixedLag | RandomLag | AsyncWorkers``."""
    timing: TimingModel | None = field(
        default=None, metadata={SECTION_BASE: lambda values: env_timing(values["env"])})
    """Simulated durations of steps, tool calls and learner updates
    (None: the env preset's latency, 1 s updates, no stragglers; keys set refine that)."""
    policy: str = "tabular"
    """Policy class: ``tabular`` (one logit per observation and action), ``linear`` or ``mlp`` (over the
    env's observation features; these generalise to held-out prompts)."""
    updates: int = 200
    """Learner updates (optimizer steps) to run."""
    seed: int = 0
    """Seed of the run's single random generator (same seed, same results)."""
    eval_every: int = 10
    """Exact train/held-out success every this many updates (and at update 0); NaN in the rows between."""
    logprob_noise: float = 0.0
    """Std of Gaussian noise added to stored behaviour log-probs (the inference-engine mismatch)."""
    checkpoint_every: int = 100
    """Write a resumable checkpoint every this many updates (and at the end)."""
    env_options: Mapping[str, object] = field(default_factory=dict)
    """Keyword arguments overriding the env preset's."""

    def __post_init__(self) -> None:
        check_int("updates", self.updates, low=1)
        check_int("seed", self.seed, low=0)
        check_int("eval_every", self.eval_every, low=1)
        check_int("checkpoint_every", self.checkpoint_every, low=1)
        check_real("logprob_noise", self.logprob_noise, low=0.0)
        check_choice("policy", self.policy, ("tabular", "linear", "mlp"))
        check_instance("env", self.env, str)
        check_instance("algorithm", self.algorithm, AlgorithmConfig)
        check_instance("timing", self.timing, (TimingModel, type(None)))
        check_instance("lag", self.lag, (FixedLag, RandomLag, AsyncWorkers))
        queued = getattr(self.lag, "max_queued", None)
        if queued is not None and queued < self.algorithm.batch_size:
            raise ValueError(f"max_queued ({queued}) must be >= batch_size ({self.algorithm.batch_size})")
        object.__setattr__(self, "env_options", dict(self.env_options))

    def with_updates(self, updates: int) -> TrainConfig:
        """The same run with another update budget (everything else, hence every result, unchanged)."""
        return replace(self, updates=updates)


@dataclass(frozen=True)
class EnvPreset:
    """A registered env id and its keyword options (the simulated timing is the env's own latency)."""

    env_id: str
    """A registered gymnasium id (``toy_envs/PromptBandit-v0`` ...)."""
    options: Mapping[str, object] = field(default_factory=dict)
    """Keyword arguments of the env."""

    @property
    def timing(self) -> TimingModel:
        """The env's own step and tool latency, as the simulator's :class:`TimingModel` (read, not copied)."""
        return timing_of(gym.make(self.env_id, **self.options))


class _Presets(Mapping[str, EnvPreset]):
    """``--env`` name → :class:`EnvPreset`, read from the registration table :data:`toy_envs.TOY_ENVS` at each
    lookup (each row registered with gymnasium first), so that a row added there is a preset here."""

    def _table(self) -> dict[str, EnvPreset]:
        presets: dict[str, EnvPreset] = {}
        for row in toy_envs.TOY_ENVS:
            row.register()
            presets.update({name: EnvPreset(row.env_id, options) for name, options in row.presets.items()})
        return presets

    def __getitem__(self, name: str) -> EnvPreset:
        return self._table()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._table())

    def __len__(self) -> int:
        return len(self._table())


ENVS: Mapping[str, EnvPreset] = _Presets()
"""Env presets by ``--env`` name, the rows of :data:`toy_envs.TOY_ENVS`: PromptBandit (64 prompts × 4 answers;
``tiny`` 2 × 2; ``hard`` 8 answers, harder prompts), ToolGridworld (5 × 5, H = 20, tool latency median 5 s,
σ = 1) and ReasoningChain (16 prompts, H = 16). Any other registered gymnasium id is accepted too."""


def env_timing(name: str) -> TimingModel:
    """The :class:`TimingModel` of env ``name``'s own latency (what ``timing: None`` means for it)."""
    return ENVS.get(name, EnvPreset(name)).timing


@dataclass(frozen=True, eq=False)
class SimEnv:
    """A vector env for the simulator and what it knows about the env.

    Shape:
        train_prompts ``[P_train] int64``, heldout_prompts ``[P_heldout] int64``; observation_features
        ``[O, d] float64`` (one-hot when the env has no tables).
    """

    name: str
    vector_env: Any
    """The gymnasium ``VectorEnv`` (``num_envs`` sub-envs, reset at every collection)."""
    tables: toy_envs.MDPTables | None
    """Exact tables, or None (then success is a Monte Carlo estimate)."""
    horizon: int
    """H: the longest possible episode (the tables' horizon or the env's ``max_episode_steps``)."""
    num_observations: int
    num_actions: int
    train_prompts: np.ndarray
    heldout_prompts: np.ndarray
    observation_features: np.ndarray
    pins_prompts: bool
    """Whether ``reset(options={"prompt": [N]})`` pins each sub-env's prompt (the toy envs)."""

    @property
    def num_envs(self) -> int:
        return int(self.vector_env.num_envs)


def make_env(
    name: str, num_envs: int, options: Mapping[str, object] | None = None, timing: TimingModel | None = None
) -> SimEnv:
    """The env ``name`` (a preset of :data:`ENVS` or a gymnasium id) as ``num_envs`` vector sub-envs.

    Raises:
        ValueError: ``name`` is not registered, its spaces are not ``Discrete``, or it has no time limit.
    """
    preset = ENVS.get(name, EnvPreset(name))
    kwargs = {**preset.options, **dict(options or {})}
    is_toy = preset.env_id.startswith("toy_envs/")
    if timing is not None and is_toy:
        kwargs["latency"] = timing.latency
    single = _make_single(name, preset.env_id, kwargs)
    _check_discrete(name, single)
    try:
        tables = toy_envs.exact_tables(single)
    except ValueError:  # a P table the tables cannot hold (Taxi's negative rewards): Monte Carlo metrics
        tables = None
    horizon = tables.horizon if tables is not None else getattr(single.spec, "max_episode_steps", None)
    if horizon is None:
        raise ValueError(
            f"{name} has no time limit: register it with max_episode_steps (or make it with "
            "gymnasium.wrappers.TimeLimit); the simulator pads trajectories to the horizon."
        )
    mode = "vector_entry_point" if single.spec.vector_entry_point is not None else "sync"
    vector_env = gym.make_vec(preset.env_id, num_envs=num_envs, vectorization_mode=mode, **kwargs)
    O, A = int(single.observation_space.n), int(single.action_space.n)
    if tables is not None:
        train, heldout, features = tables.train_prompts, tables.heldout_prompts, tables.observation_features
    else:
        train, heldout, features = np.zeros(1, np.int64), np.zeros(0, np.int64), np.eye(O)
    return SimEnv(name, vector_env, tables, int(horizon), O, A, train, heldout, features, pins_prompts=is_toy)


def _make_single(name: str, env_id: str, kwargs: dict) -> gym.Env:
    if env_id not in gym.registry:
        raise ValueError(
            f"env must be one of the presets {', '.join(ENVS)} or a registered gymnasium id; got {name!r}"
        )
    return gym.make(env_id, **kwargs)


def _check_discrete(name: str, env: gym.Env) -> None:
    """Observations and actions must be ``Discrete``: the simulator's policies are tables over them."""
    missing = [
        f"{what} space is {space} (needs Discrete starting at 0)"
        for what, space in (("observation", env.observation_space), ("action", env.action_space))
        if not isinstance(space, gym.spaces.Discrete) or space.start != 0
    ]
    if missing:
        raise ValueError(
            f"{name} cannot run in the simulator: its {' and its '.join(missing)}. The simulator's policies "
            "act on a finite set of observations with a finite set of actions."
        )


def timing_of(env: gym.Env) -> TimingModel:
    """The :class:`TimingModel` of an env's own latency (no tool latency for envs without one)."""
    dynamics = getattr(env.unwrapped, "_dynamics", None)
    if dynamics is None:
        return TimingModel()
    return TimingModel(**asdict(dynamics.latency))


def build_tables(name: str, options: Mapping[str, object] | None = None) -> toy_envs.MDPTables:
    """Exact tables of env ``name`` with ``options`` overriding the preset's keyword arguments.

    >>> build_tables("bandit_tiny").expected_reward.tolist()
    [[0.9, 0.2], [0.3, 0.7]]
    """
    preset = ENVS.get(name, EnvPreset(name))
    tables = toy_envs.exact_tables(_make_single(name, preset.env_id, {**preset.options, **dict(options or {})}))
    if tables is None:
        raise ValueError(f"{name} offers no exact tables (neither env.unwrapped.tables() nor a P table)")
    return tables


