"""The sweep runner: every cell of some designs, in parallel processes, resumable, one JSON file per cell.

Layout of an output directory::

    OUT/<claim>/design.json             the design, as written before the run
    OUT/<claim>/cells/<arm>__<knob>__s<seed>.json   one finished cell: its config, seed and result

A cell file is written atomically by the process that ran the cell (temporary file + ``os.replace``),
so a sweep killed at any moment (SIGKILL included) leaves only whole files of finished cells. Running
the same sweep again skips them and runs the rest; because a cell's result depends only on its config
(seed included) and holds no wall time, the resumed directory is byte-identical to an uninterrupted one.
A cell file whose config differs from the design's is an error (another design, or an older flashsim,
wrote there), never overwritten.

Cells run in a pool of ``jobs`` worker processes (default: all cores; ``spawn`` start, one torch
thread each), or in this process with ``jobs=1``. A tqdm bar shows cells done of all and the ETA.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from multiprocessing import get_context
from pathlib import Path

from flashsim.config import to_dict
from flashsim.experiments.design import Cell, ClaimDesign
from flashsim.experiments.run_cell import run_cell
from flashsim.sim.config import TrainConfig
from flashsim.storage import atomic_write_text, jsonable
from flashsim.validation import check_int

CELLS, DESIGN = "cells", "design.json"

RunFunction = Callable[[TrainConfig], dict]


def to_json(value: object) -> str:
    """Deterministic, strict JSON text (sorted keys, NaN as null, trailing newline)."""
    return json.dumps(jsonable(value), sort_keys=True, indent=1, allow_nan=False) + "\n"


def cell_path(out: Path | str, cell: Cell) -> Path:
    return Path(out) / cell.claim / CELLS / f"{cell.key}.json"


def cell_record(cell: Cell, result: dict) -> dict:
    """What a cell file holds."""
    return {"claim": cell.claim, "arm": cell.arm, "knob": cell.knob, "seed": cell.seed,
            "config": to_dict(cell.config), "result": result}


def read_cell(out: Path | str, cell: Cell) -> dict | None:
    """The finished cell's record, or None if it has not run; ``ValueError`` if the file is another design's."""
    path = cell_path(out, cell)
    if not path.exists():
        return None
    record = json.loads(path.read_text())
    if "config" not in record:
        raise ValueError(
            f"{path} was written by an older flashsim (a 'spec' instead of the simulator's 'config'); use another "
            f"--out, or delete the directory to start afresh"
        )
    expected = json.loads(to_json(to_dict(cell.config)))
    if record["config"] != expected or record.get("seed") != cell.seed:
        raise ValueError(
            f"{path} was written by another design (its config or seed differs from this sweep's); use another "
            f"--out, or delete the directory to start afresh"
        )
    return record


def _run_and_write(out: str, cell: Cell, run: RunFunction) -> str:
    """Run one cell and write its file atomically (in the worker process)."""
    import torch

    torch.set_num_threads(1)  # tiny tensors: one thread per process is fastest
    result = run(cell.config)
    path = cell_path(out, cell)
    atomic_write_text(path, to_json(cell_record(cell, result)))
    return cell.key


def prepare(out: Path | str, designs: Sequence[ClaimDesign]) -> tuple[list[Cell], int]:
    """Create the directories, write each design, drop temporary files of killed writes; return (pending, done)."""
    pending, done = [], 0
    for design in designs:
        cells_dir = Path(out) / design.claim / CELLS
        cells_dir.mkdir(parents=True, exist_ok=True)
        for stale in cells_dir.glob(".*.tmp"):
            stale.unlink(missing_ok=True)
        for cell in design.cells():  # first, so that a directory of another design is left as it is
            if read_cell(out, cell) is None:
                pending.append(cell)
            else:
                done += 1
        design_text = to_json(design.to_dict())
        design_path = Path(out) / design.claim / DESIGN
        if not design_path.exists() or design_path.read_text() != design_text:
            atomic_write_text(design_path, design_text)
    return pending, done


def run_sweep(
    designs: Sequence[ClaimDesign], out: Path | str, *, jobs: int | None = None, progress: bool = True,
    run: RunFunction = run_cell,
) -> int:
    """Run every unfinished cell of ``designs`` into ``out``; return how many cells ran now.

    Args:
        designs: the claims' designs.
        out: output directory (created); finished cells already there are kept and skipped.
        jobs: worker processes (default: ``os.cpu_count()``); 1 runs the cells in this process.
        progress: show a progress bar (cells done / all, ETA) on stderr.
        run: the cell function ``run(config) -> result`` (module-level, so processes can import it).
    """
    if jobs is None:
        jobs = os.cpu_count() or 1
    jobs = check_int("jobs", jobs, low=1)
    pending, done = prepare(out, designs)
    bar = _progress_bar(done + len(pending), done) if progress else None
    try:
        if jobs == 1 or len(pending) <= 1:
            for cell in pending:
                _run_and_write(str(out), cell, run)
                _advance(bar, cell)
        else:
            _run_parallel(pending, str(out), jobs, run, bar)
    finally:
        if bar is not None:
            bar.close()
    return len(pending)


def _run_parallel(pending: list[Cell], out: str, jobs: int, run: RunFunction, bar) -> None:
    """At most ``2 × jobs`` cells in flight, so that Ctrl-C leaves little queued work to cancel."""
    queue = iter(pending)
    with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn")) as pool:
        running = {}
        for cell in queue:
            running[pool.submit(_run_and_write, out, cell, run)] = cell
            if len(running) >= 2 * jobs:
                break
        while running:
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                cell = running.pop(future)
                future.result()  # a failed cell stops the sweep with its exception
                _advance(bar, cell)
                following = next(queue, None)
                if following is not None:
                    running[pool.submit(_run_and_write, out, following, run)] = following


def _advance(bar, cell: Cell) -> None:
    if bar is not None:
        bar.set_postfix_str(f"{cell.claim} {cell.key}", refresh=False)
        bar.update(1)


def _progress_bar(total: int, initial: int):
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, file=sys.stderr, unit="cell", dynamic_ncols=True, desc="cells")
