"""``Problem``: everything a gradient method needs besides the batches themselves."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import Tensor

import toy_envs
from flashsim.policies import Policy
from flashsim.sim.rollouts import Snapshot

#: Per-batch stats that every gradient method returns as ``[c]`` tensors (besides the chunk total
#: ``clipped_tokens``, a 0-dim tensor: the loss reports clipping only for a whole call).
PER_BATCH_STATS = ("acceptance_rate", "token_acceptance_rate", "ess", "ess_fraction", "num_tokens", "mean_length")


@dataclass(frozen=True, eq=False)
class Problem:
    """One estimator at one parameter point: the learner, the behaviour policy, the loss and its options.

    Shape:
        group_ids: ``[B]`` int64 (grouped batches) or None.
    """

    dynamics: toy_envs.TabularDynamics
    """The env's batched dynamics core (its ``tables`` are the exact tables)."""
    policy: Policy
    behavior: Snapshot
    """The behaviour policy μ: its float64 table log μ(a | o) and the CDF the rollouts sample from."""
    loss_fn: Callable
    group_ids: Tensor | None
    options: dict
