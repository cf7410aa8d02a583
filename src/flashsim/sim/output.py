"""Run outputs: metrics as CSV and JSON lines, checkpoints and summaries written atomically.

Files of a run directory:

- ``metrics.csv`` / ``metrics.jsonl`` — one row per learner update (NaN is an empty CSV cell and a
  JSON ``null``); appended and flushed row by row;
- ``checkpoint.pt`` — everything needed to resume, including the byte length of both metrics files at
  that moment, so that a resumed run first truncates rows written after the checkpoint and then
  writes them again identically (nothing lost, nothing repeated);
- ``config.json``, ``summary.json`` and plots — written whole, atomically.

Atomic means written to a temporary file in the same directory and moved into place with
``os.replace``, so a crash leaves either the old file or the new one, never half of one.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import torch

METRICS_CSV, METRICS_JSONL, CHECKPOINT, SUMMARY, CONFIG = (
    "metrics.csv", "metrics.jsonl", "checkpoint.pt", "summary.json", "config.json",
)
#: Permissions of files written atomically (rw-r--r--, like a plain ``open(..., "w")`` under umask 022).
_FILE_MODE = 0o644


def atomic_write(path: Path | str, write: Callable[[io.BufferedWriter], None]) -> None:
    """Call ``write(file)`` on a temporary file next to ``path``, then move it onto ``path``."""
    path = Path(path)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(temporary, _FILE_MODE)  # mkstemp creates 0600; results are meant to be shared
        with os.fdopen(handle, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path | str, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    atomic_write(path, lambda file: file.write(text.encode()))


def save_checkpoint(path: Path | str, state: Mapping) -> None:
    """``torch.save`` of ``state`` to ``path``, atomically."""
    atomic_write(path, lambda file: torch.save(dict(state), file))


def load_checkpoint(path: Path | str) -> dict:
    """Load a checkpoint written by :func:`save_checkpoint` (it holds numpy arrays and dataclasses)."""
    return torch.load(path, weights_only=False)


def jsonable(value: object) -> object:
    """``value`` with NaN/inf floats as ``None`` and numpy scalars as Python numbers (strict JSON)."""
    if isinstance(value, Mapping):
        return {str(key): jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(item) for item in value]
    if hasattr(value, "item") and callable(value.item):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class MetricsWriter:
    """Appends metric rows to ``metrics.csv`` and ``metrics.jsonl`` in ``directory``.

    Args:
        directory: the run directory (created if missing).
        keys: the column order; every row must have exactly these keys.
        offsets: ``(csv_bytes, jsonl_bytes)`` from :attr:`offsets` of an earlier writer — truncate both
            files to that length and continue (resume); None starts both files afresh.
    """

    def __init__(self, directory: Path | str, keys: Iterable[str], offsets: tuple[int, int] | None = None) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.keys = tuple(keys)
        csv_path, jsonl_path = self.directory / METRICS_CSV, self.directory / METRICS_JSONL
        if offsets is None:
            self._csv, self._jsonl = open(csv_path, "wb"), open(jsonl_path, "wb")
            self._csv.write((",".join(self.keys) + "\n").encode())
        else:
            for path, size in ((csv_path, offsets[0]), (jsonl_path, offsets[1])):
                with open(path, "r+b") as file:
                    file.truncate(size)
            self._csv, self._jsonl = open(csv_path, "ab"), open(jsonl_path, "ab")
        self._flush()
        self._text = io.StringIO()
        self._csv_writer = csv.writer(self._text, lineterminator="\n")

    def write(self, row: Mapping[str, object]) -> None:
        """Append one row to both files (buffered: flushed by :attr:`offsets` and :meth:`close`).

        Rows still in the buffer when a run dies are lost, which is harmless: a resumed run restarts
        from the last checkpoint, whose :attr:`offsets` were flushed, and writes those rows again.
        """
        if tuple(row) != self.keys:
            raise ValueError(f"row keys {tuple(row)} differ from the columns {self.keys}")
        self._csv_writer.writerow([_csv_cell(row[key]) for key in self.keys])
        self._csv.write(self._text.getvalue().encode())
        self._text.seek(0)
        self._text.truncate()
        cells = {key: None if isinstance(v, float) and not math.isfinite(v) else v for key, v in row.items()}
        self._jsonl.write((json.dumps(cells, allow_nan=False) + "\n").encode())

    @property
    def offsets(self) -> tuple[int, int]:
        """Byte lengths of the CSV and JSON-lines files after flushing them (store them in a checkpoint)."""
        self._flush()
        return self._csv.tell(), self._jsonl.tell()

    def close(self) -> None:
        """Flush and close both files."""
        self._csv.close()
        self._jsonl.close()

    def _flush(self) -> None:
        self._csv.flush()
        self._jsonl.flush()


def read_metrics(directory: Path | str) -> list[dict[str, float]]:
    """The rows of ``metrics.jsonl`` in ``directory`` (``None`` read back as NaN)."""
    rows = []
    with open(Path(directory) / METRICS_JSONL, encoding="utf-8") as file:
        for line in file:
            rows.append({k: math.nan if v is None else v for k, v in json.loads(line).items()})
    return rows


def _csv_cell(value: object) -> str:
    if isinstance(value, float):
        return "" if math.isnan(value) else repr(value)
    return str(value)
