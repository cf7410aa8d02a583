"""FlashREINFORCE in TRL: :class:`FlashReinforceConfig` (a ``GRPOConfig``) and :class:`FlashReinforceTrainer`
(a ``GRPOTrainer`` with the same constructor).

    config = FlashReinforceConfig(output_dir="out", num_generations=1, per_device_train_batch_size=64)
    trainer = FlashReinforceTrainer(model=model, reward_funcs=reward, args=config, train_dataset=data)
    trainer.train()

What it changes in TRL 1.16's ``GRPOTrainer`` (every other part — generation with or without vLLM, reward
functions, tools, logging, checkpoints — is TRL's own):

1. **Config.** ``num_generations=1`` is accepted (TRL refuses it: "GRPO requires at least 2 generations per
   prompt"); :meth:`FlashReinforceConfig.__post_init__` lets that one check pass for G = 1 and refuses every GRPO
   setting this trainer would otherwise ignore (:data:`GRPO_ONLY`).
2. **Advantages** (``_generate_and_score_completions``): ``A_i = R_i − mean_j R_j`` over the whole generation batch
   — every process, every accumulation step (TRL gathers the rewards across processes before this point) — by
   :func:`flashsim.losses.batch_centered`, instead of TRL's per-group ones (which are 0 at G = 1).
3. **Loss** (``_compute_loss``): :func:`flashsim.losses.flash_reinforce_loss` on the learner's log-probs and the
   stored sampling log-probs μ (vLLM's ``sampling_per_token_logps`` with ``use_vllm``; without vLLM, TRL's
   generation-time ``old_per_token_logps`` when the batch is used after an optimizer step, else the current
   log-probs, which generated it), outer denominator the process's rows of one optimizer step, so DDP's gradient
   mean is the global batch's sample mean. In that last case the trust region has nothing to correct (ratio 1,
   KL 0): the trainer warns once, when it is built, with the two settings that store sampling log-probs.
4. **Logs**: ``trust/acceptance_rate``, ``trust/sequence_kl``, ``trust/ratio_max`` per step;
   ``frac_batch_reward_zero_std`` (the fraction of generation batches whose rewards are all equal: no signal for
   a batch baseline) instead of TRL's ``frac_reward_zero_std`` (the fraction of groups, 1.0 at every step at G = 1).

Left out on purpose: several iterations per batch (``num_iterations``: FlashREINFORCE takes one optimizer step
per fresh batch), a KL penalty to a reference model (``beta``), TRL's vLLM importance-sampling correction (the
token ratio on vLLM's log-probs is that correction already) and the entropy bonus.
"""

from __future__ import annotations

import dataclasses
import warnings

import torch
from torch import Tensor

try:
    from trl import GRPOConfig, GRPOTrainer
except ImportError as error:  # pragma: no cover - exercised where TRL is not installed
    raise ImportError("flashsim.integrations.trl needs TRL 1.16: pip install -e \".[conformance]\"") from error

from flashsim.losses import DEFAULT_DELTA, batch_centered, check_loss_options, flash_reinforce_loss

GRPO_ONLY = {
    "beta": "FlashREINFORCE has no KL penalty to a reference model",
    "num_iterations": "FlashREINFORCE takes one optimizer step per fresh batch and discards it",
    "loss_type": "the loss is flash_reinforce_loss (sample mean) whatever loss_type says",
    "epsilon": "there is no PPO clip: the sequence gate is the trust region",
    "epsilon_high": "there is no PPO clip: the sequence gate is the trust region",
    "delta": "TRL's two-sided clip bound; FlashREINFORCE's gate threshold is gate_delta",
    "importance_sampling_level": "the ratios are per token, the gate per trajectory",
    "scale_rewards": "the advantage is R − mean R over the generation batch, never scaled",
    "multi_objective_aggregation": "rewards are summed with reward_weights, then centred over the batch",
    "top_entropy_quantile": "no entropy mask",
    "off_policy_mask_threshold": "the sequence gate replaces OPSM",
    "entropy_coef": "no entropy bonus",
    "use_adaptive_entropy": "no entropy bonus",
    "vllm_importance_sampling_correction": "the token ratio on vLLM's sampling log-probs is that correction",
}
"""``GRPOConfig`` fields this trainer does not use, and why: set to anything but their default, they are refused."""

_MODEL_INPUTS = ("pixel_values", "image_grid_thw", "num_images", "pixel_attention_mask", "spatial_shapes",
                 "num_tiles", "image_sizes", "token_type_ids", "mm_token_type_ids", "image_position_ids")
"""The multimodal inputs ``GRPOTrainer._compute_loss`` hands its log-prob pass (all optional)."""


