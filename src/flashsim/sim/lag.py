"""Injected policy lag: ``FixedLag`` and ``RandomLag`` as a rollout source for the learner.

Update k (which turns θ_k into θ_{k+1}) trains on trajectories sampled by θ_{k − L}: exactly L
updates stale for :class:`~flashsim.sim.config.FixedLag` (θ_0 while k < L, the warm-up), and a fresh
draw of L per trajectory (per group when G > 1) for :class:`~flashsim.sim.config.RandomLag`. Trajectories
of one batch that share a version are sampled together. For lag that *emerges* from timing, see
:mod:`flashsim.sim.engine`.

The simulated clock of this source is that of a synchronous system of B workers (one trajectory
each): generating a batch takes as long as its slowest trajectory, then the learner updates. It is
reported for completeness; the event engine is the model to use for questions about time.

Glossary: B trajectories per batch, G group size, L lag, k learner update.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np

from flashsim.sim.config import AlgorithmConfig, FixedLag, RandomLag, TimingModel
from flashsim.sim.ledger import Ledger, LedgerState
from flashsim.sim.rollouts import Batch, Collector, TrajectoryArrays
from flashsim.sim.snapshots import Snapshot, SnapshotStore, SnapshotStoreState


def draw_lags(model: FixedLag | RandomLag, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` lags from ``model`` (FixedLag draws no random numbers).

    Shape:
        Returns ``[count] int64`` in ``[0, model.max_lag]``.

    >>> draw_lags(FixedLag(3), 4, np.random.default_rng(0)).tolist()
    [3, 3, 3, 3]
    >>> bool((draw_lags(RandomLag(2), 1000, np.random.default_rng(0)) <= 2).all())
    True
    """
    if isinstance(model, FixedLag):
        return np.full(count, model.lag, dtype=np.int64)
    if model.distribution == "uniform":
        lags = rng.integers(0, model.max_lag + 1, size=count)
    elif model.distribution == "geometric":
        lags = rng.geometric(1.0 / (1.0 + model.mean), size=count) - 1  # support {0, 1, ...}, mean `mean`
    else:
        lags = rng.poisson(model.mean, size=count)
    return np.minimum(lags, model.max_lag).astype(np.int64)


@dataclass
class SimClock:
    """Cumulative simulated time of the learner and of the workers, for the ``time/`` metrics."""

    now: float = 0.0
    learner_busy: float = 0.0
    learner_wait: float = 0.0
    worker_busy: float = 0.0

    def metrics(self, num_workers: int, in_flight_busy: float = 0.0) -> dict[str, float]:
        """``time/sim_clock``, ``time/learner_idle`` and ``time/worker_idle`` (fractions of time so far)."""
        learner = self.learner_busy + self.learner_wait
        capacity = num_workers * self.now
        # Busy time is a sum of many durations, capacity one product: when the workers never idle the
        # two differ by rounding and 1 − busy/capacity came out −1e-15 (printed "−0.00"). Idle time is
        # never negative, so that rounding is cut at 0.
        worker_idle = max(0.0, 1.0 - (self.worker_busy + in_flight_busy) / capacity) if capacity > 0 else 0.0
        return {
            "time/sim_clock": float(self.now),
            "time/learner_idle": float(self.learner_wait / learner) if learner > 0 else 0.0,
            "time/worker_idle": float(worker_idle),
        }


@dataclass
class LaggedSourceState:
    """What a :class:`LaggedSource` needs to continue: kept snapshots, ledger, clock, next group id."""

    snapshots: SnapshotStoreState
    ledger: LedgerState
    clock: SimClock
    next_group: int


class LaggedSource:
    """Batches whose lag is drawn from a :class:`FixedLag` or :class:`RandomLag` model.

    Args:
        model: the lag model.
        algorithm: batch size B and group size G.
        sampler: collects trajectories from the env.
        timing: update time for the simulated clock.
        train_prompts: prompts to draw from (uniformly, one per group).
        rng: the run's generator.
    """

    def __init__(
        self, model: FixedLag | RandomLag, algorithm: AlgorithmConfig, sampler: Collector,
        timing: TimingModel, train_prompts: np.ndarray, rng: np.random.Generator,
    ) -> None:
        self.model, self.sampler, self.timing, self.rng = model, sampler, timing, rng
        self.batch_size, self.group_size = algorithm.batch_size, algorithm.group_size
        self.train_prompts = np.asarray(train_prompts, dtype=np.int64)
        self.snapshots = SnapshotStore(keep=model.max_lag + 1)
        self.ledger = Ledger()
        self.clock = SimClock()
        self.next_group = 0

    @property
    def version(self) -> int:
        """The newest published version k."""
        return self.snapshots.latest.version

    def publish(self, snapshot: Snapshot) -> None:
        """The learner finished an update (taking ``update_time``) and published ``snapshot`` (θ_0: the start)."""
        if snapshot.version > 0:
            self.clock.now += self.timing.update_time
            self.clock.learner_busy += self.timing.update_time
        self.snapshots.publish(snapshot)

    def collect(self) -> Batch:
        """The batch for the next update k = :attr:`version`: B trajectories, each sampled by θ_{k − L}."""
        k, G = self.version, self.group_size
        groups = self.batch_size // G
        versions = np.maximum(k - draw_lags(self.model, groups, self.rng), 0)
        prompts = self.rng.choice(self.train_prompts, size=groups)
        versions, prompts = np.repeat(versions, G), np.repeat(prompts, G)
        group_ids = np.repeat(np.arange(self.next_group, self.next_group + groups, dtype=np.int64), G)
        self.next_group += groups
        trajectories = self._sample(versions, prompts)
        ids = self.ledger.start(self.batch_size, taken=True)
        self._advance_clock(trajectories.durations)
        return Batch(ids, versions, group_ids, trajectories)

    def _sample(self, versions: np.ndarray, prompts: np.ndarray) -> TrajectoryArrays:
        """Rows sampled by their own versions, all in one collection."""
        kept, which = np.unique(versions, return_inverse=True)
        snapshots = [self.snapshots.get(version) for version in kept]
        return self.sampler.sample_mixed(snapshots, which.astype(np.int64), prompts, self.rng)

    def _advance_clock(self, durations: np.ndarray) -> None:
        generation = float(durations.max())
        self.clock.now += generation
        self.clock.learner_wait += generation
        self.clock.worker_busy += float(durations.sum())

    def metrics(self) -> dict[str, float]:
        """The ``time/`` metrics, with B workers."""
        return self.clock.metrics(self.batch_size)

    def check(self) -> dict[str, int]:
        """The ledger's invariant (nothing is ever in flight or queued between updates here)."""
        return self.ledger.check(in_flight=np.empty(0, np.int64), queued=np.empty(0, np.int64))

    def state_dict(self) -> LaggedSourceState:
        """A deep copy of the mutable state (the generator is saved by the caller)."""
        return LaggedSourceState(
            self.snapshots.state_dict(), self.ledger.state_dict(), copy.copy(self.clock), self.next_group
        )

    def load_state_dict(self, state: LaggedSourceState) -> None:
        """Restore from :meth:`state_dict`."""
        self.snapshots.load_state_dict(state.snapshots)
        self.ledger.load_state_dict(state.ledger)
        self.clock, self.next_group = copy.copy(state.clock), state.next_group
