"""The trust regions the loss tests sweep: the registry rows that differ from the paper only in the trust region.

Each is a row of :data:`flashsim.losses.LOSSES` (the paper's ``flash_reinforce``, ``token_gate``,
``no_gate``, ``tis``, ``ratio_mask``, and ``ppo_clip``, which is ``grpo_loss``) called on given
advantages, so a test sweeps exactly what training runs. Every one aggregates by ``sample_mean`` unless told.
"""

from __future__ import annotations

from flashsim.losses import LOSSES, batch_centered

CORRECTIONS = tuple(name for name, spec in LOSSES.items() if spec.advantage is batch_centered
                    and not spec.needs_entropies() and spec.options.get("aggregation", "sample_mean") == "sample_mean")
"""The rows with the paper's advantage and aggregation: they differ from it in the trust region alone."""


def correction_loss(log_probs, behavior_log_probs, action_mask, advantages, *, correction, **options):
    """``(loss, stats)`` of row ``correction`` on precomputed advantages; ``options`` override the row's."""
    options.setdefault("aggregation", "sample_mean")
    return LOSSES[correction](log_probs, behavior_log_probs, None, action_mask, advantages=advantages, **options)
