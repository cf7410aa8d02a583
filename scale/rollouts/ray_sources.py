"""Rollout engines as Ray actors: the asynchronous loop across processes (and machines), crash-tolerant.

:class:`RayRollouts` offers the same two methods as :class:`scale.rollouts.sources.AsyncRollouts`
(``next_batch(num_trajectories)`` and ``publish(model, version)``), but each engine lives in its own
Ray actor process (``ray.init()`` starts a local cluster; ``address=`` joins an existing one). The
driver (learner rank 0) keeps one ``collect`` call in flight per actor while it trains, so sampling and
learning overlap exactly as with threads; the policy lag is measured per trajectory as before.

**Weights.** :meth:`RayRollouts.publish` puts the state dict in the object store once and every later
call carries the reference and its version; an actor whose engine is older fetches it before sampling.
So a restarted actor — which comes back with the weights it was built with, not the latest ones —
always samples from the current weights and tags its trajectories with their version.

**Crashes.** Actors are created with ``max_restarts``; a call whose actor died (``RayActorError``,
including ``ActorUnavailableError`` while it restarts) is not retried by Ray (at-most-once actor tasks)
but re-queued here: its prompts, with the same group ids, go to the next free actor. Each prompt's
trajectories are therefore delivered exactly once: never lost, never used twice.

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

from flashsim.validation import check_int
from scale.rollouts.collect import RolloutSettings, collect
from scale.rollouts.prompts import PromptExample, PromptStream
from scale.rollouts.tokenizer import Tokenizer
from scale.rollouts.trajectory import Rollout, RolloutEngine

RESTART_BACKOFF_SECONDS = 0.5
"""After a failed call, wait this long before sending the actor more work (it is restarting)."""
_WAIT_SECONDS = 0.05


class EngineActor:
    """One rollout engine in its own process (wrapped by ``ray.remote`` in :class:`RayRollouts`).

    Args:
        build_engine: a picklable callable returning the engine (called again after a restart).
        tokenizer, settings: as in :func:`scale.rollouts.collect.collect`.
        crash_on_call: testing only — the first incarnation of the actor exits the process on this call.
    """

    def __init__(self, build_engine: Callable[[], RolloutEngine], tokenizer: Tokenizer, settings: RolloutSettings,
                 crash_on_call: int | None = None) -> None:
        import ray

        torch.set_num_threads(1)
        self.engine, self.tokenizer, self.settings = build_engine(), tokenizer, settings
        self.crash_on_call = None if ray.get_runtime_context().was_current_actor_reconstructed else crash_on_call
        self.calls = 0

    def collect(self, examples: list[PromptExample], first_group_id: int, weights: list[Any], version: int
                ) -> tuple[list[list[Rollout]], int]:
        """Load ``weights`` (``[ObjectRef]``) if the engine is older than ``version``, then collect."""
        import ray

        self.calls += 1
        if self.calls == self.crash_on_call:
            os._exit(1)
        if self.engine.version != version:
            self.engine.update_weights(ray.get(weights[0]), version)
        return collect(self.engine, self.tokenizer, examples, self.settings, itertools.count(first_group_id))

    def restarted(self) -> bool:
        import ray

        return ray.get_runtime_context().was_current_actor_reconstructed


class RayRollouts:
    """Engine actors feeding the learner; same interface as :class:`scale.rollouts.sources.AsyncRollouts`.

    Args:
        build_engines: one picklable engine factory per actor, run inside it (e.g. different seeds).
        tokenizer, stream, settings, group_counter: as in :func:`scale.rollouts.collect.collect`.
        prompts_per_call: prompts per actor call.
        queue_size: most finished groups waiting for the learner; with one call in flight per actor it
            bounds the lag, as the queue of the threaded loop does.
        address: a Ray cluster to join (``None``: start a local one, or use the one already running).
        max_restarts: restarts Ray grants each actor.
        crash_on_call: testing only, see :class:`EngineActor` (applied to the first actor).
    """

    def __init__(self, build_engines: Sequence[Callable[[], RolloutEngine]], tokenizer: Tokenizer,
                 stream: PromptStream, settings: RolloutSettings, group_counter: itertools.count, *,
                 prompts_per_call: int = 16, queue_size: int = 32, address: str | None = None,
                 max_restarts: int = 3, crash_on_call: int | None = None) -> None:
        import ray

        if not build_engines:
            raise ValueError("build_engines must hold at least one engine factory; got none")
        check_int("prompts_per_call", prompts_per_call, low=1)
        check_int("queue_size", queue_size, low=1)
        self._ray = ray
        self._started_ray = not ray.is_initialized()
        if self._started_ray:
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
        remote = ray.remote(max_restarts=max_restarts, max_task_retries=0, num_cpus=0)(EngineActor)
        self.actors = [remote.remote(build, tokenizer, settings, crash_on_call if i == 0 else None)
                       for i, build in enumerate(build_engines)]
        self.stream, self.settings, self.group_counter = stream, settings, group_counter
        self.prompts_per_call, self.queue_size = prompts_per_call, queue_size
        self.weights: list[Any] = []
        self.version = -1
        self.ready: deque[list[Rollout]] = deque()
        self.retry: deque[tuple[list[PromptExample], int]] = deque()
        self.in_flight: dict[Any, tuple[int, list[PromptExample], int]] = {}
        self.not_before = [0.0] * len(self.actors)
        self.dropped = 0
        self.failed_calls = 0
        self.delivered_calls = [0] * len(self.actors)

    def publish(self, model: Any, version: int) -> None:
        """Put the weights in the object store; every later call carries them (loaded where older)."""
        state = model.state_dict() if isinstance(model, torch.nn.Module) else model
        self.weights = [self._ray.put({k: v.detach().to("cpu", copy=True) for k, v in state.items()})]
        self.version = int(version)
        self._dispatch()

    def _dispatch(self) -> None:
        """Give each idle, available actor one call while fewer than ``queue_size`` groups wait (like a
        worker thread, which blocks only once its finished groups cannot enter the full queue)."""
        busy = {index for index, _, _ in self.in_flight.values()}
        for index, actor in enumerate(self.actors):
            if index in busy or time.monotonic() < self.not_before[index] or len(self.ready) >= self.queue_size:
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
        except self._ray.exceptions.RayActorError:  # died or restarting: the call did not deliver
            self.retry.append((examples, first_group_id))
            self.failed_calls += 1
            self.not_before[index] = time.monotonic() + RESTART_BACKOFF_SECONDS
            return
        self.ready.extend(groups)
        self.dropped += dropped
        self.delivered_calls[index] += 1

    def next_batch(self, num_trajectories: int) -> tuple[list[Rollout], dict[str, float]]:
        """Whole groups, in completion order, until at least ``num_trajectories`` trajectories."""
        if not self.weights:
            raise RuntimeError("publish(model, version) before the first next_batch")
        start = time.perf_counter()
        rollouts: list[Rollout] = []
        while True:
            while self.ready and len(rollouts) < num_trajectories:
                rollouts += self.ready.popleft()
            if len(rollouts) >= num_trajectories:
                break
            self._dispatch()
            if not self.in_flight:  # every actor is backing off after a failure
                time.sleep(_WAIT_SECONDS)
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
            self._ray.kill(actor, no_restart=True)
        self.in_flight.clear()
        if self._started_ray:
            self._ray.shutdown()
