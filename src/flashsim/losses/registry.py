"""The loss registry: every algorithm and ablation as a named combination of the three axes.

``get_loss(name)`` returns a :class:`RegisteredLoss`, a callable with one signature for all of them::

    loss_fn(log_probs, behavior_log_probs, rewards, action_mask, group_ids=None, **options) -> (loss, stats)

where ``options`` are keyword arguments of :func:`flashsim.losses.policy_loss` (``delta``,
``clip_eps``, ``num_sequences``, ``advantages``, ``entropies`` ...) and may override the entry's
``aggregation``, ``correction`` or ``negative_token_fraction``. An ablation is a new row of
:data:`LOSSES`, never a new copy of a loss.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from torch import Tensor

from flashsim.losses._checks import check_choice
from flashsim.losses.advantages import ADVANTAGES, GROUPED_ADVANTAGES
from flashsim.losses.composed import resolve_advantages
from flashsim.losses.policy_loss import policy_loss


@dataclass(frozen=True)
class LossSpec:
    """One combination of the axes: advantage estimator, correction / trust region, aggregation.

    ``negative_token_fraction`` below 1 turns on the negative-token entropy filter, so the loss then
    needs ``entropies=`` and ``failures=`` (:attr:`needs_entropies`).
    """

    advantage: str
    correction: str
    aggregation: str
    description: str
    negative_token_fraction: float = 1.0
    group_size: int = 1
    """Rollouts per prompt G that the algorithm samples by default (8 for the GRPO family, 1 otherwise)."""

    @property
    def needs_groups(self) -> bool:
        """True when the advantage can only be formed from sibling rollouts (GRPO-style groups)."""
        return self.advantage in GROUPED_ADVANTAGES

    @property
    def needs_entropies(self) -> bool:
        """True when the loss needs per-token ``entropies`` and per-trajectory ``failures``."""
        return self.negative_token_fraction < 1


LOSSES: dict[str, LossSpec] = {
    "flash_reinforce": LossSpec("batch_centered", "sequence_gate", "sample_mean", "FlashREINFORCE (the paper)"),
    "token_gate": LossSpec("batch_centered", "token_gate", "sample_mean", "token-local gate instead of sequence"),
    "no_gate": LossSpec("batch_centered", "none", "sample_mean", "token IS ratios, no trust region"),
    "token_mean": LossSpec("batch_centered", "sequence_gate", "token_mean", "DAPO's token-mean aggregation"),
    "positive_only": LossSpec("positive_only", "sequence_gate", "sample_mean", "A = R, no baseline"),
    "entropy_filter": LossSpec(
        "batch_centered", "sequence_gate", "sample_mean",
        "failed trajectories keep their 20% highest-entropy tokens", negative_token_fraction=0.2,
    ),
    "ppo_clip": LossSpec("batch_centered", "ppo_clip", "sample_mean", "PPO clip instead of the gate"),
    "tis": LossSpec("batch_centered", "truncated_is", "sample_mean", "truncated IS (cap C) instead of the gate"),
    "ratio_mask": LossSpec("batch_centered", "ratio_mask", "sample_mean", "IcePop-style ratio-band token mask"),
    "rloo": LossSpec("leave_one_out", "none", "seq_mean_token_sum", "RLOO: leave-one-out baseline, unbiased",
                     group_size=8),
    "grpo": LossSpec("group_normalized", "ppo_clip", "token_mean", "GRPO advantage and clip, DAPO's token-mean",
                     group_size=8),
    "dr_grpo": LossSpec("group_centered", "ppo_clip", "seq_mean_token_sum_norm", "Dr. GRPO (Liu et al. 2025)",
                        group_size=8),
}
"""Every named loss. Keys are the names accepted by :func:`get_loss` and by the simulator's ``--algo``."""


class RegisteredLoss:
    """The loss registered as ``name``: :func:`policy_loss` with the axes of ``spec`` (see the module docstring).

    Args:
        name: its key in :data:`LOSSES`.
        spec: its :class:`LossSpec`.
    """

    def __init__(self, name: str, spec: LossSpec) -> None:
        self.name, self.spec = name, spec

    def needs_entropies(self, options: Mapping[str, object]) -> bool:
        """True when a call with ``options`` runs the negative-token entropy filter (``negative_token_fraction``
        below 1, the entry's own or an override), so the caller must pass ``entropies`` and ``failures``."""
        return options.get("negative_token_fraction", self.spec.negative_token_fraction) < 1

    def __call__(
        self,
        log_probs: Tensor,
        behavior_log_probs: Tensor,
        rewards: Tensor | None,
        action_mask: Tensor,
        group_ids: Tensor | None = None,
        *,
        advantages: Tensor | None = None,
        **options,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """``(loss, stats)`` as :func:`policy_loss`; advantages from ``rewards`` by ``spec.advantage`` unless given."""
        if self.spec.needs_groups and group_ids is None and advantages is None:
            raise ValueError(
                f"{self.spec.advantage!r} advantages need group_ids [B] (which prompt each trajectory answers)"
            )
        advantages = resolve_advantages(
            rewards, advantages, log_probs, ADVANTAGES[self.spec.advantage], group_ids,
            validate=options.get("validate", True),
        )
        axes = {
            "correction": self.spec.correction, "aggregation": self.spec.aggregation,
            "negative_token_fraction": self.spec.negative_token_fraction,
        }
        return policy_loss(log_probs, behavior_log_probs, action_mask, advantages, **(axes | options))

    def __repr__(self) -> str:
        return f"get_loss({self.name!r})"


def get_loss(name: str) -> RegisteredLoss:
    """The loss registered under ``name`` (see :data:`LOSSES`); unknown names list the valid ones.

    >>> loss_fn = get_loss("flash_reinforce")
    >>> loss_fn, loss_fn.spec.correction
    (get_loss('flash_reinforce'), 'sequence_gate')
    """
    check_choice("loss", name, LOSSES)
    return RegisteredLoss(name, LOSSES[name])
