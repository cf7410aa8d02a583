"""Run outputs: the run directory, its metrics and event files, the progress bar and the learning-curve
figure — shared by the simulator (``flashsim train``) and ``scale`` (``python -m scale train``).

:class:`RunDirectory` is the shell of a run: it starts a fresh directory or resumes one, writes the
metric rows, the checkpoint (with the metrics' offsets in it) and JSON files such as ``summary.json``.
:class:`ProgressBar` shows the updates on stderr. The files of a run directory:

- ``metrics.csv`` / ``metrics.jsonl`` — one row per update, appended (:class:`MetricsWriter`). NaN is an
  empty CSV cell and a JSON ``null``. Rows are buffered and flushed when a checkpoint asks for
  :attr:`MetricsWriter.offsets` (their byte lengths); the checkpoint stores them, and a resumed run
  truncates both files to them and writes the later rows again: nothing lost, nothing repeated.
- ``checkpoint.pt`` — :func:`flashsim.storage.save_checkpoint`: tensors and plain data, read back without
  running code from the file.
- TensorBoard event files (``events.out.tfevents.*``, only with ``logger="tensorboard"``) — a copy of the
  metric rows as scalars (:class:`EventLog`), for people who watch runs in TensorBoard. The metrics files
  stay the record. The checkpoint also stores every event file's byte length; a resumed run cuts each
  back to it and deletes the event files written after the checkpoint, so each update is in the event
  log once, whichever reader opens it.
- ``curves.png`` — :func:`plot_curves`: metrics against the learner update, one panel each; the panels are
  data (:class:`CurvePanel`), the simulator's :data:`SIMULATOR_PANELS` or ``scale.run.trainer.SCALE_PANELS``.
- everything else (``config.json``, ``summary.json``) — written whole with
  :func:`flashsim.storage.atomic_write` (a crash leaves the old file or the new one, never half of one).

Atomic writes, strict-JSON values and the checkpoint codec are :mod:`flashsim.storage`, which modules without a
run directory use too.
"""

from __future__ import annotations

import csv
import io
import json
import math
import numbers
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from flashsim.storage import atomic_write, atomic_write_text, jsonable, load_checkpoint, save_checkpoint

METRICS_CSV, METRICS_JSONL, SUMMARY = "metrics.csv", "metrics.jsonl", "summary.json"
OFFSETS, EVENT_LENGTHS = "offsets", "event_lengths"
"""The checkpoint keys under which :class:`RunDirectory` stores the byte lengths of the metrics files and of
the event files."""
LOGGERS = ("tensorboard",)
"""What a run may log to besides its metrics files (``--logger``; None: nothing)."""
EVENT_FILES = "events.out.tfevents.*"
"""The names of TensorBoard event files (as ``torch.utils.tensorboard`` writes them)."""


# ----------------------------------------------------------------------------- metrics


class MetricsWriter:
    """Appends metric rows to ``metrics.csv`` and ``metrics.jsonl`` in ``directory``.

    Args:
        directory: the run directory (created if missing).
        keys: the CSV columns, in order. A row may leave columns out (an empty cell; the JSON line
            omits the key) but may not bring others (``ValueError`` naming them).
        offsets: ``(csv_bytes, jsonl_bytes)`` from :attr:`offsets` of an earlier writer, stored in a
            checkpoint — truncate both files to that length and continue (resume); None starts afresh.
    """

    def __init__(self, directory: Path | str, keys: Iterable[str], offsets: tuple[int, int] | None = None) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.keys = tuple(keys)
        self._columns = frozenset(self.keys)
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
        extra = [key for key in row if key not in self._columns]
        if extra:
            raise ValueError(f"row keys {extra} are not columns of {METRICS_CSV}; declare them in keys")
        self._csv_writer.writerow([_csv_cell(row[key]) if key in row else "" for key in self.keys])
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


def read_metrics(directory: Path | str) -> list[dict[str, Any]]:
    """The rows of ``metrics.jsonl`` in ``directory`` (``null`` read back as NaN)."""
    rows = []
    with open(Path(directory) / METRICS_JSONL, encoding="utf-8") as file:
        for line in file:
            rows.append({k: math.nan if v is None else v for k, v in json.loads(line).items()})
    return rows


def _csv_cell(value: object) -> str:
    if isinstance(value, float):
        return "" if math.isnan(value) else repr(value)
    return str(value)


