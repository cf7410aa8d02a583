"""``MDPTables``: the exact dynamics of a toy env, as plain numpy arrays; how they are built and checked.

Every toy env is a finite-horizon problem over a small set of hidden states ``x``: a start state
drawn given the prompt, K possible successors of each (state, action) with their probabilities
(K = 1, deterministic, for the three toy envs; FrozenLake's slippery ice has K = 3) and a Bernoulli
reward coin per outcome. The agent sees ``observation_of_state[x]``. These tables are both what
the envs step through (``toy_envs.core.TabularDynamics``) and what ``flashsim.exact`` runs backward
induction over, so the simulator and the exact gradient can never disagree about the dynamics.

This module holds, in order:

* ``check_array``, the array check of the toy-env configurations (the scalar ones, ``check_int`` and
  ``check_real``, are :mod:`flashsim.validation`'s: the one argument validator, standard library only, the
  one module of flashsim that ``toy_envs`` imports; it imports neither torch nor any flashsim layer);
* the helpers the toy envs build their tables with (``split_prompts``, ``answer_features``);
* :class:`MDPTables`;
* :func:`exact_tables` and :func:`p_table_tables`: exact tables of *other people's* gymnasium envs.

Glossary: H horizon, P prompts, X hidden states, O observations, A actions, K outcomes of a step,
d feature size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from flashsim.validation import check_int

#: Tolerance for "rows sum to 1" (float64 rounding of generated distributions).
ROW_SUM_TOLERANCE = 1e-9


def check_array(name: str, value: object, shape: tuple[int | None, ...], *, probability: bool = False) -> np.ndarray:
    """``value`` as a float64 array of ``shape`` (None = any size); optionally entries in [0, 1]."""
    array = np.asarray(value, dtype=np.float64)
    if array.ndim != len(shape) or any(s is not None and s != n for s, n in zip(shape, array.shape)):
        expected = "[" + ", ".join("*" if s is None else str(s) for s in shape) + "]"
        raise ValueError(f"{name} must have shape {expected}, got {list(array.shape)}.")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} must be finite.")
    if probability and (array.min(initial=0.0) < 0.0 or array.max(initial=0.0) > 1.0):
        raise ValueError(
            f"{name} must hold probabilities in [0, 1], got values in [{array.min()}, {array.max()}]; "
            "clip or rescale them."
        )
    return array


def split_prompts(num_prompts: int, heldout_fraction: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Random train / held-out split: ``floor(heldout_fraction * P)`` held-out prompts, sorted ids."""
    num_heldout = int(np.floor(heldout_fraction * num_prompts))
    if num_heldout >= num_prompts:
        raise ValueError(f"heldout_fraction={heldout_fraction} leaves no train prompt out of {num_prompts}; lower it.")
    order = rng.permutation(num_prompts)
    return np.sort(order[num_heldout:]), np.sort(order[:num_heldout])


