"""TRL's ``GRPOTrainer`` loss, called unmodified on a minimal stand-in for the trainer object.

``GRPOTrainer._compute_loss(self, model, inputs)`` reads its settings from ``self`` and gets the policy's
log-probs from ``self._get_per_token_logps_and_entropies``; the stand-in (:class:`_Trainer`) holds the
settings of a real ``GRPOConfig`` (built with the variant's options, so TRL's defaults and validation
apply) and hands back the harness's log-probs. One process, no vLLM, no reference model (β = 0, TRL's
default): what is checked is the policy loss and its aggregation.

Advantages: TRL forms them inline in ``_generate_and_score_completions`` (no function of their own), so
:meth:`TRLLoss.advantages` writes the same formula with TRL's ``nanstd``: ``(R − mean_g R)/(std_g R + 1e-4)``
over ``rewards.view(-1, G)`` (``scale_rewards="group"``), or without the division (``"none"``). The
``batch_advantages`` invariant therefore tests this transcription, not TRL.

Shards: TRL divides each microbatch's loss by ``current_gradient_accumulation_steps`` (``dapo``, ``cispo``
and ``vespo`` by the generation batch's token count instead), so it assumes equal-size microbatches:
the adapter declares ``equal_shards`` and hands the shard count over as the accumulation steps.
"""

from __future__ import annotations

import inspect
import tempfile
import types
from collections import defaultdict
from dataclasses import dataclass
from types import SimpleNamespace

import torch
from torch import Tensor

from flashsim.testing.adapters import Adapter, group_rows, handed_advantages, pipeline_rewards, require, tensor_code

MAX_COMPLETION_LENGTH = 32
"""``max_completion_length`` of the ``dr_grpo`` row (its N: the harness's rows are at most 24 tokens)."""

OPSM_THRESHOLD = 0.5
"""``off_policy_mask_threshold`` of the OPSM row (the value TRL's docs suggest)."""

OWN_OFF_POLICY = {
    "cispo": "CISPO weighs tokens by the detached min(ρ, ε_high), not GRPO's PPO clip",
    "sapo": "SAPO replaces the clip by a soft sigmoid gate",
    "vespo": "VESPO weighs sequences by its φ(w), not GRPO's PPO clip",
    "gspo": "GSPO clips the sequence's length-normalised ratio, not GRPO's token ratio",
    "grpo off_policy_mask": "besides the PPO clip, OPSM drops negative-advantage sequences whose mean KL estimate "
                            "log μ − log π exceeds the threshold (DeepSeek-V3.2's off-policy sequence mask)",
}

LEFT_OUT = {
    "the trainer's fused LM head (log-probs float32, 0 in padding)":
        "the stand-in hands _compute_loss the drawn log-probs as they are, so `precision` and `padding` show what "
        "bf16 or non-finite padded log-probs would do; the trainer never produces them (tests/testing/"
        "test_adapters.py checks it on a real GRPOTrainer), and those cells are classed outside the pipeline",
    "vLLM generation and the reference model":
        "neither enters the policy loss with β = 0, TRL's default",
}
"""Steps of TRL's default pipeline around the loss that the adapter does not run, and why the verdict stands."""

NOT_IN_TABLE: dict[str, str] = {}
"""TRL 1.16 options that make a GRPO variant the table does not have a row for, and why."""


class _Accelerator:
    """One process: gathers and reductions are the identity."""

    num_processes = 1
    sync_gradients = True

    def gather(self, tensor: Tensor) -> Tensor:
        return tensor

    gather_for_metrics = gather

    def reduce(self, tensor: Tensor, reduction: str = "sum") -> Tensor:
        return tensor


