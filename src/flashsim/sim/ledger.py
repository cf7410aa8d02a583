"""The accounting ledger: where every generated trajectory is, so none is lost or used twice.

Each trajectory gets an id when a worker starts it and then moves through states, one way only::

    IN_FLIGHT ──complete──▶ QUEUED ──take──▶ TAKEN ──settle──▶ CONSUMED (admitted by the gate)
        │                                              └──────▶ REJECTED (rejected by the gate)
        └──crash──▶ CRASHED (dropped with its worker; the task is issued again under a new id)

The invariant, checked by :meth:`Ledger.check` and by a hypothesis stateful test: every started
trajectory is in exactly one state, every transition starts from the state it claims, and the
per-state counts equal the counters kept along the way. A trajectory taken twice, completed twice or
settled without being taken raises :class:`AccountingError` at the transition itself.

Statuses are one byte per trajectory (a million trajectories cost a megabyte), so the ledger is
exact without per-trajectory Python objects.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

IN_FLIGHT, QUEUED, TAKEN, CONSUMED, REJECTED, CRASHED = 1, 2, 3, 4, 5, 6
STATUS_NAMES = {
    IN_FLIGHT: "in_flight", QUEUED: "queued", TAKEN: "taken", CONSUMED: "consumed",
    REJECTED: "rejected", CRASHED: "crashed",
}


class AccountingError(RuntimeError):
    """A trajectory was lost, used twice, or moved out of a state it was not in."""


class Ledger:
    """Status of every trajectory id (ids are 0, 1, 2, ... in start order).

    >>> ledger = Ledger()
    >>> ids = ledger.start(3)
    >>> ledger.complete(ids); ledger.take(ids[:2]); ledger.settle(ids[:2], np.array([True, False]))
    >>> ledger.counts()
    {'started': 3, 'in_flight': 0, 'queued': 1, 'taken': 0, 'consumed': 1, 'rejected': 1, 'crashed': 0}
    """

    def __init__(self) -> None:
        self._status = np.zeros(1024, dtype=np.int8)
        self.started = 0
        self.completed = 0
        self.crashed = 0
        self.stragglers = 0

    def start(self, count: int = 1, *, taken: bool = False) -> np.ndarray:
        """Allocate ``count`` new ids, all IN_FLIGHT — or, with ``taken``, already completed and TAKEN
        (trajectories generated and handed to the learner at once, as by the lag-injection source)."""
        ids = np.arange(self.started, self.started + count, dtype=np.int64)
        if self.started + count > self._status.shape[0]:
            grown = np.zeros(max(2 * self._status.shape[0], self.started + count), dtype=np.int8)
            grown[: self.started] = self._status[: self.started]
            self._status = grown
        self._status[ids] = TAKEN if taken else IN_FLIGHT
        self.started += count
        self.completed += count if taken else 0
        return ids

    def start_one(self) -> int:
        """Allocate one new IN_FLIGHT id (the event engine's scalar fast path)."""
        if self.started == self._status.shape[0]:
            self.start(1)
            return self.started - 1
        trajectory = self.started
        self._status[trajectory] = IN_FLIGHT
        self.started += 1
        return trajectory

    def complete(self, ids: np.ndarray | int) -> None:
        """IN_FLIGHT → QUEUED: the worker finished the trajectory."""
        self._move(ids, IN_FLIGHT, QUEUED)
        self.completed += 1 if isinstance(ids, (int, np.integer)) else len(ids)

    def crash(self, ids: np.ndarray | int) -> None:
        """IN_FLIGHT → CRASHED: the worker died; the trajectory is dropped."""
        self._move(ids, IN_FLIGHT, CRASHED)
        self.crashed += 1 if isinstance(ids, (int, np.integer)) else len(ids)

    def take(self, ids: np.ndarray) -> None:
        """QUEUED → TAKEN: the learner took the trajectories into a batch."""
        self._move(ids, QUEUED, TAKEN)

    def settle(self, ids: np.ndarray, admitted: np.ndarray) -> None:
        """TAKEN → CONSUMED where ``admitted``, else REJECTED (the gate's verdict after its last use)."""
        ids = np.asarray(ids, dtype=np.int64)
        self._check(ids, TAKEN, "settle")
        self._status[ids] = np.where(np.asarray(admitted, dtype=bool), CONSUMED, REJECTED)

    def status(self, ids: np.ndarray | int) -> np.ndarray:
        """Status codes of ``ids`` (0 for ids never started)."""
        ids = np.asarray(ids, dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= self.started):
            raise IndexError(f"trajectory ids must lie in [0, {self.started}), got {ids}")
        return self._status[ids]

    def ids_in(self, status: int) -> np.ndarray:
        """All ids currently in ``status``."""
        return np.flatnonzero(self._status[: self.started] == status)

    def counts(self) -> dict[str, int]:
        """How many trajectories are in each state, plus ``started``."""
        per_status = np.bincount(self._status[: self.started], minlength=CRASHED + 1)
        counts = {"started": self.started}
        counts.update({name: int(per_status[code]) for code, name in STATUS_NAMES.items()})
        return counts

    def check(self, in_flight: np.ndarray | None = None, queued: np.ndarray | None = None) -> dict[str, int]:
        """Verify the invariant; optionally that the engine's in-flight and queued ids match the ledger's.

        Raises:
            AccountingError: a trajectory is unaccounted for, or the engine and ledger disagree.
        """
        counts = self.counts()
        if sum(v for k, v in counts.items() if k != "started") != self.started:
            raise AccountingError(f"{self.started} trajectories started but the states hold {counts}")
        for name, code, expected in (("in_flight", IN_FLIGHT, in_flight), ("queued", QUEUED, queued)):
            if expected is not None:
                actual = self.ids_in(code)
                if not np.array_equal(np.sort(np.asarray(expected, dtype=np.int64)), actual):
                    raise AccountingError(f"engine's {name} ids {sorted(expected)} != ledger's {actual.tolist()}")
        return counts

    def _move(self, ids: np.ndarray | int, source: int, target: int) -> None:
        if isinstance(ids, (int, np.integer)):
            if not 0 <= ids < self.started or self._status[ids] != source:
                self._fail(np.array([ids]), source, STATUS_NAMES[target])
            self._status[ids] = target
            return
        ids = np.asarray(ids, dtype=np.int64)
        self._check(ids, source, STATUS_NAMES[target])
        self._status[ids] = target

    def _check(self, ids: np.ndarray, source: int, action: str) -> None:
        if ids.size == 0:
            return
        if ids.min() < 0 or ids.max() >= self.started or not _distinct(ids):
            raise AccountingError(f"cannot {action} ids {ids.tolist()}: unknown or repeated")
        if np.any(self._status[ids] != source):
            self._fail(ids, source, action)

    def _fail(self, ids: np.ndarray, source: int, action: str) -> None:
        valid = (ids >= 0) & (ids < self.started)
        states = {int(i): STATUS_NAMES.get(int(self._status[i]), "unknown") for i in ids[valid]}
        raise AccountingError(
            f"cannot move to {action}: expected every id {STATUS_NAMES[source]}, found {states}"
        )

    def state_dict(self) -> LedgerState:
        """Everything needed to restore the ledger exactly."""
        return LedgerState(self._status[: self.started].copy(), self.completed, self.crashed, self.stragglers)

    def load_state_dict(self, state: LedgerState) -> None:
        """Restore from :meth:`state_dict`."""
        status = state.status
        self._status = np.zeros(max(1024, 2 * status.shape[0]), dtype=np.int8)
        self._status[: status.shape[0]] = status
        self.started = int(status.shape[0])
        self.completed, self.crashed, self.stragglers = int(state.completed), int(state.crashed), int(state.stragglers)


@dataclass
class LedgerState:
    """A ledger's content: the status of every started id (``[started] int8``) and its counters."""

    status: np.ndarray
    completed: int
    crashed: int
    stragglers: int


def _distinct(ids: np.ndarray) -> bool:
    """True when no id repeats (O(n) for the common consecutive block, else a sort)."""
    if ids[-1] - ids[0] == ids.size - 1 and np.all(np.diff(ids) == 1):
        return True
    ordered = np.sort(ids)
    return bool(np.all(ordered[1:] != ordered[:-1]))
