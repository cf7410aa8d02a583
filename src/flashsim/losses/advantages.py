"""The other advantage estimators: A_i from the rewards R of one batch, ``[B] → [B]``.

The estimators of the ablations and of GRPO: no baseline (:func:`positive_only`), GRPO's
group-normalised advantage (:func:`group_normalized`), Dr. GRPO's :func:`group_centered` and RLOO's
:func:`leave_one_out`. FlashREINFORCE's own one-batch baseline, :func:`~flashsim.losses.tokens.batch_centered`,
sits with the token math both losses share. Rewards are promoted (bf16/fp16 → float32) and shifted
so that equal rewards give exactly 0.

Glossary: B trajectories, G trajectories per group (prompt).
"""

from __future__ import annotations

import torch
from torch import Tensor

from flashsim.losses.tokens import promoted

# GRPO's ε added to the group std (DeepSeekMath): keeps a group whose rewards are all equal at
# advantage 0 instead of 0/0.
GROUP_STD_EPS = 1e-6


def positive_only(rewards: Tensor, group_ids: Tensor | None = None) -> Tensor:
    """No baseline: ``A_i = R_i``. With 0/1 rewards, failures give no learning signal at all.

    The ablation of the article's §8 ("positive-only feedback collapsed to 9.8").

    >>> positive_only(torch.tensor([1.0, 0.0]))
    tensor([1., 0.])
    """
    return promoted(rewards).clone()


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
