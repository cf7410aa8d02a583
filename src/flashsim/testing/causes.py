"""Why a framework's row fails an invariant, and whether its users can reach the failure.

Every :class:`Cause` names the framework's line that does it (located in the installed source by the code
it quotes, so the line number is the installed version's), what it means for a user, and its class:

- ``reachable``: the framework's own pipeline feeds inputs that trigger it; ``evidence`` is the pipeline line
  that produces them (float32 rewards, micro-batches, ...);
- ``outside``: it needs inputs the pipeline never feeds; ``evidence`` is the line that guarantees they never
  occur (log-probs written as 0 in padding, cast to float32, an assertion on the group size);
- ``documented``: the framework documents the behaviour; ``evidence`` is the documentation.

The table is keyed by framework, invariant, variant and **dtype** (the dtype of the cell's drawn inputs): a
flaw that amplifies rounding (a constant group's mean, one ulp off, divided by 0 + ε) is reachable in the dtype
the framework's pipeline holds the values in (float32 rewards) and outside the pipeline in float64, which no
pipeline feeds. :func:`rounding_level` says whether a failure's size is what rounding in its dtype, amplified by
the cause's ``amplifies``, can give; :func:`classify` refuses a reachable class for a float64 cell at that size.

``title`` names the flaw: rows that share one flaw share its title, and the page counts causes by title.
"""

from __future__ import annotations

import importlib.util
import pathlib
import re
from dataclasses import dataclass, replace

ANY = ""
"""The dtype field of a :data:`CAUSES` key that matches cells of any dtype."""

SEVERITIES = {"reachable": "reachable", "outside": "outside the pipeline", "documented": "documented"}
"""Class → how the page names it."""


@dataclass(frozen=True)
class Line:
    """A line of an installed framework: its file (relative to site-packages) and the code it holds; ``within`` is
    a line before it (its function's ``def``) where the same code appears more than once."""

    file: str
    code: str
    note: str = ""
    """What the line shows (for evidence: why the class is what it is)."""
    within: str = ""


@dataclass(frozen=True)
class Cause:
    """A flaw of a framework's loss: the line that does it, what it means for a user, its class and evidence."""

    title: str
    line: Line
    meaning: str
    severity: str
    evidence: Line
    amplifies: float | None = None
    """The factor by which the cause scales rounding noise (1/ε for a division by std + ε), None when the failure
    does not come from rounding."""
    draft: str = ""
    """A reachable cause's drafted upstream issue, a file in ``docs/upstream/``."""
    no_draft: str = ""
    """Why a reachable cause has no drafted upstream issue."""

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {', '.join(SEVERITIES)}, got {self.severity!r}")


def locate(line: Line) -> str:
    """``file:line`` of ``line.code`` in the installed framework (``file`` alone where it is not found)."""
    try:
        spec = importlib.util.find_spec(line.file.split("/")[0])
    except (ImportError, ValueError):
        return line.file
    if spec is None or not spec.submodule_search_locations:
        return line.file
    path = pathlib.Path(next(iter(spec.submodule_search_locations))).parent / line.file
    try:
        inside = not line.within
        for number, text in enumerate(path.read_text().splitlines(), start=1):
            inside = inside or line.within in text
            if inside and line.code in text:
                return f"{line.file}:{number}"
    except OSError:
        pass
    return line.file


# ---- evidence shared by several causes -------------------------------------------------------------------

_TRL_PADDING = Line(
    "trl/trainer/grpo_trainer.py", "labels = input_ids_batch.masked_fill(attention_mask_batch == 0, -100)",
    "TRL's trainer labels padding -100, for which its fused LM head returns log-prob 0: the loss never sees NaN or "
    "inf in padding (tests/testing/test_adapters.py checks it on a real GRPOTrainer)")
_TRL_FLOAT32 = Line(
    "trl/trainer/grpo_trainer.py", "all_logps.append(outputs.log_probs[:, -logits_to_keep:])",
    "the trainer's log-probs come from its fused LM head, float32 whatever the model's dtype "
    "(tests/testing/test_adapters.py checks it on a real GRPOTrainer): bf16 log-probs reach the loss only from a "
    "subclass")
