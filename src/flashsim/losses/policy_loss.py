"""The general policy loss: advantages × a correction (trust region) × an aggregation.

Every algorithm in flashsim — FlashREINFORCE, GRPO and each ablation — is one combination of the
three axes passed to :func:`policy_loss`; :mod:`flashsim.losses.composed` and the registry only pick
combinations. The loss is *minimised*: ``−∇L`` is the update direction. Op by op, with plain autograd:

    log ρ_it = log π(a_it) − log μ(a_it)                      (detached; clamped to ±c if asked)
    d_it     = KL(Bern(μ(a_it)) ‖ Bern(π(a_it))),   D̄_i = (1/T_i) Σ_t d_it
    J_it     = CORRECTION_TERMS[correction](...)          (see flashsim.losses.corrections)
    L        = −Σ_i u_i Σ_t J_it                            (u_i: the aggregation's weight)

with the optional negative-token entropy filter narrowing the tokens a failed trajectory may
contribute (:func:`flashsim.losses.trust_region.negative_token_filter`).

Deliberately left out: entropy bonuses, value baselines (critic-free by design) and KL penalties to a
reference (only :func:`flashsim.losses.grpo_loss` offers GRPO's k3 penalty, off by default).
"""

from __future__ import annotations

import torch
from torch import Tensor

