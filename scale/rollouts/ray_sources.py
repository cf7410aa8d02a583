"""Rollout engines as Ray actors: the asynchronous loop across processes (and machines), crash-tolerant.

:class:`RayRollouts` offers the same two methods as :class:`scale.rollouts.sources.AsyncRollouts`
(``next_batch(num_trajectories)`` and ``publish(model, version)``), but each engine lives in its own
Ray actor process (a local cluster of its own, ``ray.init(address="local")``, unless ``address=`` names one to
join; ``"auto"`` means what Ray means: the cluster of the last ``ray start`` or one running here). The
driver (learner rank 0) keeps one ``collect`` call in flight per actor while it trains, so sampling and
learning overlap exactly as with threads; the policy lag is measured per trajectory as before.

**Weights.** :meth:`RayRollouts.publish` puts the state dict in the object store once and every later
call carries the reference and its version; an actor that has not loaded that version fetches it
before sampling.
So a replacement actor — built with its factory's weights, not the latest ones — samples from the
current weights from its first call and tags its trajectories with their version.

**Crashes.** A call whose actor process died (``RayActorError``: killed from outside, out of memory, its
node lost) is not retried by Ray (at-most-once actor tasks) but re-queued here: its prompts, with the
same group ids, go to the next free actor. Each prompt's trajectories are therefore delivered exactly
once: never lost, never used twice. The driver then replaces the dead actor itself with a new one built
from the same small factory. Ray's own ``max_restarts`` is not used: it re-runs the constructor with
arguments kept in the object store, which may be gone by then (ray-project/ray#53727, "the actor restart
will fail"), and a restart that never comes leaves its calls pending forever.

**A dead fleet fails loudly.** An engine whose replacements die ``max_restarts`` times in a row, with no
call delivered in between, is given up. :meth:`RayRollouts.next_batch` raises
:class:`~scale.rollouts.sources.RolloutFleetError` once every engine is given up, or when no call at all
was delivered for ``fleet_timeout_s`` seconds while the learner waited (a replacement that never starts,
a cluster without room for it), naming the engines and the last weight version delivered.

Left out on purpose: NCCL weight broadcast to GPU engines (vLLM's weight-transfer API); the object
store serves CPU and single-node runs. Learner ranks stay in the driver's ``torch.distributed`` group
(:mod:`scale.learner.distributed`) rather than being Ray actors.
"""

from __future__ import annotations

import itertools
import os
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import torch

from flashsim.validation import check_int, check_real
from scale.rollouts.collect import RolloutSettings, collect
from scale.rollouts.engines.weights import snapshot
from scale.rollouts.prompts import PromptExample, PromptStream
from scale.rollouts.sources import RolloutFleetError
from scale.rollouts.tokenizer import Tokenizer
from scale.rollouts.trajectory import Rollout, RolloutEngine

_WAIT_SECONDS = 0.05


class EngineActor:
    """One rollout engine in its own process (wrapped by ``ray.remote`` in :class:`RayRollouts`).

    Args:
        build_engine: a small picklable callable returning the engine (called again in each replacement).
        tokenizer, settings: as in :func:`scale.rollouts.collect.collect`.
        crash_on_call: testing only — the actor exits its process on this call.
    """

    def __init__(self, build_engine: Callable[[], RolloutEngine], tokenizer: Tokenizer, settings: RolloutSettings,
                 crash_on_call: int | None = None) -> None:
        torch.set_num_threads(1)
        self.engine, self.tokenizer, self.settings = build_engine(), tokenizer, settings
        self.crash_on_call = crash_on_call
        self.calls = 0
        self.loaded_version: int | None = None  # none yet: the factory's weights are not the learner's

    def collect(self, examples: list[PromptExample], first_group_id: int, weights: list[Any], version: int
                ) -> tuple[list[list[Rollout]], int]:
        """Load ``weights`` (``[ObjectRef]``) unless this actor loaded ``version`` already, then collect.

        Compared with what the actor loaded, not with the engine's version: a fresh engine reports version 0,
        which is also the version of the warmed-up weights the learner publishes first."""
        import ray

        self.calls += 1
        if self.calls == self.crash_on_call:
            os._exit(1)
        if self.loaded_version != version:
            self.engine.update_weights(ray.get(weights[0]), version)
            self.loaded_version = version
        return collect(self.engine, self.tokenizer, examples, self.settings, itertools.count(first_group_id))

    def pid(self) -> int:
        """The actor's process id (to kill it from outside in tests and drills)."""
        return os.getpid()