class _Trainer:
    """The attributes ``GRPOTrainer._compute_loss`` reads, set as ``GRPOTrainer.__init__`` sets them from args."""

    def __init__(self, args, log_probs: Tensor, steps: int) -> None:
        self.args, self._log_probs = args, log_probs
        self.loss_type, self.beta = args.loss_type, args.beta
        self.epsilon_low = args.epsilon
        self.epsilon_high = args.epsilon_high if args.epsilon_high is not None else args.epsilon
        self.importance_sampling_level = args.importance_sampling_level
        self.off_policy_mask_threshold = args.off_policy_mask_threshold
        self.top_entropy_quantile = args.top_entropy_quantile
        self.max_completion_length = args.max_completion_length
        self.use_vllm = False  # one process, no vLLM: the correction below is read only together with use_vllm
        self.vllm_importance_sampling_correction = args.vllm_importance_sampling_correction
        self.entropy_coef, self.use_adaptive_entropy = args.entropy_coef, args.use_adaptive_entropy
        self._entropy_bonus_enabled = self.entropy_coef != 0.0 or self.use_adaptive_entropy
        self.aux_loss_enabled = False
        self.current_gradient_accumulation_steps = steps
        self.accelerator = _Accelerator()
        self.model = SimpleNamespace(training=True)
        self._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, **_):
        return self._log_probs, torch.zeros_like(self._log_probs), None

    def __getattr__(self, name: str):
        """Any other method the loss calls (``get_gamma_weights`` ...) is GRPOTrainer's own, bound to the stand-in."""
        trainer = require("trl.trainer.grpo_trainer", "trl").GRPOTrainer
        static = inspect.getattr_static(trainer, name)
        if isinstance(static, (staticmethod, classmethod)):
            return getattr(trainer, name)
        if callable(static):
            return types.MethodType(static, self)
        raise AttributeError(name)


_ARGS: dict[tuple, object] = {}


def trl_args(**options):
    """A real ``GRPOConfig`` with ``options`` (CPU, no reporting), cached: building one takes seconds."""
    key = tuple(sorted(options.items()))
    if key not in _ARGS:
        trl = require("trl", "trl")
        _ARGS[key] = trl.GRPOConfig(output_dir=tempfile.gettempdir(), use_cpu=True, bf16=False, report_to="none",
                                    **options)
    return _ARGS[key]


