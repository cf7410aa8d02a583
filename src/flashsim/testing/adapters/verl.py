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

from flashsim.testing.adapters import Adapter, handed_advantages, pipeline_rewards, require, tensor_code

LOSS_SCALE_FACTOR = 32
"""``loss_scale_factor`` of the Dr. GRPO row with a fixed normaliser."""

DRO_BETA = 0.1
"""``policy_loss.dro_beta`` of the DRO row (verl requires one and documents none)."""

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

SINGLETON_FALLBACK = ("verl documents that a group of one trajectory falls back to mean 0, std 1 "
                      "(verl/utils/groupwise.py: 'Singleton groups fallback to mean=0, std=1'), so with n = 1 "
                      "A = R / (1 + ε), REINFORCE without a baseline; the row matches that fallback")

_OFF_POLICY_RULES = {
    "bypass_mode": "verl's rollout correction gates on a k3 KL estimate (seq_mean_k3) and truncates token IS weights, "
                   "not FlashREINFORCE's Bernoulli-KL gate",
    "gspo": "GSPO clips the sequence's length-normalised ratio, not GRPO's token ratio",
    "gpg": "GPG is −A·log π with no importance ratio: off-policy data is used as if on-policy, by design",
    "cispo": "CISPO weighs tokens by the detached clipped ratio, not GRPO's PPO clip",
    "dppo_tv": "DPPO drops tokens whose probability moved more than ε (total variation), not GRPO's ratio clip",
    "dppo_kl": "DPPO drops tokens whose binary KL exceeds ε, not GRPO's ratio clip",
    "sapo": "SAPO replaces the clip by a soft sigmoid gate of the ratio (4/τ)·σ(τ(ρ − 1)), whose slope at ρ = 1 is "
            "GRPO's",
    "geo_mean": "GMPO weighs a sequence by the geometric mean of its clipped token ratios, not GRPO's per-token clip",
    "dro": "DRO is −A·log π plus a quadratic penalty β/2·(log π − log μ)², with no importance ratio",
    "kl_cov": "KL-Cov has no clip: it adds ppo_kl_coef·|log π − log μ| to the tokens of largest "
              "covariance(A, log π) (at least one per call)",
}


_PENALTY = ("{} is not zero off-policy whatever the advantages, so the loss does not vanish with them, by design "
            "(verl's G = 1 estimator failure shows in the other verl rows)")
_OWN_RULES = {
    "dro": {name: _PENALTY.format("DRO's penalty β/2·(log π − log μ)²")
            for name in ("constant_rewards", "single_rollout_groups")},
    "kl_cov": {**{name: _PENALTY.format("KL-Cov's penalty ppo_kl_coef·|log π − log μ|")
                  for name in ("constant_rewards", "single_rollout_groups")},
               "length_normalisation": "KL-Cov penalises the max(1, ⌊kl_cov_ratio · N⌋) tokens of largest covariance: "
                                       "repeating a trajectory's tokens changes N and penalises one copy of a token, "
                                       "not all, by design"},
}
"""Invariants that do not apply to a verl policy loss by its own design, and why."""


