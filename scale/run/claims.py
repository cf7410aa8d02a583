"""The paper's claims on a real transformer: pre-registered designs over ``scale``'s config, run by flashsim's
claims machinery (issue 20).

The designs, the cell store (one atomic JSON file per finished cell, resumed after SIGKILL with no cell lost
or run twice), the parallel runner and the verdict rule (at the ceiling / supported / not supported /
negligible / inconclusive, against a pre-registered smallest effect) are :mod:`flashsim.experiments`'s;
this module adds what is specific to a transformer:

- the task: the tiny CPU preset (a 2-layer character Llama, two-digit multiplication with a calculator,
  warm-up then RL) with a calculator that answers 30 % of the expressions wrong
  (``rollout.tool_error_rate``), so tool calls also occur in failed trajectories (``docs/transformer-pilot.md``);
- pairing: every arm of a seed starts from the same warm-up (``warmup.cache`` in the output folder), so
  arms differ only after update 0;
- the cell's measures (:data:`CELL_METRICS`), read from the run's metrics rows;
- the designs (:func:`build_design`) at three budgets: ``smoke`` (seconds, for tests), ``quick`` and ``full``.

Run as ``python -m scale reproduce C1 C3 C4 --quick --out runs/tclaims``. Not built yet (issue 20): C2 under
injected lag, and the committed ≥ 10-seed run.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from flashsim.experiments.design import Arm, ClaimDesign, Comparison, KnobValue
from flashsim.io import jsonable
from scale.run.cli import resolve_config_path
from scale.run.config import Config, load_config

CLAIMS = ("C1", "C3", "C4")
PROFILES = ("smoke", "quick", "full")
TOOL_ERROR_RATE = 0.3
"""Share of expressions the calculator answers wrong (the pilot's task)."""

CELL_METRICS = {
    "accuracy": "held-out accuracy (sampled at temperature 1) after the last update",
    "accuracy_greedy": "held-out greedy accuracy after the last update",
    "auc": "area under the held-out accuracy curve against rollouts spent (update 0 to the last), per rollout",
    "tool_calls": "held-out tool calls per trajectory after the last update",
    "tool_calls_change": "held-out tool calls per trajectory: after the last update minus after the warm-up",
    "length": "held-out length in policy tokens after the last update",
    "truncation": "share of held-out trajectories cut at the token budget after the last update",
    "acceptance_rate": "share of trajectories the sequence gate admitted, mean over updates",
    "sequence_kl": "sequence KL between behaviour and learner, mean over updates",
    "lag_mean": "policy lag of the trained trajectories, mean over updates",
}
"""Every per-cell measure of a transformer claim, with what it means."""

_BUDGETS = {  # profile → (seeds, updates, evaluate every, warm-up steps, held-out prompts)
    "smoke": (2, 3, 3, 20, 16),
    "quick": (3, 30, 10, 300, 200),
    "full": (10, 60, 10, 300, 500),
}


def base_config(profile: str, warmups: Path | str) -> Config:
    """The task at ``profile``'s budget; warm-ups shared through ``warmups``."""
    _, updates, every, steps, tests = _BUDGETS[profile]
    return load_config(resolve_config_path("tiny_cpu"), [
        f"rollout.tool_error_rate={TOOL_ERROR_RATE}", "loop.mode=sync", "log.progress=false",
        f"train.updates={updates}", f"eval.every={every}", f"warmup.steps={steps}", f"data.num_test={tests}",
        f"warmup.cache={Path(warmups).resolve()}", "log.checkpoint_every=1000000"])


def build_design(claim: str, profile: str, warmups: Path | str, seeds: int | None = None) -> ClaimDesign:
    """``claim``'s design at ``profile``'s budget (``seeds`` overrides the budget's count)."""
    if claim not in CLAIMS:
        raise ValueError(f"claim must be one of {', '.join(CLAIMS)}; got {claim!r}")
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {', '.join(PROFILES)}; got {profile!r}")
    count = _BUDGETS[profile][0] if seeds is None else seeds
    design = _DESIGNS[claim](base_config(profile, warmups))
    return dataclasses.replace(design, seeds=tuple(range(count)), profile=profile)


def _on_task(**fields: Any) -> ClaimDesign:
    """A design on the one task (a single knob value, the headline); :func:`build_design` sets the seeds."""
    return ClaimDesign(knob_name="task", knob=(KnobValue("tool30", "calculator wrong on 30 %"),), headline="tool30",
                       seeds=(0, 1), vary_instance=False, **fields)


def _c1(base: Config) -> ClaimDesign:
    batch = base.train.batch_size
    return _on_task(
        claim="C1", title="FlashREINFORCE (1 rollout per prompt) vs GRPO (G = 4) on a transformer",
        paper="GRPO needs about twice the rollouts; with them it abandoned the tool (0.00 Python calls vs 3.25)",
        question="At equal rollouts, and with GRPO given twice the rollouts (twice the updates, or twice the "
                 "batch), which learns faster per rollout, and does GRPO stop calling the tool?",
        base=base,
        arms=(Arm("flash", "FlashREINFORCE", {"train.loss": "flash_reinforce", "rollout.group_size": 1}),
              Arm("grpo", "GRPO G = 4, same rollouts", {"train.loss": "grpo", "rollout.group_size": 4}),
              Arm("grpo_2x_updates", "GRPO G = 4, twice the updates",
                  {"train.loss": "grpo", "rollout.group_size": 4, "train.updates": 2 * base.train.updates}),
              Arm("grpo_2x_batch", "GRPO G = 4, twice the batch",
                  {"train.loss": "grpo", "rollout.group_size": 4, "train.batch_size": 2 * batch,
                   "loop.queue_size": 2 * base.loop.queue_size})),
        comparisons=(Comparison("auc", "flash", "grpo", "greater", paper="≈ 2× fewer rollouts"),
                     Comparison("auc", "flash", "grpo_2x_updates", "greater"),
                     Comparison("auc", "flash", "grpo_2x_batch", "greater"),
                     Comparison("tool_calls", "flash", "grpo", "greater", paper="3.25 vs 0.00 calls")),
        metrics=("accuracy", "tool_calls_change", "length"))


def _c3(base: Config) -> ClaimDesign:
    return _on_task(
        claim="C3", title="Sample-mean vs token-mean aggregation on a transformer",
        paper="token-mean's length bias: 37 % longer answers", question="Does token-mean make answers longer?",
        base=base,
        arms=(Arm("sample_mean", "sample-mean", {"train.loss": "flash_reinforce"}),
              Arm("token_mean", "token-mean", {"train.loss": "token_mean"})),
        comparisons=(Comparison("length", "sample_mean", "token_mean", "less", paper="37 % shorter"),
                     Comparison("auc", "sample_mean", "token_mean", "greater", source="none")),
        metrics=("accuracy", "truncation", "tool_calls"))


def _c4(base: Config) -> ClaimDesign:
    token_sum = {"train.loss_options.aggregation": "seq_mean_token_sum"}
    return _on_task(
        claim="C4", title="Signed vs positive-only feedback, each under sample-mean and token-sum, on a transformer",
        paper="positive-only collapsed to 9.8 and stopped calling the tool",
        question="Does positive-only lose accuracy and tool calls, and is per-trajectory length averaging the "
                 "mechanism (as on the toys)?",
        base=base,
        arms=(Arm("signed", "signed, sample-mean", {"train.loss": "flash_reinforce"}),
              Arm("positive_only", "positive-only, sample-mean", {"train.loss": "positive_only"}),
              Arm("signed_token_sum", "signed, token sum", {"train.loss": "flash_reinforce", **token_sum}),
              Arm("positive_only_token_sum", "positive-only, token sum", {"train.loss": "positive_only", **token_sum})),
        comparisons=(Comparison("auc", "signed", "positive_only", "greater", paper="37.0 vs 9.8"),
                     Comparison("tool_calls", "signed", "positive_only", "greater", paper="calls kept vs 0"),
                     Comparison("auc", "positive_only_token_sum", "positive_only", "greater", source="none")),
        metrics=("accuracy", "length"))


_DESIGNS = {"C1": _c1, "C3": _c3, "C4": _c4}


def run_cell(config: Config) -> dict[str, Any]:
    """Train ``config`` in a temporary run directory; return the cell's measures and its curve (plain JSON)."""
    with tempfile.TemporaryDirectory(prefix="flashsim_tclaim_") as folder:
        log = dataclasses.replace(config.log, out=folder, progress=False)
        from scale.run.trainer import Trainer  # the trainer imports torch and transformers: only in the worker

        Trainer(dataclasses.replace(config, log=log)).run()
        rows = [json.loads(line) for line in (Path(folder) / "metrics.jsonl").read_text().splitlines() if line]
    return jsonable(cell_result(rows))


def cell_result(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """:data:`CELL_METRICS` and the accuracy curve against rollouts, from a run's metrics rows (update 0 first)."""
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
        "acceptance_rate": mean("trust/acceptance_rate"), "sequence_kl": mean("trust/sequence_kl_mean"),
        "lag_mean": mean("lag/mean"),
    }
    curve = {"update": [row["update"] for _, row in evaluated], "rollouts": x.tolist(), "accuracy": y.tolist(),
             "tool_calls": [row["eval/tool_calls"] for _, row in evaluated]}
    return {"metrics": metrics, "curve": curve}

