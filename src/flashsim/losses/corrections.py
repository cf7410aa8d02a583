"""The corrections (trust regions) for stale tokens: one small function each, chosen by name in one table.

Each correction turns the token quantities of one batch (:class:`Tokens`) into the per-token objective
``J_it`` whose aggregate the loss maximises (``L = −aggregate(J)``), and says which tokens it kept.

REINFORCE-style corrections use ``J_it = keep_it · sg(w_it) · A_i · log π(a_it)`` with a detached
weight ``w_it`` — the importance ratio ρ_it = π/μ, min(ρ_it, C) for TIS, or 1 without importance
sampling — so ``∇J_it = keep_it · w_it · A_i · ∇log π(a_it)``, the importance-weighted policy gradient
of FlashREINFORCE (NVIDIA 2026):

- :func:`sequence_gate` (the paper's Sequence Trust Region): keep trajectory i iff D̄_i ≤ δ;
- :func:`token_gate` (token-local ablation): keep token t iff d_it ≤ δ;
- :func:`no_correction`: keep every token (plain importance sampling);
- :func:`truncated_is` (TIS, Yao et al. 2025): w = min(ρ, C);
- :func:`ratio_mask` (IcePop / masked IS): keep a token iff its ρ lies in [low, high].

:func:`ppo_clip` uses PPO's surrogate (Schulman et al. 2017) with a live ratio,
``J_it = min(r_it A_i, clip(r_it, 1 − ε_low, 1 + ε_high) A_i)``; on an unclipped token its gradient
``r · A · ∇log π`` equals the REINFORCE-style one, so ``ppo_clip`` vs ``sequence_gate`` isolates the
trust region, not the estimator.

Glossary: B trajectories, T token slots, δ the gate threshold, C the TIS cap.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor


@dataclass(frozen=True)
class Settings:
    """The hyperparameters of the corrections, already validated."""

    delta: float  # δ of the gates
    importance_sampling: bool  # weight REINFORCE-style terms by ρ (else by 1)
    clip_low: float  # ε_low of PPO's clip
    clip_high: float  # ε_high of PPO's clip
    tis_cap: float  # C of truncated IS
    ratio_bounds: tuple[float, float]  # the band of ratio_mask
    log_ratio_clamp: float | None  # the cap on |log ρ|, or None


class Tokens(NamedTuple):
    """What every correction sees, in the compute dtype. Padding slots hold 0 in every ``[B, T]`` float.

    Shape: ``[B, T]`` except ``sequence_kl`` and ``advantages`` ``[B]``.
    """

    log_probs: Tensor  # log π(a_it), carries the graph
    behavior_log_probs: Tensor  # log μ(a_it), detached
    ratio: Tensor  # ρ_it = exp(log π − log μ), detached (log-ratio clamped when asked)
    token_kl: Tensor  # d_it, the sampled-action Bernoulli KL
    sequence_kl: Tensor  # D̄_i = (1/T_i) Σ_t d_it
    advantages: Tensor  # A_i, detached
    eligible: Tensor  # bool: policy tokens that the negative-token filter keeps (all of them when q = 1)


class Terms(NamedTuple):
    """A correction's result. Shape: ``objective``, ``kept``, ``clipped`` ``[B, T]``; ``admitted`` ``[B]``."""

    objective: Tensor  # J_it, 0 on tokens that were not kept
    kept: Tensor  # bool: tokens that contribute
    admitted: Tensor  # bool: trajectories the trajectory-level gate admitted (all for token-level corrections)
    clipped: Tensor  # bool: tokens clipped (PPO) or capped (TIS)


def reinforce_terms(x: Tokens, keep: Tensor, weight: Tensor) -> Tensor:
    """``J_it = sg(w_it) · A_i · log π(a_it)`` on kept tokens, 0 elsewhere. Shape: ``[B, T]``."""
    w = torch.where(keep, weight, 0.0)  # a dropped token's ratio may be inf: select it away before multiplying
    return torch.where(keep, w * x.advantages[:, None] * x.log_probs, 0.0)


def _weight(x: Tokens, s: Settings) -> Tensor:
    return x.ratio if s.importance_sampling else torch.ones_like(x.ratio)


