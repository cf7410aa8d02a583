"""The fast path: every batch's update direction ĝ = −∇_θ L at once, exactly.

Every registered loss depends on θ only through the sampled tokens' log-probs ``ℓ_it = log π_θ(a_it |
o_it)`` (behaviour log-probs, rewards and advantages are constants of the update), so by the chain rule

    ∇_θ L = Σ_it (∂L/∂ℓ_it) ∇_θ ℓ_it,     ∇_logits(o) ℓ_it = e_{a_it} − π(· | o_it)   (softmax score).

Three vectorised steps, over a chunk of c batches:

1. ``∂L/∂ℓ`` for every batch from one call of the registry loss, unchanged, on the stacked batches:
   each batch's advantages come from the registry's own estimator (:func:`batch_advantages`), and the
   aggregation's denominators are made per batch by reweighting rows (:func:`log_prob_coefficients`).
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

from collections.abc import Callable, Mapping

import torch
from torch import Tensor

from flashsim.losses import LossSpec, token_weights
from flashsim.policies import Policy
from flashsim.sim.rollouts import Snapshot
from flashsim.variance.problem import Problem
from flashsim.variance.sampling import Rollouts, Uniforms, simulate


def log_prob_table(policy: Policy) -> Tensor:
    """``log π(a | o)`` for every observation, float64, detached. Shape: ``[O, A]``."""
    with torch.no_grad():
        return torch.log_softmax(policy.all_logits().to(torch.float64), dim=-1)


def behavior_snapshot(policy: Policy) -> Snapshot:
    """The :class:`~flashsim.sim.rollouts.Snapshot` that rollouts of μ = ``policy`` sample from (float64 table)."""
    return Snapshot.of_log_probs(log_prob_table(policy).numpy(), 0)


def batch_advantages(loss_fn: LossSpec, rewards: Tensor, group_ids: Tensor | None,
                     options: Mapping[str, object] = {}) -> Tensor:  # noqa: B006 (read only)
    """Each batch's advantages by the registry estimator of ``loss_fn`` with ``options``. Shape: ``[c, B] -> [c, B]``.

    Batched with ``vmap`` where the estimator allows it. The group estimators (group-normalised,
    group-centred, leave-one-out) sum groups in place, which ``vmap`` cannot batch; they only combine
    rewards within a group, so one call over all batches with group ids made distinct per batch gives
    each batch's own advantages (``tests/variance`` checks this against the per-batch loss for every
    registered loss).
    """
    estimator = loss_fn.advantage_estimator(options)
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
    """``∂L_m/∂ℓ_it`` for every batch m of the chunk, from one call of the registry loss on all of them.

    The c batches are stacked into one ``[c·B, T]`` call with each batch's own advantages; every
    registered loss is ``Σ_i u_i · term_i`` with ``term_i`` a function of row i alone and ``u_i`` the
    aggregation weight of its tokens, so the stacked gradient times ``u_i(batch) / u_i(stacked)``
    (both from :func:`flashsim.losses.token_weights`) is batch m's own gradient, denominators and all.

    Shape:
        log_probs: ``[c, B, T]`` float64; group_ids ``[B]`` or None. Returns ``([c, B, T], {name: [c]})``.
    """
    chunk, budget, width = log_probs.shape
    mask = rollouts.action_mask
    advantages = batch_advantages(loss_fn, rollouts.rewards, group_ids, options)
    stacked_ids = None if group_ids is None else (group_ids + torch.arange(chunk)[:, None] * budget).reshape(-1)
    leaf = log_probs.detach().reshape(chunk * budget, width).requires_grad_(True)
    with torch.enable_grad():
        loss, stats = loss_fn(
            leaf, rollouts.behavior_log_probs.reshape(leaf.shape), rollouts.rewards.reshape(-1),
            mask.reshape(leaf.shape), stacked_ids, advantages=advantages.reshape(-1), validate=False, **options,
        )
        (stacked,) = torch.autograd.grad(loss, leaf)
    mode = loss_fn.resolved(options)["aggregation"]
    max_tokens = options.get("max_tokens")

    def row_weights(row_mask: Tensor) -> Tensor:  # every token of a row has its row's weight; t = 0 is a token
        return token_weights(row_mask, mode, dtype=torch.float64, max_tokens=max_tokens)[:, 0]

    own = torch.vmap(row_weights)(mask)
    pooled = row_weights(mask.reshape(leaf.shape)).view(chunk, budget)
    coefficients = stacked.view(mask.shape) * (own / pooled)[:, :, None]
    return coefficients, batch_stats(stats, log_probs, rollouts)


def batch_stats(stats: dict[str, Tensor], log_probs: Tensor, rollouts: Rollouts) -> dict[str, Tensor]:
    """Per-batch trust-region stats from the per-row stats of a stacked loss call.

    ``ess`` is Kish's ESS of the token ratios, ``(Σρ)² / Σρ²`` over the batch's policy tokens (as
    :func:`flashsim.losses.effective_sample_size`); ``clipped_tokens`` is the chunk's total (the loss
    reports clipping for the whole call only).

    Shape:
        log_probs ``[c, B, T]``; returns ``{name: [c]}`` plus ``clipped_tokens`` ``[]``.
    """
    chunk, budget, width = log_probs.shape
    mask = rollouts.action_mask
    tokens = mask.sum(dim=(1, 2)).to(torch.float64)
    ratio = torch.exp(log_probs - rollouts.behavior_log_probs) * mask  # both log-probs are finite on padding
    ess = ratio.sum(dim=(1, 2)) ** 2 / (ratio * ratio).sum(dim=(1, 2))
    return {
        "acceptance_rate": stats["admitted"].view(chunk, budget).to(torch.float64).mean(dim=1) if "admitted" in stats
        else torch.ones(chunk, dtype=torch.float64),  # no gate (GRPO): every trajectory is used
        "token_acceptance_rate": (stats["token_kept"].view(mask.shape) & mask).sum(dim=(1, 2)) / tokens,
        "ess": ess,
        "ess_fraction": ess / tokens,
        "num_tokens": tokens,
        "clipped_tokens": clipped_or_capped(stats).to(torch.float64) * tokens.sum(),
    }


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
        prompts ``[c, B]``; returns ``([c, num_params] float64, stats)`` with the stats of
        :data:`~flashsim.variance.problem.PER_BATCH_STATS` (``[c]``) and ``clipped_tokens`` (``[]``).
    """
    rollouts = simulate(problem.dynamics, problem.behavior, prompts, uniforms)
    log_table = log_prob_table(problem.policy)
    log_probs = log_table.take(rollouts.observations * log_table.shape[1] + rollouts.actions)
    coefficients, stats = log_prob_coefficients(
        problem.loss_fn, log_probs, rollouts, problem.group_ids, problem.options
    )
    logit_grads = logit_gradients(coefficients, rollouts, log_table.exp())
    stats["mean_length"] = rollouts.lengths.to(torch.float64).mean(dim=1)
    return -parameter_gradients(problem.policy, logit_grads), stats


def clipped_or_capped(stats: dict[str, Tensor]) -> Tensor:
    """The fraction of tokens whose weight a ratio limit changed: PPO's clip (GRPO) or the TIS cap (FlashREINFORCE)."""
    return stats["clip_fraction"] if "clip_fraction" in stats else stats["tis_capped_fraction"]
