"""Importance ratios, the sampled-action Bernoulli KL, and the negative-token entropy filter.

Detached diagnostics on ``[B, T]`` token tensors: what the corrections of
:mod:`flashsim.losses.corrections` decide with. Padding slots (``action_mask`` False) may hold
anything, NaN and ±inf included: they are replaced with ``torch.where`` before any arithmetic, never
multiplied by zero (0 · NaN = NaN).

Glossary: B trajectories, T token slots, T_i policy tokens of trajectory i, μ the behaviour policy
that sampled a token (its log-prob stored at sampling time), π the current learner, δ the gate
threshold, q the kept fraction of a failed trajectory's tokens.
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
    return torch.where(action_mask, values, fill)


def log_importance_ratio(
    log_probs: Tensor, behavior_log_probs: Tensor, action_mask: Tensor, *, clamp: float | None = None
) -> tuple[Tensor, Tensor]:
    """Detached ``log ρ_it = log π(a_it) − log μ(a_it)``, 0 on padding, optionally clamped to ±clamp.

    The clamp caps the *value* and adds or removes no token: a REINFORCE-style term keeps the weight
    ``exp(clamp(log ρ))``, a bounded constant, so its gradient is ``clamp(ρ) · A · ∇log π``. verl and
    slime clamp the live log-ratio instead (±20 / ±30), which zeroes the gradient outside the cap;
    flashsim leaves dropping tokens to the trust region, which counts what it drops. PPO's live ratio
    is clamped the same way and, as under ``torch.clamp``, has zero gradient outside the cap.

    Shape:
        log_probs, behavior_log_probs: ``[B, T]``; action_mask: ``[B, T]`` bool.
        Returns ``(log_ratio [B, T], num_clamped [])``; ``num_clamped`` counts policy tokens whose
        log-ratio was clamped (0 when ``clamp`` is None).
    """
    log_ratio = masked(log_probs.detach() - behavior_log_probs.detach(), action_mask)
    if clamp is None:
        return log_ratio, torch.zeros((), dtype=torch.long, device=log_ratio.device)
    num_clamped = torch.count_nonzero(log_ratio.abs() > clamp)
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
    mu = masked(behavior_log_probs.detach(), action_mask).exp()
    pi = masked(log_probs.detach(), action_mask).exp()
    return masked(bernoulli_kl(mu, pi), action_mask)


def sequence_mean(values: Tensor, action_mask: Tensor) -> Tensor:
    """Mean of ``values`` over each trajectory's policy tokens: ``(1/T_i) Σ_t values_it``.

    Shape:
        ``[B, T]`` values and mask in, ``[B]`` out. Rows without policy tokens give NaN (the loss
        validates that every row has at least one).
    """
    counts = torch.count_nonzero(action_mask, dim=1).to(values.dtype)
    return masked(values, action_mask).sum(dim=1) / counts


def negative_token_filter(
    entropies: Tensor, failures: Tensor, action_mask: Tensor, fraction: float
) -> Tensor:
    """Tokens kept by the negative-token entropy filter (FlashREINFORCE appendix; verl ``neg_topq``).

    A failed trajectory keeps only its ``k_i = ⌈q · T_i⌉`` highest-entropy policy tokens (equal
    entropies: the earlier position first); every other trajectory keeps all its policy tokens. The
    loss gives the dropped tokens weight 0 and leaves the trajectory its 1/T_i and its place in B.
    ``q = 1`` keeps everything (the base method), ``q = 0`` drops every token of a failed trajectory.

    Shape:
        entropies ``[B, T]`` (per-token entropies of the behaviour distribution), failures ``[B]``
        bool, action_mask ``[B, T]`` bool → ``[B, T]`` bool.

    >>> h = torch.tensor([[0.1, 0.9, 0.5, 0.9], [0.1, 0.9, 0.5, 0.9]])
    >>> mask = torch.ones(2, 4, dtype=torch.bool)
    >>> negative_token_filter(h, torch.tensor([True, False]), mask, 0.25)  # k = 1: the earlier 0.9 wins
    tensor([[False,  True, False, False],
            [ True,  True,  True,  True]])
    """
    lengths = torch.count_nonzero(action_mask, dim=1)
    keep_count = torch.ceil(fraction * lengths.to(torch.float64))  # ⌈q · T_i⌉, as math.ceil(q * T_i)
    # rank_it: position of token t when row i's policy tokens are sorted by entropy, highest first
    # (stable: ties keep their order); padding sorts last.
    order = torch.sort(masked(entropies.detach(), action_mask, -torch.inf), dim=1, descending=True, stable=True)[1]
    positions = torch.arange(action_mask.shape[1], device=action_mask.device).expand_as(order)
    rank = torch.empty_like(order).scatter_(1, order, positions)
    top = rank < keep_count[:, None]
    return action_mask & (top | ~failures[:, None])


def effective_sample_size(weights: Tensor, action_mask: Tensor) -> Tensor:
    """Kish's ESS of the importance weights over policy tokens: ``(Σw)² / Σw²`` (a 0-dim tensor)."""
    w = masked(weights, action_mask)
    return w.sum() ** 2 / (w * w).sum()