class EventLog:
    """TensorBoard scalars of metric rows, in one event file of ``directory`` (``torch.utils.tensorboard``).

    Each finite number of a row (booleans, text, NaN and ±inf left out, as the JSON-lines file leaves them
    null) is a scalar tagged with its key, at step ``row["update"]``.

    Args:
        directory: the folder of the event file (a new file per writer, named by time, host and process).
        purge_step: a resumed run's first step: TensorBoard hides the steps from there on that an earlier
            file holds (``SummaryWriter(purge_step=...)``), for a TensorBoard that read them before the
            resume cut them off.

    Raises:
        ImportError: the ``tensorboard`` package is not installed (the message says how to install it).
    """

    def __init__(self, directory: Path | str, *, purge_step: int | None = None) -> None:
        self._writer = _summary_writer()(str(directory), purge_step=purge_step)

    def write(self, row: Mapping[str, object]) -> None:
        """Add the numbers of ``row`` at step ``row["update"]``."""
        step = int(row["update"])
        for key, value in row.items():
            if key != "update" and _is_number(value) and math.isfinite(value):
                self._writer.add_scalar(key, float(value), step)

    def flush(self) -> None:
        """Write every scalar added so far to the file (a kill of the process then loses none of them)."""
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


def _summary_writer() -> type:
    """``torch.utils.tensorboard.SummaryWriter``, or an ImportError that says how to install it."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as error:
        raise ImportError(
            "logger 'tensorboard' needs the tensorboard package: pip install tensorboard "
            "(or the project's tensorboard extra)"
        ) from error
    return SummaryWriter


def _is_number(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


# ----------------------------------------------------------------------------- the run directory


class RunDirectory:
    """A run's output directory: metric rows, one checkpoint, JSON files; resumable after a kill.

    A fresh run calls :meth:`start`; a resumed one :meth:`resume`, which restores the checkpoint's state
    and then truncates the metrics files to the offsets saved with it, so the rows a killed run wrote
    after its last checkpoint are written again, once: the files end up byte for byte those of a run
    never interrupted (when the run itself is deterministic). The event files get the same treatment
    (cut back to their lengths at the checkpoint; those begun after it deleted), whether or not this
    process logs to TensorBoard itself.

    Args:
        out: the directory; ``None`` keeps nothing (an in-memory run; :meth:`resume` is then an error).
        columns: the CSV columns of the metrics (see :class:`MetricsWriter`).
        checkpoint: the checkpoint's path inside ``out``.
        types: classes the checkpoint may hold besides plain data (see :func:`save_checkpoint`).
        writes: False for a process that resumes from the checkpoint but leaves every file to another one
            (the data-parallel ranks other than 0).
        logger: ``"tensorboard"``: also write each row's numbers as TensorBoard scalars into ``out``
            (:class:`EventLog`; ``tensorboard --logdir OUT``); None: only the metrics files.

    Raises:
        ValueError: ``logger`` is not None or one of :data:`LOGGERS`.
        ImportError: ``logger="tensorboard"`` without the ``tensorboard`` package (said before the run starts).
    """

    def __init__(
        self, out: Path | str | None, columns: Iterable[str], *, checkpoint: str = "checkpoint.pt",
        types: Iterable[type] = (), writes: bool = True, logger: str | None = None,
    ) -> None:
        if logger is not None and logger not in LOGGERS:
            raise ValueError(f"logger must be one of {list(LOGGERS)} or None; got {logger!r}")
        self.out = Path(out) if out is not None else None
        self.columns = tuple(columns)
        self.checkpoint = self.out / checkpoint if self.out is not None else None
        self.types = tuple(types)
        self.writes = writes and self.out is not None
        self.logger = logger
        if logger == "tensorboard" and self.writes:
            _summary_writer()
        self._metrics: MetricsWriter | None = None
        self._events: EventLog | None = None
        self._resumed = False

    def start(self, *, overwrite: bool = False) -> None:
        """Begin a fresh run: create the directory and empty metrics files.

        Raises:
            FileExistsError: the directory already holds a run's metrics or checkpoint (unless ``overwrite``).
        """
        if not self.writes:
            return
        if not overwrite and ((self.out / METRICS_CSV).exists() or self.checkpoint.exists()):
            raise FileExistsError(
                f"{self.out} already holds a run; pass --resume to continue it, or choose another --out"
            )
        self.out.mkdir(parents=True, exist_ok=True)
        self._cut_event_files({})  # an overwritten run's
        self._metrics = MetricsWriter(self.out, self.columns, None)

    def resume(self, restore: Callable[[dict[str, Any]], None]) -> None:
        """Read the checkpoint, call ``restore(state)``, then reopen the metrics where the checkpoint left them.

        ``state`` is what :meth:`save` was given. The metrics files are truncated only after ``restore``
        has accepted the state, so a refused checkpoint leaves the directory as it was.

        Raises:
            ValueError: no directory (``out`` is None), or a checkpoint that is not tensors and plain data
                or holds no metrics offsets.
            FileNotFoundError: no checkpoint in the directory.
        """
        if self.out is None:
            raise ValueError("resuming needs the directory of the interrupted run; got out=None")
        if not self.checkpoint.exists():
            raise FileNotFoundError(
                f"no checkpoint to resume from in {self.out} (expected {self.checkpoint}); run without resume first"
            )
        state = load_checkpoint(self.checkpoint, types=self.types)
        if OFFSETS not in state or EVENT_LENGTHS not in state:
            raise ValueError(f"{self.checkpoint} holds no metrics offsets: it was not written by a RunDirectory")
        offsets, event_lengths = tuple(state.pop(OFFSETS)), state.pop(EVENT_LENGTHS)
        restore(state)
        if self.writes:
            self._metrics = MetricsWriter(self.out, self.columns, offsets)
            self._cut_event_files(event_lengths)
            self._resumed = True

    def write(self, row: Mapping[str, object]) -> None:
        """Append one metrics row (and its numbers to the event log; ``update`` is TensorBoard's step)."""
        if self._metrics is None:
            return
        self._metrics.write(row)
        if self.logger == "tensorboard":
            if self._events is None:  # opened at the first row: a resumed run's is the checkpoint's step + 1
                self._events = EventLog(self.out, purge_step=int(row["update"]) if self._resumed else None)
            self._events.write(row)

    def checkpoint_due(self, update: int, *, every: int, last: int) -> bool:
        """Whether this process saves after ``update``: every ``every`` updates (0: never) and after the last."""
        return self.writes and ((every > 0 and update % every == 0) or update == last)

    def save(self, state: Mapping[str, Any]) -> None:
        """Write ``state`` and the lengths of the metrics and event files (flushing the rows so far) as the
        checkpoint, atomically."""
        if not self.writes:
            return
        if self._events is not None:
            self._events.flush()
        lengths = {path.name: path.stat().st_size for path in sorted(self.out.glob(EVENT_FILES))}
        self.checkpoint.parent.mkdir(parents=True, exist_ok=True)
        save_checkpoint(self.checkpoint, {**state, OFFSETS: self._metrics.offsets, EVENT_LENGTHS: lengths},
                        types=self.types)

    def write_text(self, name: str, text: str) -> None:
        """Write ``out/name`` atomically (a config file, for instance)."""
        if self.writes:
            atomic_write_text(self.out / name, text)

    def write_json(self, name: str, data: object) -> None:
        """Write ``out/name`` (``summary.json``, ``config.json``) as indented strict JSON, NaN as ``null``."""
        self.write_text(name, json.dumps(jsonable(data), indent=2, allow_nan=False) + "\n")

    def close(self) -> None:
        """Flush and close the metrics (and event) files."""
        if self._metrics is not None:
            self._metrics.close()
            self._metrics = None
        if self._events is not None:
            self._events.close()
            self._events = None

    def __enter__(self) -> RunDirectory:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _cut_event_files(self, lengths: Mapping[str, int]) -> None:
        """Truncate the event files named in ``lengths`` to their lengths; delete the others (begun later)."""
        for path in self.out.glob(EVENT_FILES):
            if path.name in lengths:
                with open(path, "r+b") as file:
                    file.truncate(lengths[path.name])
            else:
                path.unlink()


class ProgressBar:
    """A tqdm bar on stderr showing the latest metrics, or nothing when not ``enabled``.

    Args:
        total: the updates (or steps) of the whole run.
        initial: those already done (a resumed run).
        description: the bar's label.
        unit: what one step of the bar is.
        enabled: False shows nothing (and does not import tqdm).
    """

    def __init__(self, total: int, *, initial: int = 0, description: str | None = None, unit: str = "update",
                 enabled: bool = True) -> None:
        self._bar = None
        if enabled:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total, initial=initial, desc=description, unit=unit, file=sys.stderr,
                             dynamic_ncols=True, leave=False)

    def advance(self, **postfix: str) -> None:
        """One step done; ``postfix`` is shown beside the bar (``reward="0.42"``)."""
        if self._bar is not None:
            self._bar.set_postfix(postfix, refresh=False)
            self._bar.update(1)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