from flashsim.losses import _checks as checks
from flashsim.losses.aggregation import AGGREGATIONS, aggregate
from flashsim.losses.corrections import CORRECTION_TERMS, CORRECTIONS, Settings, Terms, Tokens
from flashsim.losses.trust_region import (
    log_importance_ratio,
    masked,
    negative_token_filter,
    sampled_action_kl,
    sequence_mean,
)


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
    negative_token_fraction: float = 1.0,
    entropies: Tensor | None = None,
    failures: Tensor | None = None,
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
        log_ratio_clamp: opt-in cap c: log ρ is clamped to ±c before exponentiating (counted in
            stats); the gradient outside the cap is that of the clamped formula (see
            :func:`~flashsim.losses.trust_region.log_importance_ratio`; 30.0 is slime's value).
            Without it an overflowing ratio on a kept token raises ``FloatingPointError``.
        negative_token_fraction: q; with q < 1 a failed trajectory keeps only its ⌈q·T_i⌉
            highest-entropy policy tokens (the negative-token entropy filter); 1 is the base method.
        entropies: ``[B, T]`` per-token entropies of the behaviour distribution (needed when q < 1).
        failures: ``[B]`` bool, True for a failed trajectory (needed when q < 1).
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
    settings = _settings(delta, importance_sampling, clip_eps, clip_eps_high, tis_cap, ratio_bounds, log_ratio_clamp)
    _check_filter(negative_token_fraction, entropies, failures, log_probs)
    if validate:
        _check_values(log_probs, behavior_log_probs, action_mask, advantages, entropies)
    dtype = checks.compute_dtype(log_probs.dtype)
    mask = action_mask
    log_pi = masked(log_probs.to(dtype), mask)  # [B, T], carries the graph; 0 on padding
    log_mu = masked(behavior_log_probs.detach().to(dtype), mask)
    log_ratio, num_clamped = log_importance_ratio(log_pi, log_mu, mask, clamp=log_ratio_clamp)  # log ρ, detached
    token_kl = sampled_action_kl(log_pi, log_mu, mask)  # d_it
    eligible = mask  # tokens a correction may keep: all, or a failed row's top-entropy ones
    if negative_token_fraction < 1:
        eligible = negative_token_filter(entropies, failures, mask, negative_token_fraction)
    tokens = Tokens(
        log_probs=log_pi, behavior_log_probs=log_mu, ratio=log_ratio.exp(), token_kl=token_kl,
        sequence_kl=sequence_mean(token_kl, mask), advantages=advantages.detach().to(dtype), eligible=eligible,
    )
    terms = CORRECTION_TERMS[correction](tokens, settings)  # J_it and the kept tokens
    if validate:
        _check_overflow(tokens.ratio, terms.kept)
    loss = -aggregate(  # L = −Σ_i u_i Σ_t J_it
        terms.objective, mask, aggregation, num_sequences=num_sequences, num_tokens=num_tokens, max_tokens=max_tokens
    )
    return loss, _stats(loss, tokens, terms, mask, num_clamped)


def _stats(loss: Tensor, x: Tokens, terms: Terms, mask: Tensor, num_clamped: Tensor) -> dict[str, Tensor]:
    """The detached diagnostics of one call (keys documented in :func:`policy_loss`)."""
    dtype = x.ratio.dtype
    num_tokens = torch.count_nonzero(mask).to(dtype)
    on_policy = masked(x.ratio, mask)  # ρ on policy tokens, 0 on padding
    ess = on_policy.sum() ** 2 / (on_policy * on_policy).sum()  # Kish's ESS, as effective_sample_size
    return {
        "loss": loss.detach(),
        "advantages": x.advantages,
        "sequence_kl": x.sequence_kl,
        "admitted": terms.admitted,
        "token_kept": terms.kept,
        "acceptance_rate": terms.admitted.to(dtype).mean(),
        "token_acceptance_rate": torch.count_nonzero(terms.kept).to(dtype) / num_tokens,
        "ess": ess,
        "ess_fraction": ess / num_tokens,
        "clip_fraction": torch.count_nonzero(terms.clipped).to(dtype) / num_tokens,
        "ratio_min": masked(x.ratio, mask, torch.inf).min(),
        "ratio_mean": on_policy.sum() / num_tokens,
        "ratio_max": on_policy.max(),  # ratios are ≥ 0: the zeros on padding never win
        "num_log_ratio_clamped": num_clamped,
    }


def _settings(
    delta: float, importance_sampling: bool, clip_eps: float, clip_eps_high: float | None, tis_cap: float,
    ratio_bounds: tuple[float, float], log_ratio_clamp: float | None,
) -> Settings:
    """The validated :class:`Settings` (every hyperparameter, whichever correction uses it)."""
    checks.check_number("delta", delta, low=0.0)
    checks.check_number("clip_eps", clip_eps, low=0.0, high=1.0, low_inclusive=False, high_inclusive=False)
    if clip_eps_high is not None:
        checks.check_number("clip_eps_high", clip_eps_high, low=0.0, low_inclusive=False)
    checks.check_number("tis_cap", tis_cap, low=0.0, low_inclusive=False)
    if not (isinstance(ratio_bounds, tuple) and len(ratio_bounds) == 2):
        raise TypeError(f"ratio_bounds must be a (low, high) tuple, got {ratio_bounds!r}")
    low = checks.check_number("ratio_bounds[0]", ratio_bounds[0], low=0.0)
    checks.check_number("ratio_bounds[1]", ratio_bounds[1], low=low)
    if log_ratio_clamp is not None:
        checks.check_number("log_ratio_clamp", log_ratio_clamp, low=0.0, low_inclusive=False)
    clip_high = clip_eps if clip_eps_high is None else clip_eps_high
    return Settings(delta, importance_sampling, clip_eps, clip_high, tis_cap, ratio_bounds, log_ratio_clamp)


def _check_filter(fraction: float, entropies: Tensor | None, failures: Tensor | None, log_probs: Tensor) -> None:
    """The negative-token filter's inputs: q in [0, 1]; with q < 1, entropies [B, T] and failures [B] bool."""
    fraction = checks.check_number("negative_token_fraction", fraction, low=0.0, high=1.0)
    if fraction < 1 and (entropies is None or failures is None):
        missing = " and ".join(n for n, v in (("entropies", entropies), ("failures", failures)) if v is None)
        raise ValueError(
            f"negative_token_fraction={fraction:g} < 1 needs entropies [B, T] (the behaviour policy's per-token "
            f"entropies) and failures [B] bool; {missing} not given (or set negative_token_fraction=1.0)"
        )
    if entropies is not None:
        checks.check_token_tensor("entropies", entropies, log_probs, same_dtype=False)
    if failures is not None:
        checks.check_per_trajectory("failures", failures, log_probs, boolean=True)


def _check_values(
    log_probs: Tensor, behavior_log_probs: Tensor, action_mask: Tensor, advantages: Tensor, entropies: Tensor | None
) -> None:
    """The value checks of ``validate=True`` (they synchronise with the device), in a fixed order."""
    checks.check_nonempty_rows(action_mask)
    checks.check_values("log_probs", log_probs, action_mask)
    checks.check_values("behavior_log_probs", behavior_log_probs, action_mask)
    checks.check_finite_vector("advantages", advantages)
    if entropies is not None:
        checks.check_values("entropies", entropies, action_mask, log_probs=False)


def _check_overflow(ratio: Tensor, kept: Tensor) -> None:
    """A kept token whose ratio π/μ overflowed would poison the loss: say how to fix it."""
    if not bool(torch.isfinite(masked(ratio, kept)).all()):
        raise FloatingPointError(
            "an importance ratio π/μ overflowed on an admitted token (log-ratio too large); pass "
            "log_ratio_clamp=30.0 to clamp it, or check that behavior_log_probs belong to these tokens"
        )
