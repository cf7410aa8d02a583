"""Losses written the way a trainer writes them — correct ones, and mutants with one real bug each.

Every function here is a from-scratch, op-by-op implementation (none calls ``flashsim.losses``), in
one of the calling conventions of :mod:`flashsim.testing.conventions`. The correct ones must pass
:func:`flashsim.testing.check_loss`; every mutant must fail it. :data:`MUTANTS` names, for each
mutant, the bug class (from DESIGN.md or from a trainer's issue tracker) and the invariants that are
expected to catch it. ``python -m tests.testing.mutants`` prints the mutant-score table of
``docs/verify.md``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

DELTA = 3e-3  # FlashREINFORCE's gate threshold δ
CLIP_EPS = 0.2  # GRPO's clip range ε
STD_EPS = 1e-6  # GRPO's ε added to the group std
KL_CLAMP = 1e-6  # both probabilities of the Bernoulli KL are clamped to [1e-6, 1 − 1e-6]


def bernoulli_kl(p: Tensor, q: Tensor) -> Tensor:
    p, q = p.clamp(KL_CLAMP, 1 - KL_CLAMP), q.clamp(KL_CLAMP, 1 - KL_CLAMP)
    return p * torch.log(p / q) + (1 - p) * torch.log((1 - p) / (1 - q))


def _flash(log_probs, behavior_log_probs, rewards, action_mask, advantages, num_sequences, bug=None):
    """FlashREINFORCE, the paper's formula, with at most one ``bug`` switched on."""
    dtype = log_probs.dtype if bug == "no_promotion" else torch.promote_types(log_probs.dtype, torch.float32)
    current = log_probs.to(dtype)
    behavior = behavior_log_probs.to(dtype) if bug == "behavior_not_detached" else behavior_log_probs.detach().to(dtype)
    if bug == "mask_by_multiply":  # NaN · 0 = NaN: junk in padding leaks
        current, behavior = current * action_mask, behavior * action_mask
    else:
        current, behavior = torch.where(action_mask, current, 0.0), torch.where(action_mask, behavior, 0.0)
    if advantages is None:
        rewards = rewards.detach().to(dtype)
        if bug == "not_centred":
            advantages = rewards
        elif bug == "leave_one_out":  # baseline excludes the sample itself
            advantages = rewards - (rewards.sum() - rewards) / (rewards.shape[0] - 1)
        else:
            advantages = rewards - rewards.mean()
    advantages = advantages.detach().to(dtype)
    log_ratio = current - behavior
    if bug == "ratio_not_detached":
        ratio = torch.exp(log_ratio)
    elif bug == "behavior_not_detached":  # π detached, μ not: the gradient flows into the behaviour log-probs
        ratio = torch.exp(current.detach() - behavior)
    else:
        ratio = torch.exp(log_ratio.detach())
    mu, pi = behavior.detach().exp(), current.detach().exp()
    token_kl = bernoulli_kl(pi, mu) if bug == "kl_swapped" else bernoulli_kl(mu, pi)
    token_kl = torch.where(action_mask, token_kl, 0.0)
    lengths = action_mask.sum(dim=1)
    sequence_kl = token_kl.sum(dim=1) if bug == "summed_kl" else token_kl.sum(dim=1) / lengths
    if bug == "token_gate":
        kept = action_mask & (token_kl <= DELTA)
    else:
        kept = action_mask & (sequence_kl <= DELTA)[:, None]
    terms = torch.where(kept, ratio * current, 0.0)
    if bug == "token_mean":
        return -(advantages[:, None] * terms).sum() / lengths.sum()
    batch = rewards.shape[0] if num_sequences is None or bug == "per_shard_denominator" else num_sequences
    if bug == "rejected_dropped":  # the outer mean over admitted trajectories only
        batch = (sequence_kl <= DELTA).sum().clamp(min=1)
    return -(advantages * terms.sum(dim=1) / lengths).sum() / batch


def _group_normalized(rewards: Tensor, group_ids: Tensor, bug=None) -> Tensor:
    if bug == "batch_baseline":  # one baseline for the whole batch instead of one per group
        return (rewards - rewards.mean()) / (rewards.std() + STD_EPS) if rewards.numel() > 1 else 0 * rewards
    advantages = torch.zeros_like(rewards)
    for group in group_ids.unique():
        members = group_ids == group
        if int(members.sum()) == 1:
            continue  # a group of one is its own baseline: advantage 0
        values = rewards[members]
        std = values.std() if bug == "std_no_eps" else values.std() + STD_EPS
        advantages[members] = (values - values.mean()) / std
    return advantages


def _grpo(log_probs, old_log_probs, rewards, action_mask, group_ids, advantages, num_tokens, bug=None):
    """GRPO: group-normalised advantages, PPO clip, token-mean; at most one ``bug``."""
    dtype = torch.promote_types(log_probs.dtype, torch.float32)
    current = torch.where(action_mask, log_probs.to(dtype), 0.0)
    old = torch.where(action_mask, old_log_probs.detach().to(dtype), 0.0)
    if advantages is None:
        advantages = _group_normalized(rewards.detach().to(dtype), group_ids, bug)
    advantages = advantages.detach().to(dtype)[:, None]
    ratio = torch.exp(current - old)
    surrogate = ratio * advantages
    if bug != "no_clip":
        surrogate = torch.minimum(surrogate, ratio.clamp(1 - CLIP_EPS, 1 + CLIP_EPS) * advantages)
    tokens = action_mask.sum() if num_tokens is None else num_tokens
    return -torch.where(action_mask, surrogate, 0.0).sum() / tokens


