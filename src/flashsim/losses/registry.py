"""Every algorithm and ablation by name: one row of plain data each, calling the loss users read.

A row is a :class:`~flashsim.losses.loss.LossSpec`: which loss function (:func:`flash_reinforce_loss`
or :func:`grpo_loss`), which advantage estimator, and the named options it fixes. Calling a row is
calling that function, so training runs exactly the code of the formula. An ablation is a new row,
never a new copy of a loss. The simulator's ``--algo`` and ``scale``'s ``train.loss`` take these names.
"""

from __future__ import annotations

from flashsim.losses.grpo import group_centered, group_normalized, grpo_loss, leave_one_out
from flashsim.losses.loss import LossSpec, batch_centered, flash_reinforce_loss, positive_only
from flashsim.validation import check_choice

FR, GRPO = flash_reinforce_loss, grpo_loss

LOSSES: dict[str, LossSpec] = {
    "flash_reinforce": LossSpec(FR, batch_centered, "FlashREINFORCE (the paper)"),
    "token_gate": LossSpec(FR, batch_centered, "token-local gate instead of sequence", {"gate": "token"}),
    "no_gate": LossSpec(FR, batch_centered, "token IS ratios, no trust region", {"gate": "none"}),
    "token_mean": LossSpec(FR, batch_centered, "DAPO's token-mean aggregation", {"aggregation": "token_mean"}),
    "positive_only": LossSpec(FR, positive_only, "A = R, no baseline"),
    "entropy_filter": LossSpec(FR, batch_centered, "failed trajectories keep their 20% highest-entropy tokens",
                               {"negative_token_fraction": 0.2}),
    "ppo_clip": LossSpec(GRPO, batch_centered, "PPO clip instead of the gate", {"aggregation": "sample_mean"}),
    "tis": LossSpec(FR, batch_centered, "truncated IS (cap C) instead of the gate", {"gate": "none", "tis_cap": 2.0}),
    "ratio_mask": LossSpec(FR, batch_centered, "IcePop-style ratio-band token mask",
                           {"gate": "none", "ratio_bounds": (0.5, 2.0)}),
    "rloo": LossSpec(FR, leave_one_out, "RLOO: leave-one-out baseline, unbiased",
                     {"gate": "none", "aggregation": "seq_mean_token_sum"}, group_size=8),
    "grpo": LossSpec(GRPO, group_normalized, "GRPO advantage and clip, DAPO's token-mean", group_size=8,
                     needs_groups=True),
    "dr_grpo": LossSpec(GRPO, group_centered, "Dr. GRPO (Liu et al. 2025)", {"aggregation": "seq_mean_token_sum_norm"},
                        group_size=8, needs_groups=True),
}
"""Every named loss. Keys are the names accepted by :func:`get_loss`, ``--algo`` and ``train.loss``."""

def get_loss(name: str) -> LossSpec:
    """The loss registered under ``name`` (see :data:`LOSSES`); unknown names list the valid ones.

    >>> spec = get_loss("token_gate")
    >>> spec.loss.__name__, spec.options
    ('flash_reinforce_loss', {'gate': 'token'})
    """
    return LOSSES[check_choice("loss", name, LOSSES)]
