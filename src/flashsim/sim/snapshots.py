"""Policy snapshots: every learner update k publishes θ_k; rollouts are sampled from a snapshot.

A snapshot is what a rollout worker needs to act and nothing more: the behaviour policy's log-prob
table ``log μ(a | o)`` over all observations (every toy env has finitely many), computed with the
policy's own ``log_softmax`` so that at lag 0 the stored behaviour log-probs equal the learner's
bit for bit (ratio exactly 1, KL exactly 0). Parameters are not kept: a rollout only ever needs the
probabilities it samples from, and the learner only needs its own current parameters.

Glossary: O observations, A actions, L lag, k learner update (version).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from flashsim.validation import check_int


@dataclass(frozen=True)
class Snapshot:
    """The published behaviour policy of one version.

    Shape:
        log_probs: ``[O, A] float64``, rows log-normalised. cumulative: ``[O, A] float64``, the row-wise
        CDF with its last column exactly 1 (inverse-CDF sampling never runs past the last action).
    """

    version: int
    log_probs: np.ndarray
    cumulative: np.ndarray

    @classmethod
    def of_policy(cls, policy: torch.nn.Module, version: int) -> Snapshot:
        """Snapshot of ``policy`` (any module with ``all_logits() -> [O, A]``) as version ``version``."""
        with torch.no_grad():
            log_probs = torch.log_softmax(policy.all_logits(), dim=-1).double().numpy().copy()
        cumulative = np.cumsum(np.exp(log_probs), axis=1)
        cumulative[:, -1] = 1.0
        log_probs.flags.writeable = False
        cumulative.flags.writeable = False
        return cls(version, log_probs, cumulative)


class SnapshotStore:
    """The last ``keep`` published snapshots, looked up by version.

    Versions before 0 resolve to θ_0 (a lag larger than the number of updates so far means "the
    initial policy"), so lag models can ask for ``k − L`` without special cases.

    >>> import torch
    >>> class Uniform(torch.nn.Module):
    ...     def all_logits(self):
    ...         return torch.zeros(1, 2)
    >>> store = SnapshotStore(keep=2)
    >>> for k in range(3):
    ...     store.publish(Snapshot.of_policy(Uniform(), k))
    >>> store.latest.version, store.get(1).version, store.oldest
    (2, 1, 1)
    """

    def __init__(self, keep: int) -> None:
        self.keep = check_int("keep", keep, low=1)  # how many snapshots to keep
        self._snapshots: dict[int, Snapshot] = {}

    def publish(self, snapshot: Snapshot) -> None:
        """Add the next version (versions are published in order 0, 1, 2, ...) and forget the oldest."""
        expected = 0 if not self._snapshots else self.latest.version + 1
        if snapshot.version != expected:
            raise ValueError(f"snapshot version must be {expected} (published in order), got {snapshot.version}")
        self._snapshots[snapshot.version] = snapshot
        self._snapshots.pop(snapshot.version - self.keep, None)

    @property
    def latest(self) -> Snapshot:
        """The newest snapshot."""
        return self._snapshots[max(self._snapshots)]

    @property
    def oldest(self) -> int:
        """The oldest version still kept."""
        return min(self._snapshots)

    def get(self, version: int) -> Snapshot:
        """Snapshot ``version`` (negative versions mean θ_0); raises ``KeyError`` if already forgotten."""
        version = max(int(version), 0)
        if version not in self._snapshots:
            raise KeyError(
                f"snapshot {version} is not kept (kept: {sorted(self._snapshots)}); raise keep to at least "
                "the largest lag + 1"
            )
        return self._snapshots[version]

    def state_dict(self) -> SnapshotStoreState:
        """Everything needed to restore the store exactly (snapshots are immutable: shared, not copied)."""
        return SnapshotStoreState(self.keep, list(self._snapshots.values()))

    def load_state_dict(self, state: SnapshotStoreState) -> None:
        """Restore from :meth:`state_dict`."""
        self.keep = state.keep
        self._snapshots = {snapshot.version: snapshot for snapshot in state.snapshots}


@dataclass
class SnapshotStoreState:
    """The kept snapshots, oldest first, and how many to keep."""

    keep: int
    snapshots: list[Snapshot]
