"""Where the learner's batches come from: a synchronous collector, or asynchronous rollout workers.

Every source is a :class:`RolloutSource`: ``next_batch(num_trajectories) -> (rollouts, info)``,
``publish(model, version)`` and ``close()``. ``info``
holds ``time/generate_s`` (seconds the engines spent generating and scoring since the previous batch) and
``time/wait_s`` (seconds the learner was blocked waiting for this batch: in the synchronous loop the
generation itself). Ray actors (:mod:`scale.rollouts.ray_sources`) report ``time/wait_s`` only.

**Synchronous** (:class:`SyncRollouts`): generate the batch with the current weights, then update —
every trajectory is on-policy (lag 0) and the learner and engine take turns.

**Asynchronous** (:class:`AsyncRollouts`): ``num_workers`` threads, each with its own engine, loop
``take prompts → generate → score → put groups on a bounded queue`` while the learner trains. A worker
blocks when the queue is full, so the policy lag is set by the queue capacity plus the groups in
flight: a trajectory sampled with weight version v and consumed by the update that starts from
version k has lag ``k − v``, measured per trajectory and logged. Published weights reach a worker's
engine at its next call. (Threads suffice on CPU: torch releases the GIL inside its kernels.)

A worker thread that raises ends the run: :meth:`AsyncRollouts.next_batch` raises
:class:`RolloutFleetError` naming the worker, its error and the last weight version delivered (the
CLI prints it with the ``--resume`` command and exits non-zero).

The same two methods are offered by :class:`scale.rollouts.ray_sources.RayRollouts`, which puts each engine
in a Ray actor process (``loop.placement: ray``).

**Injected lag** (:class:`InjectedLag`, ``rollout.injected_lag: L``) wraps any of them: the engines are given
the weights of L updates ago instead of the newest, so the synchronous loop trains on trajectories exactly L
updates stale (fewer during the first L updates), as the simulator's fixed lag does. The trajectories carry
the version and log-probs of the weights that sampled them, so the measured lag, the importance ratios and
the gate see the real staleness.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import Any, Protocol

import torch

from flashsim.validation import check_int
from scale.rollouts.collect import RolloutSettings, collect
from scale.rollouts.engines.weights import snapshot
from scale.rollouts.prompts import PromptStream
from scale.rollouts.tokenizer import Tokenizer
from scale.rollouts.trajectory import Rollout, RolloutEngine

_POLL_SECONDS = 0.05


class RolloutSource(Protocol):
    """What the trainer asks of a rollout source (:class:`SyncRollouts`, :class:`AsyncRollouts`,
    :class:`~scale.rollouts.ray_sources.RayRollouts`, :class:`InjectedLag`); a new source needs these three
    methods and nothing else. The trainer calls ``publish`` once after each update, ``next_batch`` once before
    it, and ``close`` once when the run ends or fails."""

    def next_batch(self, num_trajectories: int) -> tuple[list[Rollout], dict[str, float]]:
        """At least ``num_trajectories`` scored trajectories, whole groups only, each carrying the version
        and log-probs of the weights that sampled it; and ``info``, namespaced floats for the metrics row
        (``time/wait_s``: seconds the caller was blocked; see the module docstring for the rest).

        Raises:
            RolloutFleetError: the source can no longer deliver (the message says why).
        """
        ...

    def publish(self, model: Any, version: int) -> None:
        """Hand the source weights ``version`` (a module or a state dict, copied before this returns: the
        caller goes on training it); trajectories sampled later use them, or older ones when lag is
        injected."""
        ...

    def close(self) -> None:
        """Stop sampling and release the engines' threads, actors or processes; safe after a failure."""
        ...


class RolloutFleetError(RuntimeError):
    """The rollout engines can no longer deliver trajectories; the message names them and the last
    weight version delivered. The run stops; its last checkpoint is intact and ``--resume`` continues."""


