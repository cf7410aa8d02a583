"""A rollout engine in a child process of its own, driven over a pipe: how a ``torchrun`` rank hosts vLLM.

vLLM starts a ``torch.distributed`` world of its own (``init_distributed_environment``). Inside a
``torchrun`` learner rank, the default process group already exists, so vLLM builds its groups on the
learners' world (``torch.distributed.new_group`` is collective) and blocks until the other ranks join,
which they never do. vLLM's answer for training alongside inference is to keep them in separate
processes (its RLHF examples; ``external_launcher`` is the other way round: every rank builds an engine
on the shared world). So :class:`EngineProcess` builds the engine in a ``spawn``-ed child — a fresh
interpreter, without the parent's process group — whose environment has ``torchrun``'s variables
removed (:data:`LAUNCHER_ENVIRONMENT`), so nothing in it can mistake it for a learner rank.

It offers the :class:`~scale.rollouts.trajectory.RolloutEngine` interface. Publication is lazy, as in
the in-process engines: :meth:`EngineProcess.update_weights` keeps a copy, and the thread that calls
:meth:`EngineProcess.generate` sends the newest copy to the child first, so the pipe is only ever used
by the sampling thread and a learner publishing never waits for a generate call. Tensors cross the pipe
through torch's multiprocessing pickler (shared memory, not a byte copy of every weight).

A child that dies (killed, out of memory) makes the next call raise :class:`RuntimeError`; a parent that
dies closes the pipe and the child returns (it is also a daemon, ended when the parent exits).
"""

from __future__ import annotations

import multiprocessing
import os
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import torch

from scale.rollouts.engines.weights import EngineBase
from scale.rollouts.trajectory import RolloutEngine, SamplingParams, Trajectory

LAUNCHER_ENVIRONMENT = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                        "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT")
"""Variables ``torchrun`` sets for its ranks (and every ``TORCHELASTIC_*`` one), removed in the child."""


def _serve(connection: Any, build: Callable[[], RolloutEngine], threads: int) -> None:
    """The child: build the engine, then answer ``(method, args)`` requests until the parent closes the pipe."""
    for key in [k for k in os.environ if k in LAUNCHER_ENVIRONMENT or k.startswith("TORCHELASTIC_")]:
        del os.environ[key]
    torch.set_num_threads(threads)
    try:
        engine = build()
    except Exception:
        connection.send(("error", traceback.format_exc()))
        return
    connection.send(("ok", None))
    while True:
        try:
            method, args = connection.recv()
        except EOFError:  # the parent is gone
            return
        try:
            connection.send(("ok", getattr(engine, method)(*args)))
        except Exception:
            connection.send(("error", traceback.format_exc()))


class EngineProcess(EngineBase):
    """The engine ``build()`` returns, built and run in a child process; same interface as the engine.

    Args:
        build: a small picklable callable returning the engine (run in the child, e.g. a
            ``functools.partial`` of :class:`~scale.rollouts.engines.vllm_engine.VLLMEngine`).
        name: the child process's name (in ``ps`` and in errors).
    """

    def __init__(self, build: Callable[[], RolloutEngine], *, name: str = "rollout-engine") -> None:
        context = multiprocessing.get_context("spawn")
        self._connection, child = context.Pipe()
        self.process = context.Process(target=_serve, args=(child, build, torch.get_num_threads()), name=name,
                                       daemon=True)
        self.process.start()
        child.close()  # the parent's copy: the child's exit then reads as end-of-file here
        self._receive("start")
        super().__init__("cpu")

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams) -> list[Trajectory]:
        """The child engine's trajectories, sampled from the newest published weights."""
        fresh: list[dict[str, torch.Tensor]] = []
        version = self._weights.load_newest(fresh.append)
        if fresh:
            self._call("update_weights", fresh[0], version)
        return self._call("generate", [list(p) for p in prompts], sampling)

    def _call(self, method: str, *args: Any) -> Any:
        try:
            self._connection.send((method, args))
        except (BrokenPipeError, ConnectionResetError, EOFError):
            self._raise_exited(method)
        return self._receive(method)

    def _receive(self, method: str) -> Any:
        try:
            status, value = self._connection.recv()
        except (EOFError, ConnectionResetError):
            self._raise_exited(method)
        if status == "error":
            raise RuntimeError(f"the engine process {self.process.name} (pid {self.process.pid}) failed in "
                               f"{method}:\n{value}")
        return value

    def _raise_exited(self, method: str) -> None:
        self.process.join(timeout=5)
        raise RuntimeError(f"the engine process {self.process.name} (pid {self.process.pid}) exited with code "
                           f"{self.process.exitcode} during {method}")

    def close(self) -> None:
        """Close the pipe (the child returns) and wait for the child."""
        self._connection.close()
        self.process.join(timeout=30)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
