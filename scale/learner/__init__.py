"""The learner wing: one optimizer step per fresh batch of rollouts, with flashsim's loss unchanged.

Imports :mod:`scale.rollouts` (the trajectories it trains on), never :mod:`scale.run`.

- :mod:`~scale.learner.learner` — pack rollouts into tensors, score them, apply the loss, step;
- :mod:`~scale.learner.logprobs` — chunked sampled-token log-probs (never the whole ``[B, T, V]``);
- :mod:`~scale.learner.distributed` — data-parallel learners with global advantages and denominators;
- :mod:`~scale.learner.model` — the tiny Llama built from a config, or a pretrained causal LM.
"""

from scale.learner.learner import Learner, PackedBatch, pack, policy_log_probs

__all__ = ["Learner", "PackedBatch", "pack", "policy_log_probs"]
