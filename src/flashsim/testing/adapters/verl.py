"""verl's ``core_algos``: its advantage estimator, policy losses and ``agg_loss``, called unmodified.

Advantages: ``compute_grpo_outcome_advantage`` (rewards as ``[B, 1]`` token-level scores, the group
ids as its ``index``); verl has no batch-mean estimator, so the FlashREINFORCE-like row's ``R − mean R``
is the adapter's own (its ``batch_advantages`` tests the adapter). The per-trajectory advantage is
broadcast over the row and multiplied by the response mask, as the estimator returns it. Policy loss:
``get_policy_loss_fn(loss_mode)`` with a real ``ActorConfig`` whose ``global_batch_info`` holds what
verl's ``ppo_loss`` puts there (dp size 1, the global token count and batch size,
``loss_scale_factor``). verl computes the old log-probs under ``no_grad`` (``compute_log_prob``); the
adapter detaches them too.

Install: verl 0.9.1 pins ``transformers<5.11``, which the lock's 5.19 does not meet, so it is installed
with ``--no-deps`` plus the few modules ``core_algos`` imports (``requirements/conformance-nodeps.txt``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from flashsim.testing.adapters import Adapter, require

LOSS_SCALE_FACTOR = 32
"""``loss_scale_factor`` of the Dr. GRPO row with a fixed normaliser."""

LOSS_AGG_MODES = {"token-mean": "token_mean", "seq-mean-token-mean": "sample_mean",
                  "seq-mean-token-sum": "seq_mean_token_sum", "seq-mean-token-sum-norm": "seq_mean_token_sum_norm"}
"""verl's ``loss_agg_mode`` → flashsim's name of that aggregation."""


def actor_config(**fields):
    """A real verl ``ActorConfig`` (CPU-free fields only), cached by ``fields``."""
    key = tuple(sorted((k, repr(v)) for k, v in fields.items()))
    if key not in _CONFIGS:
        config = require("verl.workers.config", "verl")
        policy_loss = fields.pop("policy_loss", {})
        rollout = policy_loss.pop("rollout_correction", None)
        if rollout is not None:
            algorithm = require("verl.trainer.config.algorithm", "verl")
            policy_loss["rollout_correction"] = algorithm.RolloutCorrectionConfig(**rollout)
        loss = config.PolicyLossConfig(**policy_loss)
        _CONFIGS[key] = config.ActorConfig(strategy="fsdp", ppo_micro_batch_size_per_gpu=1, rollout_n=1,
                                           policy_loss=loss, **fields)
    return _CONFIGS[key]


_CONFIGS: dict[tuple, object] = {}


@dataclass
class VerlLoss(Adapter):
    framework = "verl"
    distribution = "verl"

    def __post_init__(self) -> None:
        self.loss_agg_mode = self.options.get("loss_agg_mode", "token-mean")
        self.loss_mode = self.options.get("loss_mode", "vanilla")
        self.norm_by_std = self.options.get("norm_adv_by_std_in_grpo", True)
        if self.loss_mode == "bypass_mode":
            self.off_policy_rule = ("verl's rollout correction gates on a k3 KL estimate (seq_mean_k3) and truncates "
                                    "token IS weights, not FlashREINFORCE's Bernoulli-KL gate")

    def advantages(self, rewards: Tensor, group_ids: Tensor | None) -> Tensor:
        scores = rewards.to(torch.promote_types(rewards.dtype, torch.float32))
        if self.algorithm == "flash_reinforce":  # verl has no batch-mean estimator: the adapter forms it
            return scores - scores.mean()
        core_algos = require("verl.trainer.ppo.core_algos", "verl")
        advantages, _ = core_algos.compute_grpo_outcome_advantage(
            token_level_rewards=scores[:, None], response_mask=torch.ones_like(scores[:, None]),
            index=group_ids.cpu().numpy(), epsilon=self.std_eps, norm_adv_by_std_in_grpo=self.norm_by_std)
        return advantages[:, 0]

    def _loss(self, log_probs, behavior_log_probs, advantages, action_mask, *, num_sequences, num_tokens,
              max_tokens, num_shards) -> Tensor:
        core_algos = require("verl.trainer.ppo.core_algos", "verl")
        fields = {key: self.options[key] for key in ("loss_scale_factor",) if key in self.options}
        if self.loss_mode != "vanilla":
            fields["policy_loss"] = {"loss_mode": self.loss_mode, **self.options.get("policy_loss", {})}
        config = actor_config(**fields)
        config.global_batch_info.clear()
        config.global_batch_info.update(
            dp_size=1, batch_num_tokens=int(action_mask.sum()) if num_tokens is None else num_tokens,
            global_batch_size=action_mask.shape[0] if num_sequences is None else num_sequences,
            loss_scale_factor=config.loss_scale_factor)
        token_advantages = advantages[:, None] * action_mask  # the estimator's [B, T] output
        loss, _ = core_algos.get_policy_loss_fn(self.loss_mode)(
            old_log_prob=behavior_log_probs.detach(), log_prob=log_probs, advantages=token_advantages,
            response_mask=action_mask, loss_agg_mode=self.loss_agg_mode, config=config)
        return loss


def _row(name: str, algorithm: str, estimator: str, aggregation: str, **options) -> VerlLoss:
    return VerlLoss(name, algorithm, aggregation, estimator, std_eps=1e-6, options=options)


def variants() -> list[VerlLoss]:
    """GRPO with every ``loss_agg_mode`` verl documents for it, Dr. GRPO, and the FlashREINFORCE-like
    REINFORCE with rollout correction (``bypass_mode``, sequence rejection)."""
    rows = [_row(f"grpo {mode}", "grpo", "group_mean_std", aggregation, loss_agg_mode=mode)
            for mode, aggregation in LOSS_AGG_MODES.items()]
    rows.append(_row("dr_grpo seq-mean-token-sum-norm", "grpo", "group_mean", "seq_mean_token_sum_norm",
                     loss_agg_mode="seq-mean-token-sum-norm", norm_adv_by_std_in_grpo=False))
    rows.append(_row(f"dr_grpo loss_scale_factor={LOSS_SCALE_FACTOR}", "grpo", "group_mean",
                     f"constant:{LOSS_SCALE_FACTOR}",
                     loss_agg_mode="seq-mean-token-sum-norm", norm_adv_by_std_in_grpo=False,
                     loss_scale_factor=LOSS_SCALE_FACTOR))
    rows.append(_row("reinforce bypass_mode seq_mean_k3", "flash_reinforce", "batch_mean", "sample_mean",
                     loss_agg_mode="seq-mean-token-mean", loss_mode="bypass_mode",
                     policy_loss={"rollout_correction": {"loss_type": "reinforce", "rollout_is": "token",
                                                         "rollout_rs": "seq_mean_k3", "rollout_rs_threshold": 3e-3,
                                                         "bypass_mode": True}}))
    return rows


def policy_loss(loss_agg_mode: str = "token-mean", **options) -> VerlLoss:
    """verl's vanilla (PPO-clip) GRPO loss with ``loss_agg_mode`` (``flashsim check-loss
    flashsim.testing.adapters.verl:policy_loss --option loss_agg_mode=seq-mean-token-sum``)."""
    if loss_agg_mode not in LOSS_AGG_MODES:
        raise ValueError(f"loss_agg_mode {loss_agg_mode!r} is not one of {', '.join(LOSS_AGG_MODES)}")
    estimator = "group_mean_std" if options.get("norm_adv_by_std_in_grpo", True) else "group_mean"
    aggregation = (f"constant:{options['loss_scale_factor']}" if "loss_scale_factor" in options
                   else LOSS_AGG_MODES[loss_agg_mode])
    return _row(f"grpo {loss_agg_mode}", "grpo", estimator, aggregation, loss_agg_mode=loss_agg_mode, **options)


__all__ = ["VerlLoss", "policy_loss", "variants"]
