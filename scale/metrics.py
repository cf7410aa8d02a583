"""Metric sinks: CSV, JSONL and (when ``tensorboard`` is installed) TensorBoard, written only by the trainer.

Rows are flat dicts of namespaced keys (``rollout/reward``, ``trust/acceptance_rate``, ``lag/mean``,
``eval/accuracy``). The CSV header is the union of the keys seen so far: when a new key appears the
file is rewritten with the wider header (runs are small; JSONL is the append-only record).
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any


class MetricsWriter:
    """Append metric rows to ``out/metrics.csv`` and ``out/metrics.jsonl`` (and TensorBoard)."""

    def __init__(self, out: str | Path, *, tensorboard: bool = True) -> None:
        self.out = Path(out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.csv_path, self.jsonl_path = self.out / "metrics.csv", self.out / "metrics.jsonl"
        self.rows: list[dict[str, Any]] = []
        if self.jsonl_path.exists():
            self.rows = [json.loads(line) for line in self.jsonl_path.read_text().splitlines() if line.strip()]
        self.tensorboard = _tensorboard_writer(self.out / "tensorboard") if tensorboard else None

    def write(self, row: dict[str, Any]) -> None:
        """Record one row (``update`` is the x-axis)."""
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}
        self.rows.append(clean)
        with self.jsonl_path.open("a") as handle:
            handle.write(json.dumps(clean) + "\n")
        self._write_csv()
        if self.tensorboard is not None:
            step = int(row.get("update", len(self.rows)))
            for key, value in row.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool) and key != "update":
                    self.tensorboard.add_scalar(key, value, step)

    def truncate_after(self, update: int) -> None:
        """Forget rows past ``update`` (after resuming from an earlier checkpoint)."""
        self.rows = [r for r in self.rows if r.get("update", 0) <= update]
        self.jsonl_path.write_text("".join(json.dumps(r) + "\n" for r in self.rows))
        self._write_csv()

    def _write_csv(self) -> None:
        header: list[str] = []
        for row in self.rows:
            header += [k for k in row if k not in header]
        with self.csv_path.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=header)
            writer.writeheader()
            writer.writerows(self.rows)

    def close(self) -> None:
        if self.tensorboard is not None:
            self.tensorboard.close()


def _tensorboard_writer(directory: Path) -> Any:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # tensorboard is optional
        return None
    return SummaryWriter(str(directory))