_VERL_PADDING = Line(
    "verl/workers/utils/padding.py",
    "response_list.append(F.pad(values[seq_offset - resp_len - 1 : seq_offset - 1], (*skip_padding, 0, pad_size)))",
    "verl's engine pads the unpadded log-probs back with zeros before the loss: NaN or inf never sits in padding")
_VERL_AUTOCAST = Line(
    "verl/workers/engine/fsdp/transformer_impl.py",
    "else torch.autocast(device_type=device_name, dtype=autocast_dtype)", within="def forward_step(",
    note="verl's FSDP engine runs the model, logprobs_from_logits and the loss inside torch.autocast(cuda, bf16) "
    "(forward_step), where log_softmax and exp are float32 ops; with flash-attn, which verl's fsdp extra installs "
    "(the default attn_implementation is flash_attention_2, verl/workers/config/model.py), the log-probs come from "
    "its Triton cross-entropy in float32 (logprobs_from_logits, verl/utils/torch_functional.py). So the loss gets "
    "float32 log-probs, never the bf16 ones this cell feeds it (the adapter calls the loss without the autocast "
    "context: on a CPU it cannot be entered the way CUDA enters it). Only a GPU run can confirm the dtype the "
    "loss receives on verl's default path; it is unverified here")
_VERL_MICRO = Line(
    "verl/workers/engine/fsdp/transformer_impl.py", "loss.backward()",
    "the engine calls backward once per micro-batch (ppo_micro_batch_size_per_gpu below the mini-batch) and the "
    "gradients add up", within="def forward_backward_batch(")
_VERL_NARROW = Line(
    "verl/workers/utils/padding.py", "max_response_len = response_lens.max().item()",
    "under the default V1 trainer (trainer.use_v1: true) ppo_loss pads each micro-batch with no_padding_2_padding, "
    "and nothing in verl sets its max_response_len: a micro-batch is padded to its own longest response, so "
    "micro-batches have different widths")
_OPENRLHF_MASK = Line(
    "openrlhf/models/actor.py", "action_log_probs = log_probs[:, -action_mask.shape[1] :] * action_mask.float()",
    "OpenRLHF's actor multiplies its log-probs by the action mask: padding holds 0, never NaN or inf")
_OPENRLHF_FLOAT32 = Line(
    "openrlhf/models/actor.py", 'output["logits"] = output["logits"].to(torch.float32)',
    "OpenRLHF's actor casts its logits to float32 before the log-probs (and vLLM returns float32 rollout "
    "log-probs): the loss never gets bf16 log-probs")
_OPENRLHF_REWARDS = Line(
    "openrlhf/trainer/ppo_utils/experience_maker.py",
    "experience.rewards = experience.rewards.to(torch.promote_types(experience.rewards.dtype, torch.float32))",
    "the experience maker holds rewards in float32 before it normalises them per prompt group")
_OPENRLHF_NORM = ("openrlhf/trainer/ppo_utils/experience_maker.py",
                  "rewards = (rewards - rewards.mean(-1, keepdim=True)) / (rewards.std(-1, keepdim=True) + 1e-9)")
_OPENRLHF_CLAMP = Line("openrlhf/models/utils.py", "r = r.clamp(min=reward_clip_range[0], max=reward_clip_range[1])",
                       "the experience maker holds rewards in float32 (compute_advantages_and_returns) and "
                       "compute_reward then clamps the normalised rewards to --reward.clip_range, default (-10, 10) "
                       "(openrlhf/cli/train_ppo_ray.py): a default run gets the clamped value, and so does the "
                       "adapter")
_OPENRLHF_CONSTANT = Cause(
    "OpenRLHF's ε = 1e-9 turns a constant group's rounding noise into advantages", Line(*_OPENRLHF_NORM),
    "with ε = 1e-9 a group of equal non-binary rewards divides the rounding error of its mean by a std that is "
    "exactly 0: every member gets the same advantage, that error × 1e9. In float32, the experience maker's reward "
    "dtype, one ulp of 0.7 becomes +59.6 and compute_reward clamps it to the default --reward.clip_range bound, "
    "+10, beside ±0.94 for a group of eight with half right; whether the mean is one ulp off depends on the value, "
    "the group size and the batch's shape (the reduction's order). Zero the advantages of groups whose std is 0 "
    "(docs/upstream/openrlhf-group-norm-epsilon.md).", "reachable", _OPENRLHF_CLAMP, amplifies=1e9,
    draft="openrlhf-group-norm-epsilon.md")