class SyncRollouts:
    """Generate each batch on demand with the newest weights (lag 0)."""

    def __init__(self, engine: RolloutEngine, tokenizer: Tokenizer, stream: PromptStream,
                 settings: RolloutSettings, group_counter: itertools.count) -> None:
        self.engines = [engine]
        self.tokenizer, self.stream, self.settings, self.group_counter = tokenizer, stream, settings, group_counter

    def next_batch(self, num_trajectories: int) -> tuple[list[Rollout], dict[str, float]]:
        start = time.perf_counter()
        examples = self.stream.take(num_trajectories // self.settings.group_size)
        groups, dropped = collect(self.engines[0], self.tokenizer, examples, self.settings, self.group_counter)
        seconds = time.perf_counter() - start
        return [r for g in groups for r in g], {"rollout/dropped": float(dropped), "time/generate_s": seconds,
                                                "time/wait_s": seconds}

    def publish(self, model: Any, version: int) -> None:
        self.engines[0].update_weights(model, version)

    def close(self) -> None:
        pass


class _Worker(threading.Thread):
    """Loops take → generate → score → put until stopped; keeps the first exception for the learner."""

    def __init__(self, owner: AsyncRollouts, engine: RolloutEngine, index: int) -> None:
        super().__init__(name=f"rollout-worker-{index}", daemon=True)
        self.owner, self.engine = owner, engine
        self.error: BaseException | None = None

    def run(self) -> None:
        owner = self.owner
        try:
            while not owner.stopping.is_set():
                start = time.perf_counter()
                examples = owner.stream.take(owner.prompts_per_call)
                groups, dropped = collect(self.engine, owner.tokenizer, examples, owner.settings, owner.group_counter)
                with owner.lock:
                    owner.dropped += dropped
                    owner.generate_seconds += time.perf_counter() - start
                for group in groups:
                    while not owner.stopping.is_set():
                        try:
                            owner.queue.put(group, timeout=_POLL_SECONDS)
                            break
                        except queue.Full:
                            continue
        except BaseException as error:  # surfaced in the learner thread by next_batch
            self.error = error


class AsyncRollouts:
    """Rollout worker threads feeding a bounded queue of prompt groups.

    Args:
        engines: one engine per worker (engines are not shared between threads).
        tokenizer, stream, settings, group_counter: as in :func:`scale.rollouts.collect.collect`.
        prompts_per_call: prompts per engine call.
        queue_size: queue capacity in groups.
    """

    def __init__(self, engines: Sequence[RolloutEngine], tokenizer: Tokenizer, stream: PromptStream,
                 settings: RolloutSettings, group_counter: itertools.count, *, prompts_per_call: int,
                 queue_size: int) -> None:
        self.engines = list(engines)
        self.tokenizer, self.stream, self.settings, self.group_counter = tokenizer, stream, settings, group_counter
        self.prompts_per_call = prompts_per_call
        self.queue: queue.Queue[list[Rollout]] = queue.Queue(maxsize=queue_size)
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.dropped = 0
        self.generate_seconds = 0.0
        """Seconds the workers spent in engine calls since the last batch (summed over workers)."""
        self.last_version_delivered: int | None = None
        self.workers = [_Worker(self, engine, i) for i, engine in enumerate(self.engines)]
        for worker in self.workers:
            worker.start()

    def _check_workers(self) -> None:
        failed = [w for w in self.workers if w.error is not None]
        if failed:
            self.close()
            error = failed[0].error
            names = ", ".join(f"{w.name} ({type(w.error).__name__})" for w in failed)
            raise RolloutFleetError(f"the rollout fleet is dead: engine thread {names} raised "
                                    f"{type(error).__name__}: {error}; last weight version delivered: "
                                    f"{self.last_version_delivered}") from error
        if not any(w.is_alive() for w in self.workers):
            raise RolloutFleetError("the rollout fleet is dead: all rollout workers stopped without an error")

    def next_batch(self, num_trajectories: int) -> tuple[list[Rollout], dict[str, float]]:
        """Groups from the queue until at least ``num_trajectories`` trajectories (whole groups)."""
        rollouts: list[Rollout] = []
        start = time.perf_counter()
        while len(rollouts) < num_trajectories:
            try:
                group = self.queue.get(timeout=_POLL_SECONDS)
            except queue.Empty:
                self._check_workers()
                continue
            rollouts += group
            versions = [r.trajectory.version for r in group]
            self.last_version_delivered = max(versions, default=self.last_version_delivered)
        with self.lock:
            dropped, self.dropped = self.dropped, 0
            generate_seconds, self.generate_seconds = self.generate_seconds, 0.0
        return rollouts, {"rollout/dropped": float(dropped), "time/generate_s": generate_seconds,
                          "time/wait_s": time.perf_counter() - start,
                          "loop/queue_depth": float(self.queue.qsize())}

    def publish(self, model: Any, version: int) -> None:
        for engine in self.engines:
            engine.update_weights(model, version)

    def close(self) -> None:
        """Stop the workers (they finish their current engine call) and drop what is queued."""
        self.stopping.set()
        while any(w.is_alive() for w in self.workers):
            try:
                self.queue.get_nowait()
            except queue.Empty:
                time.sleep(_POLL_SECONDS)


class InjectedLag:
    """A rollout source whose engines sample with the weights published ``lag`` updates ago.

    Keeps a copy of the last ``lag + 1`` published weights; publishing version k hands the source version
    ``max(k − lag, first)``, the oldest kept. The kept copies are part of the trainer's checkpoint
    (:meth:`state_dict`), so a resumed synchronous run reproduces the uninterrupted one.

    Args:
        source: a synchronous, threaded or Ray source (its engines already hold ``weights``).
        lag: L ≥ 1, in updates.
        weights, version: what the source's engines hold now (a module or a state dict, and its version).
    """

    def __init__(self, source: RolloutSource, lag: int, weights: Any, version: int) -> None:
        self.source, self.lag = source, check_int("injected_lag", lag, low=1)
        self.kept: deque[tuple[int, dict[str, torch.Tensor]]] = deque([(int(version), snapshot(weights))],
                                                                      maxlen=lag + 1)

    def next_batch(self, num_trajectories: int) -> tuple[list[Rollout], dict[str, float]]:
        return self.source.next_batch(num_trajectories)

    def publish(self, model: Any, version: int) -> None:
        """Keep ``model``'s weights as ``version``; give the engines the oldest kept (``lag`` versions back)."""
        self.kept.append((int(version), snapshot(model)))
        self.source.publish(self.kept[0][1], self.kept[0][0])

    def close(self) -> None:
        self.source.close()

    def state_dict(self) -> list[tuple[int, dict[str, torch.Tensor]]]:
        """The kept weights, oldest first, with their versions."""
        return list(self.kept)

    def load_state_dict(self, kept: Sequence[tuple[int, dict[str, torch.Tensor]]]) -> None:
        """Restore :meth:`state_dict` and give the engines its oldest weights."""
        self.kept = deque(((int(v), dict(w)) for v, w in kept), maxlen=self.lag + 1)
        self.source.publish(self.kept[0][1], self.kept[0][0])


def lag_metrics(rollouts: Sequence[Rollout], learner_version: int) -> dict[str, float]:
    """Policy lag ``k − v`` of each trajectory consumed by the update starting from version ``k``."""
    lags = [learner_version - r.trajectory.version for r in rollouts]
    return {"lag/mean": sum(lags) / len(lags), "lag/max": float(max(lags)), "lag/min": float(min(lags))}
