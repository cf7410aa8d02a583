"""FlashREINFORCE's loss, written as the paper writes it (NVIDIA 2026): see :func:`flash_reinforce_loss`.

The ablations are named options of the same function. Padding slots (``action_mask`` False) may hold anything,
NaN and ±inf included: they are replaced with ``torch.where`` before any arithmetic, never multiplied by zero.
bf16/fp16 inputs are computed in float32. Sharded callers pass advantages over the whole batch
(``advantages=``) and the global ``num_sequences`` / ``num_tokens``: the shard losses then add up exactly.

Glossary: B trajectories, T token slots, T_i policy tokens of trajectory i, μ the behaviour policy (its log-prob
stored at sampling time), π the current learner, δ the gate threshold.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from flashsim import validation as check
from flashsim.losses.entropy_filter import negative_token_filter

# Probabilities are clamped into [KL_PROB_CLAMP, 1 − KL_PROB_CLAMP] before the Bernoulli KL (as in FlashREINFORCE):
# at p or q = 0 or 1 the log terms are infinite, and at 1 − p = 1e-7 float32 cancellation makes (1 − p) meaningless.
KL_PROB_CLAMP = 1e-6


def flash_reinforce_loss(
    log_probs: Tensor,
    behavior_log_probs: Tensor,
    rewards: Tensor | None,
    action_mask: Tensor,
    *,
    delta: float = 3e-3,
    gate: str = "sequence",
    aggregation: str = "sample_mean",
    advantages: Tensor | None = None,
    importance_sampling: bool = True,
    tis_cap: float | None = None,
    ratio_bounds: tuple[float, float] | None = None,
    num_sequences: float | Tensor | None = None,
    num_tokens: float | Tensor | None = None,
    max_tokens: float | Tensor | None = None,
    log_ratio_clamp: float | None = None,
    negative_token_fraction: float = 1.0,
    entropies: Tensor | None = None,
    failures: Tensor | None = None,
    validate: bool = True,
) -> tuple[Tensor, dict[str, Tensor]]:
    """FlashREINFORCE's loss and its detached stats. It is *minimised*: ``−∇L`` is the paper's update:

        A_i  = R_i − (1/B) Σ_j R_j                          # one-batch baseline
        ρ_it = exp(log π(a_it) − log μ(a_it))                # detached, never clipped
        d_it = KL(Bern(μ(a_it)) ‖ Bern(π(a_it)))             # sampled-action Bernoulli KL
        m_i  = 1[(1/T_i) Σ_t d_it ≤ δ]                       # the whole trajectory in or out
        L    = −(1/B) Σ_i (m_i A_i / T_i) Σ_t ρ_it log π(a_it)   # sample-mean

    Args:
        log_probs: log π_θ of the sampled tokens under the current learner (carries the graph).
        behavior_log_probs: log μ of the same tokens, stored when they were sampled (never recomputed).
        rewards: one scalar reward per trajectory (may be None when ``advantages`` is given).
        action_mask: True on policy tokens; prompt, tool-output and padding slots are False.
        delta: gate threshold δ on the mean sampled-action Bernoulli KL (flashsim's default; the article gives
            none, the reference's quick-start script sets 5e-3; ``math.inf`` admits everything).
        gate: one of :data:`GATES`.
        aggregation: one of :data:`AGGREGATIONS` (the paper: ``"sample_mean"``).
        advantages: precomputed ``[B]`` advantages (e.g. centred over the global batch) instead of
            the one-batch ones computed from ``rewards``.
        importance_sampling: weight by ρ (False: by 1, plain on-policy REINFORCE terms).
        tis_cap: truncated importance sampling, weight ``min(ρ, C)`` (Yao et al. 2025); None: no cap.
        ratio_bounds: ``(low, high)``: a token whose ρ leaves the band contributes nothing (IcePop).
        num_sequences: global B of a sharded batch (see :func:`token_weights`).
        num_tokens: global Σ T_i (token-mean).
        max_tokens: T_max of ``seq_mean_token_sum_norm`` (default: the width T).
        log_ratio_clamp: opt-in cap c on |log ρ| (30.0 is slime's value); without it an overflowing ρ
            on a kept token raises ``FloatingPointError``. The weight is then ``exp(clamp(log ρ))``.
        negative_token_fraction: q of the negative-token entropy filter: with q < 1 a failed trajectory keeps only its
            ⌈q·T_i⌉ tokens of highest behaviour entropy (and its 1/T_i and its place in B).
        entropies: ``[B, T]`` behaviour entropies per token (the filter only).
        failures: ``[B]`` bool, the failed trajectories (the filter only).
        validate: run the value checks that synchronise with the device.

    Returns:
        ``(loss, stats)``; the stats are detached: ``advantages`` [B], ``sequence_kl`` [B], ``admitted``
        [B] bool, ``token_kept`` [B, T] bool, and scalars ``acceptance_rate``, ``token_acceptance_rate``,
        ``ess``, ``ess_fraction``, ``tis_capped_fraction`` (tokens whose ρ the TIS cap lowered),
        ``ratio_min``, ``ratio_mean``, ``ratio_max``, ``num_log_ratio_clamped``, ``loss``.

    Shape:
        ``[B, T]`` log-probs (one dtype) and bool mask, ``[B]`` rewards/advantages.

    >>> lp = torch.log(torch.tensor([[0.5, 0.5], [0.25, 1.0]], dtype=torch.float64))
    >>> mask = torch.tensor([[True, True], [True, False]])
    >>> loss, stats = flash_reinforce_loss(lp, lp, torch.tensor([1.0, 0.0], dtype=torch.float64), mask)
    >>> round(loss.item(), 4), stats["advantages"].tolist(), stats["admitted"].tolist()
    (-0.1733, [0.5, -0.5], [True, True])
    """
    check.check_flash_reinforce_options(dict(
        delta=delta, gate=gate, aggregation=aggregation, importance_sampling=importance_sampling, tis_cap=tis_cap,
        ratio_bounds=ratio_bounds, max_tokens=max_tokens, log_ratio_clamp=log_ratio_clamp,
        negative_token_fraction=negative_token_fraction))
    A = resolve_advantages(rewards, advantages, log_probs, batch_centered, validate=validate)  # A_i = R_i − mean R
    check.check_loss_inputs(log_probs, behavior_log_probs, action_mask, A)
    check.check_filter(negative_token_fraction, entropies, failures, log_probs)
    if validate:
        check.check_loss_values(log_probs, behavior_log_probs, action_mask, A, entropies)
    dtype = compute_dtype(log_probs.dtype)
    log_pi = masked(log_probs.to(dtype), action_mask)  # log π(a_it), carries the graph; 0 on padding
    log_mu = masked(behavior_log_probs.detach().to(dtype), action_mask)  # log μ(a_it)
    A = A.detach().to(dtype)
    T_i = torch.count_nonzero(action_mask, dim=1).to(dtype)
    log_rho, num_clamped = log_importance_ratio(log_pi, log_mu, action_mask, clamp=log_ratio_clamp)
    rho = log_rho.exp()  # ρ_it = exp(log π(a_it) − log μ(a_it)), detached
    d = masked(bernoulli_kl(log_mu.exp(), log_pi.detach().exp()), action_mask)  # d_it = KL(Bern(μ) ‖ Bern(π))
    D = d.sum(dim=1) / T_i  # D̄_i = (1/T_i) Σ_t d_it
    m = D <= delta  # m_i = 1[D̄_i ≤ δ]
    weight = rho  # sg(ρ_it)

    # The ablations, each a named option; at the paper's values none of these lines changes m, keep or weight.
    if gate != "sequence":
        m = torch.ones_like(m)
    keep = action_mask & m[:, None]  # the tokens that enter the sum
    if negative_token_fraction < 1:
        keep = keep & negative_token_filter(entropies, failures, action_mask, negative_token_fraction)
    if gate == "token":
        keep = keep & (d <= delta)
    if ratio_bounds is not None:
        keep = keep & (rho >= ratio_bounds[0]) & (rho <= ratio_bounds[1])
    if not importance_sampling:
        weight = torch.ones_like(rho)
    capped = torch.zeros_like(keep)
    if tis_cap is not None:
        weight, capped = rho.clamp(max=tis_cap), keep & (rho > tis_cap)

    if validate:
        check.check_overflow(rho, keep)
    weight = torch.where(keep, weight, 0.0)  # a dropped token's ratio may be inf: select it away first
    J = torch.where(keep, weight * A[:, None] * log_pi, 0.0)  # J_it = m_i ρ_it A_i log π(a_it)
    loss = -aggregate(J, action_mask, aggregation,  # L = −Σ_i u_i Σ_t J_it, u_i = 1/(B T_i) for sample-mean
                      num_sequences=num_sequences, num_tokens=num_tokens, max_tokens=max_tokens)
    num_policy_tokens = T_i.sum()
    return loss, {
        **ratio_stats(loss, A, rho, action_mask, keep, num_clamped), "sequence_kl": D, "admitted": m,
        "acceptance_rate": m.to(dtype).mean(),
        "tis_capped_fraction": torch.count_nonzero(capped).to(dtype) / num_policy_tokens,
    }


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
    """Detached ``log ρ_it = log π(a_it) − log μ(a_it)``, 0 on padding, optionally clamped to ±clamp.

    The clamp caps the *value* and drops no token (verl and slime clamp the live log-ratio, which zeroes
    the gradient outside the cap; flashsim leaves dropping tokens to the trust region, which counts them).
    Shape: ``[B, T]`` in; returns ``(log_ratio [B, T], num_clamped [])`` (0 when ``clamp`` is None).
    """
    log_ratio = masked(log_probs.detach() - behavior_log_probs.detach(), action_mask)
    if clamp is None:
        return log_ratio, torch.zeros((), dtype=torch.long, device=log_ratio.device)
    return log_ratio.clamp(-clamp, clamp), torch.count_nonzero(log_ratio.abs() > clamp)


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
    check.check_choice("aggregation", mode, check.AGGREGATIONS)
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
