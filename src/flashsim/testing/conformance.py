"""``flashsim conformance``: every adapter's loss under :func:`~flashsim.testing.check_loss`, written as a page.

The rows are flashsim's own registry losses first, then every variant of every framework adapter
(:mod:`flashsim.testing.adapters`); a framework that is not installed is listed as not run. Each row is
judged by what it declares (:mod:`flashsim.testing.declared`), so a failure is a property of the code, not
of a convention it never claimed. For every failure the page gives the shrunk counterexample, the line of
the framework that causes it (:data:`CAUSES`, located in the installed source by the code it quotes,
so the line number is the installed version's) and one sentence on what it means for a user.
"""

from __future__ import annotations

import datetime
import importlib
import importlib.util
import pathlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from flashsim.losses import LOSSES
from flashsim.testing.adapters import FRAMEWORKS, FrameworkMissing, installed_version, variants
from flashsim.testing.check import check_loss
from flashsim.testing.invariants import INVARIANTS
from flashsim.testing.report import LossReport


@dataclass(frozen=True)
class RegistryRow:
    """A :data:`flashsim.losses.LOSSES` row with what it declares (the registry's own rows open the table)."""

    name: str
    algorithm: str
    aggregation: str
    estimator: str

    @property
    def report_name(self) -> str:
        return f"flashsim: {self.name}"

    def __call__(self, log_probs, behavior_log_probs, rewards, action_mask, group_ids=None, **options):
        return LOSSES[self.name](log_probs, behavior_log_probs, rewards, action_mask, group_ids, **options)


REGISTRY_ROWS = (
    RegistryRow("flash_reinforce", "flash_reinforce", "sample_mean", "batch_mean"),
    RegistryRow("grpo", "grpo", "token_mean", "group_mean_std"),
    RegistryRow("dr_grpo", "grpo", "seq_mean_token_sum_norm", "group_mean"),
    RegistryRow("ppo_clip", "grpo", "sample_mean", "batch_mean"),
)


@dataclass(frozen=True)
class Cause:
    """Why a framework's row fails an invariant: the file (relative to site-packages), the code that does it
    (located in the installed file for its line number) and what it means for a user."""

    file: str
    code: str
    meaning: str
    within: str = ""
    """A line before ``code`` (its function's ``def``) where the same code appears more than once."""


# What a user reads where several rows share one flaw: one wording per flaw.
_NAN_LOSS = "padding is masked by multiplying: a NaN or inf log-prob in a padding slot makes the loss NaN."
_NAN_GRADIENT = (
    "token-mean masks the loss with torch.where, but a padding slot's gradient is its (detached) ratio × A × 0, "
    "and 0 × NaN is NaN: a NaN or inf log-prob in padding gives NaN gradients although the loss is finite.")

