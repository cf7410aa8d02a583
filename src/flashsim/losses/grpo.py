"""GRPO, the competitor (DeepSeekMath, Shao et al. 2024): :func:`grpo_loss`, and the group baselines.

Besides GRPO's group-normalised advantage: Dr. GRPO's :func:`group_centered` and RLOO's
:func:`leave_one_out`. Padding, dtypes and sharded denominators follow :mod:`flashsim.losses.loss`.

Glossary: B trajectories, G trajectories per group (prompt), T token slots.
"""

from __future__ import annotations

import torch
from torch import Tensor

from flashsim import validation as check
from flashsim.losses.loss import Tokens, aggregate, compute_dtype, promoted, resolve_advantages
from flashsim.losses.validation import check_grpo_options, check_overflow

# GRPO's ε added to the group std (DeepSeekMath): keeps a group whose rewards are all equal at
# advantage 0 instead of 0/0.
GROUP_STD_EPS = 1e-6


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
        validate: run the value checks that synchronise with the device.
        reference_log_probs: log π_ref for the optional k3 penalty to a reference policy.
        kl_coef: β of ``β · agg(exp(ref − log π) − (ref − log π) − 1)`` (0 by default, as in recent recipes).

    Returns:
        ``(loss, stats)`` with the keys of :func:`~flashsim.losses.flash_reinforce_loss` (every
        trajectory admitted; ``clip_fraction`` counts the tokens where the clip binds), plus
        ``kl_reference`` when a reference is given.

    Shape:
        ``[B, T]`` log-probs and bool mask, ``[B]`` rewards, advantages and integer group_ids.

    >>> lp = torch.zeros(4, 1, dtype=torch.float64) - 0.7
    >>> loss, stats = grpo_loss(lp, lp, torch.tensor([1.0, 0.0, 1.0, 1.0], dtype=torch.float64),
    ...                         torch.ones(4, 1, dtype=torch.bool), torch.tensor([0, 0, 1, 1]))
    >>> stats["advantages"].round(decimals=4).tolist(), loss.item() == 0.0
    ([0.7071, -0.7071, 0.0, 0.0], True)
    """
    options = check_grpo_options(dict(
        clip_eps=clip_eps, clip_eps_high=clip_eps_high, scale_by_std=scale_by_std, std_eps=std_eps,
        aggregation=aggregation, max_tokens=max_tokens, log_ratio_clamp=log_ratio_clamp, kl_coef=kl_coef))
    low = options["clip_eps"]
    high = low if clip_eps_high is None else options["clip_eps_high"]
    if advantages is None and group_ids is None:
        raise ValueError("grpo_loss needs group_ids [B] to form groups (or precomputed advantages=)")

    def estimator(r: Tensor, g: Tensor | None) -> Tensor:
        return group_normalized(r, g, scale_by_std=scale_by_std, std_eps=std_eps)

    A = resolve_advantages(rewards, advantages, log_probs, estimator, group_ids, validate=validate)
    check.check_loss_inputs(log_probs, old_log_probs, action_mask, A)
    if validate:
        check.check_loss_values(log_probs, old_log_probs, action_mask, A)

    x = Tokens.of(log_probs, old_log_probs, action_mask, A, log_ratio_clamp)
    log_r = x.log_pi - x.log_mu  # live: 0 on padding, where both are 0
    if log_ratio_clamp is not None:
        log_r = log_r.clamp(-log_ratio_clamp, log_ratio_clamp)
    r, adv = torch.exp(log_r), x.advantages[:, None]                  # r_it, A_i
    surrogate = torch.minimum(r * adv, r.clamp(1 - low, 1 + high) * adv)  # min(r A, clip(r) A)
    if validate:
        check_overflow(x.ratio, action_mask)
    J = torch.where(action_mask, surrogate, 0.0)
    counts = {"num_sequences": num_sequences, "num_tokens": num_tokens, "max_tokens": max_tokens}
    loss = -aggregate(J, action_mask, aggregation, **counts)          # token-mean by default
    # Where the clip binds the token's gradient is exactly zero: that is what clip_fraction counts.
    clipped = action_mask & (((adv > 0) & (x.ratio > 1 + high)) | ((adv < 0) & (x.ratio < 1 - low)))
    if reference_log_probs is not None and kl_coef > 0:
        penalty = aggregate(k3_to_reference(log_probs, reference_log_probs, action_mask), action_mask,
                            aggregation, **counts)
        loss = loss + kl_coef * penalty
    stats = x.stats(loss, torch.ones_like(x.sequence_kl, dtype=torch.bool), action_mask, clipped)
    if reference_log_probs is not None and kl_coef > 0:
        stats["kl_reference"] = penalty.detach()
    return loss, stats


def k3_to_reference(log_probs: Tensor, reference_log_probs: Tensor, action_mask: Tensor) -> Tensor:
    """Schulman's k3 estimator of KL(π ‖ π_ref) per token: ``exp(x) − x − 1`` with x = log π_ref − log π."""
    check.check_token_tensor("reference_log_probs", reference_log_probs, log_probs)
    dtype = compute_dtype(log_probs.dtype)
    x = torch.where(action_mask, reference_log_probs.detach().to(dtype) - log_probs.to(dtype), 0.0)
    return torch.exp(x) - x - 1


