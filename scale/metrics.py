"""Metric rows of a scale run: the columns of ``metrics.csv``, and TensorBoard when it is installed.

Rows are flat dicts of namespaced keys (``rollout/reward``, ``trust/acceptance_rate``, ``lag/mean``,
``eval/accuracy``), written only by the trainer through flashsim's one metrics writer
(:class:`flashsim.io.MetricsWriter`: CSV + JSONL, append-only, flushed at checkpoints, truncated to the
checkpoint on resume). The CSV columns are fixed up front (:data:`COLUMNS`); a row leaves out what it
does not measure (evaluation keys between evaluations) and a key outside the columns is an error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import flashsim.io as run_io

COLUMNS = (
    "update",
    "rollout/reward", "rollout/length", "rollout/tool_calls", "rollout/truncation", "rollout/trajectories",
    "rollout/dropped",
    "lag/mean", "lag/max", "lag/min", "loop/queue_depth", "loop/failed_calls", "time/wait_s",
    "loss/policy", "grad/norm", "policy/entropy",
    "trust/acceptance_rate", "trust/sequence_kl_mean", "trust/sequence_kl_max", "trust/token_acceptance_rate",
    "trust/clip_fraction", "trust/ratio_mean", "trust/ratio_min", "trust/ratio_max",
    "time/learner_s", "time/elapsed_s", "optim/lr", "learner/ranks",
    "eval/accuracy", "eval/length", "eval/tool_calls", "eval/truncation", "eval/accuracy_greedy",
    "time/warmup_s", "warmup/loss",
)
"""Every key a row may carry, in CSV column order (a new metric is added here)."""


class MetricsWriter(run_io.MetricsWriter):
    """flashsim's metrics writer over :data:`COLUMNS` in ``out``, plus TensorBoard scalars.

    Args:
        out: the run directory.
        offsets: the writer's :attr:`offsets` stored in the checkpoint being resumed (None: a fresh run).
        tensorboard: also write TensorBoard events when ``tensorboard`` is installed.
    """

    def __init__(self, out: str | Path, *, offsets: tuple[int, int] | None = None, tensorboard: bool = True) -> None:
        super().__init__(out, COLUMNS, offsets)
        self.tensorboard = _tensorboard_writer(Path(out) / "tensorboard") if tensorboard else None

    def write(self, row: dict[str, Any]) -> None:
        """Record one row (``update`` is the x-axis)."""
        super().write(row)
        if self.tensorboard is not None:
            step = int(row["update"])
            for key, value in row.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool) and key != "update":
                    self.tensorboard.add_scalar(key, value, step)

    def close(self) -> None:
        super().close()
        if self.tensorboard is not None:
            self.tensorboard.close()


def _tensorboard_writer(directory: Path) -> Any:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # tensorboard is optional
        return None
    return SummaryWriter(str(directory))
