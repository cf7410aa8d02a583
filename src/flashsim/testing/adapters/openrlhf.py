"""OpenRLHF's ``PolicyLoss`` (``openrlhf/models/loss.py``), called unmodified.

Install: ``openrlhf/models/__init__.py`` imports the actor (peft, flash-attn, a GPU stack) and
``models/utils.py`` imports ``deepspeed`` at module top, so OpenRLHF 0.11.2 and DeepSpeed are installed
with ``--no-deps`` (``requirements/conformance-nodeps.txt``) and :func:`policy_loss_class` imports
``openrlhf.models.loss`` without running the package's ``__init__`` (the package is registered by path).

Advantages: OpenRLHF forms them inline in ``RemoteExperienceMaker.compute_advantages_and_returns``
(``trainer/ppo_utils/experience_maker.py``), so :meth:`OpenRLHFLoss.advantages` writes the same lines:
``group_norm`` ``(R − mean)/(std + 1e-9)`` over ``rewards.reshape(-1, n_samples_per_prompt)``,
``dr_grpo`` ``R − mean`` per group, ``flash_reinforce`` ``R − mean R`` over the batch. The
``batch_advantages`` invariant tests this transcription. The experience maker then passes them through
``compute_reward`` (``openrlhf/models/utils.py``), which clamps them to ``--reward.clip_range``, default
``(-10, 10)``: the adapter calls that function too (with the KL coefficient 0), so a cell shows what a default
run gets. The old and rollout log-probs are computed under ``no_grad`` by the experience maker; the adapter
detaches them too.

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

from flashsim.testing.adapters import Adapter, group_rows, handed_advantages, pipeline_rewards, require, tensor_code

REWARD_CLIP_RANGE = (-10.0, 10.0)
"""``--reward.clip_range``'s default in ``openrlhf/cli/train_ppo_ray.py``."""


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