# ----------------------------------------------------------------------------- group baselines


def group_normalized(
    rewards: Tensor, group_ids: Tensor | None = None, *, scale_by_std: bool = True, std_eps: float = GROUP_STD_EPS
) -> Tensor:
    """GRPO advantage: ``A_i = (R_i − mean_g R) / (std_g R + ε)`` over the trajectory's group g.

    ``std_g`` is the unbiased (Bessel-corrected) std of the group. A group of one gets advantage 0:
    its only member is its own baseline and the unbiased std of one sample is undefined, so there is
    no contrast to learn from (which is also why GRPO with G = 1 gives no signal). With
    ``scale_by_std=False`` this is Dr. GRPO's :func:`group_centered`. Shape: ``[B]`` → ``[B]``.

    >>> group_normalized(torch.tensor([1.0, 0.0, 1.0, 1.0]), torch.tensor([0, 0, 1, 1]))
    tensor([ 0.7071, -0.7071,  0.0000,  0.0000])
    """
    rewards = promoted(rewards)
    index, counts = group_index(group_ids, rewards.device)
    k, sizes = counts.shape[0], counts.to(rewards.dtype)
    shifted = shift_to_group_minimum(rewards, index, k)
    centered = shifted - (group_sum(shifted, index, k) / sizes)[index]
    if not scale_by_std:
        return centered
    std = torch.sqrt(group_sum(centered * centered, index, k) / (sizes - 1).clamp(min=1))
    singleton = (counts == 1)[index]
    return torch.where(singleton, torch.zeros_like(centered), centered / (std[index] + std_eps))


def group_centered(rewards: Tensor, group_ids: Tensor | None = None) -> Tensor:
    """Dr. GRPO advantage: ``A_i = R_i − mean_g R`` (group mean, no std scaling; Liu et al. 2025).

    >>> group_centered(torch.tensor([1.0, 0.0, 1.0]), torch.tensor([0, 0, 1]))
    tensor([ 0.5000, -0.5000,  0.0000])
    """
    return group_normalized(rewards, group_ids, scale_by_std=False)


def leave_one_out(rewards: Tensor, group_ids: Tensor | None = None) -> Tensor:
    """RLOO advantage: ``A_i = R_i − mean of the other members of its group`` (Kool et al. 2019).

    The baseline excludes the sample itself, so the policy-gradient estimate is unbiased. Without
    ``group_ids`` the whole batch is one group. A group of one has no "others" and gets 0.

    >>> leave_one_out(torch.tensor([1.0, 0.0, 0.0]))
    tensor([ 1.0000, -0.5000, -0.5000])
    """
    rewards = promoted(rewards)
    if group_ids is None:
        group_ids = torch.zeros(rewards.shape[0], dtype=torch.long, device=rewards.device)
    index, counts = group_index(group_ids, rewards.device)
    sizes = counts.to(rewards.dtype)[index]
    shifted = shift_to_group_minimum(rewards, index, counts.shape[0])
    others_mean = (group_sum(shifted, index, counts.shape[0])[index] - shifted) / (sizes - 1).clamp(min=1)
    return torch.where(sizes > 1, shifted - others_mean, torch.zeros_like(rewards))


def group_index(group_ids: Tensor | None, device: torch.device) -> tuple[Tensor, Tensor]:
    """Dense group index [B] in 0..K−1 and the group sizes [K]."""
    if group_ids is None:
        raise ValueError("this advantage estimator needs group_ids [B] (which prompt each trajectory answers)")
    _, index = torch.unique(group_ids, return_inverse=True)
    return index.to(device), torch.bincount(index).to(device)


def group_sum(values: Tensor, index: Tensor, num_groups: int) -> Tensor:
    return torch.zeros(num_groups, dtype=values.dtype, device=values.device).index_add_(0, index, values)


def shift_to_group_minimum(rewards: Tensor, index: Tensor, num_groups: int) -> Tensor:
    """``R_i − min_g R``: baselines are shift-invariant, and this makes equal rewards exactly 0.

    In floating point the mean of G copies of 0.7 is not 0.7, so ``R − mean R`` of a constant group
    is a few ulps instead of 0, and GRPO then divides those ulps by a std of the same size, giving
    float32 advantages of ±0.1 to a group with no contrast at all. After the shift a constant group
    is exactly 0 and so are its advantages.
    """
    minimum = torch.zeros(num_groups, dtype=rewards.dtype, device=rewards.device)
    minimum = minimum.scatter_reduce(0, index, rewards, reduce="amin", include_self=False)
    return rewards - minimum[index]
