"""One pass over the tokens of a block of trajectories: the loss, its gradient and the stats together.

:func:`flashsim.losses.policy_loss` calls :func:`block_terms` once per block of rows. For every
correction the gradient of the loss with respect to log π is known in closed form —

- REINFORCE-style (``sequence_gate``, ``token_gate``, ``none``, ``truncated_is``, ``ratio_mask``):
  ``∂L/∂log π_it = −keep_it · w_it · A_i · u_i`` with the detached weight w (ρ, min(ρ, C) or 1);
- ``ppo_clip``: ``∂L/∂log π_it = −r_it · A_i · u_i`` where the clip is inactive, 0 where it is active
  (and 0 where an opt-in log-ratio clamp is active);

where ``u_i`` is the aggregation weight of trajectory i's tokens
(:func:`flashsim.losses.aggregation.trajectory_weights`) — so the pass writes that gradient, already
multiplied by ``scale_i = −A_i · u_i``, and returns per-trajectory sums from which the loss and the
stats follow. Nothing here carries an autograd graph.

Why blocks: on CPU every fresh multi-MiB temporary costs more than the arithmetic done on it (glibc
hands freed blocks back to the OS and their pages fault again on reuse); blocks of ~2^17 token slots
keep temporaries at ~0.5 MiB, where they are recycled and stay in cache. Every per-trajectory result is
computed from its own row only, so it does not depend on the blocking. See docs/performance.md.

Padding slots may hold anything: both log-prob tensors are zeroed there first (bit for bit as
``torch.where`` would), after which the log-ratio is exactly 0, the ratio 1 and the KL 0 on padding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from flashsim.losses._checks import POSITIVE_LOG_PROB_TOLERANCE
from flashsim.losses.trust_region import (
    bernoulli_kl_of_log_probs,
    ratio_bound_mask,
    select_or_zero,
    selection_bits,
    sequence_gate,
    token_gate,
    truncated_is_weights,
)

# About this many token slots per block on CPU (2^17 float32 = 0.5 MiB per temporary); see above.
CPU_BLOCK_SLOTS = 1 << 17


@dataclass(frozen=True)
class TokenSettings:
    """The per-token options of one :func:`policy_loss` call, already validated."""

    correction: str
    delta: float
    importance_sampling: bool
    clip_low: float
    clip_high: float
    tis_cap: float
    ratio_bounds: tuple[float, float]
    log_ratio_clamp: float | None
    validate: bool


class RowTerms(NamedTuple):
    """Per-trajectory results of a block, each of shape ``[rows]``."""

    loss: Tensor  # trajectory i's term of the loss: scale_i · Σ_t (its objective)
    sequence_kl: Tensor
    admitted: Tensor  # bool
    kept: Tensor  # number of kept tokens
    clipped: Tensor  # number of clipped (PPO) or capped (TIS) tokens
    clamped: Tensor  # number of clamped log-ratios
    ratio_sum: Tensor  # Σ_t ρ over policy tokens
    ratio_square_sum: Tensor
    ratio_min: Tensor
    ratio_max: Tensor
    bad_values: Tensor  # bool: a non-finite or positive log-prob on a policy token (validate only)
    overflow: Tensor  # bool: a non-finite ratio on a kept token (validate only)


def row_blocks(batch: int, width: int, device: torch.device) -> list[slice]:
    """Consecutive row blocks covering the batch: ~:data:`CPU_BLOCK_SLOTS` slots each on CPU, one block elsewhere."""
    rows = max(1, CPU_BLOCK_SLOTS // width) if device.type == "cpu" else batch
    return [slice(start, start + rows) for start in range(0, batch, rows)]


def block_terms(
    log_probs: Tensor,
    behavior_log_probs: Tensor,
    action_mask: Tensor,
    lengths: Tensor,
    advantages: Tensor,
    scale: Tensor,
    settings: TokenSettings,
    gradient: Tensor,
    kept: Tensor | None,
) -> RowTerms:
    """Write ``∂L/∂log π`` into ``gradient`` (and the kept mask into ``kept``); return the per-row terms.

    Shape:
        log_probs, behavior_log_probs: ``[r, T]`` detached, in the compute dtype; action_mask ``[r, T]``
        bool; lengths (policy tokens per row), advantages, scale (``−A_i · u_i``): ``[r]``; gradient:
        ``[r, T]`` output; kept: ``[r, T]`` bool output, or None when the correction keeps every policy token.
    """
    bits = selection_bits(action_mask, log_probs.dtype)
    current, behavior = select_or_zero(log_probs, bits), select_or_zero(behavior_log_probs, bits)
    log_ratio = current - behavior
    outside, clamped = None, torch.zeros_like(lengths)
    if settings.log_ratio_clamp is not None:
        outside = log_ratio.abs() > settings.log_ratio_clamp
        clamped = outside.sum(dim=1)
        log_ratio = log_ratio.clamp(-settings.log_ratio_clamp, settings.log_ratio_clamp)
    ratio = log_ratio.exp()
    token_kl = bernoulli_kl_of_log_probs(behavior, current)  # 0 on padding, where both log-probs are 0
    sequence_kl = token_kl.sum(dim=1) / lengths.to(ratio.dtype)
    if settings.correction == "ppo_clip":
        weights, objective, clipped = _ppo_terms(ratio, advantages, action_mask, bits, outside, settings)
        admitted, kept_count = torch.ones_like(lengths, dtype=torch.bool), lengths
    else:
        keep_bits, admitted, kept_count = _gate(ratio, token_kl, sequence_kl, action_mask, bits, lengths, settings)
        kept_ratio = select_or_zero(ratio, keep_bits)
        weights, objective, clipped = _reinforce_terms(kept_ratio, current, keep_bits, settings)
        if kept is not None:
            kept.copy_(keep_bits)
    torch.mul(weights, scale[:, None], out=gradient)
    on_policy_ratio = select_or_zero(ratio, bits)
    ratio_max = on_policy_ratio.amax(dim=1)  # ratios are ≥ 0, so the zeros on padding never win
    bad_values = overflow = torch.zeros_like(admitted)
    if settings.validate:
        bad_values = _out_of_range(current) | _out_of_range(behavior)
        # ppo_clip keeps every policy token; a REINFORCE correction only its kept tokens
        overflow = ~torch.isfinite(ratio_max if settings.correction == "ppo_clip" else kept_ratio.amax(dim=1))
    return RowTerms(
        loss=scale * objective, sequence_kl=sequence_kl, admitted=admitted, kept=kept_count, clipped=clipped,
        clamped=clamped, ratio_sum=on_policy_ratio.sum(dim=1),
        ratio_square_sum=torch.linalg.vecdot(on_policy_ratio, on_policy_ratio),
        ratio_min=torch.where(action_mask, ratio, math.inf).amin(dim=1), ratio_max=ratio_max,
        bad_values=bad_values, overflow=overflow,
    )


def _gate(
    ratio: Tensor, token_kl: Tensor, sequence_kl: Tensor, action_mask: Tensor, bits: Tensor, lengths: Tensor,
    settings: TokenSettings,
) -> tuple[Tensor, Tensor, Tensor]:
    """Selection bits of the kept tokens ``[r, T]``, admitted ``[r]`` bool and kept counts ``[r]``."""
    admitted = torch.ones_like(lengths, dtype=torch.bool)
    if settings.correction == "sequence_gate":
        admitted = sequence_gate(sequence_kl, settings.delta)
        return bits & selection_bits(admitted, ratio.dtype)[:, None], admitted, lengths * admitted
    if settings.correction == "token_gate":
        keep = token_gate(token_kl, action_mask, settings.delta)
    elif settings.correction == "ratio_mask":
        keep = ratio_bound_mask(ratio, action_mask, *settings.ratio_bounds)
    else:
        return bits, admitted, lengths
    return selection_bits(keep, ratio.dtype), admitted, keep.sum(dim=1)


def _reinforce_terms(
    kept_ratio: Tensor, current: Tensor, keep_bits: Tensor, settings: TokenSettings
) -> tuple[Tensor, Tensor, Tensor]:
    """Detached weights ``keep · w`` ``[r, T]``, ``Σ_t keep · w · log π`` ``[r]`` and capped counts ``[r]``.

    ``kept_ratio`` is ρ on the kept tokens and 0 elsewhere.
    """
    weights = kept_ratio if settings.importance_sampling else select_or_zero(torch.ones_like(kept_ratio), keep_bits)
    capped = torch.zeros_like(kept_ratio[:, 0], dtype=torch.long)
    if settings.correction == "truncated_is":  # TIS caps the ratio whatever importance_sampling says
        weights, capped_tokens = truncated_is_weights(kept_ratio, settings.tis_cap)
        capped = capped_tokens.sum(dim=1)
    # log π is zeroed off the kept tokens too: a rejected token may hold −inf when validate=False.
    return weights, torch.linalg.vecdot(weights, select_or_zero(current, keep_bits)), capped


def _ppo_terms(
    ratio: Tensor, advantages: Tensor, action_mask: Tensor, bits: Tensor, outside: Tensor | None,
    settings: TokenSettings,
) -> tuple[Tensor, Tensor, Tensor]:
    """Gradient weights ``r`` where the clip is inactive ``[r, T]``, ``Σ_t clipped ratio`` ``[r]``, clipped counts.

    ``min(r A, clip(r, 1 − ε_low, 1 + ε_high) A)`` is ``A · min(r, 1 + ε_high)`` when A > 0 and
    ``A · max(r, 1 − ε_low)`` when A < 0; the clip removes a token's gradient exactly when it binds:
    A > 0 and r > 1 + ε_high, or A < 0 and r < 1 − ε_low — i.e. when ``sign(A) · r > threshold``.
    """
    low, high = 1 - settings.clip_low, 1 + settings.clip_high
    upper = select_or_zero(ratio.clamp(max=high), bits).sum(dim=1)
    lower = select_or_zero(ratio.clamp(min=low), bits).sum(dim=1)
    positive, negative = advantages > 0, advantages < 0
    objective = torch.where(positive, upper, torch.where(negative, lower, torch.zeros_like(upper)))
    threshold = torch.where(positive, high, torch.where(negative, -low, torch.full_like(advantages, math.inf)))
    clipped = ratio * torch.sign(advantages)[:, None] > threshold[:, None]  # never on padding, where r = 1
    active = action_mask & ~clipped
    if outside is not None:  # a clamped log-ratio has zero gradient, as under torch.clamp
        active &= ~outside
    return select_or_zero(ratio, selection_bits(active, ratio.dtype)), objective, clipped.sum(dim=1)


def _out_of_range(log_probs: Tensor) -> Tensor:
    """Rows ``[r]`` with a NaN, an infinity or a positive value (beyond rounding) among ``log_probs`` (0 on padding)."""
    return ~(torch.isfinite(log_probs.amin(dim=1)) & (log_probs.amax(dim=1) <= POSITIVE_LOG_PROB_TOLERANCE))