_VERL_REWARDS = Line(
    "verl/workers/reward_manager/naive.py",
    'reward_tensor = torch.zeros_like(data.batch["responses"], dtype=torch.float32)',
    "verl's reward managers write float32 rewards: the estimator sees float32, never float64")
_VERL_CONSTANT = Cause(
    "verl divides a constant group's float32 rounding noise by 0 + 1e-6",
    Line("verl/trainer/ppo/core_algos.py",
         "scores[i] = (scores[i] - id2mean[index[i]]) / (id2std[index[i]] + epsilon)"),
    "a group of equal non-binary rewards divides the rounding error of its mean by a std that is exactly 0, plus "
    "ε = 1e-6. In float32, verl's reward dtype, the mean of n equal rewards is one ulp off for some values and "
    "group sizes and exact for others (0.7: from n = 7; 0.9: from n = 3; 0.5 never), so every member gets the "
    "same advantage of up to ±0.056, its sign the rounding's (0.7 → +0.056, 0.9 → −0.056, 0.1 → −0.0074), "
    "beside ±1 for a normal group: a group with no contrast is pushed, a little, towards or away from what it "
    "did. Zero the advantages of groups whose std is 0 (docs/upstream/verl-float32-constant-groups.md).",
    "reachable", _VERL_REWARDS, amplifies=1e6, draft="verl-float32-constant-groups.md")
_NAN_LOSS = "padding is masked by multiplying: a NaN or inf log-prob in a padding slot makes the loss NaN."
_NAN_GRADIENT = (
    "token-mean masks the loss with torch.where, but a padding slot's gradient is its (detached) ratio × A × 0, "
    "and 0 × NaN is NaN: a NaN or inf log-prob in padding gives NaN gradients although the loss is finite.")
_TRL_NAN = "TRL masks padding by multiplying (0 · NaN = NaN)"
_BF16_RATIO = (
    "the ratio is exponentiated at the log-probs' dtype, and a failure is one token at the clip edge: in bf16, "
    "for instance, exp(0.1875) = 1.203125, which is also bf16(1.2), so torch.min's tie lets the unclipped "
    "gradient through where float64 (ratio 1.2062) clips it, from a ratio off by 0.3 %. How often that "
    "happens is the last line of the result.")


def _trl(pattern: str, code: str, meaning: str = _NAN_LOSS, invariant: str = "padding") -> dict:
    return {("TRL", invariant, pattern, ANY): Cause(_TRL_NAN, Line("trl/trainer/grpo_trainer.py", code), meaning,
                                               "outside", _TRL_PADDING)}