def _everyone(x: Tokens) -> Tensor:
    return torch.ones_like(x.advantages, dtype=torch.bool)


def _nothing(x: Tokens) -> Tensor:
    return torch.zeros_like(x.eligible)


def sequence_gate(x: Tokens, s: Settings) -> Terms:
    """FlashREINFORCE's Sequence Trust Region: trajectory i is admitted iff ``D̄_i ≤ δ``.

    The whole trajectory is admitted or rejected together, so a drifted trajectory cannot contribute
    the subset of its tokens that happen to look on-policy. A rejected one stays in B.
    """
    admitted = x.sequence_kl <= s.delta
    keep = x.eligible & admitted[:, None]
    return Terms(reinforce_terms(x, keep, _weight(x, s)), keep, admitted, _nothing(x))


def token_gate(x: Tokens, s: Settings) -> Terms:
    """Token-local ablation of the gate: token t of trajectory i is kept iff ``d_it ≤ δ``."""
    keep = x.eligible & (x.token_kl <= s.delta)
    return Terms(reinforce_terms(x, keep, _weight(x, s)), keep, _everyone(x), _nothing(x))


def no_correction(x: Tokens, s: Settings) -> Terms:
    """Every policy token, weighted by ρ (or by 1 without importance sampling): no trust region."""
    return Terms(reinforce_terms(x, x.eligible, _weight(x, s)), x.eligible, _everyone(x), _nothing(x))


def truncated_is(x: Tokens, s: Settings) -> Terms:
    """Truncated importance sampling: every token, weighted by ``min(ρ, C)`` (whatever importance_sampling says)."""
    weight = x.ratio.clamp(max=s.tis_cap)
    capped = x.eligible & (x.ratio > s.tis_cap)
    return Terms(reinforce_terms(x, x.eligible, weight), x.eligible, _everyone(x), capped)


def ratio_mask(x: Tokens, s: Settings) -> Terms:
    """Keep a token iff ``low ≤ ρ ≤ high``: outside the band it contributes nothing, not a capped term."""
    low, high = s.ratio_bounds
    keep = x.eligible & (x.ratio >= low) & (x.ratio <= high)
    return Terms(reinforce_terms(x, keep, _weight(x, s)), keep, _everyone(x), _nothing(x))


def ppo_clip(x: Tokens, s: Settings) -> Terms:
    """PPO's clipped surrogate ``min(r A, clip(r, 1 − ε_low, 1 + ε_high) A)`` with a live ratio r = π/μ.

    ``∇r = r ∇log π``; where the clip binds (A > 0 and r > 1 + ε_high, or A < 0 and r < 1 − ε_low)
    the token's gradient is exactly zero. With stale rollouts μ is the behaviour policy (π_old).
    """
    log_ratio = x.log_probs - x.behavior_log_probs  # 0 on padding, where both are 0
    if s.log_ratio_clamp is not None:
        log_ratio = log_ratio.clamp(-s.log_ratio_clamp, s.log_ratio_clamp)
    r = torch.exp(log_ratio)
    A = x.advantages[:, None]
    surrogate = torch.minimum(r * A, r.clamp(1 - s.clip_low, 1 + s.clip_high) * A)
    objective = torch.where(x.eligible, surrogate, 0.0)
    ratio = x.ratio
    clipped = x.eligible & (((A > 0) & (ratio > 1 + s.clip_high)) | ((A < 0) & (ratio < 1 - s.clip_low)))
    return Terms(objective, x.eligible, _everyone(x), clipped)


Correction = Callable[[Tokens, Settings], Terms]

CORRECTION_TERMS: dict[str, Correction] = {
    "sequence_gate": sequence_gate,
    "token_gate": token_gate,
    "none": no_correction,
    "truncated_is": truncated_is,
    "ratio_mask": ratio_mask,
    "ppo_clip": ppo_clip,
}
"""Every correction by name: the one place a correction name is turned into code."""

CORRECTIONS = tuple(CORRECTION_TERMS)
"""Names accepted by ``correction=`` of :func:`flashsim.losses.policy_loss`."""