@dataclasses.dataclass
class FlashReinforceConfig(GRPOConfig):
    """A ``GRPOConfig`` for FlashREINFORCE: one rollout per prompt by default, the gate's two settings, and the
    GRPO-only settings (:data:`GRPO_ONLY`) refused unless left at their defaults."""

    num_generations: int | None = dataclasses.field(
        default=1, metadata={"help": "Rollouts per prompt (FlashREINFORCE: 1; more are allowed and share the "
                                     "batch baseline)."})
    vllm_importance_sampling_correction: bool = dataclasses.field(
        default=False, metadata={"help": "Must stay False: FlashREINFORCE's token ratio on vLLM's sampling "
                                         "log-probs is the correction."})
    gate: str = dataclasses.field(
        default="sequence", metadata={"help": "Trust region: 'sequence' (the paper: a trajectory whose mean "
                                              "sampled-action Bernoulli KL exceeds gate_delta is rejected, and stays "
                                              "in the batch count), 'token' (per-token gate) or 'none'."})
    gate_delta: float | None = dataclasses.field(
        default=None,
        metadata={"help": f"Gate threshold δ (None: flashsim's {DEFAULT_DELTA:g}). Refused with gate='none'."})

    def __post_init__(self) -> None:
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        for name, why in GRPO_ONLY.items():
            if getattr(self, name) != defaults[name]:
                raise ValueError(f"{name}={getattr(self, name)!r} is a GRPO setting FlashReinforceConfig does not "
                                 f"use: {why}. Remove it (the trainer ignores its default, {defaults[name]!r})")
        self.loss_options  # noqa: B018 (checks gate and gate_delta before anything is built)
        if not isinstance(self.num_generations, int) or self.num_generations < 1:
            raise ValueError(f"num_generations must be an int >= 1, got {self.num_generations!r}")
        try:
            super().__post_init__()
        except ValueError as error:
            # TRL's last general check refuses G = 1 ("GRPO requires at least 2 generations per prompt to
            # calculate the advantages"): FlashREINFORCE's advantages need no siblings. Only the checks of the
            # vLLM importance-sampling correction follow it, and that correction is refused above.
            if self.num_generations != 1 or "at least 2 generations" not in str(error):
                raise

    @property
    def loss_options(self) -> dict:
        """The options handed to :func:`flashsim.losses.flash_reinforce_loss`, checked by the registry's one check."""
        options = {"gate": self.gate, **({"delta": self.gate_delta} if self.gate_delta is not None else {})}
        try:
            return check_loss_options("flash_reinforce", options, where="FlashReinforceConfig")
        except (TypeError, ValueError) as error:  # the loss calls δ "delta"; this config, "gate_delta"
            message = str(error).replace("FlashReinforceConfig.delta", "FlashReinforceConfig.gate_delta")
            raise type(error)(message) from None


def generation_batch_advantages(rewards_per_func: Tensor, weights: Tensor) -> Tensor:
    """FlashREINFORCE's advantages of a generation batch: ``A_i = R_i − mean_j R_j`` with ``R_i`` the weighted sum of
    trajectory i's rewards. A trajectory no reward function scored (all NaN, as TRL marks it) gets ``A_i = 0`` and
    stays out of the mean. Shape: ``[B, F]``, ``[F]`` → ``[B]`` (float32 at least)."""
    rewards_per_func = rewards_per_func.to(torch.promote_types(rewards_per_func.dtype, torch.float32))
    rewards = (rewards_per_func * weights.to(rewards_per_func)).nansum(dim=1)
    scored = ~torch.isnan(rewards_per_func).all(dim=1)
    advantages = torch.zeros_like(rewards)
    if bool(scored.any()):
        advantages[scored] = batch_centered(rewards[scored])
    return advantages


def behavior_log_probs(inputs: dict, log_probs: Tensor) -> Tensor:
    """μ of each completion token: vLLM's sampling log-probs where TRL stored them, else TRL's generation-time
    ``old_per_token_logps``, else the current log-probs (the weights that generated the batch). A token vLLM could
    not score (NaN) gets the learner's own log-prob: ratio 1, KL 0, as TRL treats it."""
    stored = inputs.get("sampling_per_token_logps")
    stored = inputs.get("old_per_token_logps") if stored is None else stored
    if stored is None:
        return log_probs.detach()
    return torch.where(torch.isnan(stored), log_probs.detach().to(stored.dtype), stored)


def batch_rewards_all_equal(rewards_per_func: Tensor, weights: Tensor) -> bool:
    """Whether every scored trajectory of the generation batch has the same total reward, so that every
    advantage ``R_i − mean_j R_j`` is 0 and the batch carries no learning signal. Shape: ``[B, F]``, ``[F]``."""
    rewards = (rewards_per_func * weights.to(rewards_per_func)).nansum(dim=1)
    rewards = rewards[~torch.isnan(rewards_per_func).all(dim=1)]
    return rewards.numel() == 0 or bool(rewards.max() == rewards.min())


def own_log_probs_are_behaviour(args: GRPOConfig) -> bool:
    """Whether μ is the learner's own log-probs: no vLLM (so no sampling log-probs) and TRL stores no
    generation-time ones, because each generation batch is used up before an optimizer step changes the weights
    that sampled it (``gradient_accumulation_steps`` a multiple of ``steps_per_generation``; TRL's own test)."""
    generate_every = args.steps_per_generation * args.num_iterations
    return not args.use_vllm and args.gradient_accumulation_steps % generate_every == 0


