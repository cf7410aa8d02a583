"""Checkpoints: one ``state.pt`` holding everything needed to continue a run, written atomically.

The state is model and optimizer (and scheduler) state dicts, the learner version, the prompt stream's
position, the group-id counter, every engine's sampling-generator state and the global torch RNG
state. Writing goes to a temporary file in the same directory, flushed and fsync'ed, then
``os.replace``'d over the old one, so a crash never leaves a half-written checkpoint.

In the synchronous loop a resumed run reproduces the uninterrupted one exactly. In the asynchronous
loop the prompts in flight or queued at the save are not reissued (the stream resumes after them).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

FILENAME = "state.pt"


def save_checkpoint(directory: str | Path, state: dict[str, Any]) -> Path:
    """Atomically write ``state`` to ``directory/state.pt``; returns the path."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / FILENAME
    temporary = directory / f".{FILENAME}.tmp-{os.getpid()}"
    with temporary.open("wb") as handle:
        torch.save(state, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, final)
    return final


def load_checkpoint(directory: str | Path) -> dict[str, Any]:
    """Read the state written by :func:`save_checkpoint`."""
    path = Path(directory) / FILENAME
    if not path.exists():
        raise ValueError(f"no checkpoint at {str(path)!r}; run without --resume first")
    return torch.load(path, map_location="cpu", weights_only=False)
