"""The reference path: one batch at a time, the registry loss unchanged, autograd through the policy.

This is what a trainer does for one update: simulate the batch, recompute ``log π_θ(a_it | o_it)``
with the policy's own ``log_prob`` (carrying the graph), call the loss exactly as the simulator would
(advantages computed inside the loss, input validation on), and take ``−∇_θ L`` with
``torch.autograd.grad``. It shares only the sampler and its uniforms with
:mod:`flashsim.variance.gradients`; the tests demand both agree.
"""

from __future__ import annotations

import torch
from torch import Tensor

from flashsim.variance.gradients import clipped_or_capped
from flashsim.variance.problem import Problem
from flashsim.variance.sampling import Rollouts, Uniforms, batch_uniforms, simulate


def reference_update_direction(problem: Problem, rollouts: Rollouts) -> tuple[Tensor, dict[str, Tensor]]:
    """ĝ = −∇_θ L of a single batch (``rollouts`` with a leading dimension of 1).

    Shape:
        returns ``([num_params] float64, {name: 0-dim})``; ``clipped_tokens`` counts the batch's clipped tokens.
    """
    observations, actions = rollouts.observations[0], rollouts.actions[0]
    parameters = list(problem.policy.parameters())
    with torch.enable_grad():
        log_probs = problem.policy.log_prob(observations.reshape(-1), actions.reshape(-1)).view(observations.shape)
        loss, stats = problem.loss_fn(
            log_probs.to(torch.float64), rollouts.behavior_log_probs[0], rollouts.rewards[0],
            rollouts.action_mask[0], problem.group_ids, **problem.options,
        )
        grads = torch.autograd.grad(loss, parameters, allow_unused=True)
    flat = torch.cat([(torch.zeros_like(p) if g is None else g).reshape(-1) for p, g in zip(parameters, grads)])
    num_tokens = rollouts.lengths.sum().to(torch.float64)
    kept = {name: stats[name].to(torch.float64) for name in ("token_acceptance_rate", "ess")}
    # A loss without a gate (GRPO) reports no acceptance: every trajectory is used.
    kept["acceptance_rate"] = stats.get("acceptance_rate", torch.ones((), dtype=torch.float64)).to(torch.float64)
    kept.update(
        ess_fraction=stats["ess_fraction"].to(torch.float64), num_tokens=num_tokens,
        mean_length=num_tokens / rollouts.lengths.numel(), clipped_tokens=clipped_or_capped(stats) * num_tokens,
    )
    return -flat.to(torch.float64), kept


def reference_update_directions(
    problem: Problem, prompts: Tensor, uniforms: Uniforms
) -> tuple[Tensor, dict[str, Tensor]]:
    """Simulate and differentiate each batch of the chunk in a plain Python loop.

    Shape:
        prompts ``[c, B]``; returns ``([c, num_params] float64, stats)`` as
        :func:`flashsim.variance.gradients.fast_update_directions`.
    """
    budget = prompts.shape[1]
    results = []
    for index in range(prompts.shape[0]):
        own = batch_uniforms(uniforms, index, budget)
        rollouts = simulate(problem.dynamics, problem.behavior, prompts[index : index + 1], own)
        results.append(reference_update_direction(problem, rollouts))
    directions = torch.stack([direction for direction, _ in results])
    stats = {name: torch.stack([batch_stats[name] for _, batch_stats in results]) for name in results[0][1]}
    stats["clipped_tokens"] = stats["clipped_tokens"].sum()
    return directions, stats