@dataclass
class VerlLoss(Adapter):
    framework = "verl"
    distribution = "verl"

    def __post_init__(self) -> None:
        self.loss_agg_mode = self.options.get("loss_agg_mode", "token-mean")
        self.loss_mode = self.options.get("loss_mode", "vanilla")
        self.norm_by_std = self.options.get("norm_adv_by_std_in_grpo", True)
        self.off_policy_rule = _OFF_POLICY_RULES.get(self.loss_mode)
        self.own_rules = _OWN_RULES.get(self.loss_mode, {})
        if self.algorithm == "grpo":  # compute_grpo_outcome_advantage's documented singleton fallback
            self.singleton_fallback = "unit"
            self.documented = {"single_rollout_groups": SINGLETON_FALLBACK}

    def advantages(self, rewards: Tensor, group_ids: Tensor | None) -> Tensor:
        scores = pipeline_rewards(rewards)
        if self.loss_mode == INTEGRATION:  # flashsim's estimator, taken from verl's registry as its trainer does
            core_algos = _integration()
            advantages, _ = core_algos.get_adv_estimator_fn(INTEGRATION)(
                token_level_rewards=scores[:, None], response_mask=torch.ones_like(scores[:, None]), config=None)
            return advantages[:, 0]
        if self.algorithm == "flash_reinforce":  # verl has no batch-mean estimator: the adapter forms it
            return scores - scores.mean()
        core_algos = require("verl.trainer.ppo.core_algos", "verl")
        advantages, _ = core_algos.compute_grpo_outcome_advantage(
            token_level_rewards=scores[:, None], response_mask=torch.ones_like(scores[:, None]),
            index=group_ids.cpu().numpy(), epsilon=self.std_eps, norm_adv_by_std_in_grpo=self.norm_by_std)
        return advantages[:, 0]

    def _loss(self, log_probs, behavior_log_probs, advantages, action_mask, *, num_sequences, num_tokens,
              max_tokens, num_shards) -> Tensor:
        core_algos = _integration() if self.loss_mode == INTEGRATION else require("verl.trainer.ppo.core_algos", "verl")
        fields = {key: self.options[key] for key in ("loss_scale_factor",) if key in self.options}
        if self.loss_mode not in ("vanilla", INTEGRATION):
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

    snippet_mask = "response_mask"

    def snippet_setup(self) -> list[str]:
        lines = ["import torch", "from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage, "
                 "get_policy_loss_fn", "from verl.workers.config import ActorConfig, PolicyLossConfig"]
        if self.loss_mode == INTEGRATION:
            lines.append("import flashsim.integrations.verl  # registers flash_reinforce in verl's registries")
            lines.append("from verl.trainer.ppo.core_algos import get_adv_estimator_fn")
        policy = {"loss_mode": self.loss_mode, **self.options.get("policy_loss", {})}
        rollout = policy.pop("rollout_correction", None)
        config = f"PolicyLossConfig(**{policy!r})"
        if rollout is not None:
            lines.append("from verl.trainer.config.algorithm import RolloutCorrectionConfig")
            config = config[:-1] + f", rollout_correction=RolloutCorrectionConfig(**{rollout!r}))"
        scale = {"loss_scale_factor": self.options["loss_scale_factor"]} if "loss_scale_factor" in self.options else {}
        return [*lines, f"config = ActorConfig(strategy='fsdp', ppo_micro_batch_size_per_gpu=1, rollout_n=1, "
                        f"{''.join(f'{k}={v!r}, ' for k, v in scale.items())}policy_loss={config})",
                f"policy_loss_fn = get_policy_loss_fn({self.loss_mode!r})"]

    def snippet_call(self, batch, name, *, advantages=None, num_sequences=None, num_tokens=None, max_tokens=None,
                     num_shards=1) -> list[str]:
        if advantages is not None:
            lines = handed_advantages(name, advantages)
        else:
            lines = [f"token_level_rewards_{name} = {tensor_code(pipeline_rewards(batch.rewards)[:, None])}",
                     self._formed_advantages(batch, name)]
        tokens = int(batch.action_mask.sum()) if num_tokens is None else num_tokens
        sequences = batch.batch_size if num_sequences is None else num_sequences
        return [*lines, f"response_mask_{name} = {tensor_code(batch.action_mask)}",
                f"log_prob_{name} = {tensor_code(batch.log_probs, grad=True)}",
                f"old_log_prob_{name} = {tensor_code(batch.behavior_log_probs)}",
                "config.global_batch_info.clear()",
                f"config.global_batch_info.update(dp_size=1, batch_num_tokens={tokens}, global_batch_size={sequences}, "
                f"loss_scale_factor=config.loss_scale_factor)",
                f"loss_{name}, _ = policy_loss_fn(old_log_prob=old_log_prob_{name}, log_prob=log_prob_{name}, "
                f"advantages=advantages_{name}[:, None] * response_mask_{name}, response_mask=response_mask_{name}, "
                f"loss_agg_mode={self.loss_agg_mode!r}, config=config)",
                f"grad_{name} = torch.autograd.grad(loss_{name}, log_prob_{name})[0]"]

    def _formed_advantages(self, batch, name: str) -> str:
        """The line of :meth:`snippet_call` that forms ``advantages_{name}`` from ``token_level_rewards_{name}`` as
        this row's estimator does."""
        ones = f"response_mask=torch.ones_like(token_level_rewards_{name})"
        if self.loss_mode == INTEGRATION:
            return (f"advantages_{name} = get_adv_estimator_fn({INTEGRATION!r})(token_level_rewards="
                    f"token_level_rewards_{name}, {ones}, config=None)[0][:, 0]")
        if self.algorithm == "flash_reinforce":
            return (f"advantages_{name} = (token_level_rewards_{name} - token_level_rewards_{name}.mean())"
                    f"[:, 0]  # verl has no batch-mean estimator: the row's own")
        return (f"advantages_{name} = compute_grpo_outcome_advantage(token_level_rewards=token_level_rewards_"
                f"{name}, {ones}, index={batch.group_ids.tolist()!r}, epsilon={self.std_eps!r}, "
                f"norm_adv_by_std_in_grpo={self.norm_by_std!r})[0][:, 0]")


