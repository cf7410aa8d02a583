"""Importance ratios, the sampled-action Bernoulli KL, and the trust regions built on them.

Everything here is detached math on [B, T] token tensors except :func:`ppo_clip_surrogate`, whose
ratio carries the gradient as in PPO. Padding slots (``action_mask`` False) may hold anything,
NaN and ±inf included: they are replaced with ``torch.where`` before any arithmetic, never
multiplied by zero (0 · NaN = NaN).

Glossary: B trajectories, T token slots, μ the behaviour policy that sampled a token (its log-prob
stored at sampling time), π the current learner, δ the gate threshold.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

# Probabilities are clamped into [KL_PROB_CLAMP, 1 − KL_PROB_CLAMP] before the Bernoulli KL (as in
# FlashREINFORCE): at p or q = 0 or 1 the log terms are infinite, and at 1 − p = 1e-7 float32
# cancellation makes (1 − p) meaningless anyway.
KL_PROB_CLAMP = 1e-6
# The same clamp in log space: clamping log p to these bounds clamps p to [1e-6, 1 − 1e-6].
LOG_PROB_CLAMP = (math.log(KL_PROB_CLAMP), math.log1p(-KL_PROB_CLAMP))

# torch.where with a bool condition runs a scalar loop on CPU (about 1 ns per element on the 2-core
# benchmark machine, 3-5× a vectorised multiply). The hot path of the loss instead ANDs the bits of
# each value with a word of all ones (keep) or all zeros (drop): bit for bit what torch.where(keep,
# values, 0.0) gives, NaN and ±inf included, but vectorised. See docs/performance.md.
_SAME_WIDTH_INTEGER = {
    torch.float64: torch.int64, torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16,
}


def masked(values: Tensor, action_mask: Tensor, fill: float = 0.0) -> Tensor:
    """``values`` on policy tokens, ``fill`` on padding (NaN-safe)."""
    return torch.where(action_mask, values, torch.full_like(values, fill))


def selection_bits(keep: Tensor, dtype: torch.dtype) -> Tensor:
    """Words of all ones where ``keep`` is True and all zeros elsewhere, as wide as ``dtype``.

    Shape:
        ``keep`` bool of any shape in; the same shape out, as the integer type of ``dtype``'s width.
    """
    return keep.to(_SAME_WIDTH_INTEGER[dtype]).neg_()


def select_or_zero(values: Tensor, bits: Tensor) -> Tensor:
    """``torch.where(keep, values, 0.0)`` bit for bit (NaN-safe), given ``bits = selection_bits(keep, values.dtype)``.

    ``bits`` may broadcast against ``values`` (e.g. one word per trajectory, shape ``[B, 1]``).

    >>> x = torch.tensor([1.5, float("nan"), -float("inf"), -2.0])
    >>> select_or_zero(x, selection_bits(torch.tensor([True, False, False, True]), x.dtype))
    tensor([ 1.5000,  0.0000,  0.0000, -2.0000])
    """
    return (values.view(bits.dtype) & bits).view(values.dtype)


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
    bits = selection_bits(action_mask, log_probs.dtype)
    behavior = select_or_zero(behavior_log_probs.detach(), bits)
    return bernoulli_kl_of_log_probs(behavior, select_or_zero(log_probs.detach(), bits))


def bernoulli_kl_of_log_probs(log_p: Tensor, log_q: Tensor) -> Tensor:
    """:func:`bernoulli_kl` of ``p = exp(log_p)`` and ``q = exp(log_q)``, computed from the log-probs.

    The same clamp and the same formula, rearranged to need three transcendental functions instead of
    six (they dominate the loss's cost on CPU): log p and log q are clamped in log space
    (:data:`LOG_PROB_CLAMP`), so ``p log(p/q) = p (log p − log q)`` needs no log, and
    ``(1−p) log((1−p)/(1−q)) = (1−p) log1p((q − p)/(1 − q))`` needs one log1p instead of two. It
    agrees with :func:`bernoulli_kl` to rounding: ``q − p`` and ``1 − q`` are exact for p, q ≥ 1/2
    (Sterbenz), where the two-log1p form cancels. Equal log-probs (e.g. padding zeros) give exactly 0.

    Shape:
        any two broadcastable floating tensors in; their broadcast shape out.

    >>> bernoulli_kl_of_log_probs(torch.tensor([0.5, 0.9]).log(), torch.tensor([0.5, 0.8]).log()).round(decimals=4)
    tensor([0.0000, 0.0367])
    """
    log_p, log_q = log_p.clamp(*LOG_PROB_CLAMP), log_q.clamp(*LOG_PROB_CLAMP)
    p, q = log_p.exp(), log_q.exp()
    kl = p * (log_p - log_q) + (1 - p) * torch.log1p((q - p) / (1 - q))
    return kl.clamp(min=0.0)  # rounding noise below zero, as in bernoulli_kl


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