@dataclass
class TRLLoss(Adapter):
    framework = "TRL"
    distribution = "trl"

    def __post_init__(self) -> None:
        self.loss_type = self.options.get("loss_type", "grpo")
        self.scale_rewards = self.options.get("scale_rewards", "group")
        self.off_policy_rule = OWN_OFF_POLICY.get(self.variant)
        if self.loss_type == "bnpo":
            self.local_shards = True
            self.documented = {"shards": "TRL documents that bnpo normalises over the local batch only "
                                         "(trl/trainer/grpo_config.py, loss_type), so results vary with the local "
                                         "batch size; the row matches that local normalisation"}
        if self.loss_type == "vespo":
            self.own_rules = {"length_normalisation": "VESPO's φ(w) is a function of the sequence's summed log-ratio: "
                                                      "repeating a trajectory's tokens changes it by design"}

    def advantages(self, rewards: Tensor, group_ids: Tensor | None) -> Tensor:
        nanstd = require("trl.trainer.utils", "trl").nanstd
        rewards = pipeline_rewards(rewards)
        size = group_rows(group_ids) if group_ids is not None else rewards.shape[0]
        grouped = rewards.view(-1, size)
        centred = rewards - grouped.mean(dim=1).repeat_interleave(size)
        if self.scale_rewards == "none":
            return centred
        std = nanstd(grouped, dim=1).flatten().repeat_interleave(size) if size > 1 else torch.zeros_like(rewards)
        return torch.nan_to_num(centred / (std + 1e-4), nan=0.0)

    def _loss(self, log_probs, behavior_log_probs, advantages, action_mask, *, num_sequences, num_tokens,
              max_tokens, num_shards) -> Tensor:
        trainer_module = require("trl.trainer.grpo_trainer", "trl")
        args = trl_args(**self.options)
        batch, width = action_mask.shape
        stand_in = _Trainer(args, log_probs, num_shards)
        stand_in.args = SimpleNamespace(**{**vars(args), "steps_per_generation": num_shards})
        total_tokens = int(action_mask.sum()) if num_tokens is None else num_tokens
        inputs = {
            "prompt_ids": torch.zeros(batch, 0, dtype=torch.long),
            "prompt_mask": torch.zeros(batch, 0, dtype=torch.long),
            "completion_ids": torch.zeros(batch, width, dtype=torch.long),
            "completion_mask": action_mask.to(torch.int32),  # TRL's completion mask is an int tensor
            # TRL computes the old log-probs under no_grad (_generate_and_score_completions): detached here too.
            "advantages": advantages, "old_per_token_logps": behavior_log_probs.detach(),
            "num_items_in_batch": torch.tensor(float(total_tokens)),
        }
        return trainer_module.GRPOTrainer._compute_loss(stand_in, None, inputs)

    snippet_mask = "completion_mask"

    def snippet_setup(self) -> list[str]:
        options = "".join(f", {key}={value!r}" for key, value in self.options.items())
        return ["import tempfile", "from collections import defaultdict", "from types import SimpleNamespace",
                "import torch", "from trl import GRPOConfig", "from trl.trainer.grpo_trainer import GRPOTrainer",
                "from trl.trainer.utils import nanstd",
                f"args = GRPOConfig(output_dir=tempfile.gettempdir(), use_cpu=True, bf16=False, report_to='none'"
                f"{options})",
                "# GRPOTrainer._compute_loss on a trainer built without __init__ (no model, dataset or vLLM): the "
                "attributes the loss reads, set as __init__ sets them from args",
                "trainer = object.__new__(GRPOTrainer)",
                "trainer.args, trainer.loss_type, trainer.beta = args, args.loss_type, args.beta",
                "trainer.epsilon_low = args.epsilon",
                "trainer.epsilon_high = args.epsilon_high if args.epsilon_high is not None else args.epsilon",
                "trainer.importance_sampling_level = args.importance_sampling_level",
                "trainer.off_policy_mask_threshold = args.off_policy_mask_threshold",
                "trainer.top_entropy_quantile = args.top_entropy_quantile",
                "trainer.max_completion_length = args.max_completion_length",
                "trainer.use_vllm, trainer.vllm_importance_sampling_correction = False, "
                "args.vllm_importance_sampling_correction",
                "trainer.entropy_coef, trainer.use_adaptive_entropy = args.entropy_coef, args.use_adaptive_entropy",
                "trainer._entropy_bonus_enabled = trainer.entropy_coef != 0.0 or trainer.use_adaptive_entropy",
                "trainer.aux_loss_enabled = False",
                "trainer.accelerator = SimpleNamespace(num_processes=1, sync_gradients=True, gather=lambda t: t, "
                "gather_for_metrics=lambda t: t, reduce=lambda t, reduction='sum': t)  # one process",
                "trainer.model = SimpleNamespace(training=True)",
                "trainer._metrics = {'train': defaultdict(list), 'eval': defaultdict(list)}"]

    def snippet_call(self, batch, name, *, advantages=None, num_sequences=None, num_tokens=None, max_tokens=None,
                     num_shards=1) -> list[str]:
        if advantages is not None:
            lines = handed_advantages(name, advantages, "generation batch")
        else:
            size = group_rows(batch.group_ids)
            grouped = f"rewards_{name}.view(-1, {size})"
            lines = [f"rewards_{name} = {tensor_code(pipeline_rewards(batch.rewards))}",
                     f"# GRPOTrainer._generate_and_score_completions (scale_rewards={self.scale_rewards!r}, "
                     f"num_generations={size})",
                     f"advantages_{name} = rewards_{name} - torch.nanmean({grouped}, dim=1).repeat_interleave("
                     f"{size}, dim=0)"]
            if self.scale_rewards != "none":
                std = (f"nanstd({grouped}, dim=1).repeat_interleave({size}, dim=0)" if size > 1
                       else f"torch.zeros_like(rewards_{name})")
                lines.append(f"advantages_{name} = advantages_{name} / ({std} + 1e-4)")
            lines.append(f"advantages_{name} = torch.nan_to_num(advantages_{name}, nan=0.0)")
        rows, width = batch.action_mask.shape
        tokens = int(batch.action_mask.sum()) if num_tokens is None else num_tokens
        empty = f"torch.zeros({rows}, 0, dtype=torch.long)"
        return [*lines, f"completion_mask_{name} = {tensor_code(batch.action_mask.to(torch.int32))}",
                f"per_token_logps_{name} = {tensor_code(batch.log_probs, grad=True)}",
                f"old_per_token_logps_{name} = {tensor_code(batch.behavior_log_probs)}",
                f"trainer._get_per_token_logps_and_entropies = lambda *args, **kwargs: (per_token_logps_{name}, "
                f"torch.zeros_like(per_token_logps_{name}), None)  # the policy's log-probs (the model's forward pass)",
                f"trainer.current_gradient_accumulation_steps = args.steps_per_generation = {num_shards}",
                f"loss_{name} = trainer._compute_loss(None, {{'prompt_ids': {empty}, 'prompt_mask': {empty}, "
                f"'completion_ids': torch.zeros({rows}, {width}, dtype=torch.long), 'completion_mask': "
                f"completion_mask_{name}, 'advantages': advantages_{name}, 'old_per_token_logps': "
                f"old_per_token_logps_{name}, 'num_items_in_batch': torch.tensor({float(tokens)!r})}})",
                f"grad_{name} = torch.autograd.grad(loss_{name}, per_token_logps_{name})[0]"]


