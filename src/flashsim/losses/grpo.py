"""GRPO, the competitor (DeepSeekMath, Shao et al. 2024): :func:`grpo_loss`, PPO's clipped surrogate.

Its advantage is :func:`~flashsim.losses.group_normalized` (:mod:`flashsim.losses.advantages`).
The token math (log-ratio, d and D̄, aggregation) is :mod:`flashsim.losses.tokens`, shared with FlashREINFORCE's
loss; padding, dtypes and sharded denominators follow it.

Glossary: B trajectories, G trajectories per group (prompt), T token slots.
"""

from __future__ import annotations

import torch
from torch import Tensor

from flashsim.losses import checks as check
from flashsim.losses.advantages import GROUP_STD_EPS, group_normalized
from flashsim.losses.options import GRPO_OPTIONS
from flashsim.losses.tokens import (
    aggregate,
    compute_dtype,
    log_importance_ratio,
    masked,
    ratio_stats,
    resolve_advantages,
    sampled_action_kl,
    sequence_mean,
)


@check.takes_options(GRPO_OPTIONS)
def grpo_loss(
    log_probs: Tensor,
    old_log_probs: Tensor,
    rewards: Tensor | None,
    action_mask: Tensor,
    group_ids: Tensor | None = None,
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
    """GRPO's loss and its detached stats; by default aggregated with DAPO's token-mean (TRL's default):

        A_i  = (R_i − mean_g R) / (std_g R + ε)              # group-normalised
        r_it = π(a_it) / π_old(a_it)                         # live: carries the gradient
        L    = −(1/Σ_j T_j) Σ_it min(r_it A_i, clip(r_it, 1 − ε_low, 1 + ε_high) A_i)

    DeepSeekMath's own GRPO (TRL ``loss_type="grpo"``) is ``aggregation="sample_mean"``; Dr. GRPO (TRL
    ``"dr_grpo"``) is ``scale_by_std=False, aggregation="seq_mean_token_sum_norm"``.

    Args:
        log_probs: log π_θ of the sampled tokens (carries the graph).
        old_log_probs: log π_old of the same tokens; with stale rollouts, the behaviour policy μ.
        rewards: one reward per trajectory (may be None when ``advantages`` is given).
        action_mask: True on policy tokens.
        group_ids: which prompt each trajectory answers (siblings share an id); may be None only
            when ``advantages`` is given.
        clip_eps: ε_low; the clip range is ``[1 − clip_eps, 1 + clip_eps_high]``.
        clip_eps_high: ε_high (default ``clip_eps``; larger is DAPO's clip-higher).
        scale_by_std: divide by the group std (False gives Dr. GRPO's centred advantage).
        std_eps: ε added to the group std (default 1e-6; TRL uses 1e-4). It bounds |A| by
            |R − mean| / ε when a group's rewards barely differ.
        aggregation: ``"token_mean"`` (DAPO's; TRL's default), ``"sample_mean"`` (DeepSeekMath GRPO)
            or another mode of :data:`~flashsim.losses.AGGREGATIONS`.
        advantages: precomputed ``[B]`` advantages instead of those from ``rewards`` and ``group_ids``.
        num_sequences: global B of a sharded batch.
        num_tokens: global Σ T_i (token-mean).
        max_tokens: T_max of ``seq_mean_token_sum_norm``.
        log_ratio_clamp: opt-in cap on |log r|; outside it the token's gradient is 0.
        validate: check the options given (against :data:`~flashsim.losses.options.GRPO_OPTIONS`) and run the value
            checks that synchronise with the device.
        reference_log_probs: log π_ref for the optional k3 penalty to a reference policy.
        kl_coef: β of ``β · agg(exp(ref − log π) − (ref − log π) − 1)`` (0 by default, as in recent recipes).

    Returns:
        ``(loss, stats)``; the stats are detached: those of :func:`~flashsim.losses.loss.ratio_stats`,
        ``sequence_kl`` [B] (the drift D̄_i, a diagnostic: nothing is gated on it), ``clip_fraction`` (the
        tokens where the clip binds, whose gradient is 0), and ``kl_reference`` when a reference is given.
        GRPO has no gate, so it reports no ``admitted`` or ``acceptance_rate``.

    Shape:
        ``[B, T]`` log-probs and bool mask, ``[B]`` rewards, advantages and integer group_ids.

    >>> lp = torch.zeros(4, 1, dtype=torch.float64) - 0.7
    >>> loss, stats = grpo_loss(lp, lp, torch.tensor([1.0, 0.0, 1.0, 1.0], dtype=torch.float64),
    ...                         torch.ones(4, 1, dtype=torch.bool), torch.tensor([0, 0, 1, 1]))
    >>> stats["advantages"].round(decimals=4).tolist(), loss.item() == 0.0
    ([0.7071, -0.7071, 0.0, 0.0], True)
    """
    low, high = clip_eps, clip_eps if clip_eps_high is None else clip_eps_high  # ε_low, ε_high
    if advantages is None and group_ids is None:
        raise ValueError("grpo_loss needs group_ids [B] to form groups (or precomputed advantages=)")

    def estimator(r: Tensor, g: Tensor | None) -> Tensor:
        return group_normalized(r, g, scale_by_std=scale_by_std, std_eps=std_eps)

    A = resolve_advantages(rewards, advantages, log_probs, estimator, group_ids, validate=validate)
    check.check_loss_inputs(log_probs, old_log_probs, action_mask, A)
    if validate:
        check.check_loss_values(log_probs, old_log_probs, action_mask, A)

    dtype = compute_dtype(log_probs.dtype)
    log_pi = masked(log_probs.to(dtype), action_mask)  # log π(a_it), carries the graph; 0 on padding
    log_old = masked(old_log_probs.detach().to(dtype), action_mask)  # log π_old(a_it)
    log_r, num_clamped = log_importance_ratio(log_pi, log_old, action_mask, clamp=log_ratio_clamp)  # live
    r, adv = torch.exp(log_r), A.detach().to(dtype)[:, None]  # r_it, A_i
    ratio = r.detach()
    surrogate = torch.minimum(r * adv, r.clamp(1 - low, 1 + high) * adv)  # min(r A, clip(r) A)
    if validate:
        check.check_overflow(ratio, action_mask)
    J = torch.where(action_mask, surrogate, 0.0)
    counts = {"num_sequences": num_sequences, "num_tokens": num_tokens, "max_tokens": max_tokens}
    loss = -aggregate(J, action_mask, aggregation, **counts)  # token-mean by default
    penalized = reference_log_probs is not None and kl_coef > 0
    if penalized:
        penalty = aggregate(k3_to_reference(log_probs, reference_log_probs, action_mask), action_mask,
                            aggregation, **counts)
        loss = loss + kl_coef * penalty
    # Where the clip binds the token's gradient is exactly zero: that is what clip_fraction counts.
    clipped = action_mask & (((adv > 0) & (ratio > 1 + high)) | ((adv < 0) & (ratio < 1 - low)))
    stats = {
        **ratio_stats(loss, adv[:, 0], ratio, action_mask, action_mask, num_clamped),
        # The drift diagnostic D̄_i (GRPO does not gate on it): runs compare drift across losses.
        "sequence_kl": sequence_mean(sampled_action_kl(log_pi, log_old, action_mask), action_mask),
        "clip_fraction": torch.count_nonzero(clipped).to(dtype) / torch.count_nonzero(action_mask).to(dtype),
    }
    if penalized:
        stats["kl_reference"] = penalty.detach()
    return loss, stats


def k3_to_reference(log_probs: Tensor, reference_log_probs: Tensor, action_mask: Tensor) -> Tensor:
    """Schulman's k3 estimator of KL(π ‖ π_ref) per token: ``exp(x) − x − 1`` with x = log π_ref − log π."""
    check.check_token_tensor("reference_log_probs", reference_log_probs, log_probs)
    dtype = compute_dtype(log_probs.dtype)
    x = torch.where(action_mask, reference_log_probs.detach().to(dtype) - log_probs.to(dtype), 0.0)
    return torch.exp(x) - x - 1
