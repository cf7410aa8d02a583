"""The loss registry: every algorithm and ablation as a named combination of the three axes.

``get_loss(name)`` returns a callable with one signature for all of them::

    loss_fn(log_probs, behavior_log_probs, rewards, action_mask, group_ids=None, **options) -> (loss, stats)

where ``options`` are keyword arguments of :func:`flashsim.losses.policy_loss` (``delta``,
``clip_eps``, ``num_sequences``, ``advantages`` ...) and may override the entry's ``aggregation`` or
``correction``. An ablation is a new row of :data:`LOSSES`, never a new copy of a loss.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from torch import Tensor

from flashsim.losses._checks import check_choice
from flashsim.losses.advantages import ADVANTAGES, GROUPED_ADVANTAGES
from flashsim.losses.composed import resolve_advantages
from flashsim.losses.policy_loss import policy_loss


@dataclass(frozen=True)
class LossSpec:
    """One combination of the axes: advantage estimator, correction / trust region, aggregation."""

    advantage: str
    correction: str
    aggregation: str
    description: str

    @property
    def needs_groups(self) -> bool:
        """True when the advantage can only be formed from sibling rollouts (GRPO-style groups)."""
        return self.advantage in GROUPED_ADVANTAGES


LOSSES: dict[str, LossSpec] = {
    "flash_reinforce": LossSpec("batch_centered", "sequence_gate", "sample_mean", "FlashREINFORCE (the paper)"),
    "token_gate": LossSpec("batch_centered", "token_gate", "sample_mean", "token-local gate instead of sequence"),
    "no_gate": LossSpec("batch_centered", "none", "sample_mean", "token IS ratios, no trust region"),
    "token_mean": LossSpec("batch_centered", "sequence_gate", "token_mean", "token-mean aggregation"),
    "positive_only": LossSpec("positive_only", "sequence_gate", "sample_mean", "A = R, no baseline"),
    "ppo_clip": LossSpec("batch_centered", "ppo_clip", "sample_mean", "PPO clip instead of the gate"),
    "tis": LossSpec("batch_centered", "truncated_is", "sample_mean", "truncated IS (cap C) instead of the gate"),
    "ratio_mask": LossSpec("batch_centered", "ratio_mask", "sample_mean", "IcePop-style ratio-band token mask"),
    "rloo": LossSpec("leave_one_out", "none", "seq_mean_token_sum", "RLOO: leave-one-out baseline, unbiased"),
    "grpo": LossSpec("group_normalized", "ppo_clip", "token_mean", "GRPO (Shao et al. 2024)"),
    "dr_grpo": LossSpec("group_centered", "ppo_clip", "seq_mean_token_sum_norm", "Dr. GRPO (Liu et al. 2025)"),
}
"""Every named loss. Keys are the names accepted by :func:`get_loss` and by the simulator's ``--algo``."""


def _registered_loss(
    spec: LossSpec,
    log_probs: Tensor,
    behavior_log_probs: Tensor,
    rewards: Tensor | None,
    action_mask: Tensor,
    group_ids: Tensor | None = None,
    *,
    advantages: Tensor | None = None,
    **options,
) -> tuple[Tensor, dict[str, Tensor]]:
    if spec.needs_groups and group_ids is None and advantages is None:
        raise ValueError(f"{spec.advantage!r} advantages need group_ids [B] (which prompt each trajectory answers)")
    validate = options.get("validate", True)
    advantages = resolve_advantages(
        rewards, advantages, log_probs, ADVANTAGES[spec.advantage], group_ids, validate=validate
    )
    options.setdefault("correction", spec.correction)
    options.setdefault("aggregation", spec.aggregation)
    return policy_loss(log_probs, behavior_log_probs, action_mask, advantages, **options)


def get_loss(name: str) -> Callable[..., tuple[Tensor, dict[str, Tensor]]]:
    """The loss registered under ``name`` (see :data:`LOSSES`); unknown names list the valid ones.

    >>> get_loss("flash_reinforce").spec.correction
    'sequence_gate'
    """
    check_choice("loss", name, LOSSES)
    fn = partial(_registered_loss, LOSSES[name])
    fn.spec = LOSSES[name]  # type: ignore[attr-defined]
    return fn
