"""FlashREINFORCE's loss, written as the paper writes it (NVIDIA 2026): see :func:`flash_reinforce_loss`.

The ablations are named options of the same function. Padding slots (``action_mask`` False) may hold anything,
NaN and ±inf included: they are replaced with ``torch.where`` before any arithmetic, never multiplied by zero.
bf16/fp16 inputs are computed in float32. Sharded callers pass advantages over the whole batch
(``advantages=``) and the global ``num_sequences`` / ``num_tokens``: the shard losses then add up exactly.

Glossary: B trajectories, T token slots, T_i policy tokens of trajectory i, μ the behaviour policy (its log-prob
stored at sampling time), π the current learner, δ the gate threshold.
"""

from __future__ import annotations

import torch
from torch import Tensor

from flashsim.losses import checks as check
from flashsim.losses.entropy_filter import negative_token_filter
from flashsim.losses.options import DEFAULT_DELTA, FLASH_REINFORCE_OPTIONS
from flashsim.losses.tokens import (
    aggregate,
    batch_centered,
    compute_dtype,
    log_importance_ratio,
    masked,
    ratio_stats,
    resolve_advantages,
    sampled_action_kl,
    sequence_mean,
)


@check.takes_options(FLASH_REINFORCE_OPTIONS)
def flash_reinforce_loss(
    log_probs: Tensor,
    behavior_log_probs: Tensor,
    rewards: Tensor | None,
    action_mask: Tensor,
    *,
    delta: float = DEFAULT_DELTA,
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
        delta: gate threshold δ on the mean sampled-action Bernoulli KL (default :data:`DEFAULT_DELTA`, flashsim's;
            ``math.inf`` admits everything).
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
        validate: check the options given (against :data:`FLASH_REINFORCE_OPTIONS`) and run the value checks
            that synchronise with the device; trainers that checked both where they entered pass False.

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
    log_rho, num_clamped = log_importance_ratio(log_pi.detach(), log_mu, action_mask, clamp=log_ratio_clamp)
    rho = log_rho.exp()  # ρ_it = exp(log π(a_it) − log μ(a_it)), detached
    d = sampled_action_kl(log_pi, log_mu, action_mask)  # d_it = KL(Bern(μ(a_it)) ‖ Bern(π(a_it)))
    D = sequence_mean(d, action_mask)  # D̄_i = (1/T_i) Σ_t d_it
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
