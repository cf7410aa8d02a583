"""Importance ratios, the sampled-action Bernoulli KL, and the trust regions built on them.

Everything here is detached math on [B, T] token tensors except :func:`ppo_clip_surrogate`, whose
ratio carries the gradient as in PPO. Padding slots (``action_mask`` False) may hold anything,
NaN and ±inf included: they are replaced with ``torch.where`` before any arithmetic, never
multiplied by zero (0 · NaN = NaN).

Glossary: B trajectories, T token slots, μ the behaviour policy that sampled a token (its log-prob
stored at sampling time), π the current learner, δ the gate threshold.
"""

from __future__ import annotations

import torch
from torch import Tensor

# Probabilities are clamped into [KL_PROB_CLAMP, 1 − KL_PROB_CLAMP] before the Bernoulli KL (as in
# FlashREINFORCE): at p or q = 0 or 1 the log terms are infinite, and at 1 − p = 1e-7 float32
# cancellation makes (1 − p) meaningless anyway.
KL_PROB_CLAMP = 1e-6


def masked(values: Tensor, action_mask: Tensor, fill: float = 0.0) -> Tensor:
    """``values`` on policy tokens, ``fill`` on padding (NaN-safe)."""
    return torch.where(action_mask, values, torch.full_like(values, fill))


def log_importance_ratio(
    log_probs: Tensor, behavior_log_probs: Tensor, action_mask: Tensor, *, clamp: float | None = None
) -> tuple[Tensor, Tensor]:
    """Detached ``log ρ_it = log π(a_it) − log μ(a_it)``, 0 on padding, optionally clamped to ±clamp.

    Shape:
        log_probs, behavior_log_probs: ``[B, T]``; action_mask: ``[B, T]`` bool.
        Returns ``(log_ratio [B, T], num_clamped [])``; ``num_clamped`` counts policy tokens whose
        log-ratio was clamped (0 when ``clamp`` is None).
    """
    log_ratio = masked(log_probs.detach() - behavior_log_probs.detach(), action_mask)
    if clamp is None:
        return log_ratio, torch.zeros((), dtype=torch.long, device=log_ratio.device)
    num_clamped = (log_ratio.abs() > clamp).sum()
    return log_ratio.clamp(-clamp, clamp), num_clamped


def bernoulli_kl(p: Tensor, q: Tensor) -> Tensor:
    """KL between Bernoulli(p) and Bernoulli(q): ``p log(p/q) + (1−p) log((1−p)/(1−q))``.

    Both are clamped to ``[1e-6, 1 − 1e-6]`` first (see :data:`KL_PROB_CLAMP`). It is ≥ 0 (exactly,
    also after rounding), zero when p = q (after clamping) and positive when they differ by more than rounding.

    >>> bernoulli_kl(torch.tensor([0.5, 0.9]), torch.tensor([0.5, 0.8])).round(decimals=4)
    tensor([0.0000, 0.0367])
    """
    p = p.clamp(KL_PROB_CLAMP, 1 - KL_PROB_CLAMP)
    q = q.clamp(KL_PROB_CLAMP, 1 - KL_PROB_CLAMP)
    kl = p * (torch.log(p) - torch.log(q)) + (1 - p) * (torch.log1p(-p) - torch.log1p(-q))
    # For p ≈ q the two terms cancel and rounding can leave a few ulps below zero (bernoulli_kl(0.875,
    # 0.8749999999999998) was −3.5e-18); a divergence is never negative, so clamp that noise away.
    return kl.clamp(min=0.0)


def sampled_action_kl(log_probs: Tensor, behavior_log_probs: Tensor, action_mask: Tensor) -> Tensor:
    """Per-token ``d_it = KL(Bernoulli(μ(a_it)) ‖ Bernoulli(π(a_it)))``, detached, 0 on padding.

    FlashREINFORCE's proxy for how far the learner moved on the action that was actually sampled:
    it needs only the two stored/recomputed probabilities of that one token, not the full vocabulary.

    Shape:
        ``[B, T]`` in, ``[B, T]`` out.
    """
    p = torch.exp(masked(behavior_log_probs.detach(), action_mask))
    q = torch.exp(masked(log_probs.detach(), action_mask))
    return masked(bernoulli_kl(p, q), action_mask)


