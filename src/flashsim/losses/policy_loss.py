"""The general policy loss: advantages × a trust region/correction × an aggregation.

Every algorithm in flashsim — FlashREINFORCE, GRPO and each ablation — is one combination of the
three axes passed to :func:`policy_loss`; :mod:`flashsim.losses.composed` and the registry only pick
combinations. The loss is *minimised*: ``−∇L`` is the update direction.

REINFORCE-style corrections (``sequence_gate``, ``token_gate``, ``none``, ``truncated_is``,
``ratio_mask``) use the per-token term ``keep_it · w_it · A_i · log π(a_it)`` with a detached weight
``w_it`` (the importance ratio ρ_it = π/μ, or min(ρ_it, C) for TIS, or 1 without importance sampling),
whose gradient ``keep · w · A · ∇log π`` is the importance-weighted policy gradient (FlashREINFORCE,
NVIDIA 2026, eq. for the One-Batch REINFORCE update). ``ppo_clip`` uses PPO's clipped surrogate
(Schulman et al. 2017), whose ratio carries the gradient.

How it is computed: the gradient of every correction with respect to log π is known in closed form,
so one pass over the tokens (:mod:`flashsim.losses._token_pass`) computes the loss, that gradient and
the stats together, and :class:`ClosedFormGradient` hands the gradient to autograd — the backward pass
is one multiply. The same loss written op by op with plain autograd is the reference of
``tests/test_loss_autograd_function.py``; ``benchmarks/bench_losses.py`` times both.

Deliberately left out: entropy bonuses, value baselines (critic-free by design) and KL penalties to a
reference (only :func:`flashsim.losses.grpo_loss` offers GRPO's k3 penalty, off by default).
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from flashsim.losses import _checks as checks
from flashsim.losses._token_pass import RowTerms, TokenSettings, block_terms, row_blocks
from flashsim.losses.aggregation import AGGREGATIONS, trajectory_weights

CORRECTIONS = ("sequence_gate", "token_gate", "none", "truncated_is", "ratio_mask", "ppo_clip")
# Corrections whose kept tokens are exactly the policy tokens: their ``token_kept`` is ``action_mask``.
_KEEP_EVERY_POLICY_TOKEN = ("none", "truncated_is", "ppo_clip")


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
        log_ratio_clamp: if set, clamp log ρ to ±this before exponentiating (counted in stats);
            otherwise an overflowing ratio on a kept token raises ``FloatingPointError``.
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
    _check_hyperparameters(correction, delta, clip_eps, clip_eps_high, tis_cap, ratio_bounds, log_ratio_clamp)
    settings = TokenSettings(
        correction, delta, importance_sampling, clip_eps, clip_eps if clip_eps_high is None else clip_eps_high,
        tis_cap, ratio_bounds, log_ratio_clamp, validate,
    )
    dtype = checks.compute_dtype(log_probs.dtype)
    current, behavior = log_probs.to(dtype), behavior_log_probs.detach().to(dtype)
    advantages = advantages.detach().to(dtype)
    lengths = action_mask.sum(dim=1)
    scale = -advantages * trajectory_weights(
        action_mask, aggregation, dtype=dtype, lengths=lengths,
        num_sequences=num_sequences, num_tokens=num_tokens, max_tokens=max_tokens,
    )
    scale = torch.where(lengths > 0, scale, 0.0)  # a row without policy tokens (validate=False) adds nothing
    gradient = torch.empty(current.shape, dtype=dtype, device=current.device)
    kept = action_mask if correction in _KEEP_EVERY_POLICY_TOKEN else torch.empty_like(action_mask)
    blocks = [
        block_terms(
            current.detach()[rows], behavior[rows], action_mask[rows], lengths[rows], advantages[rows],
            scale[rows], settings, gradient[rows], None if kept is action_mask else kept[rows],
        )
        for rows in row_blocks(*current.shape, current.device)
    ]
    terms = RowTerms(*(torch.cat(parts) for parts in zip(*blocks)))
    if validate:
        _raise_on_bad_values(terms, lengths, advantages, log_probs, behavior_log_probs, action_mask)
    loss = ClosedFormGradient.apply(current, terms.loss.sum(), gradient)
    return loss, _stats(loss, advantages, terms, kept, lengths)


class ClosedFormGradient(torch.autograd.Function):
    """``loss`` forward; ``grad_output · gradient`` backward, for a ``gradient`` computed with the loss.

    ``policy_loss`` computes ``∂L/∂log π`` in closed form in the same pass as ``L``, so autograd
    records this one node instead of the ~20 of the op-by-op formula, and the backward pass is one
    multiply. It is first-order only (``once_differentiable``): no double backward.

    Shape:
        log_probs ``[B, T]`` (the graph input), loss ``[]``, gradient ``[B, T]`` → ``[]``.
    """

    @staticmethod
    def forward(ctx, log_probs: Tensor, loss: Tensor, gradient: Tensor) -> Tensor:
        ctx.save_for_backward(gradient)
        return loss.detach().clone()

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_output: Tensor) -> tuple[Tensor | None, None, None]:
        (gradient,) = ctx.saved_tensors
        return (grad_output * gradient if ctx.needs_input_grad[0] else None), None, None


def _raise_on_bad_values(
    terms: RowTerms, lengths: Tensor, advantages: Tensor, log_probs: Tensor, behavior_log_probs: Tensor,
    action_mask: Tensor,
) -> None:
    """The value checks of ``validate=True``, folded into the token pass and read with one host sync.

    When an input is bad the named checks of :mod:`flashsim.losses._checks` run again, in their
    documented order, to raise the error that names the first problem.
    """
    bad_input = terms.bad_values.any() | (lengths == 0).any() | ~torch.isfinite(advantages).all()
    bad_input, overflow = torch.stack([bad_input, terms.overflow.any()]).tolist()
    if bad_input:
        checks.check_nonempty_rows(action_mask)
        checks.check_values("log_probs", log_probs, action_mask)
        checks.check_values("behavior_log_probs", behavior_log_probs, action_mask)
        checks.check_finite_vector("advantages", advantages)
        raise AssertionError("the token pass flagged a bad value that the checks did not find")
    if overflow:
        raise FloatingPointError(
            "an importance ratio π/μ overflowed on an admitted token (log-ratio too large); pass "
            "log_ratio_clamp=30.0 to clamp it, or check that behavior_log_probs belong to these tokens"
        )


def _stats(loss: Tensor, advantages: Tensor, terms: RowTerms, kept: Tensor, lengths: Tensor) -> dict[str, Tensor]:
    dtype = advantages.dtype
    num_tokens = lengths.sum().to(dtype)
    ratio_sum = terms.ratio_sum.sum()
    ess = ratio_sum**2 / terms.ratio_square_sum.sum()  # Kish's ESS (Σw)² / Σw², as effective_sample_size
    return {
        "loss": loss.detach(),
        "advantages": advantages,
        "sequence_kl": terms.sequence_kl,
        "admitted": terms.admitted,
        "token_kept": kept,
        "acceptance_rate": terms.admitted.to(dtype).mean(),
        "token_acceptance_rate": terms.kept.sum().to(dtype) / num_tokens,
        "ess": ess,
        "ess_fraction": ess / num_tokens,
        "clip_fraction": terms.clipped.sum().to(dtype) / num_tokens,
        "ratio_min": terms.ratio_min.min(),
        "ratio_mean": ratio_sum / num_tokens,
        "ratio_max": terms.ratio_max.max(),
        "num_log_ratio_clamped": terms.clamped.sum(),
    }


def _check_hyperparameters(
    correction: str, delta: float, clip_eps: float, clip_eps_high: float | None, tis_cap: float,
    ratio_bounds: tuple[float, float], log_ratio_clamp: float | None,
) -> None:
    if correction in ("sequence_gate", "token_gate"):
        checks.check_number("delta", delta, low=0.0)
    if correction == "ppo_clip":
        checks.check_number("clip_eps", clip_eps, low=0.0, high=1.0, low_inclusive=False, high_inclusive=False)
        if clip_eps_high is not None:
            checks.check_number("clip_eps_high", clip_eps_high, low=0.0, low_inclusive=False)
    if correction == "truncated_is":
        checks.check_number("tis_cap", tis_cap, low=0.0, low_inclusive=False)
    if correction == "ratio_mask":
        if not (isinstance(ratio_bounds, tuple) and len(ratio_bounds) == 2):
            raise TypeError(f"ratio_bounds must be a (low, high) tuple, got {ratio_bounds!r}")
        low = checks.check_number("ratio_bounds[0]", ratio_bounds[0], low=0.0)
        checks.check_number("ratio_bounds[1]", ratio_bounds[1], low=low)
    if log_ratio_clamp is not None:
        checks.check_number("log_ratio_clamp", log_ratio_clamp, low=0.0, low_inclusive=False)
