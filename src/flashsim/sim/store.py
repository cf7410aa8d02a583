"""Trajectory storage of the event engine: rows of started-but-not-yet-taken trajectories, by id.

A ring of array rows indexed by ``id mod capacity``; a row is freed when the learner takes it (or its
worker crashes). Trajectories finish out of order (stragglers can stay in flight for many updates),
so when a new id lands on a row that is still occupied the ring doubles instead of overwriting.
No per-trajectory Python objects: a trajectory is one row of :class:`TrajectoryArrays` plus its
version and group.
"""

from __future__ import annotations

from dataclasses import fields

import numpy as np

from flashsim.sim.rollouts import TrajectoryArrays

_COLUMNS = tuple(f.name for f in fields(TrajectoryArrays))


class TrajectoryStore:
    """Rows of live trajectories, looked up by trajectory id.

    >>> store = TrajectoryStore(horizon=2, capacity=2)
    >>> rows = TrajectoryArrays.empty(3, 2); rows.rewards[:] = [0.0, 1.0, 2.0]
    >>> for i in range(3):
    ...     store.put(i, rows, i, version=7, group=i)
    >>> taken, versions, groups = store.pop(np.array([2, 0]))
    >>> taken.rewards.tolist(), versions.tolist(), store.capacity
    ([2.0, 0.0], [7, 7], 4)
    """

    def __init__(self, horizon: int, capacity: int = 256) -> None:
        capacity = 1 << max(int(capacity) - 1, 0).bit_length()
        self.horizon = horizon
        self.rows = TrajectoryArrays.empty(capacity, horizon)
        self.versions = np.zeros(capacity, np.int64)
        self.groups = np.zeros(capacity, np.int64)
        self.owner = np.full(capacity, -1, np.int64)

    @property
    def capacity(self) -> int:
        """Rows available (a power of two)."""
        return int(self.owner.shape[0])

    def put(self, trajectory: int, source: TrajectoryArrays, row: int, *, version: int, group: int) -> None:
        """Store row ``row`` of ``source`` as trajectory ``trajectory``."""
        slot = trajectory & (self.capacity - 1)
        while self.owner[slot] != -1:
            self._grow()
            slot = trajectory & (self.capacity - 1)
        for name in _COLUMNS:
            getattr(self.rows, name)[slot] = getattr(source, name)[row]
        self.versions[slot], self.groups[slot], self.owner[slot] = version, group, trajectory

    def group_of(self, trajectory: int) -> int:
        """The group of a stored trajectory."""
        return int(self.groups[self._slot(trajectory)])

    def prompt_of(self, trajectory: int) -> int:
        """The prompt of a stored trajectory."""
        return int(self.rows.prompts[self._slot(trajectory)])

    def pop(self, ids: np.ndarray) -> tuple[TrajectoryArrays, np.ndarray, np.ndarray]:
        """Rows, versions and groups of ``ids`` (in that order); their rows are freed.

        Shape:
            ids: ``[n] int64``. Returns ``(TrajectoryArrays [n], versions [n], groups [n])``.
        """
        slots = np.asarray(ids, np.int64) & (self.capacity - 1)
        if not np.array_equal(self.owner[slots], ids):
            raise KeyError(f"trajectories {np.setdiff1d(ids, self.owner).tolist()} are not stored")
        result = self.rows.take(slots), self.versions[slots], self.groups[slots]
        self.owner[slots] = -1
        return result

    def discard(self, trajectory: int) -> None:
        """Free the row of ``trajectory`` (a crashed worker's)."""
        self.owner[self._slot(trajectory)] = -1

    def live_ids(self) -> np.ndarray:
        """Ids of every stored trajectory, sorted."""
        return np.sort(self.owner[self.owner >= 0])

    def _slot(self, trajectory: int) -> int:
        slot = trajectory & (self.capacity - 1)
        if self.owner[slot] != trajectory:
            raise KeyError(f"trajectory {trajectory} is not stored")
        return slot

    def _grow(self) -> None:
        live = np.flatnonzero(self.owner >= 0)
        old_rows, old_versions, old_groups, old_owner = self.rows, self.versions, self.groups, self.owner
        capacity = 2 * self.capacity
        self.rows = TrajectoryArrays.empty(capacity, self.horizon)
        self.versions = np.zeros(capacity, np.int64)
        self.groups = np.zeros(capacity, np.int64)
        self.owner = np.full(capacity, -1, np.int64)
        slots = old_owner[live] & (capacity - 1)
        self.rows.put(slots, old_rows.take(live))
        self.versions[slots], self.groups[slots], self.owner[slots] = (
            old_versions[live], old_groups[live], old_owner[live],
        )
