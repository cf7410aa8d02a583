"""FlashREINFORCE and GRPO: the two named losses, each one configuration of :func:`policy_loss`.

``flash_reinforce_loss`` (NVIDIA 2026) — One-Batch REINFORCE advantage, Sequence Trust Region,
Sample-Mean Optimization:

    A_i  = R_i − (1/B) Σ_j R_j
    ρ_it = exp(log π − log μ)        (detached, no clipping)
    d_it = KL(Bern(μ(a_it)) ‖ Bern(π(a_it))),   D̄_i = (1/T_i) Σ_t d_it,   m_i = 1[D̄_i ≤ δ]
    L    = −(1/B) Σ_i (m_i A_i / T_i) Σ_t ρ_it log π(a_it)

``grpo_loss`` — GRPO's group-normalised advantage and PPO clip (DeepSeekMath, Shao et al. 2024),
aggregated by default with DAPO's token-mean (Yu et al. 2025; TRL's default ``loss_type``):

    A_i  = (R_i − mean_g R) / (std_g R + ε)
    L    = −(1/Σ T_i) Σ_it min(r_it A_i, clip(r_it, 1 − ε_low, 1 + ε_high) A_i),  r = π/π_old

DeepSeekMath's own GRPO (TRL ``loss_type="grpo"``) is ``aggregation="sample_mean"``; Dr. GRPO
(TRL ``"dr_grpo"``) is ``scale_by_std=False, aggregation="seq_mean_token_sum_norm"``.

Contract for both: each row of the [B, T] tensors is one complete trajectory; when a batch is split
across ranks or microbatches, compute advantages over the whole batch first and pass them with
``advantages=`` together with the global ``num_sequences`` / ``num_tokens``, so that the shard losses
add up to the full-batch loss exactly. Rewards are promoted to the compute dtype (float32 for
bf16/fp16 log-probs, else theirs) before any advantage estimator.
"""

from __future__ import annotations

import torch
from torch import Tensor

from flashsim.losses import _checks as checks
from flashsim.losses.advantages import GROUP_STD_EPS, batch_centered, group_normalized
from flashsim.losses.aggregation import aggregate
from flashsim.losses.policy_loss import policy_loss

GATES = {"sequence": "sequence_gate", "token": "token_gate", "none": "none"}


def resolve_advantages(
    rewards: Tensor | None,
    advantages: Tensor | None,
    reference: Tensor,
    estimator,
    group_ids: Tensor | None = None,
    *,
    validate: bool = True,
) -> Tensor:
    """Advantages passed by the caller, or computed from ``rewards`` by ``estimator``.

    Shape:
        rewards, advantages, group_ids: ``[B]``; reference: the ``[B, T]`` log-probs.
    """
    checks.check_token_tensor("log_probs", reference)
    if advantages is not None:
        return checks.check_per_trajectory("advantages", advantages, reference)
    if rewards is None:
        raise ValueError("pass rewards [B] (or precomputed advantages=[B]); both are None")
    checks.check_per_trajectory("rewards", rewards, reference)
    if group_ids is not None:
        checks.check_per_trajectory("group_ids", group_ids, reference, integer=True)
    if validate:
        checks.check_finite_vector("rewards", rewards)
    # bf16 rewards averaged in bf16 put the baseline off by up to 4.5e-3: promote before any estimator.
    return estimator(rewards.to(checks.compute_dtype(reference.dtype)), group_ids)


