"""OpenRLHF's ``PolicyLoss`` (``openrlhf/models/loss.py``), called unmodified.

Install: ``openrlhf/models/__init__.py`` imports the actor (peft, flash-attn, a GPU stack) and
``models/utils.py`` imports ``deepspeed`` at module top, so OpenRLHF 0.11.2 and DeepSpeed are installed
with ``--no-deps`` (``requirements/conformance-nodeps.txt``) and :func:`policy_loss_class` imports
``openrlhf.models.loss`` without running the package's ``__init__`` (the package is registered by path).

Advantages: OpenRLHF forms them inline in ``RemoteExperienceMaker.compute_advantages_and_returns``
(``trainer/ppo_utils/experience_maker.py``), so :meth:`OpenRLHFLoss.advantages` writes the same lines:
``group_norm`` ``(R − mean)/(std + 1e-9)`` over ``rewards.reshape(-1, n_samples_per_prompt)``,
``dr_grpo`` ``R − mean`` per group, ``flash_reinforce`` ``R − mean R`` over the batch. The
``batch_advantages`` invariant tests this transcription. The old and rollout log-probs are computed
under ``no_grad`` by the experience maker; the adapter detaches them too.

FlashREINFORCE row: ``is_correction_level="seq"``, ``is_correction_gating="binary_kl"``, threshold
``(0, δ)`` (the trust region of ``cli/train_ppo_ray.py``), one update per batch: ``old_log_probs`` are the
learner's (detached), ``rollout_log_probs`` the behaviour policy's.
"""

from __future__ import annotations

import importlib
import pathlib
import sys
import types
from dataclasses import dataclass

import torch
from torch import Tensor

from flashsim.testing.adapters import Adapter, group_rows, require


def policy_loss_class() -> type:
    """``openrlhf.models.loss.PolicyLoss``, imported without ``openrlhf/models/__init__.py``."""
    if "openrlhf.models.loss" not in sys.modules:
        package = require("openrlhf", "openrlhf")
        require("deepspeed", "deepspeed")  # models/utils.py imports it at top
        if "openrlhf.models" not in sys.modules:
            models = types.ModuleType("openrlhf.models")
            models.__path__ = [str(pathlib.Path(package.__file__).parent / "models")]
            sys.modules["openrlhf.models"] = models
        importlib.import_module("openrlhf.models.loss")
    return sys.modules["openrlhf.models.loss"].PolicyLoss


_GATES = {
    "tv": "the sequence gate bounds the mean total variation |μ − π_old| of the sampled tokens, not their Bernoulli KL",
    "ratio": "the sequence gate keeps the geometric-mean ratio π_old/μ inside [low, high], not the Bernoulli KL "
             "below δ",
}
"""Off-policy rules of the sequence gates other than ``binary_kl`` (FlashREINFORCE's)."""


TV_THRESHOLD = 0.05
"""Upper bound of the total-variation gate's row (OpenRLHF documents no default for it)."""


@dataclass
class OpenRLHFLoss(Adapter):
    framework = "OpenRLHF"
    distribution = "openrlhf"

    def __post_init__(self) -> None:
        self.advantage_estimator = self.options.pop("advantage_estimator", "group_norm")
        self.gated = self.options.get("is_correction_level", "off") != "off"
        gspo = self.options.get("policy_loss_type") == "gspo"
        self.off_policy_rule = ("GSPO clips the sequence's length-normalised ratio, not GRPO's token ratio" if gspo
                                else _GATES.get(self.options.get("is_correction_gating")) if self.gated else None)

    def advantages(self, rewards: Tensor, group_ids: Tensor | None) -> Tensor:
        rewards = rewards.to(torch.promote_types(rewards.dtype, torch.float32))
        if self.advantage_estimator == "flash_reinforce":
            return rewards - rewards.mean()
        size = group_rows(group_ids) if group_ids is not None else rewards.shape[0]
        grouped = rewards.reshape(-1, size)
        if self.advantage_estimator == "dr_grpo":
            return (grouped - grouped.mean(-1, keepdim=True)).reshape(-1)
        return ((grouped - grouped.mean(-1, keepdim=True)) / (grouped.std(-1, keepdim=True) + 1e-9)).reshape(-1)

    def _loss(self, log_probs, behavior_log_probs, advantages, action_mask, *, num_sequences, num_tokens,
              max_tokens, num_shards) -> Tensor:
        loss_fn = policy_loss_class()(**self.options)
        counts = {"batch_num_tokens": num_tokens, "global_batch_size": num_sequences}
        token_advantages = advantages[:, None].expand(action_mask.shape)
        if self.gated:  # one update per batch: the old policy is the learner, the rollout policy is μ
            old, rollout = log_probs.detach(), behavior_log_probs.detach()
        else:
            old, rollout = behavior_log_probs.detach(), None
        loss, *_ = loss_fn(log_probs, old, token_advantages, action_mask, rollout_log_probs=rollout, **counts)
        return loss


