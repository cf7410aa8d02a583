"""Rollout sources of the simulator: snapshots θ_k, the tabular rollout loop, the ledger, injected lag.

A source answers the verbs of ``scale``'s sources: ``publish(snapshot)`` after every learner update and
``next_batch()`` for the learner's next :class:`Batch`. The parts (the event loop,
:mod:`flashsim.sim.events`, uses them too): :class:`Snapshot` (the behaviour policy of version k as a
log-prob table and its CDF, built once) and :class:`SnapshotStore`; :func:`roll_out`, **the** tabular
rollout loop (inverse-CDF actions, ``log μ(a_t | o_t)`` stored at sampling time, never recomputed),
run on a gymnasium vector env by :class:`Sampler` and on the toy envs' dynamics core by
:mod:`flashsim.variance.sampling`; the :class:`Ledger` (no trajectory lost or used twice); and
:class:`LaggedSource`, injected lag (update k trains on θ_{k − L}, L fixed or random).

Randomness of a collection, for both callers of :func:`roll_out`: the env's own seeded draws, and one
action uniform per (step, trajectory), ``[H, n]``, drawn before the loop.

Deliberately left out: non-integer observations (``Discrete`` spaces only), ``info`` keys beyond
``tool_call`` and ``duration``.

Glossary: B trajectories per batch, G group size, H horizon, L lag, k learner update (version),
O observations, A actions, V versions in one collection.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, fields

import numpy as np
import torch

from flashsim.sim.config import AlgorithmConfig, FixedLag, RandomLag, TimingModel
from flashsim.validation import check_int

# ----------------------------------------------------------------------------- snapshots


@dataclass(frozen=True)
class Snapshot:
    """The published behaviour policy of one version.

    Shape: log_probs ``[O, A] float64``, rows log-normalised; cumulative ``[O, A] float64``, the row-wise
    CDF with its last column exactly 1 (inverse-CDF sampling never runs past the last action).
    """

    version: int
    log_probs: np.ndarray
    cumulative: np.ndarray

    @classmethod
    def of_log_probs(cls, log_probs: np.ndarray, version: int) -> Snapshot:
        """Snapshot of the table ``log_probs`` (copied as float64) as version ``version``."""
        log_probs = np.array(log_probs, dtype=np.float64)
        cumulative = np.cumsum(np.exp(log_probs), axis=1)
        cumulative[:, -1] = 1.0
        log_probs.flags.writeable = cumulative.flags.writeable = False
        return cls(version, log_probs, cumulative)

    @classmethod
    def of_policy(cls, policy: torch.nn.Module, version: int) -> Snapshot:
        """Snapshot of ``policy`` (any module with ``all_logits() -> [O, A]``) as version ``version``.

        ``log_softmax`` runs in the policy's own dtype, so that at lag 0 the stored behaviour log-probs
        equal the learner's bit for bit (ratio exactly 1, KL exactly 0).
        """
        with torch.no_grad():
            log_probs = torch.log_softmax(policy.all_logits(), dim=-1).double().numpy()
        return cls.of_log_probs(log_probs, version)


@dataclass
class SnapshotStoreState:
    """The kept snapshots, oldest first, and how many to keep."""

    keep: int
    snapshots: list[Snapshot]


class SnapshotStore:
    """The last ``keep`` published snapshots, looked up by version; versions before 0 resolve to θ_0
    (a lag beyond the updates so far means "the initial policy"), so lag models ask for ``k − L`` freely.

    >>> store = SnapshotStore(keep=2)
    >>> for k in range(3):
    ...     store.publish(Snapshot.of_log_probs(np.log([[0.5, 0.5]]), k))
    >>> store.latest.version, store.get(1).version, store.oldest
    (2, 1, 1)
    """

    def __init__(self, keep: int) -> None:
        self.keep = check_int("keep", keep, low=1)
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


# ----------------------------------------------------------------------------- trajectories and the loop


@dataclass
class TrajectoryArrays:
    """Columns of B trajectories (one row each), padded to H token slots.

    Shape: observations, actions ``[B, H] int64`` and behavior_log_probs ``[B, H] float64`` (0 on
    padding); lengths, tool_calls, prompts ``[B] int64``; rewards, durations ``[B] float64``; truncated ``[B] bool``.
    """

    observations: np.ndarray
    actions: np.ndarray
    behavior_log_probs: np.ndarray
    lengths: np.ndarray
    rewards: np.ndarray
    tool_calls: np.ndarray
    truncated: np.ndarray
    prompts: np.ndarray
    durations: np.ndarray

    def __len__(self) -> int:
        return int(self.lengths.shape[0])

    def take(self, index: np.ndarray | slice) -> TrajectoryArrays:
        """The rows ``index`` (a copy for index arrays, a view for slices)."""
        return TrajectoryArrays(**{f.name: getattr(self, f.name)[index] for f in fields(self)})

    @classmethod
    def empty(cls, size: int, horizon: int) -> TrajectoryArrays:
        """Zero-filled columns for ``size`` trajectories."""
        token_int, token_float = np.zeros((size, horizon), np.int64), np.zeros((size, horizon))
        return cls(
            token_int, token_int.copy(), token_float, np.zeros(size, np.int64), np.zeros(size),
            np.zeros(size, np.int64), np.zeros(size, bool), np.zeros(size, np.int64), np.zeros(size),
        )

    def put(self, index: np.ndarray | slice, rows: TrajectoryArrays) -> None:
        """Write ``rows`` into the rows ``index`` in place."""
        for f in fields(self):
            getattr(self, f.name)[index] = getattr(rows, f.name)


@dataclass
class Batch:
    """A learner batch: trajectories plus where they came from.

    Shape: ids, versions, group_ids ``[B] int64`` — ledger ids, the snapshot version that sampled each,
    and the group (prompt draw) each belongs to (siblings are adjacent).
    """

    ids: np.ndarray
    versions: np.ndarray
    group_ids: np.ndarray
    trajectories: TrajectoryArrays

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    def take(self, index: np.ndarray | slice) -> Batch:
        """The rows ``index``."""
        return Batch(self.ids[index], self.versions[index], self.group_ids[index], self.trajectories.take(index))


def roll_out(
    snapshots: list[Snapshot], which: np.ndarray, observations: np.ndarray, uniforms: np.ndarray,
    step: Callable[[np.ndarray, np.ndarray, int], tuple],
) -> TrajectoryArrays:
    """Roll out n trajectories from their first observations; trajectory i acts with ``snapshots[which[i]]``.

    At step t every running trajectory i takes the action of its snapshot's CDF at ``uniforms[t, i]``
    and stores its observation, action and ``log μ(a | o)``; ``step(active, actions, t)`` advances the
    env for the running rows ``active`` (a slice or indices) only and returns their ``(observation,
    reward, terminated, truncated, tool_call, duration)``. Only running trajectories are stepped.

    Shape:
        which, observations ``[n] int64``; uniforms ``[H, n]``; ``step`` returns ``[len(active)]`` arrays
        (``tool_call``, ``duration`` may be scalars). Returns n rows of H slots (``prompts`` left 0).
    """
    horizon, n = uniforms.shape
    log_probs = np.concatenate([snapshot.log_probs for snapshot in snapshots])  # [V·O, A]: row v·O + o
    cumulative = np.concatenate([snapshot.cumulative for snapshot in snapshots])
    first_row = which * snapshots[0].log_probs.shape[0]
    out = TrajectoryArrays.empty(n, horizon)
    # The running rows: a slice (views, no copies) until the first trajectory ends, then their indices.
    active, obs = slice(0, n), np.asarray(observations, dtype=np.int64)
    for t in range(horizon):
        row = first_row[active] + obs
        # Inverse CDF: the first action with cumulative ≥ u (< A, as the last column is exactly 1).
        action = (cumulative[row] < uniforms[t, active, None]).sum(axis=1)
        out.observations[:, t][active], out.actions[:, t][active] = obs, action  # column views: numpy's fast path
        out.behavior_log_probs[:, t][active] = log_probs[row, action]
        next_obs, reward, terminated, truncated, tool_call, duration = step(active, action, t)
        out.rewards[active] += reward
        out.tool_calls[active] += tool_call
        out.durations[active] += duration
        out.lengths[active] += 1
        out.truncated[active] = truncated & ~terminated
        running = ~(terminated | truncated)
        obs = np.asarray(next_obs, dtype=np.int64)
        if not running.all():
            active, obs = np.arange(n)[active][running], obs[running]
            if active.size == 0:
                break
    return out


class Sampler:
    """Samples trajectories from a gymnasium vector env (:class:`~flashsim.sim.config.SimEnv`) with :func:`roll_out`.

    Each collection reseeds the sub-envs with seeds drawn from the run's generator, pins their prompts
    (toy envs), then draws the ``[H, n]`` action uniforms. The dynamics are the env's own, so what the
    simulator trains on is exactly what ``gymnasium.make`` gives a user.

    Args:
        env: the vector env and what is known about it.
        step_duration: seconds per step of envs that do not report ``info["duration"]``.
        logprob_noise: std of Gaussian noise added to the *stored* behaviour log-probs (models the
            numerical gap between an inference engine and the learner; the actions are still drawn
            from the true snapshot). Noisy values are capped at 0 so they stay log-probabilities.
    """

    def __init__(self, env, step_duration: float = 1.0, logprob_noise: float = 0.0) -> None:
        self.env = env
        self.step_duration = float(step_duration)
        self.logprob_noise = float(logprob_noise)
        self.steps = 0  # env steps simulated (for throughput reports)

    @property
    def horizon(self) -> int:
        """H, the number of token slots of every trajectory."""
        return self.env.horizon

    def sample(self, snapshot: Snapshot, prompts: np.ndarray, rng: np.random.Generator) -> TrajectoryArrays:
        """One trajectory per entry of ``prompts`` (at most ``num_envs``), all acting with ``snapshot``."""
        prompts = np.asarray(prompts, dtype=np.int64)
        return self.sample_mixed([snapshot], np.zeros(prompts.shape[0], np.int64), prompts, rng)

    def sample_mixed(
        self, snapshots: list[Snapshot], which: np.ndarray, prompts: np.ndarray, rng: np.random.Generator
    ) -> TrajectoryArrays:
        """Trajectory i acts with ``snapshots[which[i]]`` and answers ``prompts[i]``.

        Shape: which, prompts ``[n] int64`` with n ≤ ``num_envs``. Returns n rows.
        """
        vector_env, N, n = self.env.vector_env, self.env.num_envs, prompts.shape[0]
        if n > N:
            raise ValueError(f"at most {N} trajectories per collection (num_envs), got {n}")
        seeds = rng.integers(0, 2**63, size=N)
        options = {"prompt": np.resize(prompts, N)} if self.env.pins_prompts else None
        observations, _ = vector_env.reset(seed=seeds.tolist(), options=options)
        uniforms = rng.random((self.horizon, n))
        actions = np.zeros(N, np.int64)  # sub-envs without a running trajectory take action 0

        def step(active: np.ndarray, action: np.ndarray, t: int) -> tuple:
            actions[:] = 0
            actions[active] = action
            observation, reward, terminated, truncated, info = vector_env.step(actions)
            tool_call = info["tool_call"][active] if "tool_call" in info else 0
            duration = info["duration"][active] if "duration" in info else self.step_duration
            return observation[active], reward[active], terminated[active], truncated[active], tool_call, duration

        out = roll_out(snapshots, which, observations[:n], uniforms, step)
        out.prompts[:] = prompts if self.env.pins_prompts else 0
        self.steps += int(out.lengths.sum())
        if self.logprob_noise > 0:
            mask = np.arange(self.horizon) < out.lengths[:, None]
            noise = self.logprob_noise * rng.standard_normal((n, self.horizon))
            out.behavior_log_probs[:] = np.where(mask, np.minimum(out.behavior_log_probs + noise, 0.0), 0.0)
        return out


# ----------------------------------------------------------------------------- the ledger

IN_FLIGHT, QUEUED, TAKEN, CONSUMED, REJECTED, CRASHED = 1, 2, 3, 4, 5, 6
STATUS_NAMES = {IN_FLIGHT: "in_flight", QUEUED: "queued", TAKEN: "taken", CONSUMED: "consumed",
                REJECTED: "rejected", CRASHED: "crashed"}


class AccountingError(RuntimeError):
    """A trajectory was lost, used twice, or moved out of a state it was not in."""


@dataclass
class LedgerState:
    """A ledger's content: the status of every started id (``[started] int8``) and its counters."""

    status: np.ndarray
    completed: int
    crashed: int
    stragglers: int


