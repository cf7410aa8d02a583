"""The discrete-event loop: N rollout workers and one learner in simulated time; lag emerges.

Each worker starts a trajectory with the newest *published* snapshot θ_k, finishes it after its
simulated duration (per-step time plus heavy-tailed tool latency, :class:`~flashsim.sim.config.TimingModel`)
and starts the next one. The learner takes the next B completed trajectories in completion order
(B/G complete groups when G > 1: it waits for the last sibling), spends ``update_time`` on the
update, and publishes θ_{k+1}; trajectories started during the update still use θ_k. The policy lag
of a trajectory, ``k − version``, is therefore not set by anyone: it grows with the number of workers
(more trajectories in flight per update) and with the duration tail (long trajectories come back
many updates later) — the FlashREINFORCE paper's setting.

Faults: a worker may crash mid-trajectory (probability ``crash_prob``, or injected with
:meth:`EventLoop.crash_worker`): its trajectory is dropped and counted, the task (prompt, group)
goes back to the head of the queue, and the worker returns after ``restart_time``. Stragglers take
``straggler_factor`` times longer (random, or injected with :meth:`EventLoop.delay_worker`).
Backpressure: a worker that finds ``max_queued`` completed trajectories waiting pauses until the
learner takes a batch. With ``synchronous=True`` each version generates exactly one batch and then
the workers wait for the learner (the on-policy barrier baseline).

Cost: trajectory *contents* are sampled in vectorised chunks of B per snapshot version (a chunk
that a new version makes stale is dropped before any of its rows start, which is unbiased); only
the event bookkeeping is per trajectory.

Deliberately left out: heterogeneous workers, network delays, partial-trajectory interruption
(a trajectory never switches snapshot mid-way) and weight-transfer time.
"""

from __future__ import annotations

import copy
import heapq
from collections import deque
from dataclasses import dataclass, fields
from typing import ClassVar

import numpy as np

from flashsim.sim.config import AlgorithmConfig, AsyncWorkers, TimingModel
from flashsim.sim.rollouts import Batch, Ledger, LedgerState, Sampler, SimClock, Snapshot, TrajectoryArrays

COMPLETE, CRASH, RESTART = 0, 1, 2


@dataclass
class EventLoopState:
    """Every piece of the event loop's mutable state (the attributes of the same names); see ``__init__``."""

    checkpoint_name: ClassVar[str] = "flashsim.sim.engine.EngineState"
    """The name its checkpoints were first written under (the class and its module were renamed)."""

    ledger: LedgerState
    clock: SimClock
    store: TrajectoryStore
    snapshot: Snapshot | None
    pending: Snapshot | None
    publish_at: float
    quota: int
    task_prompts: np.ndarray
    task_groups: np.ndarray
    task_head: int
    next_group: int
    buffer: TrajectoryArrays | None
    buffer_version: int
    buffer_pos: int
    buffer_crash: np.ndarray
    buffer_straggler: np.ndarray
    worker_trajectory: np.ndarray
    worker_start: np.ndarray
    worker_end: np.ndarray
    worker_kind: np.ndarray
    worker_seq: np.ndarray
    events: list[tuple[float, int, int, int]]
    seq: int
    parked: deque[int]
    partial: dict[int, list[int]]
    ready: deque[list[int]]
    ready_count: int