def flash_reinforce(log_probs, behavior_log_probs, rewards, action_mask, *, advantages=None, num_sequences=None):
    """A correct FlashREINFORCE loss in the flashsim convention, written from the paper's formula."""
    return _flash(log_probs, behavior_log_probs, rewards, action_mask, advantages, num_sequences)


def grpo(log_probs, old_log_probs, rewards, action_mask, group_ids, *, advantages=None, num_tokens=None):
    """A correct GRPO loss in the flashsim convention."""
    return _grpo(log_probs, old_log_probs, rewards, action_mask, group_ids, advantages, num_tokens)


def _flash_mutant(bug: str, name: str):
    def loss(log_probs, behavior_log_probs, rewards, action_mask, *, advantages=None, num_sequences=None):
        return _flash(log_probs, behavior_log_probs, rewards, action_mask, advantages, num_sequences, bug)

    loss.__name__ = loss.__qualname__ = name
    return loss


def _grpo_mutant(bug: str, name: str):
    def loss(log_probs, old_log_probs, rewards, action_mask, group_ids, *, advantages=None, num_tokens=None):
        return _grpo(log_probs, old_log_probs, rewards, action_mask, group_ids, advantages, num_tokens, bug)

    loss.__name__ = loss.__qualname__ = name
    return loss


token_mean = _flash_mutant("token_mean", "token_mean")
leave_one_out = _flash_mutant("leave_one_out", "leave_one_out")
per_shard_denominator = _flash_mutant("per_shard_denominator", "per_shard_denominator")
kl_swapped = _flash_mutant("kl_swapped", "kl_swapped")
token_gate = _flash_mutant("token_gate", "token_gate")
rejected_dropped = _flash_mutant("rejected_dropped", "rejected_dropped")
ratio_not_detached = _flash_mutant("ratio_not_detached", "ratio_not_detached")
summed_kl = _flash_mutant("summed_kl", "summed_kl")
not_centred = _flash_mutant("not_centred", "not_centred")
mask_by_multiply = _flash_mutant("mask_by_multiply", "mask_by_multiply")
no_promotion = _flash_mutant("no_promotion", "no_promotion")
behavior_not_detached = _flash_mutant("behavior_not_detached", "behavior_not_detached")
grpo_std_no_eps = _grpo_mutant("std_no_eps", "grpo_std_no_eps")
grpo_no_clip = _grpo_mutant("no_clip", "grpo_no_clip")
grpo_batch_baseline = _grpo_mutant("batch_baseline", "grpo_batch_baseline")


