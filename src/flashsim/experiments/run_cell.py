"""One cell's run: a resolved :class:`~flashsim.sim.config.TrainConfig` (seed included) → the cell's result.

This is the only module of :mod:`flashsim.experiments` that *runs* the simulator (designs only build
its configs). It uses the simulator's public API — ``Simulation(config).step()`` and ``.evaluate()`` —
and :mod:`flashsim.exact` for the final policy's exact statistics.

A cell's result is plain JSON: ``metrics`` (the scalars of :data:`CELL_METRICS`) and ``curve`` (the
learning curve at the exact-evaluation points). It holds nothing that depends on the machine (no wall
time), so a cell run twice gives byte-identical files.
"""

from __future__ import annotations

import math

import numpy as np

from flashsim import exact
from flashsim.sim import FixedLag, Simulation, TrainConfig
from flashsim.storage import jsonable
from flashsim.variance import measure_gradient

__all__ = [
    "CELL_METRICS", "PROBE_METRICS", "area_under_curve", "drawdown",
    "probe_cell", "probe_points", "rollouts_to", "run_cell",
]

CELL_METRICS = {
    "success_train": "exact success of the final policy on the train prompts",
    "success_heldout": "exact success of the final policy on the held-out prompts (NaN without held-out prompts)",
    "success_peak": "highest exact train success at any evaluation point",
    "collapse": "success_peak − success_train (how far the run fell from its best)",
    "length": "exact expected trajectory length of the final policy (train prompts)",
    "truncation": "exact probability that the final policy is truncated at the horizon",
    "tool_calls": "exact expected tool calls per trajectory of the final policy",
    "entropy_final": "policy entropy per token, mean over the last 10 % of updates",
    "acceptance_rate": "fraction of trajectories the gate admitted, mean over updates after warm-up",
    "token_acceptance_rate": "fraction of policy tokens that contributed, mean over updates after warm-up",
    "sequence_kl": "drift: mean sequence KL D̄ between behaviour and learner, mean over updates after warm-up",
    "clip_fraction": "fraction of PPO-clipped tokens, mean over updates after warm-up",
    "lag_mean": "observed lag k − version, mean over updates after warm-up",
    "sim_clock": "simulated seconds at the end of the run",
    "seconds_per_update": "simulated seconds per learner update (sim_clock / updates)",
    "learner_idle": "fraction of simulated time the learner waited for data (whole run)",
    "worker_idle": "fraction of worker time idle (parked or at a barrier; whole run)",
    "rollouts": "trajectories completed by workers",
    "optimum": "exact optimal success on the train prompts (the ceiling of success_train)",
    "optimum_heldout": "exact optimal success on the held-out prompts (NaN without held-out prompts)",
    "success_initial": "exact train success of the initial policy (before any update)",
    "auc": "area under the exact train-success curve against rollouts spent, over the rollouts spent: the mean "
           "success per rollout from the first to the last (trapezoids between evaluation points, starting at "
           "0 rollouts with the initial policy); it cannot saturate the way final success does",
    "rollouts_to_90": "rollouts spent until exact train success first reaches 0.9 × optimum (linear between "
                      "evaluation points; NaN if never within the budget)",
    "rollouts_to_95": "rollouts spent until exact train success first reaches 0.95 × optimum (as rollouts_to_90)",
    "rollouts_to_60": "rollouts spent until exact train success first reaches 0.6 × optimum (as rollouts_to_90)",
    "rollouts_to_70": "rollouts spent until exact train success first reaches 0.7 × optimum (as rollouts_to_90)",
    "updates_to_90": "learner updates completed until exact train success first reaches 0.9 × optimum (as "
                     "rollouts_to_90): the data trained on, where arms collect it in different chunks (C5's m "
                     "minibatches of one batch collect m updates' trajectories at once)",
    "drawdown": "largest fall of exact train success from its running peak at any evaluation point (the "
                "collapse of a run that recovers counts too)",
}
"""Every per-cell metric, with what it means. "After warm-up": updates k ≥ updates/10 (with a fixed
lag L the first L updates are less stale)."""