# ----------------------------------------------------------------------------- curves.png


@dataclass(frozen=True)
class CurvePanel:
    """One panel of :func:`plot_curves`."""

    key: str
    """The metric drawn solid against ``update``."""
    title: str
    """The panel's title."""
    dashed: str | None = None
    """A second metric drawn dashed in the same colour with a dot at each point, never smoothed (held-out
    success, evaluation: measured every few updates)."""
    smooth: bool = True
    """Whether ``key`` takes the moving average of :func:`plot_curves` (noisy per-batch metrics do)."""


SIMULATOR_PANELS = (
    CurvePanel("env/success_train", "exact success (train; held-out dashed)", dashed="env/success_heldout",
               smooth=False),
    CurvePanel("env/reward", "batch reward"),
    CurvePanel("trust/acceptance_rate", "gate acceptance rate"),
    CurvePanel("trust/sequence_kl", "mean sequence KL"),
    CurvePanel("lag/mean", "observed lag (mean)"),
    CurvePanel("policy/entropy", "policy entropy (nats)"),
)
"""The simulator's panels (the metric names of :data:`flashsim.sim.simulation.METRIC_KEYS`)."""


def plot_curves(
    runs: Mapping[str, Sequence[Mapping[str, float]]], path: Path | str, *, title: str = "", smooth: int = 1,
    heldout: bool = True, panels: Sequence[CurvePanel] = SIMULATOR_PANELS,
) -> Path:
    """Save a figure of ``runs``, one panel per entry of ``panels`` in two rows, to ``path`` (PNG); return the path.

    Args:
        runs: label → metric rows (dicts with ``update`` and the panels' keys; a missing key or NaN is
            no point). A panel that no run reports says so.
        path: where to write the PNG (written atomically).
        title: figure title.
        smooth: moving-average window for the panels with ``smooth`` set (1: none).
        heldout: also draw the panels' dashed metrics; pointless for tabular policies, whose held-out
            success never changes (they do not train on those prompts).
        panels: what to draw (default: the simulator's).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = max(1, math.ceil(len(panels) / 2))
    figure, axes = plt.subplots(2, columns, figsize=(13 / 3 * columns, 6.5), constrained_layout=True, squeeze=False)
    for axis, panel in zip(axes.flat, panels):
        drawn = False
        for index, (label, rows) in enumerate(runs.items()):
            x, y = _series(rows, panel.key, smooth if panel.smooth else 1)
            axis.plot(x, y, color=f"C{index}", label=label, linewidth=1.3)
            drawn = drawn or bool(y)
            if panel.dashed is not None and heldout:
                x, y = _series(rows, panel.dashed, 1)
                axis.plot(x, y, color=f"C{index}", linestyle="--", linewidth=1.0, marker=".", markersize=4)
                drawn = drawn or bool(y)
        if not drawn:
            axis.text(0.5, 0.5, f"no {panel.key} in these runs", ha="center", va="center", fontsize=8,
                      color="0.5", transform=axis.transAxes)
        axis.set_title(panel.title, fontsize=10)
        axis.set_xlabel("learner update")
        axis.grid(alpha=0.3)
    for axis in axes.flat[len(panels):]:
        axis.set_visible(False)
    axes.flat[0].legend(fontsize=8)
    if title:
        figure.suptitle(title)
    path = Path(path)
    atomic_write(path, lambda file: figure.savefig(file, format="png", dpi=110))
    plt.close(figure)
    return path


def _series(rows: Sequence[Mapping[str, float]], key: str, smooth: int) -> tuple[list[float], list[float]]:
    """(update, value) pairs of ``key`` without NaN, as a trailing moving average of ``smooth`` points."""
    points = [(row["update"], row[key]) for row in rows if key in row and not _missing(row[key])]
    if smooth > 1:
        values = [v for _, v in points]
        windows = [values[max(0, i - smooth + 1) : i + 1] for i in range(len(values))]
        points = [(x, sum(window) / len(window)) for (x, _), window in zip(points, windows)]
    return [x for x, _ in points], [v for _, v in points]


def _missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))