ON_POLICY_WARNING = (
    "FlashReinforceTrainer: μ is the learner's own log-probs here (use_vllm=False, and with "
    "gradient_accumulation_steps={accumulation} and steps_per_generation={generation} each generation batch is used "
    "up before an optimizer step changes the weights that sampled it): every token ratio is 1 and every sequence KL "
    "0, so the trust region has nothing to correct and the gate admits every trajectory. For stored sampling "
    "log-probs, generate with vLLM (use_vllm=True: μ is vLLM's sampling log-probs) or use each generation batch "
    "across optimizer steps (steps_per_generation > gradient_accumulation_steps: μ is TRL's generation-time "
    "log-probs).")
"""What the trainer warns, once, when :func:`own_log_probs_are_behaviour` holds."""


class FlashReinforceTrainer(GRPOTrainer):
    """``GRPOTrainer`` training with FlashREINFORCE (see the module docstring); same constructor, and ``args`` a
    :class:`FlashReinforceConfig` (built with its defaults when None)."""

    def __init__(self, model, reward_funcs=None, args: FlashReinforceConfig | None = None, *positional, **keywords):
        if args is None:
            name = model if isinstance(model, str) else getattr(model.config, "_name_or_path", "") or "model"
            args = FlashReinforceConfig(f"{name.split('/')[-1]}-FlashREINFORCE")
        if not isinstance(args, FlashReinforceConfig):
            raise TypeError(f"args must be a FlashReinforceConfig (a GRPOConfig would train GRPO), got "
                            f"{type(args).__name__}")
        super().__init__(model, reward_funcs, args, *positional, **keywords)
        if own_log_probs_are_behaviour(args):
            warnings.warn(ON_POLICY_WARNING.format(accumulation=args.gradient_accumulation_steps,
                                                   generation=args.steps_per_generation), UserWarning, stacklevel=2)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        self._batch_rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        return self._batch_rewards  # [B_global, F]: every process's rewards of this generation batch

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        advantages = generation_batch_advantages(self._batch_rewards, self.reward_weights)
        local = slice(self.accelerator.process_index * len(inputs), (self.accelerator.process_index + 1) * len(inputs))
        output["advantages"] = advantages[local].to(output["advantages"])
        self._logs["advantages"].extend(advantages.tolist())  # replaces TRL's group advantages (a generation batch)
        # TRL's frac_reward_zero_std is the fraction of *groups* whose rewards are all equal (GRPO's zero-advantage
        # rows; 1.0 at every step when G = 1). The baseline here is the batch's: its signal is gone only when the
        # whole generation batch scored alike. One value per generation batch; TRL averages them when it logs.
        metrics = self._metrics["train" if self.model.training else "eval"]
        metrics.pop("frac_reward_zero_std", None)
        metrics["frac_batch_reward_zero_std"].append(float(batch_rewards_all_equal(self._batch_rewards,
                                                                                   self.reward_weights)))
        return output

    def _compute_loss(self, model, inputs):
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        input_ids = torch.cat([inputs["prompt_ids"], completion_ids], dim=1)
        attention_mask = torch.cat([inputs["prompt_mask"], completion_mask], dim=1)
        log_probs, _, aux_loss = self._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, completion_ids.size(1), compute_aux_loss=self.aux_loss_enabled,
            **{name: inputs.get(name) for name in _MODEL_INPUTS})
        mask = completion_mask if "tool_mask" not in inputs else completion_mask * inputs["tool_mask"]
        mode = "train" if self.model.training else "eval"
        # The rows of one optimizer step on this process: DDP's mean over processes makes it the global B.
        steps = self.current_gradient_accumulation_steps if mode == "train" else 1
        behaviour = behavior_log_probs(inputs, log_probs)
        dtype = torch.promote_types(log_probs.dtype, behaviour.dtype)  # TRL's head: float32; never round μ down
        loss, stats = flash_reinforce_loss(log_probs.to(dtype), behaviour.to(dtype), None, mask.bool(),
                                           advantages=inputs["advantages"], num_sequences=log_probs.shape[0] * steps,
                                           **self.args.loss_options)
        if self.aux_loss_enabled:
            loss = loss + self.args.router_aux_loss_coef * aux_loss / steps
        gather = self.accelerator.gather
        self._metrics[mode]["trust/acceptance_rate"].append(gather(stats["acceptance_rate"][None]).mean().item())
        self._metrics[mode]["trust/sequence_kl"].append(gather(stats["sequence_kl"]).nanmean().item())
        self._metrics[mode]["trust/ratio_max"].append(gather(stats["ratio_max"][None]).max().item())
        return loss


__all__ = ["GRPO_ONLY", "ON_POLICY_WARNING", "FlashReinforceConfig", "FlashReinforceTrainer",
           "batch_rewards_all_equal", "behavior_log_probs", "generation_batch_advantages",
           "own_log_probs_are_behaviour"]
