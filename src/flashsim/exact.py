"""Exact objectives J(θ) and exact policy gradients ∇J(θ) of a policy on a toy env's tables.

A toy env is a finite-horizon problem over hidden states x whose step (x, a) has outcomes k with
probabilities p(k | x, a) (one outcome for the deterministic toy envs); the policy acts on
``o = observation_of_state[x]``. With ``k`` steps left, finite-horizon backward induction
(Puterman, *Markov Decision Processes*, 1994, §4.3) gives the expected future reward

    V_k(x) = Σ_a π(a | o(x)) · (r̄(x, a) + Σ_k p(k | x, a) V_{k-1}(next(x, a, k))),   V_0 = 0,  V(end) = 0,

with r̄(x, a) = Σ_k p(k | x, a) r(x, a, k) the mean reward of the step,

and J(θ) = mean over prompts p of Σ_x ρ_p(x) V_H(x). Everything runs vectorised over x in float64
autograd, so ∇J(θ) is one ``torch.autograd.grad``. The bandit (H = 1) is the closed form
``J = mean_p Σ_a π(a | p) s[p, a]``. The same recursion with other per-step quantities gives the
expected length (count 1 per step), expected tool calls, and the truncation probability
(``V_0 = 1``, no per-step value).

Deliberately left out: discounting (rewards are episodic 0/1). This module is the only source of
exact quantities (J, ∇J, success, length, tool calls, truncation) in flashsim.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from flashsim.policies import Policy


@dataclass(frozen=True, eq=False)
class TorchTables:
    """``toy_envs.MDPTables`` as torch tensors (float64 / int64 on one device); see :func:`to_torch`.

    Shape:
        observation_of_state ``[X]``; initial_distribution ``[P, X]``; next_state and
        transition_probability ``[X, A, K]``; reward (the mean reward of a step, r̄) and tool_call
        ``[X, A]``; train_prompts ``[P_train]``; heldout_prompts ``[P_heldout]``;
        observation_features ``[O, d]``.
    """

    horizon: int
    num_prompts: int
    num_observations: int
    num_actions: int
    observation_of_state: torch.Tensor
    initial_distribution: torch.Tensor
    next_state: torch.Tensor
    transition_probability: torch.Tensor
    reward: torch.Tensor
    tool_call: torch.Tensor
    train_prompts: torch.Tensor
    heldout_prompts: torch.Tensor
    observation_features: torch.Tensor


def to_torch(tables: Any, *, device: torch.device | str | None = None) -> TorchTables:
    """Convert ``toy_envs.MDPTables`` to :class:`TorchTables` once (pure; returns the input if converted).

    Example:
        >>> import toy_envs
        >>> to_torch(toy_envs.PromptBandit(**toy_envs.bandit_preset("tiny")).tables()).reward.dtype
        torch.float64
    """
    if isinstance(tables, TorchTables):
        return tables
    required = ("horizon", "observation_of_state", "initial_distribution", "next_state", "reward", "tool_call")
    if any(not hasattr(tables, name) for name in required):
        raise TypeError(f"tables must be a toy_envs.MDPTables (env.unwrapped.tables()), got {type(tables).__name__}.")

    def tensor(array: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
        return torch.as_tensor(np.array(array), dtype=dtype, device=device)

    return TorchTables(
        horizon=tables.horizon,
        num_prompts=tables.num_prompts,
        num_observations=tables.num_observations,
        num_actions=tables.num_actions,
        observation_of_state=tensor(tables.observation_of_state, torch.int64),
        initial_distribution=tensor(tables.initial_distribution, torch.float64),
        next_state=tensor(tables.next_state, torch.int64),
        transition_probability=tensor(tables.transition_probability, torch.float64),
        reward=tensor(tables.expected_reward, torch.float64),
        tool_call=tensor(tables.tool_call, torch.float64),
        train_prompts=tensor(tables.train_prompts, torch.int64),
        heldout_prompts=tensor(tables.heldout_prompts, torch.int64),
        observation_features=tensor(tables.observation_features, torch.float64),
    )


def _select_prompts(tables: TorchTables, prompts: Any) -> torch.Tensor:
    """Prompt ids: None or "train" → train prompts, "heldout", "all", or explicit ids. Shape: ``[P_sel]``."""
    named = {
        "train": tables.train_prompts,
        "heldout": tables.heldout_prompts,
        "all": torch.arange(tables.num_prompts, device=tables.reward.device),
    }
    if prompts is None:
        return tables.train_prompts
    if isinstance(prompts, str):
        if prompts not in named:
            raise ValueError(f"prompts must be None, one of {sorted(named)} or prompt ids, got {prompts!r}.")
        selected = named[prompts]
    else:
        selected = torch.as_tensor(np.array(prompts), dtype=torch.int64, device=tables.reward.device).reshape(-1)
    if selected.numel() == 0:
        raise ValueError("prompts selects no prompt (e.g. an empty held-out split); pass other prompts.")
    if selected.min() < 0 or selected.max() >= tables.num_prompts:
        raise ValueError(f"prompt ids must lie in [0, {tables.num_prompts}), got {prompts!r}.")
    return selected


def state_action_probs(tables: TorchTables, policy: Policy) -> torch.Tensor:
    """π(a | o(x)) for every hidden state, float64, differentiable. Shape: ``[X, A]``."""
    if policy.num_observations != tables.num_observations or policy.num_actions != tables.num_actions:
        raise ValueError(
            f"policy is over {policy.num_observations} observations x {policy.num_actions} actions but the "
            f"tables have {tables.num_observations} x {tables.num_actions}; build the policy from these tables."
        )
    probs = torch.softmax(policy.all_logits().to(torch.float64), dim=-1)
    return probs[tables.observation_of_state]


def backward_induction(
    tables: TorchTables, probs: torch.Tensor | None, step_values: torch.Tensor, final_values: torch.Tensor
) -> torch.Tensor:
    """H steps of ``V ← Σ_a π(a|x) (step_values[x, a] + Σ_k p(k|x, a) V[next(x, a, k)])`` from ``final_values``.

    An ended episode (``next = -1``) contributes 0 afterwards; ``final_values`` is the value of an
    episode still running after H steps (0 for returns, 1 for the truncation probability).
    ``probs=None`` takes the best action instead of the policy's average (``max_a``: the optimal values).

    Shape:
        probs: ``[X, A]`` or None; step_values: ``[X, A, C]``; final_values: ``[X, C]``; returns ``[X, C]``.
    """
    values = final_values
    ended = torch.zeros(1, final_values.shape[1], dtype=final_values.dtype, device=final_values.device)
    for _ in range(tables.horizon):
        padded = torch.cat([values, ended])  # next_state == -1 indexes this last, all-zero row
        successors = (tables.transition_probability.unsqueeze(-1) * padded[tables.next_state]).sum(dim=2)
        action_values = step_values + successors
        values = action_values.amax(dim=1) if probs is None else (probs.unsqueeze(-1) * action_values).sum(dim=1)
    return values


def optimal_success(tables: Any, prompts: Any = "train") -> float:
    """The best mean return over ``prompts`` of a policy that sees the hidden state (NaN: no prompt).

    Exact for the bandit (the best answer per prompt, ``mean_p max_a s[p, a]``); otherwise an upper
    bound on what a policy on observations reaches (:func:`optimum_is_exact` says which).

    Example:
        >>> import toy_envs
        >>> optimal_success(toy_envs.PromptBandit(**toy_envs.bandit_preset("tiny")).tables())  # (0.9 + 0.7) / 2
        0.8
    """
    tables = to_torch(tables)
    if isinstance(prompts, str) and prompts == "heldout" and tables.heldout_prompts.numel() == 0:
        return float("nan")
    selected = _select_prompts(tables, prompts)
    zeros = torch.zeros(tables.reward.shape[0], 1, dtype=torch.float64)
    values = backward_induction(tables, None, tables.reward.unsqueeze(-1), zeros).squeeze(-1)
    return float((tables.initial_distribution[selected] @ values).mean())


def optimum_is_exact(tables: Any) -> bool:
    """Whether :func:`optimal_success` is reachable by a policy on observations, not only an upper bound.

    :func:`optimal_success` is the optimum over policies that see the state and the step. A policy on
    observations matches it when an episode is one step and each state has an observation of its own
    (the bandits). It is a bound elsewhere: FrozenLake's policy does not see how many of its 100 steps
    are left (bound 0.7442; the greedy stationary policy reaches 0.7402), and states of the tool
    gridworld share observations.

    Example:
        >>> import toy_envs
        >>> optimum_is_exact(toy_envs.PromptBandit(**toy_envs.bandit_preset("tiny")).tables())
        True
    """
    tables = to_torch(tables)
    observations = tables.observation_of_state
    return tables.horizon == 1 and torch.unique(observations).numel() == observations.numel()


def prompt_returns(tables: Any, policy: Policy, prompts: Any = None) -> torch.Tensor:
    """Expected return of each selected prompt, differentiable. Shape: ``[P_sel]`` float64."""
    tables = to_torch(tables)
    selected = _select_prompts(tables, prompts)
    probs = state_action_probs(tables, policy)
    zeros = torch.zeros(tables.reward.shape[0], 1, dtype=torch.float64, device=probs.device)
    values = backward_induction(tables, probs, tables.reward.unsqueeze(-1), zeros).squeeze(-1)
    return tables.initial_distribution[selected] @ values


def expected_return(tables: Any, policy: Policy, prompts: Any = None) -> torch.Tensor:
    """J(θ): the expected return averaged over ``prompts`` (default the train prompts), differentiable.

    Args:
        tables: ``toy_envs.MDPTables`` or :class:`TorchTables`.
        policy: a :class:`flashsim.policies.Policy` over the tables' observations and actions.
        prompts: None or ``"train"``, ``"heldout"``, ``"all"``, or prompt ids.

    Returns:
        a 0-dim float64 tensor.

    Example:
        >>> import toy_envs
        >>> from flashsim.policies import make_policy
        >>> tables = toy_envs.PromptBandit(**toy_envs.bandit_preset("tiny")).tables()
        >>> round(expected_return(tables, make_policy("tabular", tables)).item(), 4)  # (0.55 + 0.5) / 2
        0.525
    """
    return prompt_returns(tables, policy, prompts).mean()


def exact_gradient(tables: Any, policy: Policy, prompts: Any = None) -> torch.Tensor:
    """∇J(θ) in the layout of ``policy.get_flat()`` (the dtype of the parameters).

    Shape:
        returns ``[policy.num_params]``.
    """
    parameters = list(policy.parameters())
    with torch.enable_grad():
        objective = expected_return(tables, policy, prompts)
        grads = torch.autograd.grad(objective, parameters, allow_unused=True)
    return torch.cat([(torch.zeros_like(p) if g is None else g).reshape(-1) for p, g in zip(parameters, grads)])


@torch.no_grad()
def evaluate(tables: Any, policy: Policy, prompts: Any = None) -> dict[str, torch.Tensor]:
    """Exact per-prompt statistics of ``policy`` (no sampling).

    Rewards are 0/1 and at most one step per episode is rewarded, so success = expected return.

    Returns:
        ``env/success``, ``env/expected_length``, ``env/expected_tool_calls``,
        ``env/truncation_probability`` (0-dim, the mean over prompts), the same names with a
        ``_per_prompt`` suffix (``[P_sel]``), and ``env/prompts`` (``[P_sel]`` ids).
    """
    tables = to_torch(tables)
    selected = _select_prompts(tables, prompts)
    probs = state_action_probs(tables, policy)
    X, A = probs.shape
    step_values = torch.stack(
        [
            tables.reward,
            torch.ones(X, A, dtype=torch.float64),
            tables.tool_call,
            torch.zeros(X, A, dtype=torch.float64),
        ],
        dim=-1,
    )
    final_values = torch.zeros(X, 4, dtype=torch.float64)
    final_values[:, 3] = 1.0  # still running after H steps = truncated
    values = tables.initial_distribution[selected] @ backward_induction(tables, probs, step_values, final_values)
    metrics: dict[str, torch.Tensor] = {"env/prompts": selected}
    for column, name in enumerate(("success", "expected_length", "expected_tool_calls", "truncation_probability")):
        metrics[f"env/{name}_per_prompt"] = values[:, column]
        metrics[f"env/{name}"] = values[:, column].mean()
    return metrics
