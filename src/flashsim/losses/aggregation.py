"""Aggregation: how per-token terms become one scalar, and which trajectories weigh more.

Every mode gives all policy tokens of trajectory i one weight u_i, so ``aggregate(v) = Σ_i u_i Σ_t v_it``
(names are the API; pick by what each does to long trajectories):

``sample_mean`` — ``u_i = 1 / (B · T_i)`` (FlashREINFORCE; DeepSeekMath GRPO, Shao et al. 2024, TRL ``"grpo"``)
    "seq-mean-token-mean". Every trajectory weighs the same whatever its length, so a long failed
    trajectory cannot dominate the update. Its bias: per token, a long trajectory's tokens weigh 1/T_i
    less, so the estimate is not the gradient of the expected return when lengths vary.
``token_mean`` — ``u_i = 1 / Σ_j T_j`` (DAPO, Yu et al. 2025; TRL's default ``loss_type="dapo"``/``"bnpo"``)
    Every *token* weighs the same: trajectory i weighs ∝ T_i, so long trajectories (often long
    failures) dominate — the length blow-up of the article's §4.3.
``seq_mean_token_sum`` — ``u_i = 1 / B``
    The plain REINFORCE estimate of ∇J (unbiased with an unbiased baseline); its scale grows with length.
``seq_mean_token_sum_norm`` — ``u_i = 1 / (B · T_max)`` (Dr. GRPO, Liu et al. 2025; TRL ``"dr_grpo"``)
    Sequence sums over a constant ``T_max`` (the generation budget): unbiased up to the constant, and
    no per-trajectory length normalisation.

Distributed and microbatched callers pass the *global* denominators (``num_sequences`` = global B,
``num_tokens`` = global token count, ``max_tokens`` = the generation budget) so that the sum of the
shard losses equals the full-batch loss exactly. The per-trajectory 1/T_i of ``sample_mean`` is local
by construction: each row must be a complete trajectory.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from flashsim.losses._checks import check_choice, check_count

Count = float | Tensor


def sample_mean(lengths: Tensor, sequences: Count, tokens: Count, budget: Count) -> Tensor:
    """``u_i = 1 / (B · T_i)``."""
    return 1 / (lengths * sequences)


def token_mean(lengths: Tensor, sequences: Count, tokens: Count, budget: Count) -> Tensor:
    """``u_i = 1 / Σ_j T_j``."""
    return torch.ones_like(lengths) / tokens


def seq_mean_token_sum(lengths: Tensor, sequences: Count, tokens: Count, budget: Count) -> Tensor:
    """``u_i = 1 / B``."""
    return torch.ones_like(lengths) / sequences


def seq_mean_token_sum_norm(lengths: Tensor, sequences: Count, tokens: Count, budget: Count) -> Tensor:
    """``u_i = 1 / (B · T_max)``."""
    return torch.ones_like(lengths) / (budget * sequences)


ROW_WEIGHTS: dict[str, Callable[[Tensor, Count, Count, Count], Tensor]] = {
    "sample_mean": sample_mean,
    "token_mean": token_mean,
    "seq_mean_token_sum": seq_mean_token_sum,
    "seq_mean_token_sum_norm": seq_mean_token_sum_norm,
}
"""Each mode's ``u_i`` from the lengths ``T_i`` ``[B]`` and the counts (B, Σ T_j, T_max)."""

AGGREGATIONS = tuple(ROW_WEIGHTS)


def token_weights(
    action_mask: Tensor,
    mode: str,
    *,
    dtype: torch.dtype,
    num_sequences: Count | None = None,
    num_tokens: Count | None = None,
    max_tokens: Count | None = None,
) -> Tensor:
    """The weight of each token in the aggregate: ``aggregate(v) = Σ_it weights_it v_it``.

    ``weights_it = u_i`` on policy tokens and 0 on padding (and on a row without policy tokens).

    Shape:
        action_mask ``[B, T]`` bool; returns ``[B, T]`` of ``dtype``.
    """
    check_choice("aggregation", mode, AGGREGATIONS)
    batch, width = action_mask.shape
    lengths = torch.count_nonzero(action_mask, dim=1).to(dtype)
    sequences = batch if num_sequences is None else check_count("num_sequences", num_sequences, at_least=batch)
    tokens = lengths.sum() if num_tokens is None else check_count("num_tokens", num_tokens, at_least=0)
    budget = width if max_tokens is None else check_count("max_tokens", max_tokens, at_least=0)
    weights = ROW_WEIGHTS[mode](lengths, sequences, tokens, budget)
    return torch.where(action_mask, weights[:, None], 0.0)


def aggregate(
    values: Tensor,
    action_mask: Tensor,
    mode: str = "sample_mean",
    *,
    num_sequences: Count | None = None,
    num_tokens: Count | None = None,
    max_tokens: Count | None = None,
) -> Tensor:
    """Aggregate per-token ``values`` into a scalar by ``mode`` (see the module docstring).

    Args:
        values: per-token terms; padding slots may hold anything (they are selected away).
        action_mask: True on policy tokens.
        mode: one of :data:`AGGREGATIONS`.
        num_sequences: global number of trajectories (default: this batch's B).
        num_tokens: global number of policy tokens, for ``token_mean`` (default: this batch's).
        max_tokens: the constant ``T_max`` of ``seq_mean_token_sum_norm`` (default: the width T).

    Shape:
        values ``[B, T]``, action_mask ``[B, T]`` bool → scalar.

    >>> v = torch.tensor([[1.0, 1.0, 1.0], [4.0, float("nan"), float("nan")]])
    >>> m = torch.tensor([[True, True, True], [True, False, False]])
    >>> aggregate(v, m, "sample_mean"), aggregate(v, m, "token_mean")
    (tensor(2.5000), tensor(1.7500))
    """
    weights = token_weights(
        action_mask, mode, dtype=values.dtype,
        num_sequences=num_sequences, num_tokens=num_tokens, max_tokens=max_tokens,
    )
    return (torch.where(action_mask, values, 0.0) * weights).sum()