def clip_reward(shaped: Tensor) -> Tensor:
    """``compute_reward``'s clamp of the shaped rewards to :data:`REWARD_CLIP_RANGE` (OpenRLHF's own function,
    called with KL coefficient 0 on one-token responses, so it returns the clamped reward in that token)."""
    policy_loss_class()  # registers openrlhf.models without its __init__
    utils = importlib.import_module("openrlhf.models.utils")
    kl = torch.zeros(shaped.shape[0], 1, dtype=shaped.dtype, device=shaped.device)
    return utils.compute_reward(shaped, 0.0, kl, action_mask=torch.ones_like(kl, dtype=torch.bool),
                                reward_clip_range=REWARD_CLIP_RANGE)[:, 0]


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
        rewards = pipeline_rewards(rewards)
        if self.advantage_estimator == "flash_reinforce":
            return clip_reward(rewards - rewards.mean())
        size = group_rows(group_ids) if group_ids is not None else rewards.shape[0]
        grouped = rewards.reshape(-1, size)
        if self.advantage_estimator == "dr_grpo":
            return clip_reward((grouped - grouped.mean(-1, keepdim=True)).reshape(-1))
        return clip_reward(((grouped - grouped.mean(-1, keepdim=True)) /
                            (grouped.std(-1, keepdim=True) + 1e-9)).reshape(-1))

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

    snippet_mask = "action_mask"

    def snippet_setup(self) -> list[str]:
        return ["import importlib.util, pathlib, sys, types", "import torch",
                "root = pathlib.Path(importlib.util.find_spec('openrlhf').origin).parent",
                "models = types.ModuleType('openrlhf.models')  # skip models/__init__.py (it imports the GPU stack)",
                "models.__path__ = [str(root / 'models')]", "sys.modules['openrlhf.models'] = models",
                "from openrlhf.models.loss import PolicyLoss", "from openrlhf.models.utils import compute_reward",
                f"policy_loss = PolicyLoss(**{self.options!r})"]

    def snippet_call(self, batch, name, *, advantages=None, num_sequences=None, num_tokens=None, max_tokens=None,
                     num_shards=1) -> list[str]:
        if advantages is not None:
            lines = handed_advantages(name, advantages)
        else:
            lines = [f"rewards_{name} = {tensor_code(pipeline_rewards(batch.rewards))}",
                     "# RemoteExperienceMaker.compute_advantages_and_returns "
                     "(openrlhf/trainer/ppo_utils/experience_maker.py), then compute_reward's clamp"]
            shaped = f"shaped_{name}"
            if self.advantage_estimator == "flash_reinforce":
                lines.append(f"{shaped} = rewards_{name} - rewards_{name}.mean()")
            else:
                size = group_rows(batch.group_ids)
                lines.append(f"{shaped} = rewards_{name}.reshape(-1, {size})  # [prompts, n_samples_per_prompt]")
                lines.append(f"{shaped} = {shaped} - {shaped}.mean(-1, keepdim=True)"
                             if self.advantage_estimator == "dr_grpo" else
                             f"{shaped} = ({shaped} - {shaped}.mean(-1, keepdim=True)) / ({shaped}.std(-1, "
                             f"keepdim=True) + 1e-9)")
            lines += [f"kl_{name} = torch.zeros({batch.batch_size}, 1, dtype={shaped}.dtype)",
                      f"advantages_{name} = compute_reward({shaped}.reshape(-1), 0.0, kl_{name}, action_mask="
                      f"torch.ones_like(kl_{name}, dtype=torch.bool), reward_clip_range={REWARD_CLIP_RANGE!r})[:, 0]"]
        lines += [f"action_mask_{name} = {tensor_code(batch.action_mask)}",
                  f"log_probs_{name} = {tensor_code(batch.log_probs, grad=True)}"]
        if self.gated:
            lines += [f"old_log_probs_{name} = log_probs_{name}.detach()  # one update per batch: the old policy is "
                      f"the learner", f"rollout_log_probs_{name} = {tensor_code(batch.behavior_log_probs)}"]
        else:
            lines += [f"old_log_probs_{name} = {tensor_code(batch.behavior_log_probs)}",
                      f"rollout_log_probs_{name} = None"]
        return [*lines, f"loss_{name}, *_ = policy_loss(log_probs_{name}, old_log_probs_{name}, advantages_{name}"
                        f"[:, None].expand(action_mask_{name}.shape), action_mask_{name}, rollout_log_probs="
                        f"rollout_log_probs_{name}, batch_num_tokens={num_tokens!r}, "
                        f"global_batch_size={num_sequences!r})",
                f"grad_{name} = torch.autograd.grad(loss_{name}, log_probs_{name})[0]"]


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


LEFT_OUT = {
    "the actor's float32 cast of the logits (openrlhf/models/actor.py)":
        "the adapter hands PolicyLoss the drawn log-probs as they are, so `precision` shows what bf16 log-probs would "
        "do; the actor never produces them, and those cells are classed outside the pipeline",
    "length penalties (apply_length_penalties)":
        "off by default (--reward.overlong_buffer_len and --reward.stop_properly_penalty_coef unset)",
    "the KL reward (compute_reward's −kl_coef · KL term, --algo.kl.init_coef 0.01 with a reference model)":
        "it adds −kl_coef · KL(π_old‖π_ref) to each token's return whatever the rewards and the group, so it cannot "
        "make or unmake a failure of the advantages the invariants compare; the adapter calls compute_reward with "
        "KL 0 (the reference equal to the policy), and applies the clamp to --reward.clip_range, which is on by "
        "default",
}
"""Steps of OpenRLHF's default pipeline around the loss that the adapter does not run, and why the verdict stands."""


NOT_IN_TABLE: dict[str, str] = {}
"""OpenRLHF 0.11.2 ``PolicyLoss`` options that make a GRPO or FlashREINFORCE variant without a row, and why."""


__all__ = ["NOT_IN_TABLE", "OpenRLHFLoss", "REWARD_CLIP_RANGE", "clip_reward", "policy_loss", "policy_loss_class",
           "variants"]