CURVE_KEYS = {
    "update": "update",
    "sim_clock": "time/sim_clock",
    "success_train": "env/success_train",
    "success_heldout": "env/success_heldout",
    "entropy": "policy/entropy",
    "sequence_kl": "trust/sequence_kl",
    "acceptance_rate": "trust/acceptance_rate",
    "rollouts": "data/rollouts_total",
    "tool_calls": "env/tool_calls",
}
"""Learning-curve series (name → simulator metric), one entry per evaluated update (and the final one);
``tool_calls`` is the mean over that update's batch (sampled), the other ``env/`` series are exact."""


def run_cell(config: TrainConfig) -> dict[str, object]:
    """Run ``config`` to its update budget; return ``{"metrics": ..., "curve": ...}`` (JSON-able)."""
    simulation = Simulation(config)
    initial = simulation.evaluate()["env/success_train"]  # exact: touches no random stream
    rows = [simulation.step() for _ in range(config.updates)]
    final = simulation.evaluate()
    evaluated = [row for row in rows if not math.isnan(row["env/success_train"])]
    if rows[-1] not in evaluated:
        evaluated.append({**rows[-1], **final})
    curve = {name: [float(row[key]) for row in evaluated] for name, key in CURVE_KEYS.items()}
    exact_stats = exact.evaluate(simulation.tables, simulation.policy, "train")
    after = rows[config.updates // 10:]
    last = rows[-max(1, config.updates // 10):]

    def mean(key: str, selected: list[dict]) -> float:
        return float(np.mean([row[key] for row in selected]))

    peak = max([final["env/success_train"], *curve["success_train"]])
    optimum = exact.optimal_success(simulation.tables, "train")
    heldout = simulation.tables.heldout_prompts
    rollouts, success = [0.0, *curve["rollouts"]], [initial, *curve["success_train"]]
    metrics = {
        "success_train": final["env/success_train"],
        "success_heldout": final["env/success_heldout"],
        "success_peak": peak,
        "collapse": peak - final["env/success_train"],
        "length": float(exact_stats["env/expected_length"]),
        "truncation": float(exact_stats["env/truncation_probability"]),
        "tool_calls": float(exact_stats["env/expected_tool_calls"]),
        "entropy_final": mean("policy/entropy", last),
        "acceptance_rate": mean("trust/acceptance_rate", after),
        "token_acceptance_rate": mean("trust/token_acceptance_rate", after),
        "sequence_kl": mean("trust/sequence_kl", after),
        "clip_fraction": mean("trust/clip_fraction", after),
        "lag_mean": mean("lag/mean", after),
        "sim_clock": float(rows[-1]["time/sim_clock"]),
        "seconds_per_update": float(rows[-1]["time/sim_clock"]) / config.updates,
        "learner_idle": float(rows[-1]["time/learner_idle"]),
        "worker_idle": float(rows[-1]["time/worker_idle"]),
        "rollouts": float(rows[-1]["data/rollouts_total"]),
        "optimum": optimum,
        "optimum_heldout": exact.optimal_success(simulation.tables, "heldout") if heldout.size else math.nan,
        "success_initial": initial,
        "auc": area_under_curve(rollouts, success),
        "rollouts_to_90": rollouts_to(rollouts, success, 0.9 * optimum),
        "rollouts_to_95": rollouts_to(rollouts, success, 0.95 * optimum),
        "rollouts_to_60": rollouts_to(rollouts, success, 0.6 * optimum),
        "rollouts_to_70": rollouts_to(rollouts, success, 0.7 * optimum),
        "updates_to_90": rollouts_to([0.0, *(k + 1.0 for k in curve["update"])], success, 0.9 * optimum),
        "drawdown": drawdown(success),
    }
    assert set(metrics) == set(CELL_METRICS)
    return jsonable({"metrics": metrics, "curve": curve})


def area_under_curve(rollouts: list[float], success: list[float]) -> float:
    """Trapezoid area under ``success`` against ``rollouts``, divided by the rollouts spent (a mean success).

    >>> area_under_curve([0.0, 100.0, 200.0], [0.0, 1.0, 1.0])
    0.75
    """
    x, y = np.asarray(rollouts, np.float64), np.asarray(success, np.float64)
    span = x[-1] - x[0]
    if x.size < 2 or span <= 0:
        return math.nan
    return float(np.sum((x[1:] - x[:-1]) * (y[1:] + y[:-1]) / 2) / span)


def rollouts_to(rollouts: list[float], success: list[float], threshold: float) -> float:
    """Rollouts at which ``success`` first reaches ``threshold``, linear between points (NaN if never).

    >>> rollouts_to([0.0, 100.0, 200.0], [0.2, 0.6, 1.0], 0.9)
    175.0
    """
    for i, value in enumerate(success):
        if value >= threshold:
            if i == 0:
                return float(rollouts[0])
            x0, x1, y0 = rollouts[i - 1], rollouts[i], success[i - 1]
            return float(x0 + (threshold - y0) / (value - y0) * (x1 - x0))
    return math.nan


def drawdown(success: list[float]) -> float:
    """Largest fall from the running peak: ``max_i (max_{j≤i} s_j − s_i)``.

    >>> drawdown([0.2, 0.8, 0.5, 0.9, 0.85])
    0.30000000000000004
    """
    y = np.asarray(success, np.float64)
    return float(np.max(np.maximum.accumulate(y) - y))


PROBE_METRICS = {
    "cosine": "mean cos(ĝ, ∇J) of single-batch update directions",
    "cosine_of_mean": "cos(E ĝ, ∇J): is the expected update aimed at the exact gradient?",
    "bias_norm_debiased": "‖E ĝ − ∇J‖ with the Monte Carlo noise of the mean removed",
    "variance": "tr Cov(ĝ)",
    "snr": "‖E ĝ‖² / tr Cov(ĝ)",
    "acceptance_rate": "fraction of trajectories the gate admitted in the measured batches",
}
"""What :func:`probe_cell` measures with ``flashsim.variance.measure_gradient`` (see ``docs/variance.md``)."""

PROBE_BATCHES = 32
"""Batches per gradient measurement (M); no bootstrap, the seeds give the intervals."""


def probe_points(updates: int) -> list[int]:
    """Updates at which :func:`probe_cell` measures the gradient: the start, a quarter, half, the last."""
    return sorted({0, updates // 4, updates // 2, updates - 1})


def probe_cell(config: TrainConfig) -> dict[str, object]:
    """Train ``config`` like :func:`run_cell` and measure the update direction at :func:`probe_points`.

    At update k (policy θ_k, before the update) the run's own estimator (``algorithm.loss``, B, G, loss
    options) is measured against the exact ∇J(θ_k) on fresh batches sampled by the behaviour policy
    θ_{k−L} (fixed lag L; on-policy for other lag models). Returns ``{"metrics": {...}, "probes": [...]}``:
    the training outcome of :func:`run_cell`'s metrics that matter here, and one dict per probe point.
    """
    simulation, algorithm = Simulation(config), config.algorithm
    keep = config.lag.lag if isinstance(config.lag, FixedLag) else 0
    history, probes = [], []
    points = set(probe_points(config.updates))
    for k in range(config.updates):
        history = [*history, simulation.policy.snapshot()][-(keep + 1):]
        if k in points:
            report = measure_gradient(
                simulation.tables, simulation.policy, estimator=algorithm.loss, budget=algorithm.batch_size,
                num_batches=PROBE_BATCHES, seed=config.seed * 100_003 + k, group_size=algorithm.group_size,
                behavior_policy=history[0], bootstrap=0, **dict(algorithm.loss_options),
            )
            probes.append({"update": k, **{name: float(getattr(report, name)) for name in PROBE_METRICS}})
        simulation.step(evaluate=False)
    return jsonable({"metrics": {"success_train": simulation.evaluate()["env/success_train"]}, "probes": probes})