CAUSES: dict[tuple[str, str, str], Cause] = {
    # (framework, invariant, variant regex) -> cause
    ("TRL", "padding", r"^gspo$"): Cause(
        "trl/trainer/grpo_trainer.py",
        "log_importance_weights = (log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)",
        "the sequence log-ratio is masked by multiplying, so a NaN or inf log-prob in a padding slot makes the loss "
        "NaN. TRL's own fused LM head writes 0 in padding (tests/testing/test_adapters.py checks it), so this "
        "bites only a subclass or another source of log-probs."),
    ("TRL", "padding", r"^(grpo|sapo|grpo off_policy_mask)$"): Cause(
        "trl/trainer/grpo_trainer.py", "loss = ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()",
        "padding is masked by multiplying, so a NaN or inf log-prob in a padding slot (0 · NaN) makes the loss NaN. "
        "TRL's own fused LM head writes 0 in padding (tests/testing/test_adapters.py checks it), so this bites only "
        "a subclass or another source of log-probs; mask with torch.where there."),
    ("TRL", "padding", r"^bnpo$"): Cause(
        "trl/trainer/grpo_trainer.py", "loss = (per_token_loss * mask).sum() / mask.sum().clamp(min=1.0)",
        _NAN_LOSS),
    ("TRL", "padding", r"^dr_grpo$"): Cause(
        "trl/trainer/grpo_trainer.py",
        "loss = (per_token_loss * mask).sum() / (per_token_loss.size(0) * self.max_completion_length)",
        _NAN_LOSS),
    ("TRL", "padding", r"^(dapo|cispo|vespo)$"): Cause(
        "trl/trainer/grpo_trainer.py", "loss = (per_token_loss * mask).sum() / normalizer",
        _NAN_LOSS),
    ("TRL", "padding", r"^luspo$"): Cause(
        "trl/trainer/grpo_trainer.py", "loss = (per_token_loss * mask).sum(-1).mean()",
        _NAN_LOSS),
    ("TRL", "precision", r"^vespo$"): Cause(
        "trl/trainer/grpo_trainer.py", "w_seq = torch.exp(log_w_seq)",
        "VESPO's sequence weight is exponentiated at the log-probs' dtype: with bf16 log-probs φ(w) is off by "
        "more than bf16's own rounding. TRL's own fused LM head hands the loss float32 log-probs whatever the "
        "model's dtype (tests/testing/test_adapters.py checks it), so this bites only a subclass that hands it bf16."),
    ("TRL", "precision", r"^(grpo|bnpo|dr_grpo|dapo|luspo|sapo|cispo|gspo|grpo off_policy_mask)$"): Cause(
        "trl/trainer/grpo_trainer.py", "coef_1 = torch.exp(log_importance_weights)",
        "the ratio is exponentiated at the log-probs' dtype: with bf16 log-probs it is off by up to a few per cent "
        "and tokens near 1 ± ε are clipped or not by rounding. TRL's own fused LM head hands the loss float32 "
        "log-probs whatever the model's dtype (tests/testing/test_adapters.py checks it), so this bites only a "
        "subclass that hands it bf16."),
    ("TRL", "shards", r"^bnpo$"): Cause(
        "trl/trainer/grpo_trainer.py", "loss = (per_token_loss * mask).sum() / mask.sum().clamp(min=1.0)",
        "bnpo divides by the microbatch's own token count, then by the accumulation steps: with gradient "
        "accumulation, tokens in short microbatches weigh more; use dapo (global token count) for a token mean."),
    ("verl", "single_rollout_groups", r""): Cause(
        "verl/trainer/ppo/core_algos.py", "id2mean[idx] = torch.tensor(0.0)",
        "a group of one trajectory gets mean 0 and std 1, so GRPO with one rollout per prompt (n = 1) silently "
        "trains REINFORCE without a baseline (A = R); use n ≥ 2 or a batch baseline."),
    ("verl", "constant_rewards", r""): Cause(
        "verl/trainer/ppo/core_algos.py", "scores[i] = (scores[i] - id2mean[index[i]]) / (id2std[index[i]] + epsilon)",
        "a group of equal non-binary rewards divides the rounding noise of its mean by a std that is 0 + ε (1e-6): "
        "the advantages are that noise × 1e6 instead of 0 (1e-10 here in float64, seen only where token-sum does not "
        "divide it by the token count; eight float32 rewards of 0.7 get advantages of ±0.056); centre exactly or "
        "skip groups whose rewards are all equal."),
    ("verl", "padding", r"^cispo"): Cause(
        "verl/trainer/ppo/core_algos.py", "pg_losses = -clipped_ratio_sg * advantages * log_prob",
        _NAN_GRADIENT),
    ("verl", "padding", r"^dppo_tv"): Cause(
        "verl/trainer/ppo/core_algos.py", "pg_losses = -advantages * truncated_ratio * log_prob * valid_mask",
        _NAN_GRADIENT,
        within="def compute_policy_loss_dppo_tv("),
    ("verl", "padding", r"^dppo_kl"): Cause(
        "verl/trainer/ppo/core_algos.py", "pg_losses = -advantages * truncated_ratio * log_prob * valid_mask",
        _NAN_GRADIENT,
        within="def compute_policy_loss_dppo_kl("),
    ("verl", "padding", r"^gspo"): Cause(
        "verl/trainer/ppo/core_algos.py",
        "negative_approx_kl_seq = torch.sum(negative_approx_kl * response_mask, dim=-1) / seq_lengths",
        "GSPO's sequence log-ratio is masked by multiplying, so a NaN or inf log-prob in a padding slot makes the "
        "loss NaN."),
    ("verl", "padding", r"seq-mean-token-sum|loss_scale_factor"): Cause(
        "verl/trainer/ppo/core_algos.py", "seq_losses = torch.sum(loss_mat * loss_mask, dim=-1)  # token-sum",
        "the seq-mean modes mask by multiplying (token-mean uses masked_sum's torch.where), so a NaN or inf "
        "log-prob in a padding slot makes the loss NaN."),
    ("verl", "padding", r"seq-mean-token-mean|bypass_mode"): Cause(
        "verl/trainer/ppo/core_algos.py", "seq_losses = torch.sum(loss_mat * loss_mask, dim=-1) / (seq_mask + 1e-8)",
        "the seq-mean modes mask by multiplying (token-mean uses masked_sum's torch.where), so a NaN or inf "
        "log-prob in a padding slot makes the loss NaN."),
    ("verl", "shards", r"seq-mean-token-sum-norm$"): Cause(
        "verl/trainer/ppo/core_algos.py", "horizon = loss_mask.shape[-1]",
        "without loss_scale_factor the normaliser is the microbatch's padded width, so microbatches padded to "
        "their longest response weigh differently; set actor.loss_scale_factor to the response budget."),
    ("verl", "padding", r"^geo_mean"): Cause(
        "verl/trainer/ppo/core_algos.py",
        "ratio = torch.exp((negative_approx_kl_min * response_mask).sum(dim=-1) / (response_mask_sum + 1e-8))",
        "GMPO's geometric mean masks the log-ratios by multiplying, so a NaN or inf log-prob in a padding slot "
        "makes the loss NaN."),
    ("verl", "padding", r"^dro"): Cause(
        "verl/trainer/ppo/core_algos.py",
        "pg_losses = -(log_prob * advantages - 0.5 * beta * log_ratio.square())",
        "token-mean masks the loss with torch.where, but the penalty's gradient in a padding slot is "
        "β · log-ratio × 0, and 0 × NaN is NaN: a NaN or inf log-prob in padding gives NaN gradients although the "
        "loss is finite."),
    ("verl", "padding", r"^kl_cov"): Cause(
        "verl/trainer/ppo/core_algos.py", "pg_losses1 = -advantages * ratio",
        "token-mean masks the loss with torch.where, but the gradient of the unclipped ratio in a padding slot is "
        "A × ratio = 0 × NaN = NaN: a NaN or inf log-prob in padding gives NaN gradients although the loss is "
        "finite.", within="def compute_policy_loss_kl_cov("),
    ("verl", "permutation", r"^kl_cov"): Cause(
        "verl/trainer/ppo/core_algos.py",
        "large_cov_idxs = torch.topk(cov_lst_all, k_percent_nums, largest=True).indices",
        "when covariances tie (every advantage 0, say) topk picks the penalised token by its position, so the loss "
        "depends on the order of the rows; with distinct covariances it does not. Negligible in practice."),
    ("verl", "shards", r"^kl_cov"): Cause(
        "verl/trainer/ppo/core_algos.py", "k_percent_nums = max(1, int(len(cov_lst_all) * kl_cov_ratio))",
        "the covariance and its top-k are taken over each micro-batch, at least one token each: with the default "
        "kl_cov_ratio = 2e-4 and micro-batches under 5,000 tokens, one token per micro-batch is penalised, so how "
        "many tokens get the KL penalty depends on ppo_micro_batch_size_per_gpu and the dp size, not on the ratio."),
    ("verl", "shards", r"^geo_mean"): Cause(
        "verl/trainer/ppo/core_algos.py", "pg_loss = torch.mean(pg_losses)",
        "GMPO takes the mean over the micro-batch's own sequences and ignores global_batch_info, which the other "
        "losses divide by because the engine sums micro-batch losses (verl/workers/utils/losses.py): with k "
        "micro-batches per mini-batch its gradient is k times too large, and sequences in smaller micro-batches "
        "weigh more. Divide by global_batch_size / dp_size instead of the micro-batch's size.",
        within="def compute_policy_loss_geo_mean("),
    ("verl", "precision", r"^grpo|^dr_grpo"): Cause(
        "verl/trainer/ppo/core_algos.py", "ratio = torch.exp(negative_approx_kl)",
        "the PPO ratio is exponentiated at the log-probs' dtype: with bf16 log-probs tokens near 1 ± ε are "
        "clipped or not by rounding; keep log-probs in float32.", within="def compute_policy_loss_vanilla("),
    ("verl", "precision", r"bypass_mode"): Cause(
        "verl/trainer/ppo/rollout_corr_helper.py", "log_ratio: torch.Tensor = old_log_prob - rollout_log_prob",
        "the rollout-correction statistics are computed at the log-probs' dtype: in bf16 sequences near the "
        "rejection threshold are kept or rejected by rounding; keep log-probs in float32."),
    ("OpenRLHF", "padding", r"gspo"): Cause(
        "openrlhf/models/loss.py",
        "ratio = (log_ratio * action_mask).sum(dim=-1) / action_mask.sum(dim=-1).clamp(min=1)",
        "GSPO's sequence log-ratio is masked by multiplying, so a NaN or inf log-prob in a padding slot makes the "
        "loss NaN."),
    ("OpenRLHF", "padding", r"per-sample|^flash_reinforce"): Cause(
        "openrlhf/models/loss.py", "seq_loss = (loss * loss_mask).sum(dim=-1) / (token_counts + 1e-8)",
        _NAN_LOSS),
    ("OpenRLHF", "padding", r"token_level_loss"): Cause(
        "openrlhf/models/utils.py", "return (tensor * mask).sum(dim=dim) / mask.sum(dim=dim)",
        _NAN_LOSS),
    ("OpenRLHF", "precision", r"^group_norm|^dr_grpo"): Cause(
        "openrlhf/models/loss.py", "ratio = policy_log_ratio.exp()",
        "the PPO ratio is exponentiated at the log-probs' dtype: with bf16 log-probs tokens near 1 ± ε are "
        "clipped or not by rounding. OpenRLHF's own actor casts its logits to float32 before the log-probs "
        "(openrlhf/models/actor.py), so this bites only another source of log-probs; keep them in float32."),
    ("OpenRLHF", "precision", r"^flash_reinforce seq tv"): Cause(
        "openrlhf/models/loss.py", "p = rollout_log_probs.exp().clamp(1e-6, 1 - 1e-6)",
        "the gate's total variation |μ − π_old| and the IS ratio are computed at the input dtype: in bf16 "
        "trajectories near the threshold are admitted or rejected by rounding. OpenRLHF's own actor casts its "
        "logits to float32 before the log-probs (openrlhf/models/actor.py) and vLLM returns float32 rollout "
        "log-probs, so this bites only another source of log-probs; promote them to float32 before the gate."),
    ("OpenRLHF", "precision", r"^flash_reinforce"): Cause(
        "openrlhf/models/loss.py", "p = rollout_log_probs.exp().clamp(1e-6, 1 - 1e-6)",
        "the gate's Bernoulli KL and the IS ratio are computed at the input dtype: in bf16 trajectories near δ "
        "are admitted or rejected by rounding. OpenRLHF's own actor casts its logits to float32 before the "
        "log-probs (openrlhf/models/actor.py) and vLLM returns float32 rollout log-probs, so this bites only "
        "another source of log-probs; promote them to float32 before the gate."),
    ("OpenRLHF", "single_rollout_groups", r"^group_norm"): Cause(
        "openrlhf/trainer/ppo_utils/experience_maker.py",
        "rewards = (rewards - rewards.mean(-1, keepdim=True)) / (rewards.std(-1, keepdim=True) + 1e-9)",
        "with n_samples_per_prompt = 1 the unbiased std of one reward is NaN, so every advantage is NaN; "
        "group_norm needs n ≥ 2 (use flash_reinforce's batch baseline for n = 1)."),
    ("OpenRLHF", "constant_rewards", r"^group_norm"): Cause(
        "openrlhf/trainer/ppo_utils/experience_maker.py",
        "rewards = (rewards - rewards.mean(-1, keepdim=True)) / (rewards.std(-1, keepdim=True) + 1e-9)",
        "with ε = 1e-9 a group of equal non-binary rewards divides the rounding noise of its mean by a std that "
        "is 0: the advantages are that noise × 1e9 instead of 0 (1e-7 here in float64; in float32, OpenRLHF's "
        "reward dtype, eight rewards of 0.7 get advantages of ±60); use ε ≥ 1e-6 or centre exactly."),
}


