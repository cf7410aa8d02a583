"""The learner: a collected batch in, optimizer steps through the loss registry out.

An algorithm is a configuration of :mod:`flashsim.losses` — the loss comes from
:func:`flashsim.losses.get_loss` by name and no loss math lives here. For one collected batch the
learner

1. builds the ``[B, T]`` tensors (T = the longest trajectory of the batch) and the boolean
   ``action_mask`` from the stored rows;
2. computes the advantages once over the **whole** collected batch with the registry entry's own
   estimator (``ADVANTAGES[spec.advantage]``), so that minibatches and PPO epochs share one
   baseline (the "centre before splitting" contract of :mod:`flashsim.losses.composed`);
3. takes ``epochs × minibatches`` optimizer steps (``loss.backward()`` and a ``torch.optim``
   optimizer, like every PyTorch loop), minibatch j being rows ``[j·B/m, (j+1)·B/m)``
   (whole groups, since siblings are adjacent); each step recomputes log π_θ of the stored
   (observation, action) tokens with the *current* parameters and calls the loss with the stored
   behaviour log-probs.

For the negative-token entropy filter (``negative_token_fraction`` < 1, e.g. the ``entropy_filter``
loss) the batch also carries per-token entropies — of the learner's policy when the batch is prepared,
before its update (as verl and ``scale/`` take them from the training forward; with lag 0 this is the
behaviour policy) — and ``failures`` = reward ≤ 0 (the toy envs' rewards are 0/1).

Deliberately left out: minibatch shuffling between epochs (a fixed order keeps runs reproducible
without a second random stream), gradient clipping, entropy bonuses and KL penalties (the losses
define what an algorithm is).

Glossary: B trajectories, T token slots, O observations, A actions, m minibatches.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from flashsim.losses import ADVANTAGES, get_loss
from flashsim.sim.config import AlgorithmConfig
from flashsim.sim.rollouts import Batch

#: ``AlgorithmConfig.optimizer`` name → ``torch.optim`` class.
OPTIMIZERS = {"adam": torch.optim.Adam, "sgd": torch.optim.SGD}

#: Stats of the loss reported per update, as (metric key, stats key).
_LOSS_METRICS = (
    ("loss/value", "loss"),
    ("trust/acceptance_rate", "acceptance_rate"),
    ("trust/token_acceptance_rate", "token_acceptance_rate"),
    ("trust/clip_fraction", "clip_fraction"),
    ("trust/ess_fraction", "ess_fraction"),
    ("trust/ratio_max", "ratio_max"),
)


@dataclass
class PreparedBatch:
    """Learner tensors of one collected batch.

    Shape:
        observations, actions: ``[B, T] int64``; behavior_log_probs: ``[B, T]`` (policy dtype);
        action_mask: ``[B, T] bool``; rewards, advantages: ``[B]`` (policy dtype); group_ids: ``[B] int64``.
    """

    observations: Tensor
    actions: Tensor
    behavior_log_probs: Tensor
    action_mask: Tensor
    rewards: Tensor
    advantages: Tensor
    group_ids: Tensor
    entropies: Tensor | None = None  # [B, T], only for the negative-token filter
    failures: Tensor | None = None  # [B] bool, only for the negative-token filter


class Learner:
    """Optimizer steps of one algorithm on a policy (see the module docstring).

    Args:
        policy: a :class:`flashsim.policies.Policy` (any module with ``all_logits() -> [O, A]``).
        algorithm: loss name and options, optimizer, epochs, minibatches.
    """

    def __init__(self, policy: torch.nn.Module, algorithm: AlgorithmConfig) -> None:
        self.policy, self.algorithm = policy, algorithm
        self.loss_fn = get_loss(algorithm.loss)
        self.advantage_fn = ADVANTAGES[self.loss_fn.spec.advantage]
        self.options = dict(algorithm.loss_options)
        self.filters_tokens = self.loss_fn.needs_entropies(self.options)
        self.optimizer = OPTIMIZERS[algorithm.optimizer](policy.parameters(), lr=algorithm.learning_rate)
        self.dtype = next(policy.parameters()).dtype

    def prepare(self, batch: Batch) -> PreparedBatch:
        """Tensors of ``batch``, trimmed to its longest trajectory, with global advantages."""
        rows = batch.trajectories
        T = int(rows.lengths.max())
        mask = np.arange(T) < rows.lengths[:, None]
        rewards = torch.from_numpy(rows.rewards).to(self.dtype)
        group_ids = torch.from_numpy(batch.group_ids)
        observations = torch.from_numpy(rows.observations[:, :T])
        entropies = failures = None
        if self.filters_tokens:
            with torch.no_grad():
                entropies = self.policy.entropy(observations.reshape(-1)).view(observations.shape)
            failures = rewards <= 0
        return PreparedBatch(
            observations=observations,
            actions=torch.from_numpy(rows.actions[:, :T]),
            behavior_log_probs=torch.from_numpy(rows.behavior_log_probs[:, :T]).to(self.dtype),
            action_mask=torch.from_numpy(mask),
            rewards=rewards,
            advantages=self.advantage_fn(rewards, group_ids),
            group_ids=group_ids,
            entropies=entropies,
            failures=failures,
        )

    def slices(self, batch_size: int) -> list[slice]:
        """Rows of each optimizer step on one collected batch, in order (epochs × minibatches)."""
        m = self.algorithm.minibatches
        size = batch_size // m
        return [slice(j * size, (j + 1) * size) for _ in range(self.algorithm.epochs) for j in range(m)]

    def step(self, prepared: PreparedBatch, rows: slice) -> tuple[dict[str, float], np.ndarray]:
        """One optimizer step on ``rows`` of ``prepared``.

        Returns:
            ``(metrics, admitted)``: ``loss/``, ``trust/`` and ``policy/entropy`` metrics (entropy of
            the policy *before* the step, averaged over the batch's tokens), and the gate's verdict
            per trajectory ``[n] bool``.
        """
        mask = prepared.action_mask[rows]
        observations, actions = prepared.observations[rows], prepared.actions[rows]
        table = torch.log_softmax(self.policy.all_logits(), dim=-1)  # [O, A]
        log_probs = table[observations, actions]
        filtered = {} if prepared.entropies is None else {
            "entropies": prepared.entropies[rows], "failures": prepared.failures[rows]}
        loss, stats = self.loss_fn(
            log_probs, prepared.behavior_log_probs[rows], prepared.rewards[rows], mask,
            prepared.group_ids[rows], advantages=prepared.advantages[rows], validate=False, **filtered, **self.options,
        )
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        with torch.no_grad():
            detached = table.detach()
            entropy = -(detached.exp() * detached).sum(dim=-1)[observations]
            token_entropy = torch.where(mask, entropy, 0.0).sum() / mask.sum()
            sequence_kl = stats["sequence_kl"].mean()
            values = torch.stack([stats[key].to(self.dtype) for _, key in _LOSS_METRICS] + [sequence_kl, token_entropy])
        names = [name for name, _ in _LOSS_METRICS] + ["trust/sequence_kl", "policy/entropy"]
        return dict(zip(names, values.tolist())), stats["admitted"].numpy()

    def state_dict(self) -> LearnerState:
        """Policy and optimizer state (``torch``'s own ``state_dict`` formats)."""
        return LearnerState(self.policy.state_dict(), self.optimizer.state_dict())

    def load_state_dict(self, state: LearnerState) -> None:
        """Restore from :meth:`state_dict`."""
        self.policy.load_state_dict(state.policy)
        self.optimizer.load_state_dict(state.optimizer)


@dataclass
class LearnerState:
    """What a learner needs to continue: ``policy.state_dict()`` and ``optimizer.state_dict()``."""

    policy: dict
    optimizer: dict