CAUSES: dict[tuple[str, str, str, str], Cause] = {
    # (framework, invariant, variant regex, dtype of the cell or ANY) -> cause
    **_trl(r"^gspo$", "log_importance_weights = (log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)",
           "the sequence log-ratio is masked by multiplying, so a NaN or inf log-prob in a padding slot makes the "
           "loss NaN."),
    **_trl(r"^(grpo|sapo|grpo off_policy_mask)$",
           "loss = ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()"),
    **_trl(r"^bnpo$", "loss = (per_token_loss * mask).sum() / mask.sum().clamp(min=1.0)"),
    **_trl(r"^dr_grpo$",
           "loss = (per_token_loss * mask).sum() / (per_token_loss.size(0) * self.max_completion_length)"),
    **_trl(r"^(dapo|cispo|vespo)$", "loss = (per_token_loss * mask).sum() / normalizer"),
    **_trl(r"^luspo$", "loss = (per_token_loss * mask).sum(-1).mean()"),
    ("TRL", "precision", r"^vespo$", ANY): Cause(
        "TRL exponentiates ratios at the log-probs' dtype", Line("trl/trainer/grpo_trainer.py",
                                                                 "w_seq = torch.exp(log_w_seq)"),
        "VESPO's sequence weight is exponentiated at the log-probs' dtype: with bf16 log-probs φ(w) is off by more "
        "than bf16's own rounding.", "outside", _TRL_FLOAT32),
    ("TRL", "precision", r"^(grpo|bnpo|dr_grpo|dapo|luspo|sapo|cispo|gspo|grpo off_policy_mask)$", ANY): Cause(
        "TRL exponentiates ratios at the log-probs' dtype",
        Line("trl/trainer/grpo_trainer.py", "coef_1 = torch.exp(log_importance_weights)"), _BF16_RATIO, "outside",
        _TRL_FLOAT32),
    ("TRL", "shards", r"^bnpo$", ANY): Cause(
        "TRL bnpo normalises each microbatch over its own tokens",
        Line("trl/trainer/grpo_trainer.py", "loss = (per_token_loss * mask).sum() / mask.sum().clamp(min=1.0)"),
        "bnpo divides by the microbatch's own token count, then by the accumulation steps: with gradient "
        "accumulation, tokens in short microbatches weigh more; TRL says so, and dapo is its global token mean.",
        "documented", Line("trl/trainer/grpo_config.py", "batch. Note that normalization is performed over the "
                           "local batch only", "TRL's documentation of loss_type='bnpo'")),
    ("TRL", "constant_rewards", r"", "float32"): Cause(
        "TRL divides a constant group's float32 rounding noise by 0 + 1e-4",
        Line("trl/trainer/grpo_trainer.py", "advantages = advantages / (std_rewards + 1e-4)"),
        "in float32, TRL's reward dtype, the mean of n equal rewards is one ulp off for some values and n (0.7: from "
        "n = 7) while the group's std is 0 or about as small, so every member gets the same advantage of a few 1e-4 "
        "(up to 2e-3 here) instead of 0, beside ±1 for a group with contrast (ε = 1e-4 keeps it a hundred times "
        "below verl's, 1e4 times below OpenRLHF's before its clamp). Give a group whose std is 0 advantage 0.",
        "reachable", Line(
            "trl/trainer/grpo_trainer.py",
            "rewards_per_func[:, i] = torch.tensor(output_reward_func, dtype=torch.float32, device=device)",
            "TRL's trainer holds the reward functions' outputs in float32"), amplifies=1e4,
        no_draft="it is verl's flaw with an ε 100 times larger: a constant group's members get a few 1e-4 to 2e-3 "
        "each, beside ±1 for a group with contrast, too small to move training measurably, and the fix is the "
        "one verl's draft proposes (zero the advantages of a group whose std is 0). It belongs in a TRL issue "
        "only beside evidence that it changes a run."),
    ("verl", "single_rollout_groups", r"", ANY): Cause(
        "verl's GRPO estimator gives a group of one mean 0, std 1",
        Line("verl/trainer/ppo/core_algos.py", "id2mean[idx] = torch.tensor(0.0)"),
        "a group of one trajectory gets mean 0 and std 1, so GRPO with one rollout per prompt (n = 1) trains "
        "REINFORCE without a baseline (A = R / (1 + ε)); the row does exactly that.", "documented",
        Line("verl/utils/groupwise.py", "Singleton groups fallback to mean=0, std=1.",
             "verl documents the singleton fallback")),
    ("verl", "constant_rewards", r"", "float32"): _VERL_CONSTANT,
    ("verl", "batch_advantages", r"", "float32"): replace(
        _VERL_CONSTANT, meaning="the batch's advantages, as verl's estimator forms them, give a group of equal "
        "non-binary float32 rewards the same non-zero advantage (its mean's rounding error / 1e-6) where the "
        "declared estimator gives 0: " + _VERL_CONSTANT.meaning),
    ("verl", "constant_rewards", r"", "float64"): Cause(
        "verl's ε = 1e-6 scales float64 rounding, a dtype its rewards never have",
        _VERL_CONSTANT.line,
        "in float64 the mean of equal rewards is off by at most a few ulps (1e-16), and ÷ (0 + 1e-6) leaves "
        "1e-10-sized advantages: float64 rounding, not a behaviour a run shows, since verl's rewards are float32 "
        "(the same flaw at float32 is the reachable cause above).", "outside", _VERL_REWARDS, amplifies=1e6),
    ("verl", "padding", r"^cispo", ANY): Cause(
        "verl's gradient goes NaN through padding (0 × NaN)",
        Line("verl/trainer/ppo/core_algos.py", "pg_losses = -clipped_ratio_sg * advantages * log_prob"),
        _NAN_GRADIENT, "outside", _VERL_PADDING),
    ("verl", "padding", r"^dppo_tv", ANY): Cause(
        "verl's gradient goes NaN through padding (0 × NaN)",
        Line("verl/trainer/ppo/core_algos.py", "pg_losses = -advantages * truncated_ratio * log_prob * valid_mask",
             within="def compute_policy_loss_dppo_tv("), _NAN_GRADIENT, "outside", _VERL_PADDING),
    ("verl", "padding", r"^dppo_kl", ANY): Cause(
        "verl's gradient goes NaN through padding (0 × NaN)",
        Line("verl/trainer/ppo/core_algos.py", "pg_losses = -advantages * truncated_ratio * log_prob * valid_mask",
             within="def compute_policy_loss_dppo_kl("), _NAN_GRADIENT, "outside", _VERL_PADDING),
    ("verl", "padding", r"^gspo", ANY): Cause(
        "verl masks padding by multiplying (loss NaN)",
        Line("verl/trainer/ppo/core_algos.py",
             "negative_approx_kl_seq = torch.sum(negative_approx_kl * response_mask, dim=-1) / seq_lengths"),
        "GSPO's sequence log-ratio is masked by multiplying, so a NaN or inf log-prob in a padding slot makes the "
        "loss NaN.", "outside", _VERL_PADDING),
    ("verl", "padding", r"seq-mean-token-sum|loss_scale_factor", ANY): Cause(
        "verl masks padding by multiplying (loss NaN)",
        Line("verl/trainer/ppo/core_algos.py", "seq_losses = torch.sum(loss_mat * loss_mask, dim=-1)  # token-sum"),
        "the seq-mean modes mask by multiplying (token-mean uses masked_sum's torch.where), so a NaN or inf "
        "log-prob in a padding slot makes the loss NaN.", "outside", _VERL_PADDING),
    ("verl", "padding", r"seq-mean-token-mean|bypass_mode", ANY): Cause(
        "verl masks padding by multiplying (loss NaN)",
        Line("verl/trainer/ppo/core_algos.py",
             "seq_losses = torch.sum(loss_mat * loss_mask, dim=-1) / (seq_mask + 1e-8)"),
        "the seq-mean modes mask by multiplying (token-mean uses masked_sum's torch.where), so a NaN or inf "
        "log-prob in a padding slot makes the loss NaN.", "outside", _VERL_PADDING),
    ("verl", "shards", r"seq-mean-token-sum-norm$", ANY): Cause(
        "verl seq-mean-token-sum-norm divides by the micro-batch's padded width",
        Line("verl/trainer/ppo/core_algos.py", "horizon = loss_mask.shape[-1]"),
        "without loss_scale_factor the normaliser is the width of the tensor the loss gets, and under the default "
        "V1 trainer ppo_loss pads each micro-batch to its own longest response (evidence), where verl's config "
        "documents response_length (actor.yaml: 'If null, uses response_length'): identical sequences in "
        "micro-batches of different widths get different gradients, and the loss scale follows the longest "
        "response. Set actor.loss_scale_factor to the response budget.",
        "reachable", _VERL_NARROW, draft="verl-seq-mean-token-sum-norm-width.md"),
    ("verl", "padding", r"^geo_mean", ANY): Cause(
        "verl masks padding by multiplying (loss NaN)",
        Line("verl/trainer/ppo/core_algos.py",
             "ratio = torch.exp((negative_approx_kl_min * response_mask).sum(dim=-1) / (response_mask_sum + 1e-8))"),
        "GMPO's geometric mean masks the log-ratios by multiplying, so a NaN or inf log-prob in a padding slot "
        "makes the loss NaN.", "outside", _VERL_PADDING),
    ("verl", "padding", r"^dro", ANY): Cause(
        "verl's gradient goes NaN through padding (0 × NaN)",
        Line("verl/trainer/ppo/core_algos.py",
             "pg_losses = -(log_prob * advantages - 0.5 * beta * log_ratio.square())"),
        "token-mean masks the loss with torch.where, but the penalty's gradient in a padding slot is β · log-ratio "
        "× 0, and 0 × NaN is NaN: a NaN or inf log-prob in padding gives NaN gradients although the loss is "
        "finite.", "outside", _VERL_PADDING),
    ("verl", "padding", r"^kl_cov", ANY): Cause(
        "verl's gradient goes NaN through padding (0 × NaN)",
        Line("verl/trainer/ppo/core_algos.py", "pg_losses1 = -advantages * ratio",
             within="def compute_policy_loss_kl_cov("),
        "token-mean masks the loss with torch.where, but the gradient of the unclipped ratio in a padding slot is "
        "A × ratio = 0 × NaN = NaN: a NaN or inf log-prob in padding gives NaN gradients although the loss is "
        "finite.", "outside", _VERL_PADDING),
    ("verl", "permutation", r"^kl_cov", ANY): Cause(
        "verl KL-Cov breaks covariance ties by position",
        Line("verl/trainer/ppo/core_algos.py",
             "large_cov_idxs = torch.topk(cov_lst_all, k_percent_nums, largest=True).indices"),
        "when covariances tie (every advantage 0, say) topk picks the penalised token by its position, so the loss "
        "depends on the order of the rows; with distinct covariances it does not. Small: one token's penalty moves.",
        "reachable", Line("verl/trainer/ppo/core_algos.py",
                          "scores[i] = (scores[i] - id2mean[index[i]]) / (id2std[index[i]] + epsilon)",
                          "verl's estimator gives every member of a group of equal 0/1 rewards advantage 0 exactly, "
                          "so a micro-batch of such groups has tied covariances"),
        no_draft="ties need covariances exactly equal, e.g. a micro-batch whose advantages are all 0, where the "
        "policy gradient is 0 and only which one token carries the |log π − log μ| penalty depends on the order; "
        "any deterministic tie-break is a design choice, so it is noted in the KL-Cov micro-batch draft rather than "
        "drafted alone."),
    ("verl", "shards", r"^kl_cov", ANY): Cause(
        "verl KL-Cov counts its top-k tokens per micro-batch",
        Line("verl/trainer/ppo/core_algos.py", "k_percent_nums = max(1, int(len(cov_lst_all) * kl_cov_ratio))"),
        "the covariance and its top-k are taken over each micro-batch, at least one token each: with the default "
        "kl_cov_ratio = 2e-4 and micro-batches under 5,000 tokens, one token per micro-batch is penalised, so how "
        "many tokens get the KL penalty depends on ppo_micro_batch_size_per_gpu and the dp size, not on the ratio.",
        "reachable", _VERL_MICRO, draft="verl-kl-cov-microbatch.md"),
    ("verl", "shards", r"^geo_mean", ANY): Cause(
        "verl GMPO takes a plain mean per micro-batch (gradient × k micro-batches)",
        Line("verl/trainer/ppo/core_algos.py", "pg_loss = torch.mean(pg_losses)",
             within="def compute_policy_loss_geo_mean("),
        "GMPO takes the mean over the micro-batch's own sequences and ignores global_batch_info, which agg_loss "
        "divides by so that the summed micro-batch losses are 'invariant to fsdp/megatron parallelism' (its "
        "docstring): with k micro-batches per mini-batch the policy term weighs k times more against the entropy "
        "and KL-loss terms (which agg_loss normalises globally), gradient clipping sees k times the policy "
        "gradient, and with uneven micro-batches a sequence's weight is 1 / its micro-batch's size. Divide by "
        "global_batch_size / dp_size instead of the micro-batch's size.", "reachable", _VERL_MICRO,
        draft="verl-gmpo-microbatch-gradient.md"),
    ("verl", "precision", r"^grpo|^dr_grpo", ANY): Cause(
        "verl exponentiates ratios at the log-probs' dtype",
        Line("verl/trainer/ppo/core_algos.py", "ratio = torch.exp(negative_approx_kl)",
             within="def compute_policy_loss_vanilla("),
        "the PPO ratio is exponentiated at the log-probs' dtype: with bf16 log-probs a token near 1 ± ε is clipped "
        "or not by rounding. verl's default engine hands the loss float32 log-probs (evidence), so this needs a "
        "custom engine or a path without autocast.", "outside", _VERL_AUTOCAST),
    ("verl", "precision", r"bypass_mode", ANY): Cause(
        "verl's rollout correction is computed at the log-probs' dtype",
        Line("verl/trainer/ppo/rollout_corr_helper.py", "log_ratio: torch.Tensor = old_log_prob - rollout_log_prob"),
        "the rollout-correction statistics are computed at the log-probs' dtype: in bf16 sequences near the "
        "rejection threshold are kept or rejected by rounding. verl's default engine hands the loss float32 "
        "log-probs (evidence), and vLLM's rollout log-probs are float32, so this needs another source of "
        "log-probs.", "outside", _VERL_AUTOCAST),
    ("verl", "precision", r"^dppo_kl", ANY): Cause(
        "verl's DPPO binary-KL mask is computed at the log-probs' dtype",
        Line("verl/trainer/ppo/core_algos.py",
             "valid_positive_mask = (binary_kl <= clip_divergence_high) | (prob <= old_prob)",
             within="def compute_policy_loss_dppo_kl("),
        "DPPO-KL keeps or masks a token by comparing its binary KL with the divergence bound, computed at the "
        "log-probs' dtype: in bf16 a token near the bound is kept or masked by rounding (rare: the page's "
        "frequency line). verl's default engine hands the loss float32 log-probs (evidence), so this needs a "
        "custom engine or a path without autocast.", "outside", _VERL_AUTOCAST),
    ("OpenRLHF", "padding", r"gspo", ANY): Cause(
        "OpenRLHF masks padding by multiplying (loss NaN)",
        Line("openrlhf/models/loss.py",
             "ratio = (log_ratio * action_mask).sum(dim=-1) / action_mask.sum(dim=-1).clamp(min=1)"),
        "GSPO's sequence log-ratio is masked by multiplying, so a NaN or inf log-prob in a padding slot makes the "
        "loss NaN.", "outside", _OPENRLHF_MASK),
    ("OpenRLHF", "padding", r"per-sample|^flash_reinforce", ANY): Cause(
        "OpenRLHF masks padding by multiplying (loss NaN)",
        Line("openrlhf/models/loss.py", "seq_loss = (loss * loss_mask).sum(dim=-1) / (token_counts + 1e-8)"),
        _NAN_LOSS, "outside", _OPENRLHF_MASK),
    ("OpenRLHF", "padding", r"token_level_loss", ANY): Cause(
        "OpenRLHF masks padding by multiplying (loss NaN)",
        Line("openrlhf/models/utils.py", "return (tensor * mask).sum(dim=dim) / mask.sum(dim=dim)"),
        _NAN_LOSS, "outside", _OPENRLHF_MASK),
    ("OpenRLHF", "precision", r"^group_norm|^dr_grpo", ANY): Cause(
        "OpenRLHF exponentiates ratios at the log-probs' dtype",
        Line("openrlhf/models/loss.py", "ratio = policy_log_ratio.exp()"), _BF16_RATIO, "outside", _OPENRLHF_FLOAT32),
    ("OpenRLHF", "precision", r"^flash_reinforce seq tv", ANY): Cause(
        "OpenRLHF's sequence gate is computed at the log-probs' dtype",
        Line("openrlhf/models/loss.py", "p = rollout_log_probs.exp().clamp(1e-6, 1 - 1e-6)"),
        "the gate's total variation |μ − π_old| and the IS ratio are computed at the input dtype: in bf16 "
        "trajectories near the threshold are admitted or rejected by rounding.", "outside", _OPENRLHF_FLOAT32),
    ("OpenRLHF", "precision", r"^flash_reinforce", ANY): Cause(
        "OpenRLHF's sequence gate is computed at the log-probs' dtype",
        Line("openrlhf/models/loss.py", "p = rollout_log_probs.exp().clamp(1e-6, 1 - 1e-6)"),
        "in bf16 the clamp's upper bound 1 − 1e-6 rounds to 1.0, so a token with p ≳ 0.998 (which bf16 stores as "
        "1.0), or a zero-padded slot (log-prob 0, p = q = 1), gives (1 − p)/(1 − q) = 0/0 = NaN in the Bernoulli "
        "KL; the sequence mean masks by multiplying, 0 × NaN = NaN, and a NaN statistic fails the gate's "
        "comparison, so the whole trajectory is rejected whatever its drift (here on-policy, KL = 0). In float32 "
        "nothing is filtered; in bf16 with zero padding every trajectory with a padding slot is.", "outside",
        _OPENRLHF_FLOAT32),
    ("OpenRLHF", "single_rollout_groups", r"^group_norm", ANY): Cause(
        "OpenRLHF group_norm with one sample per prompt: std of one reward is NaN",
        Line(*_OPENRLHF_NORM),
        "with n_samples_per_prompt = 1 the unbiased std of one reward is NaN, so every advantage is NaN; "
        "OpenRLHF's launcher refuses n = 1 for group_norm (use flash_reinforce's batch baseline for n = 1).",
        "outside", Line("openrlhf/cli/train_ppo_ray.py", "args.rollout.n_samples_per_prompt > 1",
                        "the launcher asserts n_samples_per_prompt > 1 for group_norm, dr_grpo, rloo")),
    ("OpenRLHF", "constant_rewards", r"^group_norm", "float32"): _OPENRLHF_CONSTANT,
    ("OpenRLHF", "batch_advantages", r"^group_norm", "float32"): replace(
        _OPENRLHF_CONSTANT, meaning="the batch's advantages, as the experience maker forms them, give a group of "
        "equal non-binary float32 rewards a non-zero advantage where the declared estimator gives 0: "
        + _OPENRLHF_CONSTANT.meaning),
    **{("OpenRLHF", invariant, r"^group_norm", "float64"): Cause(
        "OpenRLHF's ε = 1e-9 scales float64 rounding, a dtype its rewards never have", Line(*_OPENRLHF_NORM),
        "in float64 a group's mean (and a reward shifted by a constant) is off by a few ulps (1e-16), and "
        "÷ (std + 1e-9) turns that into 1e-7-sized advantages where the group has no contrast or a tiny one: "
        "float64 rounding, not a behaviour a run shows, since the experience maker holds rewards in float32 "
        "(the same flaw at float32 is the reachable cause above).", "outside", _OPENRLHF_REWARDS, amplifies=1e9)
       for invariant in ("constant_rewards", "advantage_baseline")},
}


