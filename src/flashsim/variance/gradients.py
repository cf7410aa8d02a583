"""The fast path: every batch's update direction ĝ = −∇_θ L at once, exactly.

Every registered loss depends on θ only through the sampled tokens' log-probs ``ℓ_it = log π_θ(a_it |
o_it)`` (behaviour log-probs, rewards and advantages are constants of the update), so by the chain rule

    ∇_θ L = Σ_it (∂L/∂ℓ_it) ∇_θ ℓ_it,     ∇_logits(o) ℓ_it = e_{a_it} − π(· | o_it)   (softmax score).

Three vectorised steps, over a chunk of c batches:

1. ``∂L/∂ℓ`` for every batch: ``torch.vmap`` runs the registry loss, unchanged, on each batch as its
   own loss (its own baseline, denominators and gates), and one ``autograd.grad`` of the sum of the M
   losses with respect to the ``[M, B, T]`` log-probs gives every batch's coefficients at once (the
   batches share no terms). Advantages are computed per batch by the registry's own estimator and
   passed with ``advantages=`` (see :func:`batch_advantages`).
2. Scatter-add the coefficients into the score of the logit table: ``S[m, o, a] = Σ_{it: o_it=o,
   a_it=a} ∂L_m/∂ℓ_it`` and ``∂L_m/∂logits[o] = S[m, o] − (Σ_a S[m, o, a]) π(· | o)``.
3. Pull ``[c, O, A]`` back to the parameters with one batched vector–Jacobian product of
   ``policy.all_logits()`` (``is_grads_batched``): the identity for a tabular policy, ``φᵀ ·`` for a
   linear one, exact for any policy whose logits depend on the observation alone.

The reference (:mod:`flashsim.variance.reference`) instead runs the unchanged loss on one batch at a
time with autograd through the policy; the tests demand both agree in float64.

Glossary: c batches in a chunk, B trajectories, T token slots, O observations, A actions.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from flashsim.losses import ADVANTAGES
from flashsim.policies import Policy
from flashsim.variance.problem import KEPT_STATS, Problem
from flashsim.variance.sampling import Rollouts, Uniforms, simulate


def log_prob_table(policy: Policy) -> Tensor:
    """``log π(a | o)`` for every observation, float64, detached. Shape: ``[O, A]``."""
    with torch.no_grad():
        return torch.log_softmax(policy.all_logits().to(torch.float64), dim=-1)


def batch_advantages(loss_fn: Callable, rewards: Tensor, group_ids: Tensor | None) -> Tensor:
    """Each batch's advantages by the registry's estimator for ``loss_fn``. Shape: ``[c, B] -> [c, B]``.

    Batched with ``vmap`` where the estimator allows it. The group estimators (group-normalised,
    group-centred, leave-one-out) sum groups in place, which ``vmap`` cannot batch; they only combine
    rewards within a group, so one call over all batches with group ids made distinct per batch gives
    each batch's own advantages (``tests/variance`` checks this against the per-batch loss for every
    registered loss).
    """
    estimator = ADVANTAGES[loss_fn.spec.advantage]
    try:
        return torch.vmap(estimator, in_dims=(0, None))(rewards, group_ids)
    except RuntimeError:
        chunk, budget = rewards.shape
        local = torch.zeros(budget, dtype=torch.int64) if group_ids is None else group_ids
        ids = local + torch.arange(chunk)[:, None] * (int(local.max()) + 1)
        return estimator(rewards.reshape(-1), ids.reshape(-1)).view(chunk, budget)


def log_prob_coefficients(
    loss_fn: Callable, log_probs: Tensor, rollouts: Rollouts, group_ids: Tensor | None, options: dict
) -> tuple[Tensor, dict[str, Tensor]]:
    """``∂L_m/∂ℓ_it`` for every batch m of the chunk, and the loss stats of each batch.

    Shape:
        log_probs: ``[c, B, T]`` float64; group_ids ``[B]`` or None. Returns ``([c, B, T], {name: [c]})``.
    """
    advantages = batch_advantages(loss_fn, rollouts.rewards, group_ids)

    def one_batch(lp: Tensor, behavior: Tensor, rewards: Tensor, mask: Tensor, adv: Tensor):
        loss, stats = loss_fn(lp, behavior, rewards, mask, group_ids, advantages=adv, validate=False, **options)
        return loss, {name: stats[name] for name in KEPT_STATS}

    leaf = log_probs.detach().requires_grad_(True)
    with torch.enable_grad():
        losses, stats = torch.vmap(one_batch)(
            leaf, rollouts.behavior_log_probs, rollouts.rewards, rollouts.action_mask, advantages
        )
        # The batches are independent, so the gradient of the sum holds every batch's own ∂L_m/∂ℓ.
        (coefficients,) = torch.autograd.grad(losses.sum(), leaf)
    return coefficients, stats


def logit_gradients(coefficients: Tensor, rollouts: Rollouts, probs: Tensor) -> Tensor:
    """``∂L_m/∂logits`` of every batch from the per-token coefficients (steps 2 of the module docstring).

    Shape:
        coefficients ``[c, B, T]``; probs ``[O, A]`` π(a | o). Returns ``[c, O, A]``.
    """
    chunk = coefficients.shape[0]
    num_obs, num_actions = probs.shape
    mask = rollouts.action_mask
    offsets = torch.arange(chunk)[:, None, None] * (num_obs * num_actions)
    flat = (offsets + rollouts.observations * num_actions + rollouts.actions)[mask]
    scores = torch.zeros(chunk * num_obs * num_actions, dtype=coefficients.dtype)
    scores.index_add_(0, flat, coefficients[mask])
    scores = scores.view(chunk, num_obs, num_actions)
    return scores - scores.sum(dim=-1, keepdim=True) * probs


def parameter_gradients(policy: Policy, logit_grads: Tensor) -> Tensor:
    """Batched VJP of ``policy.all_logits()``: ``[c, O, A]`` → ``[c, num_params]`` in ``get_flat()`` layout."""
    parameters = list(policy.parameters())
    with torch.enable_grad():
        logits = policy.all_logits()
        grads = torch.autograd.grad(
            logits, parameters, grad_outputs=logit_grads.to(logits.dtype), is_grads_batched=True,
            allow_unused=True,
        )
    chunk = logit_grads.shape[0]
    return torch.cat([
        (torch.zeros(chunk, p.numel(), dtype=p.dtype) if g is None else g.reshape(chunk, -1))
        for p, g in zip(parameters, grads)
    ], dim=1).to(torch.float64)


def fast_update_directions(problem: Problem, prompts: Tensor, uniforms: Uniforms) -> tuple[Tensor, dict[str, Tensor]]:
    """Simulate a chunk of batches at once and return ĝ = −∇_θ L of each, with per-batch stats.

    Shape:
        prompts ``[c, B]``; returns ``([c, num_params] float64, {name: [c]})``, the stats being
        :data:`KEPT_STATS` and ``mean_length``.
    """
    rollouts = simulate(problem.tables, problem.behavior_log_table, prompts, uniforms)
    log_table = log_prob_table(problem.policy)
    log_probs = log_table.take(rollouts.observations * log_table.shape[1] + rollouts.actions)
    coefficients, stats = log_prob_coefficients(
        problem.loss_fn, log_probs, rollouts, problem.group_ids, problem.options
    )
    logit_grads = logit_gradients(coefficients, rollouts, log_table.exp())
    stats["mean_length"] = rollouts.lengths.to(torch.float64).mean(dim=1)
    return -parameter_gradients(problem.policy, logit_grads), stats