def sequence_mean(values: Tensor, action_mask: Tensor) -> Tensor:
    """Mean of ``values`` over each trajectory's policy tokens: ``(1/T_i) Σ_t values_it``.

    Shape:
        ``[B, T]`` values and mask in, ``[B]`` out. Rows without policy tokens give NaN (the loss
        validates that every row has at least one).
    """
    counts = action_mask.sum(dim=1).to(values.dtype)
    return masked(values, action_mask).sum(dim=1) / counts


def sequence_gate(sequence_kl: Tensor, delta: float) -> Tensor:
    """FlashREINFORCE's Sequence Trust Region: admit trajectory i iff ``D̄_i ≤ δ`` (``[B]`` bool).

    The whole trajectory is admitted or rejected together, so a drifted trajectory cannot
    contribute the subset of its tokens that happen to look on-policy.
    """
    return sequence_kl <= delta


def token_gate(token_kl: Tensor, action_mask: Tensor, delta: float) -> Tensor:
    """Token-local ablation of the gate: keep token t of trajectory i iff ``d_it ≤ δ`` (``[B, T]`` bool)."""
    return action_mask & (token_kl <= delta)


def ratio_bound_mask(ratio: Tensor, action_mask: Tensor, low: float, high: float) -> Tensor:
    """Keep a token iff its importance ratio lies in ``[low, high]`` (IcePop / MIS-style masking).

    Unlike clipping, a token outside the band contributes nothing at all rather than a capped term.
    """
    return action_mask & (ratio >= low) & (ratio <= high)


def truncated_is_weights(ratio: Tensor, cap: float) -> tuple[Tensor, Tensor]:
    """Truncated importance sampling: weights ``min(ρ, C)`` and the mask of capped tokens.

    Shape:
        ``[B, T]`` in; ``(weights [B, T], capped [B, T] bool)`` out.
    """
    return ratio.clamp(max=cap), ratio > cap


def ppo_clip_surrogate(
    log_probs: Tensor,
    behavior_log_probs: Tensor,
    advantages: Tensor,
    action_mask: Tensor,
    clip_low: float,
    clip_high: float,
) -> tuple[Tensor, Tensor]:
    """PPO's clipped surrogate per token: ``min(r A, clip(r, 1 − ε_low, 1 + ε_high) A)``.

    ``r = exp(log π − log μ)`` carries the gradient (``∇r = r ∇log π``); where the clip is active the
    token's gradient is exactly zero. With stale rollouts μ is the behaviour policy (π_old).

    Shape:
        log-probs ``[B, T]``, advantages ``[B]``, mask ``[B, T]``; returns
        ``(surrogate [B, T] with 0 on padding, clipped [B, T] bool)`` where ``clipped`` marks policy
        tokens whose gradient the clip removed.
    """
    log_ratio = masked(log_probs - behavior_log_probs.detach(), action_mask)
    ratio = torch.exp(log_ratio)
    adv = advantages[:, None]
    unclipped = ratio * adv
    clipped_value = ratio.clamp(1 - clip_low, 1 + clip_high) * adv
    surrogate = torch.minimum(unclipped, clipped_value)
    r = ratio.detach()
    clipped = action_mask & (((adv > 0) & (r > 1 + clip_high)) | ((adv < 0) & (r < 1 - clip_low)))
    return masked(surrogate, action_mask), clipped


def effective_sample_size(weights: Tensor, action_mask: Tensor) -> Tensor:
    """Kish's ESS of the importance weights over policy tokens: ``(Σw)² / Σw²`` (a 0-dim tensor)."""
    w = masked(weights, action_mask)
    return w.sum() ** 2 / (w * w).sum()