def flash_reinforce_loss(
    log_probs: Tensor,
    behavior_log_probs: Tensor,
    rewards: Tensor | None,
    action_mask: Tensor,
    *,
    delta: float = 3e-3,
    gate: str = "sequence",
    aggregation: str = "sample_mean",
    advantages: Tensor | None = None,
    num_sequences: float | Tensor | None = None,
    num_tokens: float | Tensor | None = None,
    max_tokens: float | Tensor | None = None,
    importance_sampling: bool = True,
    log_ratio_clamp: float | None = None,
    negative_token_fraction: float = 1.0,
    entropies: Tensor | None = None,
    failures: Tensor | None = None,
    validate: bool = True,
) -> tuple[Tensor, dict[str, Tensor]]:
    """FlashREINFORCE's loss; ``−∇L`` is the paper's update direction (see the module docstring).

    Args:
        log_probs: log π_θ of the sampled tokens under the current learner (carries the graph).
        behavior_log_probs: log μ of the same tokens, stored when they were sampled.
        rewards: one scalar reward per trajectory (may be None when ``advantages`` is given).
        action_mask: True on policy tokens.
        delta: gate threshold δ on the mean sampled-action Bernoulli KL (paper: 3e-3; ``math.inf``
            admits every trajectory).
        gate: ``"sequence"`` (the paper), ``"token"`` (token-local ablation) or ``"none"``.
        aggregation: ``"sample_mean"`` (the paper) or another mode of :func:`aggregate`.
        advantages: precomputed advantages (e.g. centred over the global batch) replacing the
            batch-centred ones computed from ``rewards``.
        num_sequences, num_tokens, max_tokens: global denominators for sharded batches. A rejected
            trajectory stays in B.
        importance_sampling: multiply by ρ (False gives plain on-policy REINFORCE terms).
        log_ratio_clamp: clamp log ρ to ±this (e.g. 30.0) instead of raising on overflow.
        negative_token_fraction, entropies, failures: the negative-token entropy filter of the
            paper's appendix (q < 1: a failed trajectory keeps its ⌈q·T_i⌉ highest-entropy tokens);
            see :func:`policy_loss`.
        validate: run the value checks that synchronise with the device.

    Returns:
        ``(loss, stats)`` as in :func:`policy_loss`.

    Shape:
        ``[B, T]`` log-probs and bool mask, ``[B]`` rewards/advantages.

    >>> lp = torch.log(torch.tensor([[0.5, 0.5], [0.25, 1.0]], dtype=torch.float64))
    >>> mask = torch.tensor([[True, True], [True, False]])
    >>> loss, stats = flash_reinforce_loss(lp, lp, torch.tensor([1.0, 0.0], dtype=torch.float64), mask)
    >>> round(loss.item(), 4), stats["advantages"].tolist(), stats["admitted"].tolist()
    (-0.1733, [0.5, -0.5], [True, True])
    """
    correction = checks.check_choice("gate", gate, GATES.keys())
    advantages = resolve_advantages(rewards, advantages, log_probs, batch_centered, validate=validate)
    return policy_loss(
        log_probs, behavior_log_probs, action_mask, advantages,
        correction=GATES[correction], aggregation=aggregation, delta=delta,
        importance_sampling=importance_sampling, num_sequences=num_sequences, num_tokens=num_tokens,
        max_tokens=max_tokens, log_ratio_clamp=log_ratio_clamp, negative_token_fraction=negative_token_fraction,
        entropies=entropies, failures=failures, validate=validate,
    )


