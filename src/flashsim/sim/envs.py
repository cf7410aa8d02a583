"""Environment presets of the simulator: which toy env, with which options and which default timing.

The simulator samples from an env's exact :class:`toy_envs.MDPTables` (see
:mod:`flashsim.sim.rollouts`); this module only names the envs and builds their tables. Each preset's
default :class:`~flashsim.sim.config.TimingModel` copies the env's own latency settings (step
duration, median tool latency and its lognormal σ), so simulated durations match what the gymnasium
env reports in ``info["duration"]``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

import toy_envs
from flashsim.sim.config import TimingModel


@dataclass(frozen=True)
class EnvPreset:
    """A toy env class, its keyword options, and the simulated timing that matches it."""

    env_class: type
    """The gymnasium env class (``toy_envs.PromptBandit`` ...)."""
    options: Mapping[str, object] = field(default_factory=dict)
    """Keyword arguments of the env class."""
    timing: TimingModel = field(default_factory=TimingModel)
    """Default simulated timing for this env."""


ENVS: Mapping[str, EnvPreset] = MappingProxyType({
    "bandit": EnvPreset(toy_envs.PromptBandit, {}, TimingModel(step_time=1.0, tool_latency=0.0)),
    "bandit_tiny": EnvPreset(
        toy_envs.PromptBandit, toy_envs.bandit_preset("tiny"), TimingModel(step_time=1.0, tool_latency=0.0)
    ),
    "bandit_hard": EnvPreset(
        toy_envs.PromptBandit, toy_envs.bandit_preset("hard"), TimingModel(step_time=1.0, tool_latency=0.0)
    ),
    "gridworld": EnvPreset(toy_envs.ToolGridworld, {}, TimingModel(step_time=1.0, tool_latency=5.0, tool_sigma=1.0)),
    "chain": EnvPreset(toy_envs.ReasoningChain, {}, TimingModel(step_time=1.0, tool_latency=0.0)),
})
"""Env presets by ``--env`` name: PromptBandit (64 prompts × 4 answers; ``tiny`` 2 × 2; ``hard`` 8
answers, harder prompts), ToolGridworld (5 × 5, H = 20, tool latency median 5 s, σ = 1) and
ReasoningChain (16 prompts, H = 16)."""


def build_tables(name: str, options: Mapping[str, object] | None = None) -> toy_envs.MDPTables:
    """Exact tables of env preset ``name`` with ``options`` overriding the preset's keyword arguments.

    >>> build_tables("bandit_tiny").expected_reward.tolist()
    [[0.9, 0.2], [0.3, 0.7]]
    """
    if name not in ENVS:
        raise ValueError(f"env must be one of {', '.join(ENVS)}; got {name!r}")
    preset = ENVS[name]
    env = preset.env_class(**{**preset.options, **dict(options or {})})
    return env.unwrapped.tables()


def optimal_success(tables: toy_envs.MDPTables, prompts: str = "train") -> float:
    """The best achievable mean success over ``prompts`` (``train`` or ``heldout``) by a tabular policy.

    Exact for the bandit (the best answer per prompt); for multi-step envs, backward induction with a
    max over actions in the hidden state, which upper-bounds what an observation-based policy reaches.
    """
    values = np.zeros(tables.num_states + 1)  # last entry: ended
    for _ in range(tables.horizon):
        successors = (tables.transition_probability * values[tables.next_state]).sum(axis=2)
        values = np.append((tables.expected_reward + successors).max(axis=1), 0.0)
    selected = tables.train_prompts if prompts == "train" else tables.heldout_prompts
    if selected.size == 0:
        return float("nan")
    return float((tables.initial_distribution[selected] @ values[:-1]).mean())
