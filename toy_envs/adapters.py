"""Exact tables of *other people's* gymnasium envs: the toy-text ``P`` transition table, and lookup.

gymnasium's toy-text envs (``FrozenLake-v1``, ``CliffWalking``, ``Taxi``) expose their whole
dynamics as ``env.unwrapped.P[s][a] = [(probability, next_state, reward, terminated), ...]`` and a
start distribution ``initial_state_distrib``. :func:`p_table_tables` turns that into
:class:`~toy_envs.MDPTables` (hidden state = observation = the env's state, one prompt, K = the most
outcomes of any (state, action)), so ``flashsim.exact`` gives J(θ) and ∇J(θ) for them like for the
toy envs. :func:`exact_tables` is the one place that decides whether an env has exact tables.

Deliberately left out: envs whose rewards are not in [0, 1] (the tables hold Bernoulli means; Taxi
and CliffWalking have negative rewards) and envs without a time limit (the tables are finite-horizon).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from toy_envs.tables import MDPTables


def p_table_tables(env: Any) -> MDPTables:
    """:class:`MDPTables` of a gymnasium env with a ``P`` transition table (e.g. ``FrozenLake-v1``).

    Args:
        env: the env made with ``gymnasium.make`` (its ``spec.max_episode_steps`` is the horizon).

    Example:
        >>> import gymnasium as gym
        >>> tables = p_table_tables(gym.make("FrozenLake-v1"))
        >>> tables.num_states, tables.num_actions, tables.num_outcomes, tables.horizon
        (16, 4, 3, 100)
    """
    base = env.unwrapped
    name = getattr(env.spec, "id", type(base).__name__)
    horizon = getattr(env.spec, "max_episode_steps", None)
    if horizon is None:
        raise ValueError(f"{name} has no time limit (spec.max_episode_steps); exact tables need a horizon.")
    start = getattr(base, "initial_state_distrib", None)
    if start is None:
        raise ValueError(f"{name} has a P table but no initial_state_distrib; its start distribution is unknown.")
    X, A = base.observation_space.n, base.action_space.n
    K = max(len(base.P[s][a]) for s in range(X) for a in range(A))
    next_state = np.full((X, A, K), -1, dtype=np.int64)
    probability, reward = np.zeros((X, A, K)), np.zeros((X, A, K))
    for s in range(X):
        for a in range(A):
            outcomes = list(base.P[s][a])
            outcomes += [(0.0, *outcomes[-1][1:])] * (K - len(outcomes))  # pad with impossible copies
            for k, (p, successor, r, terminated) in enumerate(outcomes):
                next_state[s, a, k] = -1 if terminated else successor
                probability[s, a, k], reward[s, a, k] = p, r
    if reward.min() < 0 or reward.max() > 1:
        raise ValueError(
            f"{name} has rewards in [{reward.min()}, {reward.max()}]; exact tables hold Bernoulli means in [0, 1]."
        )
    return MDPTables(
        horizon=horizon, num_prompts=1, num_states=X, num_observations=X, num_actions=A,
        observation_of_state=np.arange(X), initial_distribution=np.asarray(start, dtype=np.float64)[None],
        next_state=next_state, reward=reward, tool_call=np.zeros((X, A)), train_prompts=[0],
        heldout_prompts=np.zeros(0, dtype=np.int64), observation_features=np.eye(X),
        transition_probability=probability,
    )


def exact_tables(env: Any) -> MDPTables | None:
    """The env's exact tables: ``env.unwrapped.tables()`` if it offers them, else from its ``P`` table, else None."""
    base = env.unwrapped
    if callable(getattr(base, "tables", None)):
        return base.tables()
    if hasattr(base, "P"):
        return p_table_tables(env)
    return None