@dataclass
class IntegrationLoss(Adapter):
    """:class:`flashsim.integrations.trl.FlashReinforceTrainer`: its own ``_compute_loss`` on the stand-in (the
    harness's behaviour log-probs as vLLM's sampling log-probs) and its own ``generation_batch_advantages``."""

    framework = "TRL"
    distribution = "trl"

    def advantages(self, rewards: Tensor, group_ids: Tensor | None) -> Tensor:
        integration = require("flashsim.integrations.trl", "trl")
        return integration.generation_batch_advantages(rewards[:, None], torch.ones(1))

    def _loss(self, log_probs, behavior_log_probs, advantages, action_mask, *, num_sequences, num_tokens,
              max_tokens, num_shards) -> Tensor:
        integration = require("flashsim.integrations.trl", "trl")
        if "config" not in _ARGS:
            _ARGS["config"] = integration.FlashReinforceConfig(output_dir=tempfile.gettempdir(), use_cpu=True,
                                                               bf16=False, report_to="none")
        batch, width = action_mask.shape
        inputs = {"prompt_ids": torch.zeros(batch, 0, dtype=torch.long),
                  "prompt_mask": torch.zeros(batch, 0, dtype=torch.long),
                  "completion_ids": torch.zeros(batch, width, dtype=torch.long),
                  "completion_mask": action_mask.to(torch.int32), "advantages": advantages,
                  "sampling_per_token_logps": behavior_log_probs.detach()}
        stand_in = _Trainer(_ARGS["config"], log_probs, num_shards)
        return integration.FlashReinforceTrainer._compute_loss(stand_in, None, inputs)


def _row(loss_type: str, aggregation: str, variant: str | None = None, **extra) -> TRLLoss:
    scale = extra.pop("scale_rewards", "group")
    estimator = "group_mean" if scale == "none" else "group_mean_std"
    options = {"loss_type": loss_type, **({"scale_rewards": scale} if scale != "group" else {}), **extra}
    return TRLLoss(variant or loss_type, "grpo", aggregation, estimator, std_eps=1e-4, equal_shards=True,
                   contiguous_groups=True, options=options)


def variants() -> list[TRLLoss]:
    """Every GRPO-family ``loss_type`` of TRL 1.16, with the aggregation its docs give it, and GSPO
    (``loss_type="grpo"`` with ``importance_sampling_level="sequence"``, TRL's documented GSPO set-up)."""
    return [
        _row("grpo", "trl:grpo"),
        _row("bnpo", "trl:bnpo"),
        _row("dr_grpo", f"constant:{MAX_COMPLETION_LENGTH}", scale_rewards="none",
             max_completion_length=MAX_COMPLETION_LENGTH),
        _row("dapo", "trl:dapo"),
        _row("luspo", "seq_mean_token_sum"),
        _row("cispo", "token_mean", epsilon_high=5.0),
        _row("sapo", "sample_mean"),
        _row("vespo", "token_mean"),
        _row("grpo", "trl:grpo", variant="gspo", importance_sampling_level="sequence"),
        _row("grpo", "trl:grpo", variant="grpo off_policy_mask", off_policy_mask_threshold=OPSM_THRESHOLD),
        IntegrationLoss("FlashReinforceTrainer (flashsim.integrations.trl)", "flash_reinforce", "sample_mean",
                        "batch_mean", equal_shards=True),
    ]


def policy_loss(loss_type: str = "grpo", **options) -> TRLLoss:
    """The TRL row for ``loss_type`` (``flashsim check-loss flashsim.testing.adapters.trl:policy_loss
    --option loss_type=bnpo``); other ``options`` go to ``GRPOConfig``."""
    rows = [row for row in variants() if isinstance(row, TRLLoss)]
    for row in rows:
        if row.loss_type == loss_type:
            row.options.update(options)
            return row
    raise ValueError(f"loss_type {loss_type!r} is not one of {', '.join(r.loss_type for r in rows)}")


__all__ = ["IntegrationLoss", "TRLLoss", "policy_loss", "variants"]
