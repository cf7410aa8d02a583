"""The token math FlashREINFORCE's and GRPO's losses share: the one-batch baseline, the log-ratio, the sampled-action
KL d and its trajectory mean D̄, the aggregation weights, and the diagnostics both report.

:func:`~flashsim.losses.flash_reinforce_loss` (:mod:`~flashsim.losses.loss`) and
:func:`~flashsim.losses.grpo_loss` (:mod:`~flashsim.losses.grpo`) import these as peers: d, D̄ and the clamp of
the log-ratio are each computed by one function here. Padding slots (``action_mask`` False) may hold anything;
they are replaced with ``torch.where`` before any arithmetic, never multiplied by zero. bf16/fp16 inputs are
computed in float32.

Glossary: B trajectories, T token slots, T_i policy tokens of trajectory i, μ the behaviour policy, π the learner.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from flashsim.losses import checks as check
from flashsim.losses.options import AGGREGATIONS

# Probabilities are clamped into [KL_PROB_CLAMP, 1 − KL_PROB_CLAMP] before the Bernoulli KL (as in FlashREINFORCE):
# at p or q = 0 or 1 the log terms are infinite, and at 1 − p = 1e-7 float32 cancellation makes (1 − p) meaningless.
KL_PROB_CLAMP = 1e-6


# ----------------------------------------------------------------------------- the one-batch baseline


def batch_centered(rewards: Tensor, group_ids: Tensor | None = None) -> Tensor:
    """One-Batch REINFORCE advantage: ``A_i = R_i − (1/B) Σ_j R_j`` (FlashREINFORCE).

    The baseline is the mean reward of the fresh batch itself, with no std scaling. Because R_i is in
    its own baseline, on-policy ``E[A_i ∇log π(τ_i)] = (1 − 1/B) ∇J``: a known, uniform shrinkage.
    ``group_ids`` is accepted for a uniform signature and ignored. Shape: ``[B]`` → ``[B]``.

    >>> batch_centered(torch.tensor([1.0, 0.0, 0.0, 1.0]))
    tensor([ 0.5000, -0.5000, -0.5000,  0.5000])
    """
    rewards = promoted(rewards)
    shifted = rewards - rewards.min()  # exact zeros for equal rewards (see shift_to_group_minimum)
    return shifted - shifted.mean()


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """bf16/fp16 are promoted to float32 before exp and log; float32 and float64 are kept."""
    return torch.promote_types(dtype, torch.float32)


def promoted(rewards: Tensor) -> Tensor:
    """Detached rewards in their compute dtype: a mean taken in bf16 is off by up to 4.5e-3 (fp16: 4.9e-4)."""
    return rewards.detach().to(compute_dtype(rewards.dtype))


def resolve_advantages(
    rewards: Tensor | None, advantages: Tensor | None, reference: Tensor, estimator: Callable,
    group_ids: Tensor | None = None, *, validate: bool = True,
) -> Tensor:
    """``advantages`` if given, else ``estimator(rewards, group_ids)`` in the compute dtype (all ``[B]``)."""
    given = check.check_advantage_inputs(rewards, advantages, group_ids, reference, validate=validate)
    return given if given is not None else estimator(rewards.to(compute_dtype(reference.dtype)), group_ids)


def ratio_stats(loss: Tensor, advantages: Tensor, ratio: Tensor, action_mask: Tensor, kept: Tensor,
                num_clamped: Tensor) -> dict[str, Tensor]:
    """The detached diagnostics both losses report: the loss, A, the kept tokens and the ratio's spread.

    Shape: advantages ``[B]``, ratio (detached) and the bool masks ``[B, T]``; the rest are scalars.
    """
    dtype = ratio.dtype
    num_tokens = torch.count_nonzero(action_mask).to(dtype)
    on_policy = masked(ratio, action_mask)  # ρ on policy tokens, 0 on padding
    ess = effective_sample_size(ratio, action_mask)
    return {
        "loss": loss.detach(),
        "advantages": advantages,
        "token_kept": kept,
        "token_acceptance_rate": torch.count_nonzero(kept).to(dtype) / num_tokens,
        "ess": ess,
        "ess_fraction": ess / num_tokens,
        "ratio_min": masked(ratio, action_mask, torch.inf).min(),
        "ratio_mean": on_policy.sum() / num_tokens,
        "ratio_max": on_policy.max(),  # ratios are ≥ 0: the zeros on padding never win
        "num_log_ratio_clamped": num_clamped,
    }


# ----------------------------------------------------------------------------- the token quantities


def masked(values: Tensor, action_mask: Tensor, fill: float = 0.0) -> Tensor:
    """``values`` on policy tokens, ``fill`` on padding (NaN-safe)."""
    return torch.where(action_mask, values, fill)


def log_importance_ratio(
    log_probs: Tensor, behavior_log_probs: Tensor, action_mask: Tensor, *, clamp: float | None = None
) -> tuple[Tensor, Tensor]:
    """``log ρ_it = log π(a_it) − log μ(a_it)``, 0 on padding, optionally clamped to ±clamp.

    The one log-ratio of both losses: FlashREINFORCE passes detached log-probs (its ρ is a detached weight),
    GRPO live ones (its ratio carries the gradient, which is then 0 where the clamp binds). The clamp caps the
    *value* and drops no token: dropping tokens is the trust region's job, which counts them.
    Shape: ``[B, T]`` in; returns ``(log_ratio [B, T], num_clamped [])`` (0 when ``clamp`` is None).
    """
    log_ratio = masked(log_probs - behavior_log_probs.detach(), action_mask)
    if clamp is None:
        return log_ratio, torch.zeros((), dtype=torch.long, device=log_ratio.device)
    return log_ratio.clamp(-clamp, clamp), torch.count_nonzero(log_ratio.detach().abs() > clamp)


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


def effective_sample_size(weights: Tensor, action_mask: Tensor) -> Tensor:
    """Kish's ESS of the importance weights over policy tokens: ``(Σw)² / Σw²`` (a 0-dim tensor)."""
    w = masked(weights, action_mask)
    return w.sum() ** 2 / (w * w).sum()


