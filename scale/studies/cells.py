"""One cell of a transformer claim: train its config, read its measures from the run's metrics rows.

A cell (arm × knob value × seed of a design in :mod:`scale.studies.claims`) is one training run of ``python -m scale
train`` in a temporary directory; :func:`run_transformer_cell` is the function flashsim's resumable runner
(:func:`flashsim.experiments.run_sweep`) calls in each worker, and :func:`cell_result` turns the run's metrics rows
into :data:`TRANSFORMER_CELL_METRICS` and the curves. A config that several claims run (C1's FlashREINFORCE arm is
C4's signed arm and C9's; C1's GRPO is C9's) runs once and its result is copied (``OUT/shared_cells``, keyed on the
config).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from flashsim.config import to_dict
from flashsim.experiments import to_json
from flashsim.losses import DEFAULT_DELTA
from flashsim.storage import atomic_write_text, jsonable
from scale.run.config import Config
from scale.studies.collapse_rules import collapsed, tool_collapsed

SHARED_CELLS = "shared_cells"
"""Folder beside ``warmups`` holding each finished config's result once, keyed on the config."""

TRANSFORMER_CELL_METRICS = {
    "accuracy": "held-out accuracy (sampled at temperature 1) after the last update",
    "accuracy_greedy": "held-out greedy accuracy after the last update",
    "auc": "area under the held-out accuracy curve against rollouts spent (update 0 to the last), per rollout",
    "tool_calls": "held-out tool calls per trajectory after the last update",
    "tool_calls_change": "held-out tool calls per trajectory: after the last update minus after the warm-up",
    "length": "held-out length in policy tokens after the last update",
    "truncation": "share of held-out trajectories cut at the token budget after the last update",
    "acceptance_rate": "share of trajectories the sequence gate admitted, mean over updates",
    "token_acceptance_rate": "share of tokens the token-local gate admitted, mean over updates",
    "sequence_kl": "sequence KL between behaviour and learner, mean over updates",
    "drift": "sequence KL between behaviour and learner in units of the gate's δ, mean over updates",
    "lag_mean": "policy lag of the trained trajectories, mean over updates",
    "entropy_final": "policy entropy (nats per token) of the trained trajectories, mean over the last 5 updates",
    "collapse": "1 if held-out accuracy is at least COLLAPSE_DROP below its running peak at each of the last "
                "COLLAPSE_EVALS evaluations (it fell and stayed down to the end), else 0",
    "tool_collapse": "1 if held-out tool calls per trajectory are below TOOL_COLLAPSE_CALLS at each of the last "
                     "COLLAPSE_EVALS evaluations (the tool abandoned to the end), else 0",
    "accuracy_tool": "held-out accuracy of the trajectories that called the calculator, after the last update",
    "accuracy_no_tool": "held-out accuracy of the trajectories that did not call it, after the last update",
    "accuracy_tool_start": "held-out accuracy of the trajectories that called the calculator, after the warm-up",
    "accuracy_no_tool_start": "held-out accuracy of the trajectories that did not call it, after the warm-up",
}
"""Every per-cell measure of a transformer claim, with what it means."""


def run_transformer_cell(config: Config) -> dict[str, Any]:
    """Train ``config`` in a temporary run directory; return the cell's measures and its curve (plain JSON).

    A config already run by another claim of the sweep (same text, seed included) is not run again: its result
    is read from ``SHARED_CELLS`` beside the warm-ups (cells are deterministic, so the copy is the run's result).
    """
    shared = None
    if config.warmup.cache is not None:
        key = hashlib.sha256(to_json(to_dict(config)).encode()).hexdigest()[:32]
        shared = Path(config.warmup.cache).parent / SHARED_CELLS / f"{key}.json"
        if shared.exists():
            return json.loads(shared.read_text())
    result = _train_cell(config)
    if shared is not None:
        shared.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(shared, to_json(result))
    return result


def _train_cell(config: Config) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="flashsim_tclaim_") as folder:
        # The run directory is thrown away: no curves.png (drawing it took longer than a smoke cell's training).
        log = dataclasses.replace(config.log, out=folder, progress=False, curves=False)
        from scale.run.trainer import Trainer  # the trainer imports torch and transformers: only in the worker

        Trainer(dataclasses.replace(config, log=log)).run()
        rows = [json.loads(line) for line in (Path(folder) / "metrics.jsonl").read_text().splitlines() if line]
    return jsonable(cell_result(rows))


def cell_result(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """:data:`TRANSFORMER_CELL_METRICS` and the accuracy curve against rollouts, from a run's metrics rows
    (update 0 first)."""
    spent = np.cumsum([row.get("rollout/trajectories", 0.0) or 0.0 for row in rows])
    evaluated = [(float(spent[i]), row) for i, row in enumerate(rows) if row.get("eval/accuracy") is not None]
    x = np.array([s for s, _ in evaluated])
    y = np.array([row["eval/accuracy"] for _, row in evaluated])
    first, last = evaluated[0][1], evaluated[-1][1]
    trained = [row for row in rows if row["update"] > 0]

    def mean(key: str) -> float:
        values = [row[key] for row in trained if row.get(key) is not None]
        return float(np.mean(values)) if values else float("nan")

    auc = float(np.sum((y[1:] + y[:-1]) / 2 * np.diff(x)) / (x[-1] - x[0])) if x[-1] > x[0] else float("nan")
    metrics = {
        "accuracy": last["eval/accuracy"], "accuracy_greedy": last.get("eval/accuracy_greedy"), "auc": auc,
        "tool_calls": last["eval/tool_calls"], "tool_calls_change": last["eval/tool_calls"] - first["eval/tool_calls"],
        "length": last["eval/length"], "truncation": last["eval/truncation"],
        "acceptance_rate": mean("trust/acceptance_rate"), "token_acceptance_rate": mean("trust/token_acceptance_rate"),
        "sequence_kl": mean("trust/sequence_kl_mean"), "drift": mean("trust/sequence_kl_mean") / DEFAULT_DELTA,
        "lag_mean": mean("lag/mean"),
        "entropy_final": float(np.mean([row["policy/entropy"] for row in trained[-5:]])) if trained else float("nan"),
        "collapse": collapsed(y),
        "tool_collapse": tool_collapsed([row["eval/tool_calls"] for _, row in evaluated]),
        "accuracy_tool": _finite(last.get("eval/accuracy_tool")),
        "accuracy_no_tool": _finite(last.get("eval/accuracy_no_tool")),
        "accuracy_tool_start": _finite(first.get("eval/accuracy_tool")),
        "accuracy_no_tool_start": _finite(first.get("eval/accuracy_no_tool")),
    }
    curve = {"update": [row["update"] for _, row in evaluated], "rollouts": x.tolist(), "accuracy": y.tolist(),
             "tool_calls": [row["eval/tool_calls"] for _, row in evaluated]}
    return {"metrics": metrics, "curve": curve}


def _finite(value: Any) -> float:
    """A metrics row's value as a float, NaN where the row has none (an empty group is written as null)."""
    return float("nan") if value is None else float(value)
