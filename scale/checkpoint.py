"""Checkpoints: one ``state.pt`` holding everything needed to continue a run, in flashsim's format.

The state is model, optimizer and scheduler state dicts, the learner version, the prompt stream's
position, the group-id counter, every engine's sampling-generator state, the global torch RNG state,
the config as plain data and the metrics files' byte lengths. :func:`flashsim.io.save_checkpoint`
writes it atomically as tensors and plain data; :func:`flashsim.io.load_checkpoint` reads it with
``torch.load(weights_only=True)``, so a tampered file is refused and never run.

In the synchronous loop a resumed run reproduces the uninterrupted one exactly. In the asynchronous
loop the prompts in flight or queued at the save are not reissued (the stream resumes after them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import flashsim.io as run_io

FILENAME = "state.pt"


def save_checkpoint(directory: str | Path, state: dict[str, Any]) -> Path:
    """Atomically write ``state`` to ``directory/state.pt``; returns the path."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    run_io.save_checkpoint(directory / FILENAME, state)
    return directory / FILENAME


def load_checkpoint(directory: str | Path) -> dict[str, Any]:
    """Read the state written by :func:`save_checkpoint` (tensors and plain data only)."""
    path = Path(directory) / FILENAME
    if not path.exists():
        raise ValueError(f"no checkpoint at {str(path)!r}; run without --resume first")
    return run_io.load_checkpoint(path)