def variants() -> list[OpenRLHFLoss]:
    """PPO-clip GRPO (token- and sample-level), GSPO, Dr. GRPO's estimator, and the FlashREINFORCE gate."""
    grpo = {"clip_eps_low": 0.2, "clip_eps_high": 0.2}
    return [
        OpenRLHFLoss("group_norm ppo token_level_loss", "grpo", "token_mean", "group_mean_std", std_eps=1e-9,
                     contiguous_groups=True, options=dict(grpo, token_level_loss=True)),
        OpenRLHFLoss("group_norm ppo per-sample", "grpo", "sample_mean", "group_mean_std", std_eps=1e-9,
                     contiguous_groups=True, options=dict(grpo, token_level_loss=False)),
        OpenRLHFLoss("group_norm gspo", "grpo", "sample_mean", "group_mean_std", std_eps=1e-9,
                     contiguous_groups=True, options=dict(grpo, policy_loss_type="gspo")),  # GSPO forces per-sample
        OpenRLHFLoss("dr_grpo ppo token_level_loss", "grpo", "token_mean", "group_mean",
                     contiguous_groups=True, options=dict(grpo, token_level_loss=True, advantage_estimator="dr_grpo")),
        OpenRLHFLoss("flash_reinforce seq binary_kl gate", "flash_reinforce", "sample_mean", "batch_mean",
                     options=dict(grpo, token_level_loss=False, is_correction_level="seq",
                                  is_correction_gating="binary_kl", is_correction_threshold=(0.0, 3e-3),
                                  advantage_estimator="flash_reinforce")),
        OpenRLHFLoss(f"flash_reinforce seq tv gate ≤ {TV_THRESHOLD}", "flash_reinforce", "sample_mean", "batch_mean",
                     options=dict(grpo, token_level_loss=False, is_correction_level="seq", is_correction_gating="tv",
                                  is_correction_threshold=(0.0, TV_THRESHOLD), advantage_estimator="flash_reinforce")),
        OpenRLHFLoss("flash_reinforce seq ratio gate [0.5, 5]", "flash_reinforce", "sample_mean", "batch_mean",
                     options=dict(grpo, token_level_loss=False, is_correction_level="seq",
                                  is_correction_gating="ratio", is_correction_threshold=(0.5, 5.0),
                                  advantage_estimator="flash_reinforce")),
    ]


def policy_loss(**options) -> OpenRLHFLoss:
    """An OpenRLHF row built from ``PolicyLoss`` options (``flashsim check-loss
    flashsim.testing.adapters.openrlhf:policy_loss --option token_level_loss=False``)."""
    gated = options.get("is_correction_level", "off") != "off"
    token_level = options.get("token_level_loss", True)
    estimator = options.get("advantage_estimator", "flash_reinforce" if gated else "group_norm")
    declared = {"group_norm": "group_mean_std", "dr_grpo": "group_mean", "flash_reinforce": "batch_mean"}
    if estimator not in declared:
        raise ValueError(f"advantage_estimator {estimator!r} is not one of {', '.join(declared)}")
    return OpenRLHFLoss("policy_loss", "flash_reinforce" if gated else "grpo",
                        "token_mean" if token_level else "sample_mean", declared[estimator], std_eps=1e-9,
                        contiguous_groups=not gated, options={**options, "advantage_estimator": estimator})


NOT_IN_TABLE: dict[str, str] = {}
"""OpenRLHF 0.11.2 ``PolicyLoss`` options that make a GRPO or FlashREINFORCE variant without a row, and why."""


__all__ = ["NOT_IN_TABLE", "OpenRLHFLoss", "policy_loss", "policy_loss_class", "variants"]
