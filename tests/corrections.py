"""The trust regions the loss tests sweep, by their names in the papers, as calls of the public losses.

``sequence_gate`` (the paper), ``token_gate`` and ``none`` are ``flash_reinforce_loss(gate=...)``;
``truncated_is`` and ``ratio_mask`` are its ``tis_cap`` / ``ratio_bounds`` options with no gate;
``ppo_clip`` is ``grpo_loss`` on the given advantages. Every one aggregates by ``sample_mean`` unless told.
"""

from __future__ import annotations

from flashsim.losses import flash_reinforce_loss, grpo_loss

NAMED = {
    "sequence_gate": {"gate": "sequence"},
    "token_gate": {"gate": "token"},
    "none": {"gate": "none"},
    "truncated_is": {"gate": "none", "tis_cap": 2.0},
    "ratio_mask": {"gate": "none", "ratio_bounds": (0.5, 2.0)},
}
CORRECTIONS = (*NAMED, "ppo_clip")


def correction_loss(log_probs, behavior_log_probs, action_mask, advantages, *, correction, **options):
    """``(loss, stats)`` of ``correction`` on precomputed advantages; ``options`` override the named ones."""
    options.setdefault("aggregation", "sample_mean")
    if correction == "ppo_clip":
        return grpo_loss(log_probs, behavior_log_probs, None, action_mask, advantages=advantages, **options)
    return flash_reinforce_loss(log_probs, behavior_log_probs, None, action_mask, advantages=advantages,
                                **{**NAMED[correction], **options})