def cause_of(framework: str, invariant: str, variant: str) -> Cause | None:
    for (name, check, pattern), cause in CAUSES.items():
        if name == framework and check == invariant and re.search(pattern, variant):
            return cause
    return None


def locate(cause: Cause) -> str:
    """``file:line`` of ``cause.code`` in the installed framework (``file`` alone where it is not found)."""
    top = cause.file.split("/")[0]
    spec = importlib.util.find_spec(top)
    if spec is None or not spec.submodule_search_locations:
        return cause.file
    path = pathlib.Path(next(iter(spec.submodule_search_locations))).parent / cause.file
    try:
        inside = not cause.within
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            inside = inside or cause.within in line
            if inside and cause.code in line:
                return f"{cause.file}:{number}"
    except OSError:
        pass
    return cause.file


@dataclass(frozen=True)
class Row:
    framework: str
    version: str | None
    variant: str
    declared: str
    report: LossReport | None
    note: str = ""


def _error(message: str) -> str:
    found = re.search(r"= ([0-9.e+-]+) >", message)
    if found:
        return found.group(1)
    return "non-finite" if "non-finite" in message else "error"


def run_rows(frameworks: Sequence[str] = tuple(FRAMEWORKS), *, max_examples: int = 40,
             progress: Callable[[str], None] = lambda line: None) -> list[Row]:
    """Every registry row and every variant of every framework in ``frameworks`` (uninstalled ones: not run)."""
    rows = []
    for row in REGISTRY_ROWS:
        report = check_loss(row, max_examples=max_examples)
        rows.append(Row("flashsim", installed_version("flashsim"), row.name, report.declared, report))
        progress(f"flashsim {row.name}: {'holds' if report.passed else 'FAILS'}")
    for framework in frameworks:
        distribution = FRAMEWORKS[framework]
        version = installed_version(distribution)
        for adapter in variants(framework):
            if version is None:
                rows.append(Row(adapter.framework, None, adapter.variant, "", None,
                                f"not run: {distribution} is not installed"))
                continue
            try:
                report = check_loss(adapter, max_examples=max_examples)
            except FrameworkMissing as error:
                rows.append(Row(adapter.framework, version, adapter.variant, "", None, f"not run: {error}"))
                continue
            rows.append(Row(adapter.framework, version, adapter.variant, report.declared, report))
            progress(f"{adapter.framework} {adapter.variant}: {len(report.failures)} failure(s)")
    return rows