def answer_features(
    num_prompts: int, num_answers: int, feature_dim: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Prompt features ``[P, d]`` and the answer each predicts (``argmax_k x_p · w_k``), ``[P]``.

    A linear policy ``logits = x_p W`` can represent the good answer of every prompt, including
    held-out ones, because the good answer is a linear argmax of the features.
    """
    features = rng.standard_normal((num_prompts, feature_dim))
    answer_directions = rng.standard_normal((num_answers, feature_dim))
    return features, np.argmax(features @ answer_directions.T, axis=1)


def _as_readonly(array: object, dtype: type) -> np.ndarray:
    result = np.array(array, dtype=dtype, copy=True)
    result.flags.writeable = False
    return result


@dataclass(frozen=True, eq=False)
class MDPTables:
    """Exact tables of a finite-horizon toy env (all arrays read-only float64 / int64).

    The episode starts in ``x ~ initial_distribution[p]`` for the prompt ``p``; in state ``x`` the agent
    sees ``observation_of_state[x]`` and takes ``a``; outcome ``k`` happens with probability
    ``transition_probability[x, a, k]``, pays reward 1 with probability ``reward[x, a, k]`` (else 0)
    and moves to ``next_state[x, a, k]``; ``-1`` ends the episode (terminated). An episode that has
    not ended after ``horizon`` steps is truncated (no further reward).

    Deterministic tables may be given with ``[X, A]`` ``next_state`` and ``reward`` and no
    ``transition_probability``: they are stored as K = 1 with probability 1.

    Shape:
        observation_of_state: ``[X] int64`` in ``[0, O)``.
        initial_distribution: ``[P, X] float64``, rows sum to 1.
        next_state: ``[X, A, K] int64`` in ``[-1, X)``.
        reward: ``[X, A, K] float64`` in ``[0, 1]`` (mean of the Bernoulli reward of the outcome).
        tool_call: ``[X, A] float64`` in ``{0, 1}`` (1 where the action is a tool call).
        train_prompts: ``[P_train] int64``; heldout_prompts: ``[P_heldout] int64`` (disjoint).
        observation_features: ``[O, d] float64``.
        transition_probability: ``[X, A, K] float64``, sums to 1 over K.

    Example:
        >>> import numpy as np
        >>> tables = MDPTables(
        ...     horizon=1, num_prompts=1, num_states=1, num_observations=1, num_actions=2,
        ...     observation_of_state=[0], initial_distribution=[[1.0]], next_state=[[-1, -1]],
        ...     reward=[[0.9, 0.1]], tool_call=[[0.0, 0.0]], train_prompts=[0], heldout_prompts=[],
        ...     observation_features=[[1.0]])
        >>> tables.reward.dtype, tables.next_state.shape, tables.expected_reward.tolist()
        (dtype('float64'), (1, 2, 1), [[0.9, 0.1]])
    """

    horizon: int
    num_prompts: int
    num_states: int
    num_observations: int
    num_actions: int
    observation_of_state: np.ndarray
    initial_distribution: np.ndarray
    next_state: np.ndarray
    reward: np.ndarray
    tool_call: np.ndarray
    train_prompts: np.ndarray
    heldout_prompts: np.ndarray
    observation_features: np.ndarray
    transition_probability: np.ndarray | None = None

    def __post_init__(self) -> None:
        for name in ("horizon", "num_prompts", "num_states", "num_observations", "num_actions"):
            object.__setattr__(self, name, check_int(f"MDPTables.{name}", getattr(self, name), low=1))
        for name in ("observation_of_state", "next_state", "train_prompts", "heldout_prompts"):
            object.__setattr__(self, name, _as_readonly(getattr(self, name), np.int64))
        for name in ("initial_distribution", "reward", "tool_call", "observation_features"):
            object.__setattr__(self, name, _as_readonly(getattr(self, name), np.float64))
        self._expand_outcomes()
        self._validate_shapes()
        self._validate_values()

    @property
    def num_outcomes(self) -> int:
        """K, the number of possible outcomes of one step (1: deterministic transitions)."""
        return int(self.next_state.shape[2])

    @property
    def expected_reward(self) -> np.ndarray:
        """``Σ_k transition_probability[x, a, k] · reward[x, a, k]``, the mean reward of a step. Shape: ``[X, A]``."""
        return (self.transition_probability * self.reward).sum(axis=2)

    def _expand_outcomes(self) -> None:
        """Store ``[X, A]`` (deterministic) tables as ``[X, A, 1]`` with probability 1."""
        next_state = self.next_state if self.next_state.ndim != 2 else self.next_state[:, :, None]
        if next_state.ndim != 3:
            raise ValueError(f"MDPTables.next_state must have shape [X, A] or [X, A, K], got {self.next_state.shape}.")
        probability = self.transition_probability
        if probability is None:
            probability = np.ones(next_state.shape)
        reward = self.reward if self.reward.ndim != 2 else self.reward[:, :, None]
        if reward.shape[:2] == next_state.shape[:2] and reward.shape[2] == 1:
            reward = np.broadcast_to(reward, next_state.shape)
        for name, array, dtype in (("next_state", next_state, np.int64), ("reward", reward, np.float64),
                                   ("transition_probability", probability, np.float64)):
            object.__setattr__(self, name, _as_readonly(array, dtype))

    def _validate_shapes(self) -> None:
        """Every shape; the float tables finite, the probability ones in [0, 1]."""
        P, X, O, A, K = self.num_prompts, self.num_states, self.num_observations, self.num_actions, self.num_outcomes
        shapes = {"observation_of_state": (X,), "next_state": (X, A, K), "train_prompts": (None,),
                  "heldout_prompts": (None,), "observation_features": (O, None)}
        for name, shape in shapes.items():
            check_array(f"MDPTables.{name}", getattr(self, name), shape)
        probabilities = {"initial_distribution": (P, X), "reward": (X, A, K), "transition_probability": (X, A, K),
                         "tool_call": (X, A)}
        for name, shape in probabilities.items():
            check_array(f"MDPTables.{name}", getattr(self, name), shape, probability=True)

    def _validate_values(self) -> None:
        X, O = self.num_states, self.num_observations
        if self.observation_of_state.size and not (
            0 <= self.observation_of_state.min() <= self.observation_of_state.max() < O
        ):
            raise ValueError(f"MDPTables.observation_of_state must lie in [0, {O}) (num_observations).")
        if self.next_state.min() < -1 or self.next_state.max() >= X:
            raise ValueError(f"MDPTables.next_state must lie in [-1, {X}); use -1 for 'episode ends'.")
        outcome_sums = self.transition_probability.sum(axis=2)
        if np.max(np.abs(outcome_sums - 1.0)) > ROW_SUM_TOLERANCE:
            raise ValueError(
                "MDPTables.transition_probability must sum to 1 over the outcomes of each (state, action), "
                f"got sums in [{outcome_sums.min()}, {outcome_sums.max()}]; normalise them."
            )
        row_sums = self.initial_distribution.sum(axis=1)
        if np.max(np.abs(row_sums - 1.0)) > ROW_SUM_TOLERANCE:
            raise ValueError(
                "MDPTables.initial_distribution rows must sum to 1 (one start distribution per prompt), "
                f"got row sums in [{row_sums.min()}, {row_sums.max()}]; normalise each row."
            )
        if not np.all(np.isin(self.tool_call, (0.0, 1.0))):
            raise ValueError("MDPTables.tool_call must be 0 or 1 (1 where the action is a tool call).")
        self._validate_prompt_split()

    def _validate_prompt_split(self) -> None:
        P = self.num_prompts
        prompts = np.concatenate([self.train_prompts, self.heldout_prompts])
        if self.train_prompts.size == 0:
            raise ValueError("MDPTables.train_prompts must hold at least one prompt; lower heldout_fraction.")
        if prompts.min() < 0 or prompts.max() >= P:
            raise ValueError(f"MDPTables prompt ids must lie in [0, {P}) (num_prompts).")
        if np.unique(prompts).size != prompts.size:
            raise ValueError("MDPTables.train_prompts and heldout_prompts must be disjoint, without repeats.")


def p_table_tables(env: Any) -> MDPTables:
    """:class:`MDPTables` of a gymnasium env with a ``P`` transition table (e.g. ``FrozenLake-v1``).

    gymnasium's toy-text envs (``FrozenLake-v1``, ``CliffWalking``, ``Taxi``) expose their whole
    dynamics as ``env.unwrapped.P[s][a] = [(probability, next_state, reward, terminated), ...]`` and a
    start distribution ``initial_state_distrib``. The tables have hidden state = observation = the
    env's state, one prompt, and K = the most outcomes of any (state, action), so ``flashsim.exact``
    gives J(θ) and ∇J(θ) for them as for the toy envs.

    Deliberately left out: envs whose rewards are not in [0, 1] (the tables hold Bernoulli means; Taxi
    and CliffWalking have negative rewards) and envs without a time limit (the tables are finite-horizon).

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
    """The env's exact tables: ``env.unwrapped.tables()`` if it offers them, else from its ``P`` table, else None.

    The one place that decides whether an env has exact tables.
    """
    base = env.unwrapped
    if callable(getattr(base, "tables", None)):
        return base.tables()
    if hasattr(base, "P"):
        return p_table_tables(env)
    return None