class RayRollouts:
    """Engine actors feeding the learner; same interface as :class:`scale.rollouts.sources.AsyncRollouts`.

    Args:
        build_engines: one small picklable engine factory per actor, run inside it (e.g. different seeds);
            a replacement actor runs it again.
        tokenizer, stream, settings, group_counter: as in :func:`scale.rollouts.collect.collect`.
        prompts_per_call: prompts per actor call.
        queue_size: most finished groups waiting for the learner; with one call in flight per actor it
            bounds the lag, as the queue of the threaded loop does.
        address: a Ray cluster to join (``"auto"``: Ray's discovery, see the module docstring); ``None`` starts a
            local cluster, never joining a recorded one: ``ray.init(address=None)`` would connect to the address of
            the last ``ray start`` in Ray's temp dir (``ray_current_cluster``) and block there if that cluster is
            gone, or follow ``$RAY_ADDRESS``.
        max_restarts: replacements of an engine's actor in a row without a delivered call before the
            engine is given up.
        fleet_timeout_s: raise :class:`RolloutFleetError` when no call was delivered for this long
            while the learner waited.
        crash_on_call: testing only, see :class:`EngineActor` (applied to the first actor, not to its
            replacements).
    """

    def __init__(self, build_engines: Sequence[Callable[[], RolloutEngine]], tokenizer: Tokenizer,
                 stream: PromptStream, settings: RolloutSettings, group_counter: itertools.count, *,
                 prompts_per_call: int = 16, queue_size: int = 32, address: str | None = None,
                 max_restarts: int = 3, fleet_timeout_s: float = 300.0, crash_on_call: int | None = None) -> None:
        import ray

        if not build_engines:
            raise ValueError("build_engines must hold at least one engine factory; got none")
        check_int("prompts_per_call", prompts_per_call, low=1)
        check_int("queue_size", queue_size, low=1)
        check_int("max_restarts", max_restarts, low=0)
        check_real("fleet_timeout_s", fleet_timeout_s, low=0.0, low_inclusive=False)
        self._ray = ray
        self._started_ray = not ray.is_initialized()
        if self._started_ray:
            _start_ray(ray, ray_address(address))
        self._remote = ray.remote(max_restarts=0, max_task_retries=0, num_cpus=0)(EngineActor)
        self.builders, self._arguments = list(build_engines), (tokenizer, settings)
        self.actors: list[Any] = [self._remote.remote(build, tokenizer, settings, crash_on_call if i == 0 else None)
                                  for i, build in enumerate(self.builders)]
        self.stream, self.settings, self.group_counter = stream, settings, group_counter
        self.prompts_per_call, self.queue_size = prompts_per_call, queue_size
        self.max_restarts, self.fleet_timeout_s = max_restarts, fleet_timeout_s
        self.weights: list[Any] = []
        self.version = -1
        self.ready: deque[list[Rollout]] = deque()
        self.retry: deque[tuple[list[PromptExample], int]] = deque()
        self.in_flight: dict[Any, tuple[int, list[PromptExample], int]] = {}
        self.starting: dict[Any, int] = {}
        self.dropped = 0
        self.failed_calls = 0
        self.restarts = 0
        self.delivered_calls = [0] * len(self.actors)
        self.failures_in_row = [0] * len(self.actors)
        self.last_errors: list[str] = [""] * len(self.actors)
        self.last_delivery = time.monotonic()
        self.last_version_delivered: int | None = None

    def publish(self, model: Any, version: int) -> None:
        """Put the weights in the object store; every later call carries them (loaded where older)."""
        self.weights = [self._ray.put(snapshot(model))]
        self.version = int(version)
        self._dispatch()

    def _dispatch(self) -> None:
        """Give each idle, living actor one call while fewer than ``queue_size`` groups wait (like a
        worker thread, which blocks only once its finished groups cannot enter the full queue)."""
        self._poll_starting(timeout=0)
        busy = {index for index, _, _ in self.in_flight.values()} | set(self.starting.values())
        for index, actor in enumerate(self.actors):
            if actor is None or index in busy or len(self.ready) >= self.queue_size:
                continue
            if self.retry:
                examples, first_group_id = self.retry.popleft()
            else:
                examples = self.stream.take(self.prompts_per_call)
                first_group_id = next(self.group_counter)
                for _ in range(len(examples) - 1):
                    next(self.group_counter)
            ref = actor.collect.remote(examples, first_group_id, self.weights, self.version)
            self.in_flight[ref] = (index, examples, first_group_id)

    def _receive(self, ref: Any) -> None:
        index, examples, first_group_id = self.in_flight.pop(ref)
        try:
            groups, dropped = self._ray.get(ref)
        except self._ray.exceptions.RayActorError as error:  # its process died: the call did not deliver
            self.retry.append((examples, first_group_id))
            self.failed_calls += 1
            self.last_errors[index] = _error_line(error)
            self._replace(index)
            return
        self.ready.extend(groups)
        self.dropped += dropped
        self.delivered_calls[index] += 1
        self.failures_in_row[index] = 0
        self.last_delivery = time.monotonic()
        self.last_version_delivered = max((r.trajectory.version for g in groups for r in g),
                                          default=self.last_version_delivered)

    def _replace(self, index: int) -> None:
        """A new actor for engine ``index`` (its first call loads the current weights), or give it up."""
        self._ray.kill(self.actors[index], no_restart=True)
        self.failures_in_row[index] += 1
        if self.failures_in_row[index] > self.max_restarts:
            self.actors[index] = None
            return
        self.actors[index] = self._remote.remote(self.builders[index], *self._arguments)
        self.starting[self.actors[index].pid.remote()] = index
        self.restarts += 1

    def _poll_starting(self, timeout: float) -> None:
        """Free the replacements that are up for calls (their first call then carries the weights current
        at that moment, not those of when they were started); replace those whose construction failed."""
        if not self.starting:
            return
        done, _ = self._ray.wait(list(self.starting), num_returns=len(self.starting), timeout=timeout)
        for ref in done:
            index = self.starting.pop(ref)
            try:
                self._ray.get(ref)
            except self._ray.exceptions.RayActorError as error:
                self.failed_calls += 1
                self.last_errors[index] = _error_line(error)
                self._replace(index)

    def pids(self) -> list[int | None]:
        """Each engine actor's process id (``None`` for an engine given up); waits until they are up."""
        return [None if a is None else self._ray.get(a.pid.remote()) for a in self.actors]

    def describe(self) -> str:
        """One line per engine: its state, calls delivered, failures in a row and the last error."""
        lines = []
        for index, actor in enumerate(self.actors):
            state = "given up" if actor is None else "alive"
            lines.append(f"  engine {index} (ray actor EngineActor): {state}, {self.delivered_calls[index]} calls "
                         f"delivered, {self.failures_in_row[index]} failed in a row"
                         + (f", last error {self.last_errors[index]}" if self.last_errors[index] else ""))
        return "\n".join(lines)

    def _check_fleet(self, waiting_since: float) -> None:
        """Raise :class:`RolloutFleetError` if every engine is given up or none delivered for too long."""
        stalled = time.monotonic() - max(waiting_since, self.last_delivery)
        if all(a is None for a in self.actors):
            reason = f"every engine actor died more than max_restarts={self.max_restarts} times in a row"
        elif stalled > self.fleet_timeout_s:
            reason = f"no engine delivered a call for {stalled:.0f} s (fleet_timeout_s={self.fleet_timeout_s:g})"
        else:
            return
        raise RolloutFleetError(f"the rollout fleet is dead: {reason}; last weight version delivered: "
                                f"{self.last_version_delivered}\n{self.describe()}")

    def next_batch(self, num_trajectories: int) -> tuple[list[Rollout], dict[str, float]]:
        """Whole groups, in completion order, until at least ``num_trajectories`` trajectories.

        Raises:
            RolloutFleetError: the fleet is dead (see the module docstring).
        """
        if not self.weights:
            raise RuntimeError("publish(model, version) before the first next_batch")
        start = time.perf_counter()
        waiting_since = time.monotonic()
        rollouts: list[Rollout] = []
        while True:
            while self.ready and len(rollouts) < num_trajectories:
                rollouts += self.ready.popleft()
            if len(rollouts) >= num_trajectories:
                break
            self._check_fleet(waiting_since)
            self._dispatch()
            if not self.in_flight:  # every living engine is a replacement starting up
                self._poll_starting(timeout=_WAIT_SECONDS)
                continue
            done, _ = self._ray.wait(list(self.in_flight), num_returns=1, timeout=_WAIT_SECONDS)
            for ref in done:
                self._receive(ref)
        self._dispatch()  # keep the actors sampling while the learner trains
        dropped, self.dropped = self.dropped, 0
        return rollouts, {"rollout/dropped": float(dropped), "time/wait_s": time.perf_counter() - start,
                          "loop/queue_depth": float(len(self.ready)), "loop/failed_calls": float(self.failed_calls)}

    def close(self) -> None:
        """Kill the actors (their calls in flight are abandoned) and stop Ray if this object started it."""
        for actor in self.actors:
            if actor is not None:
                self._ray.kill(actor, no_restart=True)
        self.in_flight.clear()
        self.starting.clear()
        if self._started_ray:
            self._ray.shutdown()


RAY_START_TRIES = 3
"""Tries to start a local Ray cluster: Ray gives its raylet a fixed 30 s to register, which a machine under heavy
load (2 cores at load 16) missed several times in a row."""


def _start_ray(ray: Any, address: str) -> None:
    """``ray.init(address)``; a local cluster whose node timed out during start-up is started again."""
    for attempt in range(1, RAY_START_TRIES + 1):
        try:
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
            return
        except Exception as error:  # Ray raises a bare Exception for this
            if address != "local" or "timed out during startup" not in str(error) or attempt == RAY_START_TRIES:
                raise
            ray.shutdown()


def ray_address(address: str | None) -> str:
    """What :class:`RayRollouts` passes to ``ray.init``: ``address`` when set, else ``"local"`` (a cluster of its
    own; ``None`` would make Ray read a possibly stale ``ray_current_cluster`` record or ``$RAY_ADDRESS``)."""
    return "local" if address is None else address


def _error_line(error: BaseException) -> str:
    """``Type: first line of the message`` (Ray's messages run to many lines)."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}"
