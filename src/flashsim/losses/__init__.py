"""``flashsim.losses``: FlashREINFORCE, GRPO and their ablations as pure PyTorch functions.

Layer 1 of flashsim: tensors in, ``(loss, detached stats)`` out; no I/O, no config objects, no
global state, no ``.item()``. The simulator and ``scale/`` train through these functions unchanged.

- :mod:`~flashsim.losses.loss` — :func:`flash_reinforce_loss`, the paper's formula line by line, with
  the ablations as named options; the token quantities (ratio, Bernoulli KL), the one-batch advantage
  and the aggregation modes it is made of;
- :mod:`~flashsim.losses.grpo` — :func:`grpo_loss` and the group baselines (GRPO, Dr. GRPO, RLOO);
- :mod:`~flashsim.losses.registry` — every algorithm and ablation by name (:data:`LOSSES`), one row of data each,
  and :func:`check_loss_options`, the one check of a row's options;
- :mod:`~flashsim.losses.validation` — each loss's options with the check of each value, and the input checks.

Glossary: B trajectories, G group size, T token slots, L policy lag, δ gate threshold.
"""

from flashsim.losses.grpo import group_centered, group_normalized, grpo_loss, leave_one_out
from flashsim.losses.loss import (
    AGGREGATIONS,
    GATES,
    aggregate,
    batch_centered,
    bernoulli_kl,
    effective_sample_size,
    flash_reinforce_loss,
    log_importance_ratio,
    negative_token_filter,
    positive_only,
    sampled_action_kl,
    sequence_mean,
    token_weights,
)
from flashsim.losses.registry import LOSSES, LossSpec, check_loss_options, get_loss

__all__ = [
    "AGGREGATIONS", "GATES", "LOSSES", "LossSpec", "aggregate", "batch_centered", "bernoulli_kl", "check_loss_options",
    "effective_sample_size", "flash_reinforce_loss", "get_loss", "group_centered", "group_normalized", "grpo_loss",
    "leave_one_out", "log_importance_ratio", "negative_token_filter", "positive_only", "sampled_action_kl",
    "sequence_mean", "token_weights",
]
