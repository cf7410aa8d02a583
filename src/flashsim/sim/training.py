"""The training runner: a :class:`~flashsim.sim.simulation.Simulation` to its update budget, with
outputs, checkpoints, resume and a progress bar.

:func:`train` is what ``flashsim train`` calls. With an output directory it writes metrics row by
row (:class:`flashsim.io.MetricsWriter`), a checkpoint every ``checkpoint_every`` updates and at the end,
``summary.json`` and ``curves.png``. ``resume=True`` continues from the directory's checkpoint and
produces exactly the files an uninterrupted run would have produced.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from flashsim.config import from_dict, to_dict
from flashsim.exact import optimal_success, optimum_is_exact
from flashsim.io import (
    METRICS_CSV,
    MetricsWriter,
    atomic_write_text,
    jsonable,
    load_checkpoint,
    read_metrics,
    save_checkpoint,
)
from flashsim.sim.config import FixedLag, RandomLag, TrainConfig
from flashsim.sim.engine import EngineState, TrajectoryStore
from flashsim.sim.plotting import plot_curves
from flashsim.sim.rollouts import (
    Batch,
    LaggedSourceState,
    Ledger,
    LedgerState,
    SimClock,
    Snapshot,
    SnapshotStoreState,
    TrajectoryArrays,
)
from flashsim.sim.simulation import (
    METRIC_KEYS,
    CollectedBatch,
    LearnerState,
    PreparedBatch,
    Simulation,
    SimulationState,
)

CHECKPOINT, CONFIG, SUMMARY, CURVES = "checkpoint.pt", "config.json", "summary.json", "curves.png"
STATE_TYPES = (
    SimulationState, LearnerState, CollectedBatch, Batch, PreparedBatch, TrajectoryArrays, EngineState,
    LaggedSourceState, LedgerState, Ledger, SnapshotStoreState, Snapshot, SimClock, TrajectoryStore,
)
"""Classes of the simulator's own state objects that its checkpoints may hold (see :mod:`flashsim.io`);
the config is stored as plain data and read back strictly by :func:`flashsim.config.from_dict`."""


@dataclass
class TrainResult:
    """What a run returns: every metric row (including rows before a resume), the summary, the directory."""

    rows: list[dict[str, float]]
    summary: dict[str, object]
    out_dir: Path | None


def train(
    config: TrainConfig, out_dir: Path | str | None = None, *, resume: bool = False, progress: bool = False,
    plot: bool = True,
) -> TrainResult:
    """Run ``config`` to ``config.updates`` learner updates.

    Args:
        config: the run.
        out_dir: where to write metrics, checkpoints, summary and plot (None: keep everything in memory).
        resume: continue from ``out_dir/checkpoint.pt`` (same config, ``updates`` may be larger).
        progress: show a tqdm progress bar on stderr.
        plot: write ``curves.png`` at the end.

    Raises:
        FileExistsError: ``out_dir`` already holds a run and ``resume`` is False.
        FileNotFoundError: ``resume`` without a checkpoint in ``out_dir``.
    """
    out = Path(out_dir) if out_dir is not None else None
    simulation = Simulation(config)
    writer, rows = _open_outputs(simulation, out, resume)
    started, started_cpu, first_update = time.perf_counter(), time.process_time(), simulation.update
    bar = _progress_bar(config.updates, first_update) if progress else None
    try:
        while simulation.update < config.updates:
            row = simulation.step()
            rows.append(row)
            if writer is not None:
                writer.write(row)
                if simulation.update % config.checkpoint_every == 0 or simulation.update == config.updates:
                    _checkpoint(simulation, writer, out)
            if bar is not None:
                bar.update(1)
                bar.set_postfix(reward=f"{row['env/reward']:.3f}", lag=f"{row['lag/mean']:.1f}", refresh=False)
    finally:
        if bar is not None:
            bar.close()
        if writer is not None:
            writer.close()
    elapsed, cpu = time.perf_counter() - started, time.process_time() - started_cpu
    summary = _summary(simulation, rows, simulation.update - first_update, elapsed, cpu)
    if out is not None:
        atomic_write_text(out / SUMMARY, json.dumps(jsonable(summary), indent=2, allow_nan=False) + "\n")
        if plot:
            title = f"{config.env} · {config.algorithm.loss} · {_lag_label(config)} · seed {config.seed}"
            plot_curves({config.algorithm.loss: rows}, out / CURVES, title=title, smooth=10,
                        heldout=config.policy != "tabular")
    return TrainResult(rows, summary, out)


def _open_outputs(
    simulation: Simulation, out: Path | None, resume: bool
) -> tuple[MetricsWriter | None, list[dict[str, float]]]:
    """The metrics writer (after restoring the checkpoint when resuming) and the rows so far."""
    if out is None:
        if resume:
            raise ValueError("resume=True needs out_dir (the directory of the interrupted run)")
        return None, []
    if resume:
        if not (out / CHECKPOINT).exists():
            raise FileNotFoundError(f"no checkpoint to resume from in {out} (expected {out / CHECKPOINT})")
        state = load_state(out / CHECKPOINT)
        simulation.load_state_dict(state["simulation"])
        writer = MetricsWriter(out, METRIC_KEYS, offsets=state["offsets"])
        return writer, read_metrics(out)
    if (out / METRICS_CSV).exists() or (out / CHECKPOINT).exists():
        raise FileExistsError(f"{out} already holds a run; pass --resume to continue it, or choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / CONFIG, json.dumps(jsonable(to_dict(simulation.config)), indent=2) + "\n")
    return MetricsWriter(out, METRIC_KEYS), []


def _checkpoint(simulation: Simulation, writer: MetricsWriter, out: Path) -> None:
    state = replace(simulation.state_dict(), config=to_dict(simulation.config))
    save_checkpoint(out / CHECKPOINT, {"simulation": state, "offsets": writer.offsets}, types=STATE_TYPES)


def load_state(path: Path | str) -> dict[str, Any]:
    """A run's checkpoint: ``{"simulation": Simulation.state_dict(), "offsets": (csv, jsonl bytes)}``.

    Loaded with ``torch.load(weights_only=True)`` (:func:`flashsim.io.load_checkpoint`); the config is
    rebuilt from plain data by :func:`flashsim.config.from_dict`, so it is checked like a config file.
    """
    state = load_checkpoint(path, types=STATE_TYPES)
    simulation = state["simulation"]
    if not isinstance(simulation, SimulationState):
        raise ValueError(f"{path} does not hold a simulator state")
    state["simulation"] = replace(simulation, config=from_dict(TrainConfig, simulation.config, name="config"))
    return state


def _summary(
    simulation: Simulation, rows: list[dict], updates_run: int, elapsed: float, cpu: float
) -> dict[str, object]:
    """Final metrics, the final policy's exact success, accounting, and throughput of this invocation.

    Throughput covers the update loop only (not Python/torch start-up or the final plot); the
    ``_per_cpu_second`` rates divide by the process's CPU time instead of wall time, so they do not
    depend on how busy the machine is (the loop is single-threaded).
    """
    config, last = simulation.config, rows[-1] if rows else {}
    final_success = simulation.evaluate()  # of the final policy (rows evaluate on their own schedule)
    return {
        "env": config.env,
        "algorithm": config.algorithm.loss,
        "lag": _lag_label(config),
        "seed": config.seed,
        "updates": simulation.update,
        "rollouts": simulation.ledger.completed,
        "final": {key: last.get(key) for key in METRIC_KEYS},
        "success_train": final_success["env/success_train"],
        "success_heldout": final_success["env/success_heldout"],
        "optimal_success_train": optimal_success(simulation.tables, "train") if simulation.tables is not None else None,
        "optimum_is_exact": optimum_is_exact(simulation.tables) if simulation.tables is not None else None,
        "success_train_stderr": final_success["env/success_train_stderr"],
        "accounting": {**simulation.ledger.counts(), "stragglers": simulation.ledger.stragglers},
        "wall_seconds": elapsed,
        "cpu_seconds": cpu,
        "updates_per_second": updates_run / elapsed if elapsed > 0 else None,
        "env_steps_per_second": simulation.sampler.steps / elapsed if elapsed > 0 else None,
        "updates_per_cpu_second": updates_run / cpu if cpu > 0 else None,
        "env_steps_per_cpu_second": simulation.sampler.steps / cpu if cpu > 0 else None,
    }


def _lag_label(config: TrainConfig) -> str:
    lag = config.lag
    if isinstance(lag, FixedLag):
        return f"lag {lag.lag}"
    if isinstance(lag, RandomLag):
        return f"random lag ≤ {lag.max_lag} ({lag.distribution})"
    return f"{lag.num_workers} workers" + (" (sync)" if lag.synchronous else "")


def _progress_bar(total: int, initial: int):
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, file=sys.stderr, unit="update", dynamic_ncols=True, leave=False)
