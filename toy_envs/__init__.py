"""Toy gymnasium environments with exact tables, for verifying RL-for-LLM losses in simulation.

Importing this package registers (gymnasium 1.x, each with a native numpy vector env as its
``vector_entry_point``, NEXT_STEP autoreset):

* ``toy_envs/PromptBandit-v0`` — :class:`PromptBandit`, one-step prompt x answer bandit;
* ``toy_envs/ToolGridworld-v0`` — :class:`ToolGridworld`, the agentic toy with a slow, useful tool;
* ``toy_envs/ReasoningChain-v0`` — :class:`ReasoningChain`, think-then-answer under a length limit.

All three step through one shared implementation (:mod:`toy_envs.core`) driven by their exact
:class:`MDPTables`, available as ``env.unwrapped.tables()``. :func:`exact_tables` also builds
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

from gymnasium.envs.registration import register, registry

from toy_envs.core import Latency, TabularDynamics, TabularEnv, TabularVectorEnv
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

ENV_IDS = ("toy_envs/PromptBandit-v0", "toy_envs/ToolGridworld-v0", "toy_envs/ReasoningChain-v0")
"""The registered environment ids."""

for _env_id, _name in zip(ENV_IDS, ("PromptBandit", "ToolGridworld", "ReasoningChain")):
    if _env_id not in registry:
        register(
            id=_env_id,
            entry_point=f"toy_envs:{_name}",
            vector_entry_point=f"toy_envs:{_name}VectorEnv",
        )

__all__ = [
    "BANDIT_PRESETS",
    "ENV_IDS",
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
    "ToolGridworld",
    "ToolGridworldConfig",
    "ToolGridworldVectorEnv",
    "bandit_preset",
    "bandit_tables",
    "chain_tables",
    "exact_tables",
    "gridworld_tables",
    "p_table_tables",
]
