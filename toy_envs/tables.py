"""``MDPTables``: the exact dynamics of a toy env, as plain numpy arrays.

Every toy env is a finite-horizon problem over a small set of hidden states ``x``: a start state
drawn given the prompt, K possible successors of each (state, action) with their probabilities
(K = 1, deterministic, for the three toy envs; FrozenLake's slippery ice has K = 3) and a Bernoulli
reward coin per outcome. The agent sees ``observation_of_state[x]``. These tables are both what
the envs step through (``toy_envs.core.TabularDynamics``) and what ``flashsim.exact`` runs backward
induction over, so the simulator and the exact gradient can never disagree about the dynamics.

Glossary: H horizon, P prompts, X hidden states, O observations, A actions, K outcomes of a step,
d feature size.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Tolerance for "rows sum to 1" (float64 rounding of generated distributions).
ROW_SUM_TOLERANCE = 1e-9


def _as_readonly(array: object, dtype: type, name: str) -> np.ndarray:
    result = np.array(array, dtype=dtype, copy=True)
    result.flags.writeable = False
    return result


def _check_shape(name: str, array: np.ndarray, shape: tuple[int, ...]) -> None:
    if array.shape != shape:
        raise ValueError(f"MDPTables.{name} must have shape {shape}, got {array.shape}.")


def _check_probability(name: str, array: np.ndarray) -> None:
    if not np.all(np.isfinite(array)) or array.min(initial=0.0) < 0.0 or array.max(initial=0.0) > 1.0:
        raise ValueError(
            f"MDPTables.{name} must hold probabilities in [0, 1], got values in "
            f"[{array.min(initial=0.0)}, {array.max(initial=0.0)}]; clip or rescale them."
        )


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
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"MDPTables.{name} must be an integer >= 1, got {value!r}.")
            object.__setattr__(self, name, int(value))
        int_fields = ("observation_of_state", "next_state", "train_prompts", "heldout_prompts")
        for name in int_fields:
            object.__setattr__(self, name, _as_readonly(getattr(self, name), np.int64, name))
        for name in ("initial_distribution", "reward", "tool_call", "observation_features"):
            object.__setattr__(self, name, _as_readonly(getattr(self, name), np.float64, name))
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
            object.__setattr__(self, name, _as_readonly(array, dtype, name))

    def _validate_shapes(self) -> None:
        P, X, O, A = self.num_prompts, self.num_states, self.num_observations, self.num_actions
        K = self.next_state.shape[2]
        _check_shape("observation_of_state", self.observation_of_state, (X,))
        _check_shape("initial_distribution", self.initial_distribution, (P, X))
        _check_shape("next_state", self.next_state, (X, A, K))
        _check_shape("reward", self.reward, (X, A, K))
        _check_shape("transition_probability", self.transition_probability, (X, A, K))
        _check_shape("tool_call", self.tool_call, (X, A))
        if self.observation_features.ndim != 2 or self.observation_features.shape[0] != O:
            raise ValueError(
                f"MDPTables.observation_features must have shape [{O}, d] (one row per observation), "
                f"got {self.observation_features.shape}."
            )
        for name in ("train_prompts", "heldout_prompts"):
            if getattr(self, name).ndim != 1:
                raise ValueError(f"MDPTables.{name} must be 1-D, got shape {getattr(self, name).shape}.")

    def _validate_values(self) -> None:
        X, O = self.num_states, self.num_observations
        if self.observation_of_state.size and not (
            0 <= self.observation_of_state.min() <= self.observation_of_state.max() < O
        ):
            raise ValueError(f"MDPTables.observation_of_state must lie in [0, {O}) (num_observations).")
        if self.next_state.min() < -1 or self.next_state.max() >= X:
            raise ValueError(f"MDPTables.next_state must lie in [-1, {X}); use -1 for 'episode ends'.")
        for name in ("initial_distribution", "reward", "tool_call", "transition_probability"):
            _check_probability(name, getattr(self, name))
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
        if not np.all(np.isfinite(self.observation_features)):
            raise ValueError("MDPTables.observation_features must be finite.")
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
