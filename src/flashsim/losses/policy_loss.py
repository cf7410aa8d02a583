"""The general policy loss: advantages × a trust region/correction × an aggregation.

Every algorithm in flashsim — FlashREINFORCE, GRPO and each ablation — is one combination of the
three axes passed to :func:`policy_loss`; :mod:`flashsim.losses.composed` and the registry only pick
combinations. The loss is *minimised*: ``−∇L`` is the update direction.

REINFORCE-style corrections (``sequence_gate``, ``token_gate``, ``none``, ``truncated_is``,
``ratio_mask``) use the per-token term ``keep_it · w_it · A_i · log π(a_it)`` with a detached weight
``w_it`` (the importance ratio ρ_it = π/μ, or min(ρ_it, C) for TIS, or 1 without importance sampling),
whose gradient ``keep · w · A · ∇log π`` is the importance-weighted policy gradient (FlashREINFORCE,
NVIDIA 2026, eq. for the One-Batch REINFORCE update). ``ppo_clip`` uses PPO's clipped surrogate
(Schulman et al. 2017), whose ratio carries the gradient.

Deliberately left out: entropy bonuses, value baselines (critic-free by design) and KL penalties to a
reference (only :func:`flashsim.losses.grpo_loss` offers GRPO's k3 penalty, off by default).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from flashsim.losses import _checks as checks
from flashsim.losses.aggregation import AGGREGATIONS, aggregate
from flashsim.losses.trust_region import (
    effective_sample_size,
    log_importance_ratio,
    masked,
    ppo_clip_surrogate,
    ratio_bound_mask,
    sampled_action_kl,
    sequence_gate,
    sequence_mean,
    token_gate,
    truncated_is_weights,
)

CORRECTIONS = ("sequence_gate", "token_gate", "none", "truncated_is", "ratio_mask", "ppo_clip")


def policy_loss(
    log_probs: Tensor,
    behavior_log_probs: Tensor,
    action_mask: Tensor,
    advantages: Tensor,
    *,
    correction: str = "sequence_gate",
    aggregation: str = "sample_mean",
    delta: float = 3e-3,
    importance_sampling: bool = True,
    clip_eps: float = 0.2,
    clip_eps_high: float | None = None,
    tis_cap: float = 2.0,
    ratio_bounds: tuple[float, float] = (0.5, 2.0),
    num_sequences: float | Tensor | None = None,
    num_tokens: float | Tensor | None = None,
    max_tokens: float | Tensor | None = None,
    log_ratio_clamp: float | None = None,
    validate: bool = True,
) -> tuple[Tensor, dict[str, Tensor]]:
    """``L = −aggregate(per-token objective)`` for one correction and one aggregation.

    Args:
        log_probs: log π_θ(a_it | h_it) of the current learner; carries the graph.
        behavior_log_probs: log μ(a_it | h_it) stored when the token was sampled (never recomputed).
        action_mask: True on policy tokens; prompt, tool-output and padding slots are False and may
            hold anything (NaN, ±inf) in the log-prob tensors.
        advantages: one per trajectory, already computed (e.g. centred over the global batch).
        correction: one of :data:`CORRECTIONS`.
        aggregation: one of :data:`flashsim.losses.aggregation.AGGREGATIONS`.
        delta: gate threshold δ on the (mean) sampled-action Bernoulli KL (gates only); ``math.inf``
            admits everything.
        importance_sampling: multiply by the detached ratio ρ = π/μ (REINFORCE-style corrections).
        clip_eps, clip_eps_high: PPO clip range ``[1 − clip_eps, 1 + clip_eps_high]`` (``ppo_clip``);
            ``clip_eps_high`` defaults to ``clip_eps`` (DAPO's clip-higher when larger).
        tis_cap: the cap C of truncated importance sampling.
        ratio_bounds: ``(low, high)`` band outside which ``ratio_mask`` drops a token.
        num_sequences, num_tokens, max_tokens: global denominators (see :func:`aggregate`); a rejected
            trajectory or token always stays in them.
        log_ratio_clamp: if set, clamp log ρ to ±this before exponentiating (counted in stats);
            otherwise an overflowing ratio on a kept token raises ``FloatingPointError``.
        validate: run the value checks that synchronise with the device.

    Returns:
        ``(loss, stats)``; ``stats`` holds detached tensors: ``advantages`` [B], ``sequence_kl`` [B],
        ``admitted`` [B] bool, ``token_kept`` [B, T] bool, and scalars ``acceptance_rate``,
        ``token_acceptance_rate``, ``ess``, ``ess_fraction``, ``clip_fraction``, ``ratio_min``,
        ``ratio_mean``, ``ratio_max``, ``num_log_ratio_clamped``, ``loss``.

    Shape:
        log_probs, behavior_log_probs: ``[B, T]`` floating (same dtype); action_mask: ``[B, T]`` bool;
        advantages: ``[B]`` floating. bf16/fp16 are computed in float32; float64 stays float64.
    """
    checks.check_token_tensor("log_probs", log_probs)
    checks.check_token_tensor("behavior_log_probs", behavior_log_probs, log_probs)
    checks.check_action_mask(action_mask, log_probs)
    checks.check_per_trajectory("advantages", advantages, log_probs)
    checks.check_choice("correction", correction, CORRECTIONS)
    checks.check_choice("aggregation", aggregation, AGGREGATIONS)
    _check_hyperparameters(correction, delta, clip_eps, clip_eps_high, tis_cap, ratio_bounds, log_ratio_clamp)
    if validate:
        checks.check_nonempty_rows(action_mask)
        checks.check_values("log_probs", log_probs, action_mask)
        checks.check_values("behavior_log_probs", behavior_log_probs, action_mask)
        checks.check_finite_vector("advantages", advantages)

    dtype = checks.compute_dtype(log_probs.dtype)
    log_probs, behavior_log_probs = log_probs.to(dtype), behavior_log_probs.to(dtype)
    advantages = advantages.detach().to(dtype)
    log_ratio, num_clamped = log_importance_ratio(
        log_probs, behavior_log_probs, action_mask, clamp=log_ratio_clamp
    )
    ratio = torch.exp(log_ratio)
    token_kl = sampled_action_kl(log_probs, behavior_log_probs, action_mask)
    sequence_kl = sequence_mean(token_kl, action_mask)

    if correction == "ppo_clip":
        high = clip_eps if clip_eps_high is None else clip_eps_high
        clamped_log_probs = log_probs if log_ratio_clamp is None else _clamp_towards(
            log_probs, behavior_log_probs, log_ratio_clamp
        )
        objective, clipped = ppo_clip_surrogate(
            clamped_log_probs, behavior_log_probs, advantages, action_mask, clip_eps, high
        )
        admitted, kept = torch.ones_like(sequence_kl, dtype=torch.bool), action_mask
    else:
        weights, admitted, kept, clipped = _reinforce_weights(
            correction, ratio, token_kl, sequence_kl, action_mask, delta, importance_sampling,
            tis_cap, ratio_bounds,
        )
        coefficient = weights * advantages[:, None]
        objective = torch.where(kept, coefficient * log_probs, torch.zeros_like(log_probs))
    if validate and not bool(torch.isfinite(ratio[kept]).all()):
        raise FloatingPointError(
            "an importance ratio π/μ overflowed on an admitted token (log-ratio too large); pass "
            "log_ratio_clamp=30.0 to clamp it, or check that behavior_log_probs belong to these tokens"
        )
    loss = -aggregate(
        objective, action_mask, aggregation,
        num_sequences=num_sequences, num_tokens=num_tokens, max_tokens=max_tokens,
    )
    stats = _stats(loss, advantages, sequence_kl, admitted, kept, clipped, ratio, action_mask, num_clamped)
    return loss, stats


def _reinforce_weights(
    correction: str, ratio: Tensor, token_kl: Tensor, sequence_kl: Tensor, action_mask: Tensor,
    delta: float, importance_sampling: bool, tis_cap: float, ratio_bounds: tuple[float, float],
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Detached weights [B, T], admitted [B], kept [B, T] and clipped [B, T] of a REINFORCE correction."""
    weights = ratio if importance_sampling else torch.ones_like(ratio)
    admitted = torch.ones_like(sequence_kl, dtype=torch.bool)
    kept, clipped = action_mask, torch.zeros_like(action_mask)
    if correction == "sequence_gate":
        admitted = sequence_gate(sequence_kl, delta)
        kept = action_mask & admitted[:, None]
    elif correction == "token_gate":
        kept = token_gate(token_kl, action_mask, delta)
    elif correction == "truncated_is":
        weights, capped = truncated_is_weights(ratio, tis_cap)
        clipped = action_mask & capped
    elif correction == "ratio_mask":
        kept = ratio_bound_mask(ratio, action_mask, *ratio_bounds)
    return weights, admitted, kept, clipped


def _clamp_towards(log_probs: Tensor, behavior_log_probs: Tensor, bound: float) -> Tensor:
    """log π with log π − log μ clamped to ±bound (gradient zero where clamped, as under a PPO clip)."""
    behavior = behavior_log_probs.detach()
    return behavior + (log_probs - behavior).clamp(-bound, bound)


def _stats(
    loss: Tensor, advantages: Tensor, sequence_kl: Tensor, admitted: Tensor, kept: Tensor,
    clipped: Tensor, ratio: Tensor, action_mask: Tensor, num_clamped: Tensor,
) -> dict[str, Tensor]:
    num_tokens = action_mask.sum().to(ratio.dtype)
    ess = effective_sample_size(ratio, action_mask)
    return {
        "loss": loss.detach(),
        "advantages": advantages,
        "sequence_kl": sequence_kl,
        "admitted": admitted,
        "token_kept": kept,
        "acceptance_rate": admitted.to(ratio.dtype).mean(),
        "token_acceptance_rate": kept.sum().to(ratio.dtype) / num_tokens,
        "ess": ess,
        "ess_fraction": ess / num_tokens,
        "clip_fraction": clipped.sum().to(ratio.dtype) / num_tokens,
        "ratio_min": masked(ratio, action_mask, math.inf).min(),
        "ratio_mean": masked(ratio, action_mask).sum() / num_tokens,
        "ratio_max": masked(ratio, action_mask, -math.inf).max(),
        "num_log_ratio_clamped": num_clamped,
    }


def _check_hyperparameters(
    correction: str, delta: float, clip_eps: float, clip_eps_high: float | None, tis_cap: float,
    ratio_bounds: tuple[float, float], log_ratio_clamp: float | None,
) -> None:
    if correction in ("sequence_gate", "token_gate"):
        checks.check_number("delta", delta, low=0.0)
    if correction == "ppo_clip":
        checks.check_number("clip_eps", clip_eps, low=0.0, high=1.0, low_inclusive=False, high_inclusive=False)
        if clip_eps_high is not None:
            checks.check_number("clip_eps_high", clip_eps_high, low=0.0, low_inclusive=False)
    if correction == "truncated_is":
        checks.check_number("tis_cap", tis_cap, low=0.0, low_inclusive=False)
    if correction == "ratio_mask":
        if not (isinstance(ratio_bounds, tuple) and len(ratio_bounds) == 2):
            raise TypeError(f"ratio_bounds must be a (low, high) tuple, got {ratio_bounds!r}")
        low = checks.check_number("ratio_bounds[0]", ratio_bounds[0], low=0.0)
        checks.check_number("ratio_bounds[1]", ratio_bounds[1], low=low)
    if log_ratio_clamp is not None:
        checks.check_number("log_ratio_clamp", log_ratio_clamp, low=0.0, low_inclusive=False)
