"""The training runner: a :class:`~flashsim.sim.simulation.Simulation` to its update budget, with
outputs, checkpoints, resume and a progress bar.

:func:`train` is what ``flashsim train`` calls. With an output directory it writes, through
flashsim's one run shell (:class:`flashsim.io.RunDirectory`), ``config.json``, metrics row by row, a
checkpoint every ``checkpoint_every`` updates and at the end, ``summary.json``, and then ``curves.png``.
``resume=True`` continues from the directory's checkpoint and produces exactly the files an
uninterrupted run would have produced.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from flashsim.config import from_dict, to_dict
from flashsim.exact import optimal_success, optimum_is_exact
from flashsim.io import SUMMARY, ProgressBar, RunDirectory, load_checkpoint, read_metrics
from flashsim.plotting import plot_curves
from flashsim.sim.config import FixedLag, RandomLag, TrainConfig
from flashsim.sim.engine import EngineState, TrajectoryStore
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

CHECKPOINT, CONFIG, CURVES = "checkpoint.pt", "config.json", "curves.png"
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
    plot: bool = True, logger: str | None = None,
) -> TrainResult:
    """Run ``config`` to ``config.updates`` learner updates.

    Args:
        config: the run.
        out_dir: where to write metrics, checkpoints, summary and plot (None: keep everything in memory).
        resume: continue from ``out_dir/checkpoint.pt`` (same config, ``updates`` may be larger).
        progress: show a tqdm progress bar on stderr.
        plot: write ``curves.png`` at the end.
        logger: ``"tensorboard"``: also write TensorBoard event files into ``out_dir`` (see
            :class:`flashsim.io.RunDirectory`); None: only the metrics files.

    Raises:
        FileExistsError: ``out_dir`` already holds a run and ``resume`` is False.
        FileNotFoundError: ``resume`` without a checkpoint in ``out_dir``.
    """
    simulation = Simulation(config)
    run = RunDirectory(out_dir, METRIC_KEYS, checkpoint=CHECKPOINT, types=STATE_TYPES, logger=logger)
    rows: list[dict[str, float]] = []
    if resume:
        run.resume(lambda state: simulation.load_state_dict(_checked(state, run.checkpoint)["simulation"]))
        rows = read_metrics(run.out)
    else:
        run.start()
        run.write_json(CONFIG, to_dict(simulation.config))
    started, started_cpu, first_update = time.perf_counter(), time.process_time(), simulation.update
    bar = ProgressBar(config.updates, initial=first_update, enabled=progress)
    with run:
        try:
            while simulation.update < config.updates:
                row = simulation.step()
                rows.append(row)
                run.write(row)
                if run.checkpoint_due(simulation.update, every=config.checkpoint_every, last=config.updates):
                    run.save({"simulation": replace(simulation.state_dict(), config=to_dict(simulation.config))})
                bar.advance(reward=f"{row['env/reward']:.3f}", lag=f"{row['lag/mean']:.1f}")
        finally:
            bar.close()
    elapsed, cpu = time.perf_counter() - started, time.process_time() - started_cpu
    summary = _summary(simulation, rows, simulation.update - first_update, elapsed, cpu)
    run.write_json(SUMMARY, summary)
    if run.writes and plot:
        title = f"{config.env} · {config.algorithm.loss} · {_lag_label(config)} · seed {config.seed}"
        plot_curves({config.algorithm.loss: rows}, run.out / CURVES, title=title, smooth=10,
                    heldout=config.policy != "tabular")
    return TrainResult(rows, summary, run.out)


def load_state(path: Path | str) -> dict[str, Any]:
    """A run's checkpoint: ``{"simulation": Simulation.state_dict(), "offsets": (csv, jsonl bytes), "event_lengths":
    {event file: bytes}}``.

    Loaded with ``torch.load(weights_only=True)`` (:func:`flashsim.io.load_checkpoint`); the config is
    rebuilt from plain data by :func:`flashsim.config.from_dict`, so it is checked like a config file.
    """
    return _checked(load_checkpoint(path, types=STATE_TYPES), path)


def _checked(state: dict[str, Any], path: Path | str) -> dict[str, Any]:
    """``state`` with its simulator state checked and its config rebuilt strictly from plain data."""
    simulation = state.get("simulation")
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