def grpo_loss(
    log_probs: Tensor,
    old_log_probs: Tensor,
    rewards: Tensor | None,
    action_mask: Tensor,
    group_ids: Tensor | None,
    *,
    clip_eps: float = 0.2,
    clip_eps_high: float | None = None,
    scale_by_std: bool = True,
    std_eps: float = GROUP_STD_EPS,
    aggregation: str = "token_mean",
    advantages: Tensor | None = None,
    num_sequences: float | Tensor | None = None,
    num_tokens: float | Tensor | None = None,
    max_tokens: float | Tensor | None = None,
    reference_log_probs: Tensor | None = None,
    kl_coef: float = 0.0,
    log_ratio_clamp: float | None = None,
    validate: bool = True,
) -> tuple[Tensor, dict[str, Tensor]]:
    """GRPO's loss: group-normalised advantages, PPO clipping, DAPO's token-mean (see the module docstring).

    Args:
        log_probs: log π_θ of the sampled tokens (carries the graph).
        old_log_probs: log π_old of the same tokens; with stale rollouts, the behaviour policy μ.
        rewards: one reward per trajectory (may be None when ``advantages`` is given).
        action_mask: True on policy tokens.
        group_ids: which prompt each trajectory answers (siblings share an id); may be None only
            when ``advantages`` is given.
        clip_eps, clip_eps_high: clip range ``[1 − clip_eps, 1 + clip_eps_high]`` (default symmetric).
        scale_by_std: divide by the group std (False gives Dr. GRPO's centred advantage).
        std_eps: ε added to the group std (default 1e-6; TRL uses 1e-4). It bounds |A| by
            |R − mean| / ε when a group's rewards barely differ.
        aggregation: ``"token_mean"`` (DAPO's; TRL's default), ``"sample_mean"`` (DeepSeekMath GRPO,
            TRL ``loss_type="grpo"``) or another mode of :func:`aggregate`.
        advantages, num_sequences, num_tokens, max_tokens: as in :func:`flash_reinforce_loss`.
        reference_log_probs, kl_coef: optional k3 penalty ``β · agg(exp(ref − log π) − (ref − log π) − 1)``
            to a reference policy (β = 0 by default, as in most recent GRPO recipes).
        log_ratio_clamp, validate: as in :func:`flash_reinforce_loss`.

    Returns:
        ``(loss, stats)`` as in :func:`policy_loss`, plus ``kl_reference`` when a reference is given.

    Shape:
        ``[B, T]`` log-probs and bool mask, ``[B]`` rewards, advantages and integer group_ids.

    >>> lp = torch.zeros(4, 1, dtype=torch.float64) - 0.7
    >>> loss, stats = grpo_loss(lp, lp, torch.tensor([1.0, 0.0, 1.0, 1.0], dtype=torch.float64),
    ...                         torch.ones(4, 1, dtype=torch.bool), torch.tensor([0, 0, 1, 1]))
    >>> stats["advantages"].round(decimals=4).tolist(), loss.item() == 0.0
    ([0.7071, -0.7071, 0.0, 0.0], True)
    """
    checks.check_number("kl_coef", kl_coef, low=0.0)
    checks.check_number("std_eps", std_eps, low=0.0)
    if advantages is None and group_ids is None:
        raise ValueError("grpo_loss needs group_ids [B] to form groups (or precomputed advantages=)")

    def estimator(r: Tensor, g: Tensor | None) -> Tensor:
        return group_normalized(r, g, scale_by_std=scale_by_std, eps=std_eps)

    advantages = resolve_advantages(rewards, advantages, log_probs, estimator, group_ids, validate=validate)
    loss, stats = policy_loss(
        log_probs, old_log_probs, action_mask, advantages,
        correction="ppo_clip", aggregation=aggregation, clip_eps=clip_eps, clip_eps_high=clip_eps_high,
        num_sequences=num_sequences, num_tokens=num_tokens, max_tokens=max_tokens,
        log_ratio_clamp=log_ratio_clamp, validate=validate,
    )
    if reference_log_probs is not None and kl_coef > 0:
        kl = _k3_to_reference(log_probs, reference_log_probs, action_mask)
        penalty = aggregate(
            kl, action_mask, aggregation,
            num_sequences=num_sequences, num_tokens=num_tokens, max_tokens=max_tokens,
        )
        loss = loss + kl_coef * penalty
        stats["kl_reference"] = penalty.detach()
        stats["loss"] = loss.detach()
    return loss, stats


def _k3_to_reference(log_probs: Tensor, reference_log_probs: Tensor, action_mask: Tensor) -> Tensor:
    """Schulman's k3 estimator of KL(π ‖ π_ref) per token: ``exp(x) − x − 1`` with x = log π_ref − log π."""
    checks.check_token_tensor("reference_log_probs", reference_log_probs, log_probs)
    dtype = checks.compute_dtype(log_probs.dtype)
    x = torch.where(action_mask, reference_log_probs.detach().to(dtype) - log_probs.to(dtype), 0.0)
    return torch.exp(x) - x - 1


__all__ = ["flash_reinforce_loss", "grpo_loss", "resolve_advantages", "GATES"]