INTEGRATION = "flash_reinforce"
"""The loss mode and estimator :mod:`flashsim.integrations.verl` registers in verl's registries."""


def _integration():
    """verl's ``core_algos`` with :mod:`flashsim.integrations.verl`'s entries registered."""
    require("flashsim.integrations.verl", "verl")
    return require("verl.trainer.ppo.core_algos", "verl")


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
    rows.append(_row(f"{INTEGRATION} (flashsim.integrations.verl)", "flash_reinforce", "batch_mean", "sample_mean",
                     loss_agg_mode="seq-mean-token-mean", loss_mode=INTEGRATION))
    # verl's fifth loss_agg_mode, and the other registered GRPO-family policy losses with the aggregation their
    # docstrings recommend (those still without a row: NOT_IN_TABLE).
    rows.append(_row("grpo token-sum", "grpo", "group_mean_std", "token_sum", loss_agg_mode="token-sum"))
    rows.append(_row("gspo seq-mean-token-mean", "grpo", "group_mean_std", "sample_mean",
                     loss_agg_mode="seq-mean-token-mean", loss_mode="gspo"))
    rows += [_row(f"{mode} token-mean", "grpo", "group_mean_std", "token_mean", loss_agg_mode="token-mean",
                  loss_mode=mode) for mode in ("gpg", "cispo", "dppo_tv", "dppo_kl")]
    # SAPO aggregates with seq-mean-token-mean whatever loss_agg_mode says; GMPO takes a plain mean of its
    # per-sequence losses (a sample mean). DRO needs its β (verl has no default; 0.1 here).
    rows.append(_row("sapo seq-mean-token-mean", "grpo", "group_mean_std", "sample_mean",
                     loss_agg_mode="seq-mean-token-mean", loss_mode="sapo"))
    rows.append(_row("geo_mean", "grpo", "group_mean_std", "sample_mean", loss_agg_mode="token-mean",
                     loss_mode="geo_mean"))
    rows.append(_row(f"dro dro_beta={DRO_BETA} token-mean", "grpo", "group_mean_std", "token_mean",
                     loss_agg_mode="token-mean", loss_mode="dro", policy_loss={"dro_beta": DRO_BETA}))
    rows.append(_row("kl_cov token-mean", "grpo", "group_mean_std", "token_mean", loss_agg_mode="token-mean",
                     loss_mode="kl_cov"))
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


LEFT_OUT = {
    "the FSDP engine's torch.autocast(cuda, bf16) and flash-attn's cross-entropy around the loss (forward_step)":
        "on a CPU the CUDA autocast cannot be entered as verl enters it, so the adapter hands the loss the drawn "
        "log-probs as they are; on verl's default path the loss gets float32 log-probs, so the bf16 `precision` cells "
        "are classed outside the pipeline, with that evidence (a GPU run would confirm the dtype; none was made)",
    "the reward manager":
        "its rewards are float32 (verl/workers/reward_manager/naive.py): the float32 column feeds that dtype, and a "
        "float64 cell at rounding level is classed outside the pipeline",
}
"""Steps of verl's default pipeline around the loss that the adapter does not run, and why the verdict stands."""


NOT_IN_TABLE = {
    "clip_cov": "it zeroes the gradient of tokens drawn with torch.randperm from those whose covariance(A, log π) "
                "lies in (clip_cov_lb, clip_cov_ub), at least one per call whenever any qualifies: its gradient is "
                "random by design, so no invariant that compares two calls can be judged (tokens with covariance in "
                "(1, 5) can occur even on-policy, where π = μ)",
}
"""verl 0.9.1's registered policy losses the table does not have a row for, and why."""


__all__ = ["NOT_IN_TABLE", "VerlLoss", "policy_loss", "variants"]
