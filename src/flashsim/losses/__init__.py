"""``flashsim.losses``: FlashREINFORCE, GRPO and their ablations as pure PyTorch functions.

Layer 1 of flashsim: tensors in, ``(loss, detached stats)`` out; no I/O, no config objects, no
global state, no ``.item()``. The simulator and ``scale/`` train through these functions unchanged.

- :mod:`~flashsim.losses.loss` — :func:`flash_reinforce_loss`, the paper's formula line by line, with
  the ablations as named options; the one-batch baseline, the token quantities (ratio, Bernoulli KL) and
  the aggregation modes it is made of;
- :mod:`~flashsim.losses.grpo` — :func:`grpo_loss`, GRPO's clipped surrogate;
- :mod:`~flashsim.losses.advantages` — the other advantage estimators (none, GRPO's, Dr. GRPO's, RLOO's);
- :mod:`~flashsim.losses.entropy_filter` — the negative-token entropy filter (an ablation after verl's ``neg_topq``);
- :mod:`~flashsim.losses.registry` — every algorithm and ablation by name (:data:`LOSSES`), one row of data each,
  and :func:`check_loss_options`, the one check of a row's options (each loss's option checks are in
  :mod:`flashsim.validation`, beside every other argument check).

Glossary: B trajectories, G group size, T token slots, L policy lag, δ gate threshold.
"""

from flashsim.losses.advantages import group_centered, group_normalized, leave_one_out, positive_only
from flashsim.losses.entropy_filter import negative_token_filter
from flashsim.losses.grpo import grpo_loss, sampled_action_kl, sequence_mean
from flashsim.losses.loss import (
    aggregate,
    batch_centered,
    bernoulli_kl,
    effective_sample_size,
    flash_reinforce_loss,
    log_importance_ratio,
    token_weights,
)
from flashsim.losses.registry import LOSSES, LossSpec, check_loss_options, get_loss
from flashsim.validation import AGGREGATIONS, GATES

__all__ = [
    "AGGREGATIONS", "GATES", "LOSSES", "LossSpec", "aggregate", "batch_centered", "bernoulli_kl", "check_loss_options",
    "effective_sample_size", "flash_reinforce_loss", "get_loss", "group_centered", "group_normalized", "grpo_loss",
    "leave_one_out", "log_importance_ratio", "negative_token_filter", "positive_only", "sampled_action_kl",
    "sequence_mean", "token_weights",
]
