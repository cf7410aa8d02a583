"""The simulator's environments: a gymnasium vector env of B sub-envs, plus what is known about it.

``--env`` is either a preset name of :data:`ENVS` (a toy env id with keyword options) or any
registered gymnasium id with ``Discrete`` observations and actions. :func:`make_env` builds the
vector env with ``gymnasium.make_vec`` (the env's own ``vector_entry_point`` when it has one — the
toy envs' native numpy vector env — else gymnasium's synchronous vector env) and asks
:func:`toy_envs.exact_tables` for exact tables (``env.unwrapped.tables()``, or the ``P`` table of
gymnasium's toy-text envs such as ``FrozenLake-v1``). Without tables the simulator still trains and
reports Monte Carlo success with its standard error.

Durations: the toy envs report each step's simulated seconds in ``info["duration"]`` from their
:class:`toy_envs.Latency` (the only latency model); a :class:`~flashsim.sim.config.TimingModel`
given in the config is passed to the env as its ``Latency``. Envs without ``info["duration"]`` take
``TimingModel.step_duration`` per step.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from types import MappingProxyType
from typing import Any

import gymnasium as gym
import numpy as np

import toy_envs
from flashsim.exact import optimal_success  # noqa: F401  (re-exported: ``flashsim.sim.optimal_success``)
from flashsim.sim.config import TimingModel


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


ENVS: Mapping[str, EnvPreset] = MappingProxyType({
    "bandit": EnvPreset("toy_envs/PromptBandit-v0"),
    "bandit_tiny": EnvPreset("toy_envs/PromptBandit-v0", toy_envs.bandit_preset("tiny")),
    "bandit_hard": EnvPreset("toy_envs/PromptBandit-v0", toy_envs.bandit_preset("hard")),
    "gridworld": EnvPreset("toy_envs/ToolGridworld-v0"),
    "chain": EnvPreset("toy_envs/ReasoningChain-v0"),
})
"""Env presets by ``--env`` name: PromptBandit (64 prompts × 4 answers; ``tiny`` 2 × 2; ``hard`` 8
answers, harder prompts), ToolGridworld (5 × 5, H = 20, tool latency median 5 s, σ = 1) and
ReasoningChain (16 prompts, H = 16). Any other registered gymnasium id is accepted too."""


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