def verl_grpo_policy_loss(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean"):
    """A correct verl-style PPO/GRPO policy loss: ``(pg_loss, pg_clipfrac)``; advantages are ``[B, T]``."""
    log_prob, old_log_prob, advantages = _promoted(log_prob, old_log_prob.detach(), advantages)
    ratio = torch.exp(torch.where(response_mask, log_prob - old_log_prob, 0.0))
    clipped = ratio.clamp(1 - CLIP_EPS, 1 + CLIP_EPS)
    losses = torch.where(response_mask, -torch.minimum(ratio * advantages, clipped * advantages), 0.0)
    clip_fraction = ((ratio * advantages > clipped * advantages) & response_mask).sum() / response_mask.sum()
    return _verl_aggregate(losses, response_mask, loss_agg_mode), clip_fraction.detach()


def verl_grpo_no_clip(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean"):
    """Mutant: the stale ratio is not clipped (tinker-cookbook #822 diverged with this)."""
    log_prob, old_log_prob, advantages = _promoted(log_prob, old_log_prob.detach(), advantages)
    ratio = torch.exp(torch.where(response_mask, log_prob - old_log_prob, 0.0))
    return _verl_aggregate(torch.where(response_mask, -ratio * advantages, 0.0), response_mask, loss_agg_mode)


def _promoted(*tensors: Tensor) -> tuple[Tensor, ...]:
    """bf16/fp16 → float32 before any exp; float64 stays float64."""
    return tuple(t.to(torch.promote_types(t.dtype, torch.float32)) for t in tensors)


def _verl_aggregate(losses: Tensor, mask: Tensor, mode: str) -> Tensor:
    if mode == "token-mean":
        return losses.sum() / mask.sum()
    if mode == "seq-mean-token-mean":
        return (losses.sum(dim=1) / mask.sum(dim=1)).mean()
    raise ValueError(f"unsupported loss_agg_mode {mode!r}")


def trl_flash_per_token(log_probs, old_log_probs, advantages, mask):
    """A correct TRL-style FlashREINFORCE per-token loss ``[B, T]`` (the caller aggregates)."""
    return _trl_flash(log_probs, old_log_probs, advantages, mask, summed=False)


def trl_flash_summed_log_ratio(log_probs, old_log_probs, advantages, mask):
    """Mutant: the per-sequence statistic is summed over tokens, not averaged (TRL #5814's bug class)."""
    return _trl_flash(log_probs, old_log_probs, advantages, mask, summed=True)


def _trl_flash(log_probs, old_log_probs, advantages, mask, summed):
    log_probs, old_log_probs, advantages = _promoted(log_probs, old_log_probs, advantages)
    log_probs = torch.where(mask, log_probs, 0.0)
    old = torch.where(mask, old_log_probs.detach(), 0.0)
    ratio = torch.exp(log_probs.detach() - old)
    kl = torch.where(mask, bernoulli_kl(old.exp(), log_probs.detach().exp()), 0.0).sum(dim=1)
    gate = kl <= DELTA if summed else kl / mask.sum(dim=1) <= DELTA
    return torch.where(mask & gate[:, None], -ratio * log_probs * advantages[:, None], 0.0)


@dataclass(frozen=True)
class Mutant:
    """A buggy loss, its calling convention, the bug class and the invariants expected to flag it."""

    name: str
    algorithm: str
    convention: str
    bug: str
    caught_by: tuple[str, ...]


MUTANTS = (
    Mutant("token_mean", "flash_reinforce", "flashsim", "token-mean where sample-mean is meant",
           ("on_policy_gradient", "length_normalisation")),
    Mutant("leave_one_out", "flash_reinforce", "flashsim", "baseline excludes the sample", ("on_policy_gradient",)),
    Mutant("per_shard_denominator", "flash_reinforce", "flashsim",
           "per-shard instead of global denominator (verl #5625, #5798)", ("shards",)),
    Mutant("kl_swapped", "flash_reinforce", "flashsim", "KL(π‖μ) instead of KL(μ‖π)", ("off_policy_gradient",)),
    Mutant("token_gate", "flash_reinforce", "flashsim", "gate on token KL instead of the sequence mean",
           ("off_policy_gradient",)),
    Mutant("rejected_dropped", "flash_reinforce", "flashsim", "rejected rows dropped from B", ("rejected_rows",)),
    Mutant("ratio_not_detached", "flash_reinforce", "flashsim", "ratio ρ not detached", ("on_policy_gradient",)),
    Mutant("summed_kl", "flash_reinforce", "flashsim", "sequence KL summed, not averaged, before the gate",
           ("off_policy_gradient",)),
    Mutant("not_centred", "flash_reinforce", "flashsim", "advantage not centred (A = R)",
           ("on_policy_gradient", "constant_rewards", "advantage_baseline")),
    Mutant("mask_by_multiply", "flash_reinforce", "flashsim", "masking by multiplying: NaN padding leaks",
           ("padding",)),
    Mutant("no_promotion", "flash_reinforce", "flashsim", "bf16 exponentiated without promotion", ("precision",)),
    Mutant("behavior_not_detached", "flash_reinforce", "flashsim", "gradient reaches the behaviour log-probs",
           ("no_gradient_to_behavior",)),
    Mutant("grpo_std_no_eps", "grpo", "flashsim", "group std without ε: constant groups give 0/0",
           ("constant_rewards",)),
    Mutant("grpo_no_clip", "grpo", "flashsim", "stale ratio not clipped (tinker-cookbook #822)",
           ("off_policy_gradient",)),
    Mutant("grpo_batch_baseline", "grpo", "flashsim", "batch baseline instead of the group's",
           ("on_policy_gradient", "single_rollout_groups")),
    Mutant("verl_grpo_no_clip", "grpo", "verl", "stale ratio not clipped, verl-style", ("off_policy_gradient",)),
    Mutant("trl_flash_summed_log_ratio", "flash_reinforce", "trl",
           "summed instead of averaged sequence statistic (TRL #5814)", ("off_policy_gradient",)),
)

CORRECT = (
    ("flash_reinforce", "flash_reinforce", "flashsim"),
    ("grpo", "grpo", "flashsim"),
    ("verl_grpo_policy_loss", "grpo", "verl"),
    ("trl_flash_per_token", "flash_reinforce", "trl"),
)
"""(function name, algorithm, convention) of the correct trainer-style losses."""


def mutant_score_table(max_examples: int = 60) -> str:
    """Markdown: every mutant, its bug, and the invariants ``check_loss`` flagged (the docs table)."""
    from flashsim.testing import check_loss

    lines = ["| mutant | convention | bug | invariants that fail |", "|---|---|---|---|"]
    flagged = 0
    for mutant in MUTANTS:
        report = check_loss(globals()[mutant.name], algorithm=mutant.algorithm, convention=mutant.convention,
                            max_examples=max_examples)
        flagged += not report.passed
        failing = ", ".join(r.name for r in report.failures) or "**none (missed)**"
        lines.append(f"| `{mutant.name}` | {mutant.convention} | {mutant.bug} | {failing} |")
    lines.append(f"\nMutant score: {flagged}/{len(MUTANTS)} flagged.")
    return "\n".join(lines)


if __name__ == "__main__":
    print(mutant_score_table())
