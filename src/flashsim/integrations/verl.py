"""FlashREINFORCE in verl 0.9.1, registered through verl's own extension points (``verl.trainer.ppo.core_algos``).

Importing this module registers, under the name ``flash_reinforce`` (:func:`register` adds others):

- an **advantage estimator** (``register_adv_est``; ``algorithm.adv_estimator=flash_reinforce``):
  ``A_i = R_i − mean_j R_j`` by :func:`flashsim.losses.batch_centered`, over the batch that verl's driver hands
  ``compute_advantage`` — the whole training batch, before it is split over data-parallel ranks and micro-batches —
  broadcast over the response tokens, as verl's estimators return it;
- a **policy loss** (``register_policy_loss``; ``actor_rollout_ref.actor.policy_loss.loss_mode=flash_reinforce``):
  :func:`flashsim.losses.flash_reinforce_loss` on one micro-batch, with the outer denominator verl's global batch
  size over the data-parallel size from ``config.global_batch_info`` (what ``ppo_loss`` puts there), so that the
  engine's sum over micro-batches and the ranks' gradient mean give the global batch's sample mean.

verl loads it in every worker when told to: ``VERL_USE_EXTERNAL_MODULES=flashsim.integrations.verl`` (read by
``import verl``), or ``actor_rollout_ref.model.external_lib=flashsim.integrations.verl``. For FlashREINFORCE's
behaviour log-probs μ set ``algorithm.rollout_correction.bypass_mode=True`` (verl then hands the rollout engine's
log-probs as ``old_log_prob``); for one optimizer step per batch, ``ppo_mini_batch_size`` = the training batch and
``ppo_epochs=1``; and ``actor.loss_agg_mode=seq-mean-token-mean`` (verl's name for the sample mean, which the loss
requires so that verl's entropy and KL terms aggregate alike). Commands: ``docs/integrations.md``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

try:
    from verl.trainer.ppo import core_algos
except ImportError as error:  # pragma: no cover - exercised where verl is not installed
    raise ImportError("flashsim.integrations.verl needs verl 0.9.1: pip install --no-deps -c requirements/lock-cpu.txt "
                      "-r requirements/conformance-nodeps.txt") from error

from flashsim.losses import batch_centered, check_loss_options, flash_reinforce_loss

NAME = "flash_reinforce"
SAMPLE_MEAN = "seq-mean-token-mean"
"""verl's ``loss_agg_mode`` for FlashREINFORCE's sample mean (mean over a trajectory's tokens, then trajectories)."""


def batch_centered_advantage(token_level_rewards: Tensor, response_mask: Tensor, config: Any = None,
                             index: Any = None, **_: Any) -> tuple[Tensor, Tensor]:
    """verl's advantage-estimator interface: ``R_i`` = the trajectory's summed token-level rewards (its outcome
    reward), ``A_i = R_i − mean_j R_j`` over every trajectory given (``index``, the prompt ids, is not needed:
    the baseline is the batch's). Returns ``(advantages, returns)``, both ``A_i`` on the response tokens and 0
    elsewhere. Shape: ``[B, T]``, ``[B, T]`` → ``[B, T]``, ``[B, T]``."""
    advantages = batch_centered(token_level_rewards.sum(dim=-1))[:, None] * response_mask
    return advantages, advantages


def flash_reinforce_policy_loss(delta: float | None = None, gate: str = "sequence"):
    """verl's policy-loss interface around :func:`flashsim.losses.flash_reinforce_loss` with gate threshold
    ``delta`` (None: flashsim's ``DEFAULT_DELTA``) and ``gate`` (``"sequence"``, ``"token"``, ``"none"``), checked
    here."""
    options = check_loss_options(NAME, {"gate": gate, **({"delta": delta} if delta is not None else {})},
                                 where="flashsim.integrations.verl.register")

    def compute_policy_loss_flash_reinforce(old_log_prob: Tensor, log_prob: Tensor, advantages: Tensor,
                                            response_mask: Tensor, loss_agg_mode: str = SAMPLE_MEAN,
                                            config: Any = None, rollout_is_weights: Tensor | None = None,
                                            **_: Any) -> tuple[Tensor, dict[str, float]]:
        """FlashREINFORCE on one micro-batch: ``old_log_prob`` is μ (the rollout engine's with bypass mode),
        ``advantages`` the estimator's ``[B, T]`` (one value per row). Shape: ``[B, T]`` each."""
        if loss_agg_mode != SAMPLE_MEAN:
            raise ValueError(f"actor.loss_agg_mode must be {SAMPLE_MEAN!r} (FlashREINFORCE's sample mean) with "
                             f"loss_mode={NAME!r}, got {loss_agg_mode!r}")
        if rollout_is_weights is not None:
            raise ValueError("rollout_is_weights given: turn verl's rollout-correction weights off (or use "
                             "bypass_mode=True); the token ratio to the behaviour log-probs is FlashREINFORCE's own")
        if config is not None and config.get("ppo_epochs", 1) != 1:
            raise ValueError(f"actor.ppo_epochs must be 1 (one optimizer step per fresh batch), got "
                             f"{config.get('ppo_epochs')}")
        info = dict(config.get("global_batch_info", {}) or {}) if config is not None else {}
        size = info.get("global_batch_size")
        num_sequences = None if size is None else size / info.get("dp_size", 1)
        mask = response_mask.bool()
        first = mask.to(torch.int8).argmax(dim=1, keepdim=True)  # A_i sits on every response token; take the first
        loss, stats = flash_reinforce_loss(log_prob, old_log_prob, None, mask,
                                           advantages=advantages.gather(1, first)[:, 0],
                                           num_sequences=num_sequences, **options)
        return loss, {"actor/flash_acceptance_rate": stats["acceptance_rate"].item(),
                      "actor/flash_sequence_kl": stats["sequence_kl"].nanmean().item(),
                      "actor/flash_ratio_max": stats["ratio_max"].item()}

    return compute_policy_loss_flash_reinforce


def register(name: str = NAME, *, delta: float | None = None, gate: str = "sequence") -> None:
    """Register the batch-centred advantage estimator and the FlashREINFORCE policy loss under ``name`` in verl's
    registries (a second name for another δ: ``register("flash_reinforce_5e3", delta=5e-3)`` in a module that
    verl imports, as this one is)."""
    core_algos.register_policy_loss(name)(flash_reinforce_policy_loss(delta, gate))
    core_algos.register_adv_est(name)(batch_centered_advantage)


register()

__all__ = ["NAME", "SAMPLE_MEAN", "batch_centered_advantage", "flash_reinforce_policy_loss", "register"]
