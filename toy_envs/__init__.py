"""Toy gymnasium environments with exact tables, for verifying RL-for-LLM losses in simulation.

Importing this package registers (gymnasium 1.x, each with a native numpy vector env as its
``vector_entry_point``, NEXT_STEP autoreset):

* ``toy_envs/PromptBandit-v0`` — :class:`PromptBandit`, one-step prompt x answer bandit;
* ``toy_envs/ToolGridworld-v0`` — :class:`ToolGridworld`, the agentic toy with a slow, useful tool;
* ``toy_envs/ReasoningChain-v0`` — :class:`ReasoningChain`, think-then-answer under a length limit.

All three step through one shared implementation (:mod:`toy_envs.core`) driven by their exact
:class:`MDPTables`, available as ``env.unwrapped.tables()``; :data:`TOY_ENVS` is the registration table
(one :class:`EnvRow` per env: a new env is its file and one row). :func:`exact_tables` also builds
tables for gymnasium's toy-text envs from their ``P`` transition table (``FrozenLake-v1``). This
package imports neither torch nor flashsim.

>>> import gymnasium as gym
>>> import toy_envs
>>> env = gym.make("toy_envs/ToolGridworld-v0")
>>> env.unwrapped.tables().horizon
20
>>> envs = gym.make_vec("toy_envs/PromptBandit-v0", num_envs=4)
>>> observations, info = envs.reset(seed=0)
>>> observations.shape
(4,)
"""

from __future__ import annotations

from toy_envs.core import (
    EnvRow,
    Latency,
    TabularDynamics,
    TabularEnv,
    TabularVectorEnv,
    ToyEnv,
    ToyVectorEnv,
    configured_latency,
)
from toy_envs.prompt_bandit import (
    BANDIT_PRESETS,
    PromptBandit,
    PromptBanditConfig,
    PromptBanditVectorEnv,
    bandit_preset,
    bandit_tables,
)
from toy_envs.reasoning_chain import ReasoningChain, ReasoningChainConfig, ReasoningChainVectorEnv, chain_tables
from toy_envs.tables import MDPTables, exact_tables, p_table_tables
from toy_envs.tool_gridworld import ToolGridworld, ToolGridworldConfig, ToolGridworldVectorEnv, gridworld_tables

TOY_ENVS: tuple[EnvRow, ...] = (
    EnvRow("toy_envs/PromptBandit-v0", "toy_envs.prompt_bandit:PromptBandit",
           {"bandit": {}, "bandit_tiny": bandit_preset("tiny"), "bandit_hard": bandit_preset("hard")}),
    EnvRow("toy_envs/ToolGridworld-v0", "toy_envs.tool_gridworld:ToolGridworld", {"gridworld": {}}),
    EnvRow("toy_envs/ReasoningChain-v0", "toy_envs.reasoning_chain:ReasoningChain", {"chain": {}}),
)
"""The registration table: one row per toy env (its gymnasium id, its class, its ``--env`` presets). A new toy
env is its file (a :class:`ToyEnv` subclass and its :class:`ToyVectorEnv`) and one row here
(docs/design.md, "Adding a toy env")."""

ENV_IDS = tuple(row.env_id for row in TOY_ENVS)
"""The registered environment ids."""

for _row in TOY_ENVS:
    _row.register()

__all__ = [
    "BANDIT_PRESETS",
    "ENV_IDS",
    "TOY_ENVS",
    "EnvRow",
    "Latency",
    "MDPTables",
    "PromptBandit",
    "PromptBanditConfig",
    "PromptBanditVectorEnv",
    "ReasoningChain",
    "ReasoningChainConfig",
    "ReasoningChainVectorEnv",
    "TabularDynamics",
    "TabularEnv",
    "TabularVectorEnv",
    "ToyEnv",
    "ToyVectorEnv",
    "ToolGridworld",
    "ToolGridworldConfig",
    "ToolGridworldVectorEnv",
    "bandit_preset",
    "bandit_tables",
    "chain_tables",
    "configured_latency",
    "exact_tables",
    "gridworld_tables",
    "p_table_tables",
]