def _cell(result) -> str:
    return {"holds": "✓", "n/a": "–", "unsupported": "unsupported"}.get(
        result.status, f"**FAILS** ({_error(result.message)})")


def render(rows: Sequence[Row], *, max_examples: int, command: str) -> str:
    """The markdown page: table, then one section per failure."""
    names = [invariant.name for invariant in INVARIANTS]
    lines = [
        "# Conformance: the field's GRPO and FlashREINFORCE losses under `check-loss`",
        "",
        f"Generated by `{command}` on {datetime.date.today().isoformat()} ({max_examples} hypothesis examples "
        "per invariant, derandomised). Do not edit by hand: regenerate it. How each framework is installed and "
        "called, and which invariants test the adapter rather than the framework: [Verify anyone's loss]"
        "(verify.md#the-frameworks-adapters).",
        "",
        "Each row is judged against the aggregation and advantage estimator it *declares* (the framework's own "
        "documentation of that variant), so no failure below is a difference of convention. ✓ holds, – does not "
        "apply to what the row declares, **FAILS** (max |got − expected|, or non-finite).",
        "",
        "| framework | version | variant | declared | " + " | ".join(f"`{n}`" for n in names) + " |",
        "|---|---|---|---|" + "---|" * len(names),
    ]
    for row in rows:
        head = f"| {row.framework} | {row.version or '–'} | {row.variant} |"
        if row.report is None:
            lines.append(f"{head} {row.note} |" + " |" * len(names))
            continue
        cells = [_cell(row.report[name]) for name in names]
        lines.append(f"{head} {row.declared.replace('aggregation ', '').replace('estimator ', '')} | "
                     + " | ".join(cells) + " |")
    failures = [(row, result) for row in rows if row.report for result in row.report.failures]
    lines += ["", f"## Failures ({len(failures)})", ""]
    if not failures:
        lines.append("None.")
    for row, result in failures:
        cause = cause_of(row.framework, result.name, row.variant)
        lines += [
            f"### {row.framework} {row.version} · {row.variant} · `{result.name}`", "",
            f"**Cause:** `{locate(cause)}`" if cause else "**Cause:** not located yet.", "",
            f"**For users:** {cause.meaning}" if cause else "", "",
            "```text", result.message, "minimal counterexample:", result.counterexample, "```", "",
        ]
    lines += ["## Variants without a row", ""]
    for framework in FRAMEWORKS:
        module = importlib.import_module(f"flashsim.testing.adapters.{framework}")
        lines += [f"- {variants(framework)[0].framework} {names}: {why}."
                  for names, why in getattr(module, "NOT_IN_TABLE", {}).items()]
    lines.append("")
    not_run = [row for row in rows if row.report is None]
    if not_run:
        lines += ["## Not run", ""] + [f"- {row.framework} {row.variant}: {row.note}" for row in not_run] + [""]
    return "\n".join(lines).rstrip() + "\n"


def uncaused(rows: Sequence[Row]) -> list[str]:
    """Failures with no :data:`CAUSES` entry (a page with any is incomplete)."""
    return [f"{row.framework} {row.variant} {result.name}" for row in rows if row.report
            for result in row.report.failures if cause_of(row.framework, result.name, row.variant) is None]


__all__ = ["CAUSES", "REGISTRY_ROWS", "Cause", "RegistryRow", "Row", "cause_of", "locate", "render", "run_rows",
           "uncaused"]
