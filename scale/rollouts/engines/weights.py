"""The weights a learner publishes to an engine: copied when published, loaded when the engine next samples.

The learner thread publishes after each update while a rollout thread may be sampling, so publishing
only swaps in a copy under a lock; the sampling thread loads the newest copy at the start of its next
call, and the version it reports is the one it samples with. A publication that is overtaken before it
is loaded is never loaded (only the newest weights matter).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch


def snapshot(weights: Any, device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """A detached copy on ``device`` of ``weights`` (a module or a state dict): the learner goes on training its own."""
    state = weights.state_dict() if isinstance(weights, torch.nn.Module) else weights
    return {name: tensor.detach().to(device, copy=True) for name, tensor in state.items()}


class PublishedWeights:
    """The newest published weights of one engine and their version (the learner update that made them).

    Args:
        device: where the published copy is kept (the engine's device; vLLM takes CPU tensors).
    """

    def __init__(self, device: str | torch.device = "cpu") -> None:
        self.device = torch.device(device)
        self._lock = threading.Lock()
        self._loaded_version = 0
        self._pending: tuple[dict[str, torch.Tensor], int] | None = None

    @property
    def version(self) -> int:
        """The version the engine samples with from its next call on."""
        with self._lock:
            return self._pending[1] if self._pending is not None else self._loaded_version

    def publish(self, weights: Any, version: int) -> None:
        """Copy ``weights`` (a module or a state dict) now; the learner goes on training its own."""
        state = snapshot(weights, self.device)
        with self._lock:
            self._pending = (state, int(version))

    def load_newest(self, load: Callable[[dict[str, torch.Tensor]], None]) -> int:
        """Call ``load(state)`` if weights were published since the last call; return the version loaded."""
        with self._lock:
            pending, self._pending = self._pending, None
            if pending is not None:
                state, self._loaded_version = pending
                load(state)
            return self._loaded_version


class EngineBase:
    """What every rollout engine shares: its newest published weights and their version.

    A subclass calls ``super().__init__(device)`` and, at the start of each ``generate``, loads the newest
    weights with ``self._weights.load_newest(load)``, sampling the whole call with the version that returns.

    Args:
        device: where the published copy is kept (the engine's device; vLLM and a child process take CPU tensors).
    """

    def __init__(self, device: str | torch.device = "cpu") -> None:
        self._weights = PublishedWeights(device)

    @property
    def version(self) -> int:
        """The version the engine samples with from its next call on."""
        return self._weights.version

    def update_weights(self, weights: Any, version: int) -> None:
        """Publish ``weights`` (a module or a state dict, Hugging Face names) as ``version``: copied now, loaded
        by the next ``generate``."""
        self._weights.publish(weights, version)