def rounding_level(error: float, dtype: str, amplifies: float) -> bool:
    """Whether ``error`` is what rounding of values of order 1 in ``dtype`` (at most :data:`ROUNDING_ULPS` ulps),
    scaled by ``amplifies``, can give."""
    import torch

    return error <= ROUNDING_ULPS * torch.finfo(getattr(torch, dtype)).eps * amplifies


ROUNDING_ULPS = 64
"""How many ulps of rounding a failure at "rounding level" may carry (sums of a few terms, a mean, a std)."""


def classify(cause: Cause, dtype: str, error: float | None) -> str:
    """The class of a cell: the cause's, checked against the cell's dtype and the failure's size. A float64 cell
    at rounding level (for a cause that amplifies rounding) is never reachable: no pipeline feeds float64."""
    if (cause.severity == "reachable" and dtype == "float64" and cause.amplifies is not None and error is not None
            and rounding_level(error, dtype, cause.amplifies)):
        raise ValueError(f"{cause.title!r} is reachable, but a float64 cell at rounding level ({error:.3g}) cannot "
                         f"be: record its float64 cause in CAUSES")
    return cause.severity

def cause_of(framework: str, invariant: str, variant: str, dtype: str = "float64") -> Cause | None:
    """The recorded cause of ``framework``'s row ``variant`` failing ``invariant`` with ``dtype`` inputs (None: not
    recorded). An entry for the cell's dtype is preferred to one for any dtype."""
    found = [(key[3] == dtype, cause) for key, cause in CAUSES.items()
             if key[:2] == (framework, invariant) and key[3] in (dtype, ANY) and re.search(key[2], variant)]
    return max(found, key=lambda pair: pair[0])[1] if found else None


__all__ = ["ANY", "CAUSES", "ROUNDING_ULPS", "SEVERITIES", "Cause", "Line", "cause_of", "classify", "locate",
           "rounding_level"]