def sampled_action_kl(log_probs: Tensor, behavior_log_probs: Tensor, action_mask: Tensor) -> Tensor:
    """Per-token ``d_it = KL(Bernoulli(μ(a_it)) ‖ Bernoulli(π(a_it)))``, detached, 0 on padding.

    The paper's proxy for how far the learner moved on the action actually sampled: it needs only
    the two probabilities of that one token, not the full vocabulary. Shape: ``[B, T]`` → ``[B, T]``.
    """
    mu = masked(behavior_log_probs.detach(), action_mask).exp()
    pi = masked(log_probs.detach(), action_mask).exp()
    return masked(bernoulli_kl(mu, pi), action_mask)


def sequence_mean(values: Tensor, action_mask: Tensor) -> Tensor:
    """``(1/T_i) Σ_t values_it`` over each trajectory's policy tokens. Shape: ``[B, T]`` → ``[B]``.

    A row without policy tokens gives NaN (the loss validates that every row has at least one).
    """
    counts = torch.count_nonzero(action_mask, dim=1).to(values.dtype)
    return masked(values, action_mask).sum(dim=1) / counts


# ----------------------------------------------------------------------------- aggregation


def token_weights(
    action_mask: Tensor, mode: str, *, dtype: torch.dtype, num_sequences: float | Tensor | None = None,
    num_tokens: float | Tensor | None = None, max_tokens: float | Tensor | None = None,
) -> Tensor:
    """``weights_it = u_i`` on policy tokens, 0 on padding: ``aggregate(v) = Σ_it weights_it v_it``.

    Distributed and microbatched callers pass the *global* denominators (``num_sequences`` = global B,
    ``num_tokens`` = global token count, ``max_tokens`` = the generation budget; defaults: this batch's
    B, Σ T_i and width T). The 1/T_i of ``sample_mean`` is local: each row must be a whole trajectory.

    Shape: action_mask ``[B, T]`` bool → ``[B, T]`` of ``dtype``.
    """
    check.check_choice("aggregation", mode, AGGREGATIONS)
    batch, width = action_mask.shape
    lengths = torch.count_nonzero(action_mask, dim=1).to(dtype)
    B = batch if num_sequences is None else check.check_count("num_sequences", num_sequences, at_least=batch)
    N = lengths.sum() if num_tokens is None else check.check_count("num_tokens", num_tokens, at_least=0)
    T_max = width if max_tokens is None else check.check_count("max_tokens", max_tokens, at_least=0)
    u = {
        "sample_mean": lambda: 1 / (lengths * B),
        "token_mean": lambda: torch.ones_like(lengths) / N,
        "seq_mean_token_sum": lambda: torch.ones_like(lengths) / B,
        "seq_mean_token_sum_norm": lambda: torch.ones_like(lengths) / (T_max * B),
    }[mode]()
    return torch.where(action_mask, u[:, None], 0.0)


def aggregate(
    values: Tensor, action_mask: Tensor, mode: str = "sample_mean", *, num_sequences: float | Tensor | None = None,
    num_tokens: float | Tensor | None = None, max_tokens: float | Tensor | None = None,
) -> Tensor:
    """``Σ_i u_i Σ_t values_it`` for ``mode`` (see :data:`AGGREGATIONS` and :func:`token_weights`).

    Shape: values ``[B, T]`` (padding may hold anything), action_mask ``[B, T]`` bool → scalar.

    >>> v = torch.tensor([[1.0, 1.0, 1.0], [4.0, float("nan"), float("nan")]])
    >>> m = torch.tensor([[True, True, True], [True, False, False]])
    >>> aggregate(v, m, "sample_mean"), aggregate(v, m, "token_mean")
    (tensor(2.5000), tensor(1.7500))
    """
    weights = token_weights(action_mask, mode, dtype=values.dtype, num_sequences=num_sequences,
                            num_tokens=num_tokens, max_tokens=max_tokens)
    return (torch.where(action_mask, values, 0.0) * weights).sum()