class Ledger:
    """Status of every trajectory id (ids are 0, 1, 2, ... in start order). Each moves one way only::

        IN_FLIGHT ──complete──▶ QUEUED ──take──▶ TAKEN ──settle──▶ CONSUMED (admitted by the gate)
            │                                              └──────▶ REJECTED (rejected by the gate)
            └──crash──▶ CRASHED (dropped with its worker; the task is issued again under a new id)

    Invariant (:meth:`check`, and a hypothesis stateful test): every started trajectory is in exactly
    one state and every transition starts from the state it claims; a trajectory taken twice, completed
    twice or settled untaken raises :class:`AccountingError` at once. One status byte per trajectory.

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
        """``count`` new IN_FLIGHT ids (with ``taken``: completed and TAKEN at once, as in :class:`LaggedSource`)."""
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
        """Allocate one new IN_FLIGHT id (the event loop's scalar fast path)."""
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
        """Verify the invariant; optionally that the event loop's in-flight and queued ids match the ledger's.

        Raises:
            AccountingError: a trajectory is unaccounted for, or the event loop and the ledger disagree.
        """
        counts = self.counts()
        if sum(v for k, v in counts.items() if k != "started") != self.started:
            raise AccountingError(f"{self.started} trajectories started but the states hold {counts}")
        for name, code, expected in (("in_flight", IN_FLIGHT, in_flight), ("queued", QUEUED, queued)):
            if expected is not None:
                actual = self.ids_in(code)
                if not np.array_equal(np.sort(np.asarray(expected, dtype=np.int64)), actual):
                    raise AccountingError(f"event loop's {name} ids {sorted(expected)} != ledger's {actual.tolist()}")
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
        raise AccountingError(f"cannot move to {action}: expected every id {STATUS_NAMES[source]}, found {states}")

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


def _distinct(ids: np.ndarray) -> bool:
    """True when no id repeats (O(n) for the common consecutive block, else a sort)."""
    if ids[-1] - ids[0] == ids.size - 1 and np.all(np.diff(ids) == 1):
        return True
    ordered = np.sort(ids)
    return bool(np.all(ordered[1:] != ordered[:-1]))


# ----------------------------------------------------------------------------- injected lag


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
        # Busy time is a sum of many durations, capacity one product: when the workers never idle,
        # 1 − busy/capacity rounds to about −1e-15. Idle time is never negative, so it is cut at 0.
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

    Update k (θ_k → θ_{k+1}) trains on trajectories of θ_{k − L}: L fixed (θ_0 while k < L, the
    warm-up) or drawn per group. The clock is that of B synchronous workers: a batch takes as long as
    its slowest trajectory, then the learner updates. Lag that *emerges* from timing:
    :class:`flashsim.sim.events.EventLoop`.

    Args:
        model: the lag model.
        algorithm: batch size B and group size G.
        sampler: samples trajectories from the env.
        timing: update time for the simulated clock.
        train_prompts: prompts to draw from (uniformly, one per group).
        rng: the run's generator.
    """

    def __init__(
        self, model: FixedLag | RandomLag, algorithm: AlgorithmConfig, sampler: Sampler,
        timing: TimingModel, train_prompts: np.ndarray, rng: np.random.Generator,
    ) -> None:
        self.model, self.sampler, self.timing, self.rng = model, sampler, timing, rng
        self.batch_size, self.group_size = algorithm.batch_size, algorithm.group_size
        self.train_prompts = np.asarray(train_prompts, dtype=np.int64)
        self.snapshots = SnapshotStore(keep=model.max_lag + 1)
        self.ledger = Ledger()
        self.clock = SimClock()
        self.next_group = 0

    def publish(self, snapshot: Snapshot) -> None:
        """The learner finished an update (taking ``update_time``) and published ``snapshot`` (θ_0: the start)."""
        if snapshot.version > 0:
            self.clock.now += self.timing.update_time
            self.clock.learner_busy += self.timing.update_time
        self.snapshots.publish(snapshot)

    def next_batch(self) -> Batch:
        """The batch for update k (the newest published version): B trajectories, each sampled by θ_{k − L}."""
        k, G = self.snapshots.latest.version, self.group_size
        groups = self.batch_size // G
        versions = np.maximum(k - draw_lags(self.model, groups, self.rng), 0)
        prompts = self.rng.choice(self.train_prompts, size=groups)
        versions, prompts = np.repeat(versions, G), np.repeat(prompts, G)
        group_ids = np.repeat(np.arange(self.next_group, self.next_group + groups, dtype=np.int64), G)
        self.next_group += groups
        kept, which = np.unique(versions, return_inverse=True)
        snapshots = [self.snapshots.get(version) for version in kept]
        trajectories = self.sampler.sample_mixed(snapshots, which.astype(np.int64), prompts, self.rng)
        ids = self.ledger.start(self.batch_size, taken=True)
        generation = float(trajectories.durations.max())
        self.clock.now += generation
        self.clock.learner_wait += generation
        self.clock.worker_busy += float(trajectories.durations.sum())
        return Batch(ids, versions, group_ids, trajectories)

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
