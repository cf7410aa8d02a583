"""Behaviour policies L updates back: a deterministic trajectory of exact gradient ascent.

A stale rollout in asynchronous training was sampled by the policy of L updates ago. To measure an
estimator at lag L without the noise of a particular training run, flashsim replaces the noisy
updates by exact ones: starting from the policy's parameters θ_0,

    θ_{k+1} = θ_k + η ∇J(θ_k) / ‖∇J(θ_k)‖        (normalised exact gradient ascent, step length η),

the learner is θ_N and the behaviour policy at lag L is θ_{N−L} (0 ≤ L ≤ N). The step has a fixed
length η in parameter space, like an update of a normalising optimiser, so the distance between
learner and behaviour grows about linearly with L; the measurement point θ_N does not depend on
which lags are measured. ∇J is over the train prompts (``flashsim.exact.exact_gradient``).

Deliberately left out: noise in the trajectory (a real run's θ_{k} are themselves random) and
optimiser state.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from flashsim.exact import exact_gradient
from flashsim.policies import Policy
from flashsim.validation import check_int, check_real


def ascent_trajectory(tables: Any, policy: Policy, *, steps: int, step_size: float) -> Tensor:
    """``[θ_0, …, θ_N]`` of normalised exact gradient ascent from ``policy`` (which is not changed).

    Shape:
        returns ``[steps + 1, num_params]`` in ``get_flat()`` layout.

    Example:
        >>> import toy_envs
        >>> from flashsim.policies import make_policy
        >>> tables = toy_envs.PromptBandit(**toy_envs.bandit_preset("tiny")).tables()
        >>> path = ascent_trajectory(tables, make_policy("tabular", tables), steps=3, step_size=0.5)
        >>> path.shape, round(float((path[1] - path[0]).norm()), 6)
        (torch.Size([4, 4]), 0.5)
    """
    check_int("steps", steps, low=0)
    check_real("step_size", step_size, low=0.0, low_inclusive=False)
    walker = policy.snapshot().requires_grad_(True)
    points = [walker.get_flat()]
    for _ in range(steps):
        gradient = exact_gradient(tables, walker)
        norm = torch.linalg.vector_norm(gradient)
        if norm == 0:
            raise FloatingPointError("the exact gradient vanished on the ascent trajectory; lower steps")
        walker.set_flat(points[-1] + step_size * gradient / norm)
        points.append(walker.get_flat())
    return torch.stack(points)


def policy_at(policy: Policy, parameters: Tensor) -> Policy:
    """A detached copy of ``policy`` with the flat ``parameters``."""
    copy = policy.snapshot()
    copy.set_flat(parameters)
    return copy


def lagged_policies(
    tables: Any, policy: Policy, *, steps: int, lags: list[int], step_size: float
) -> tuple[Policy, dict[int, Policy]]:
    """The learner θ_N and, for each lag L, the behaviour policy θ_{N−L}.

    Raises:
        ValueError: a lag is negative or larger than ``steps`` (raise ``steps`` or lower the lags).
    """
    for lag in lags:
        check_int("lags", lag, low=0, high=steps)
    path = ascent_trajectory(tables, policy, steps=steps, step_size=step_size)
    return policy_at(policy, path[steps]), {lag: policy_at(policy, path[steps - lag]) for lag in lags}
