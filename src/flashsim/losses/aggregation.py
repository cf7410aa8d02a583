"""Aggregation: how per-token terms become one scalar, and which trajectories weigh more.

Modes (names are the API; pick by what each does to long trajectories):

``sample_mean`` (FlashREINFORCE, "seq-mean-token-mean")
    ``(1/B) Σ_i (1/T_i) Σ_t v_it``. Every trajectory weighs the same whatever its length, so a long
    failed trajectory cannot dominate the update. Its bias: per token, a long trajectory's tokens
    weigh 1/T_i less, so the estimate is not the gradient of the expected return when lengths vary.
``token_mean`` (GRPO/DAPO)
    ``Σ_i Σ_t v_it / Σ_i T_i``. Every *token* weighs the same: trajectory i weighs ∝ T_i, so long
    trajectories (often long failures) dominate — the length blow-up of the article's §4.3.
``seq_mean_token_sum``
    ``(1/B) Σ_i Σ_t v_it``. The plain REINFORCE estimate of ∇J (unbiased with an unbiased baseline);
    its scale grows with length.
``seq_mean_token_sum_norm`` (Dr. GRPO)
    ``(1/B) Σ_i Σ_t v_it / T_max`` with a constant ``T_max`` (the generation budget): unbiased up to the
    constant, and no per-trajectory length normalisation.

Distributed and microbatched callers pass the *global* denominators (``num_sequences`` = global B,
``num_tokens`` = global token count, ``max_tokens`` = the generation budget) so that the sum of the
shard losses equals the full-batch loss exactly. The per-trajectory 1/T_i of ``sample_mean`` is local
by construction: each row must be a complete trajectory.
"""

from __future__ import annotations

import torch
from torch import Tensor

from flashsim.losses._checks import check_choice, check_count

AGGREGATIONS = ("sample_mean", "token_mean", "seq_mean_token_sum", "seq_mean_token_sum_norm")


def token_weights(
    action_mask: Tensor,
    mode: str,
    *,
    dtype: torch.dtype,
    num_sequences: float | Tensor | None = None,
    num_tokens: float | Tensor | None = None,
    max_tokens: float | Tensor | None = None,
) -> Tensor:
    """The weight of each token in the aggregate: ``aggregate(v) = Σ_it weights_it v_it``.

    Shape:
        action_mask ``[B, T]`` bool; returns ``[B, T]`` of ``dtype``, 0 on padding.
    """
    weights = trajectory_weights(
        action_mask, mode, dtype=dtype, num_sequences=num_sequences, num_tokens=num_tokens, max_tokens=max_tokens
    )
    return action_mask.to(dtype) * weights[:, None]


def trajectory_weights(
    action_mask: Tensor,
    mode: str,
    *,
    dtype: torch.dtype,
    lengths: Tensor | None = None,
    num_sequences: float | Tensor | None = None,
    num_tokens: float | Tensor | None = None,
    max_tokens: float | Tensor | None = None,
) -> Tensor:
    """The weight that every policy token of trajectory i gets: ``token_weights = mask · this[:, None]``.

    Each mode weighs all tokens of one trajectory alike, so one number per trajectory says it all
    (the loss scales its per-token gradient by it instead of building a [B, T] weight tensor).
    ``lengths`` (``action_mask.sum(dim=1)``) may be passed when the caller has already counted.

    Shape:
        action_mask ``[B, T]`` bool; lengths ``[B]`` integer; returns ``[B]`` of ``dtype``.
    """
    check_choice("aggregation", mode, AGGREGATIONS)
    batch, width = action_mask.shape
    lengths = action_mask.sum(dim=1) if lengths is None else lengths
    if mode == "token_mean":
        denom = lengths.sum().to(dtype) if num_tokens is None else check_count("num_tokens", num_tokens, at_least=0)
        return torch.ones(batch, dtype=dtype, device=action_mask.device) / denom
    sequences = batch if num_sequences is None else check_count("num_sequences", num_sequences, at_least=batch)
    if mode == "sample_mean":
        return 1 / (lengths.to(dtype) * sequences)
    budget = 1 if mode == "seq_mean_token_sum" else (
        width if max_tokens is None else check_count("max_tokens", max_tokens, at_least=0)
    )
    return torch.ones(batch, dtype=dtype, device=action_mask.device) / (budget * sequences)


def aggregate(
    values: Tensor,
    action_mask: Tensor,
    mode: str = "sample_mean",
    *,
    num_sequences: float | Tensor | None = None,
    num_tokens: float | Tensor | None = None,
    max_tokens: float | Tensor | None = None,
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
    return torch.where(action_mask, values * weights, torch.zeros_like(values)).sum()