class EventLoop:
    """N workers, one learner, simulated time (see the module docstring).

    Args:
        config: workers, backpressure, synchronous mode, crashes.
        algorithm: batch size B and group size G.
        sampler: samples trajectory contents from the env.
        timing: durations, update time, stragglers.
        train_prompts: prompts to draw tasks from (one uniform draw per group).
        rng: the run's generator.
    """

    def __init__(
        self, config: AsyncWorkers, algorithm: AlgorithmConfig, sampler: Sampler,
        timing: TimingModel, train_prompts: np.ndarray, rng: np.random.Generator,
    ) -> None:
        self.config, self.sampler, self.timing, self.rng = config, sampler, timing, rng
        self.train_prompts = np.asarray(train_prompts, dtype=np.int64)
        self.batch_size, self.group_size = algorithm.batch_size, algorithm.group_size
        self.max_queued = config.max_queued or self.batch_size
        if self.max_queued < self.batch_size:
            raise ValueError(f"max_queued ({self.max_queued}) must be >= the batch size ({self.batch_size})")
        N = config.num_workers
        self.ledger, self.clock = Ledger(), SimClock()
        self.store = TrajectoryStore(sampler.horizon, capacity=2 * (N + self.max_queued))
        self.snapshot: Snapshot | None = None
        self.pending: Snapshot | None = None
        self.publish_at = 0.0
        self.quota = self.batch_size  # starts left in this version (synchronous mode only)
        # Tasks not yet started: prompts and groups from position `task_head` on.
        self.task_prompts = np.empty(0, np.int64)
        self.task_groups = np.empty(0, np.int64)
        self.task_head, self.next_group = 0, 0
        # Contents sampled for tasks task_head.. with snapshot `buffer_version`; row `buffer_pos` is next.
        self.buffer, self.buffer_version, self.buffer_pos = None, -1, 0
        self.buffer_crash = self.buffer_straggler = np.empty(0)
        # Workers: current trajectory (-1 when idle), start time, pending event.
        self.worker_trajectory = np.full(N, -1, np.int64)
        self.worker_start = np.zeros(N)
        self.worker_end = np.zeros(N)
        self.worker_kind = np.zeros(N, np.int64)
        self.worker_seq = np.zeros(N, np.int64)
        self.events: list[tuple[float, int, int, int]] = []
        self.seq = 0
        self.parked: deque[int] = deque()
        self.partial: dict[int, list[int]] = {}  # group -> completed members, until the group is whole
        self.ready: deque[list[int]] = deque()  # complete groups in completion order
        self.ready_count = 0

    # ------------------------------------------------------------------ the learner's side

    @property
    def version(self) -> int:
        """The newest published version k (the pending one is not visible yet)."""
        return self.snapshot.version

    def publish(self, snapshot: Snapshot) -> None:
        """θ_0 starts the workers; later snapshots become visible ``update_time`` after the take."""
        if self.snapshot is None:
            self.snapshot = snapshot
            for worker in range(self.config.num_workers):
                self._start(worker)
            return
        self.pending = snapshot
        self.publish_at = self.clock.now + self.timing.update_time
        self.clock.learner_busy += self.timing.update_time

    def next_batch(self) -> Batch:
        """Advance simulated time until B trajectories (B/G whole groups) are ready; take them."""
        self._apply_pending_publish()
        free_at = self.clock.now
        while self.ready_count < self.batch_size:
            self._step()
        self.clock.learner_wait += self.clock.now - free_at
        members = [self.ready.popleft() for _ in range(self.batch_size // self.group_size)]
        ids = np.fromiter((i for group in members for i in group), np.int64, self.batch_size)
        self.ready_count -= self.batch_size
        trajectories, versions, groups = self.store.pop(ids)
        self.ledger.take(ids)
        self._wake()
        return Batch(ids, versions, groups, trajectories)

    def metrics(self) -> dict[str, float]:
        """``time/`` metrics; in-flight work counts as busy up to now."""
        busy = self.worker_trajectory >= 0
        in_flight = float((self.clock.now - self.worker_start[busy]).sum())
        return self.clock.metrics(self.config.num_workers, in_flight)

    def check(self) -> dict[str, int]:
        """The ledger's invariant, and that the event loop's in-flight and queued ids agree with it."""
        in_flight = self.worker_trajectory[self.worker_trajectory >= 0]
        queued = [i for group in self.ready for i in group] + [i for g in self.partial.values() for i in g]
        stored = np.concatenate([in_flight, np.asarray(queued, np.int64)])
        if not np.array_equal(np.sort(stored), self.store.live_ids()):
            raise AssertionError("the store holds rows of trajectories that are neither in flight nor queued")
        if self.ready_count != sum(len(group) for group in self.ready):
            raise AssertionError("ready_count disagrees with the ready queue")
        return self.ledger.check(in_flight=in_flight, queued=np.asarray(queued, np.int64))

    # ------------------------------------------------------------------ fault injection

    def crash_worker(self, worker: int) -> bool:
        """Crash ``worker`` now; returns False if it had no trajectory in flight."""
        if self.worker_trajectory[worker] < 0:
            return False
        self.seq += 1
        self.worker_seq[worker] = self.seq  # its pending event is now stale
        self._crash(worker)
        return True

    def delay_worker(self, worker: int, factor: float) -> bool:
        """Make ``worker``'s current trajectory a straggler (``factor`` times its total duration)."""
        if self.worker_trajectory[worker] < 0 or factor < 1:
            return False
        start = self.worker_start[worker]
        self._schedule(worker, int(self.worker_kind[worker]), start + (self.worker_end[worker] - start) * factor)
        self.ledger.stragglers += 1
        return True

    # ------------------------------------------------------------------ events

    def _schedule(self, worker: int, kind: int, time: float) -> None:
        self.seq += 1
        self.worker_seq[worker], self.worker_kind[worker], self.worker_end[worker] = self.seq, kind, time
        heapq.heappush(self.events, (time, self.seq, kind, worker))

    def _step(self) -> None:
        if not self.events:
            raise RuntimeError("the simulation is stuck: no worker is running and no batch is ready")
        time, seq, kind, worker = heapq.heappop(self.events)
        if seq != self.worker_seq[worker]:
            return  # superseded by a crash or a delay
        self.clock.now = time
        if kind == COMPLETE:
            self._complete(worker)
        elif kind == CRASH:
            self._crash(worker)
        else:
            self._start(worker)

    def _apply_pending_publish(self) -> None:
        if self.pending is None:
            return
        while self.events and self.events[0][0] < self.publish_at:
            self._step()
        self.clock.now = self.publish_at
        self.snapshot, self.pending = self.pending, None
        self.quota = self.batch_size
        self._wake()

    def _can_start(self) -> bool:
        if self.config.synchronous:
            return self.quota > 0
        return self.ready_count < self.max_queued

    def _wake(self) -> None:
        while self.parked and self._can_start():
            self._start(self.parked.popleft())

    def _start(self, worker: int) -> None:
        if not self._can_start():
            self.parked.append(worker)
            return
        row, group = self._next_task()
        trajectory = self.ledger.start_one()
        self.store.put(trajectory, self.buffer, row, version=self.snapshot.version, group=group)
        duration = float(self.buffer.durations[row])
        if self.buffer_straggler[row]:
            duration *= self.timing.straggler_factor
            self.ledger.stragglers += 1
        self.worker_trajectory[worker], self.worker_start[worker] = trajectory, self.clock.now
        crash_at = self.buffer_crash[row]
        if crash_at < 1.0:
            self._schedule(worker, CRASH, self.clock.now + crash_at * duration)
        else:
            self._schedule(worker, COMPLETE, self.clock.now + duration)
        self.quota -= 1

    def _complete(self, worker: int) -> None:
        trajectory = int(self.worker_trajectory[worker])
        self.ledger.complete(trajectory)
        self.clock.worker_busy += self.clock.now - self.worker_start[worker]
        self.worker_trajectory[worker] = -1
        group = self.store.group_of(trajectory)
        members = self.partial.setdefault(group, [])
        members.append(trajectory)
        if len(members) == self.group_size:
            del self.partial[group]
            self.ready.append(members)
            self.ready_count += self.group_size
        self._start(worker)

    def _crash(self, worker: int) -> None:
        trajectory = int(self.worker_trajectory[worker])
        self.ledger.crash(trajectory)
        self.clock.worker_busy += self.clock.now - self.worker_start[worker]
        self.worker_trajectory[worker] = -1
        prompt, group = self.store.prompt_of(trajectory), self.store.group_of(trajectory)
        self.store.discard(trajectory)
        # The task goes back to the head of the queue (a GRPO group still needs all G siblings).
        self.task_prompts = np.insert(self.task_prompts, self.task_head, prompt)
        self.task_groups = np.insert(self.task_groups, self.task_head, group)
        self.buffer = None
        self.quota += 1
        self._schedule(worker, RESTART, self.clock.now + self.config.restart_time)
        self._wake()

    # ------------------------------------------------------------------ tasks and sampled contents

    def _next_task(self) -> tuple[int, int]:
        """Buffer row and group of the next task, sampling a fresh chunk when the buffer is stale."""
        stale = self.buffer is None or self.buffer_version != self.snapshot.version
        if stale or self.buffer_pos >= len(self.buffer):
            self._refill_buffer()
        row, group = self.buffer_pos, int(self.task_groups[self.task_head])
        self.buffer_pos += 1
        self.task_head += 1
        return row, group

    def _refill_buffer(self) -> None:
        chunk = self.batch_size
        if self.task_prompts.shape[0] - self.task_head < chunk:
            self._extend_tasks(chunk)
        prompts = self.task_prompts[self.task_head : self.task_head + chunk]
        self.buffer = self.sampler.sample(self.snapshot, prompts, self.rng)
        self.buffer_version, self.buffer_pos = self.snapshot.version, 0
        self.buffer_crash = np.full(chunk, np.inf)
        if self.config.crash_prob > 0:
            draws = self.rng.random((2, chunk))
            self.buffer_crash = np.where(draws[0] < self.config.crash_prob, draws[1], np.inf)
        self.buffer_straggler = np.zeros(chunk, bool)
        if self.timing.straggler_prob > 0:
            self.buffer_straggler = self.rng.random(chunk) < self.timing.straggler_prob

    def _extend_tasks(self, count: int) -> None:
        """Append whole groups (one uniform prompt, G siblings each) until ``count`` tasks wait."""
        G = self.group_size
        groups = -(-count // G)
        prompts = np.repeat(self.rng.choice(self.train_prompts, size=groups), G)
        ids = np.repeat(np.arange(self.next_group, self.next_group + groups, dtype=np.int64), G)
        self.next_group += groups
        self.task_prompts = np.concatenate([self.task_prompts[self.task_head :], prompts])
        self.task_groups = np.concatenate([self.task_groups[self.task_head :], ids])
        self.task_head = 0

    # ------------------------------------------------------------------ checkpointing

    def state_dict(self) -> EventLoopState:
        """A deep copy of every piece of mutable state (the generator is saved by the caller)."""
        state = {f.name: copy.deepcopy(getattr(self, f.name)) for f in fields(EventLoopState) if f.name != "ledger"}
        return EventLoopState(ledger=self.ledger.state_dict(), **state)

    def load_state_dict(self, state: EventLoopState) -> None:
        """Restore from :meth:`state_dict`."""
        self.ledger.load_state_dict(state.ledger)
        for f in fields(EventLoopState):
            if f.name != "ledger":
                setattr(self, f.name, copy.deepcopy(getattr(state, f.name)))


# ------------------------------------------------------------------ trajectory storage

_COLUMNS = tuple(TrajectoryArrays.__dataclass_fields__)


class TrajectoryStore:
    """Rows of started-but-not-yet-taken trajectories, looked up by trajectory id.

    A ring of array rows indexed by ``id mod capacity``; a row is freed when the learner takes it (or
    its worker crashes). Trajectories finish out of order (stragglers can stay in flight for many
    updates), so when a new id lands on a row that is still occupied the ring doubles instead of
    overwriting. No per-trajectory Python objects: a trajectory is one row of :class:`TrajectoryArrays`
    plus its version and group.

    >>> store = TrajectoryStore(horizon=2, capacity=2)
    >>> rows = TrajectoryArrays.empty(3, 2); rows.rewards[:] = [0.0, 1.0, 2.0]
    >>> for i in range(3):
    ...     store.put(i, rows, i, version=7, group=i)
    >>> taken, versions, groups = store.pop(np.array([2, 0]))
    >>> taken.rewards.tolist(), versions.tolist(), store.capacity
    ([2.0, 0.0], [7, 7], 4)
    """

    checkpoint_name = "flashsim.sim.engine.TrajectoryStore"
    """The name its checkpoints were first written under (its module was renamed)."""

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
