"""``flashsim.losses``: FlashREINFORCE, GRPO and their ablations as pure PyTorch functions.

Layer 1 of flashsim: tensors in, ``(loss, detached stats)`` out; no I/O, no config objects, no
global state, no ``.item()``. The simulator and ``scale/`` use these functions unchanged.

Modules, bottom up:
- :mod:`~flashsim.losses.advantages` — per-trajectory advantage estimators;
- :mod:`~flashsim.losses.trust_region` — importance ratios, Bernoulli KL, the negative-token filter;
- :mod:`~flashsim.losses.corrections` — one function per correction (gates, none, TIS, ratio mask,
  PPO clip), chosen by name in ``CORRECTION_TERMS``;
- :mod:`~flashsim.losses.aggregation` — one function per aggregation mode, explicit global denominators;
- :mod:`~flashsim.losses.policy_loss` — the general composition of the three axes, op by op;
- :mod:`~flashsim.losses.composed` — ``flash_reinforce_loss`` and ``grpo_loss``;
- :mod:`~flashsim.losses.registry` — every algorithm and ablation by name.

Glossary: B trajectories, G group size, T token slots, L policy lag, δ gate threshold.
"""

from flashsim.losses.advantages import (
    ADVANTAGES,
    batch_centered,
    group_centered,
    group_normalized,
    leave_one_out,
    positive_only,
)
from flashsim.losses.aggregation import AGGREGATIONS, aggregate, token_weights
from flashsim.losses.composed import flash_reinforce_loss, grpo_loss
from flashsim.losses.corrections import CORRECTION_TERMS, CORRECTIONS
from flashsim.losses.policy_loss import policy_loss
from flashsim.losses.registry import LOSSES, LossSpec, RegisteredLoss, get_loss
from flashsim.losses.trust_region import (
    bernoulli_kl,
    effective_sample_size,
    log_importance_ratio,
    negative_token_filter,
    sampled_action_kl,
    sequence_mean,
)

__all__ = [
    "ADVANTAGES", "AGGREGATIONS", "CORRECTIONS", "CORRECTION_TERMS", "LOSSES", "LossSpec", "RegisteredLoss",
    "aggregate", "token_weights", "batch_centered", "bernoulli_kl", "effective_sample_size",
    "flash_reinforce_loss", "get_loss", "group_centered", "group_normalized", "grpo_loss",
    "leave_one_out", "log_importance_ratio", "negative_token_filter", "policy_loss", "positive_only",
    "sampled_action_kl", "sequence_mean",
]
