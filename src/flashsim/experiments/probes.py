"""Gradient probes: does the gradient-level finding predict the training-level one? (C1–C4)

For the headline setting of a claim whose design is ``probed`` (C1–C4; C4: is positive-only's expected update aimed
at ∇J?), every arm and seed is trained again (the same deterministic run as its
cell) while :func:`~flashsim.experiments.run_cell.probe_cell` measures the arm's own update direction
against the exact ∇J at a few points of the *trained* policy's trajectory (``flashsim.variance``:
cosine, cosine of the mean update, debiased bias, variance). The probes run as a sweep of their own
(``OUT/<claim>-probes/cells/``, resumable like any other) and are tabulated beside the final success.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from flashsim.experiments.analysis import fmt_interval, load_cells
from flashsim.experiments.design import ClaimDesign
from flashsim.experiments.run_cell import PROBE_METRICS
from flashsim.experiments.verdict import mean_interval

TABLE_METRICS = ("cosine_of_mean", "cosine", "bias_norm_debiased", "variance", "acceptance_rate")


def probe_design(design: ClaimDesign) -> ClaimDesign:
    """The design of ``design``'s probes: its headline knob value only, under the claim name ``<claim>-probes``."""
    headline = design.knob_value(design.headline)
    comparisons = tuple(c for c in design.comparisons if c.knobs is None or design.headline in c.knobs)
    return replace(design, claim=f"{design.claim}-probes", knob=(headline,), comparisons=comparisons, metrics=(),
                   tuning=(), panels=())


def probe_table(design: ClaimDesign, out: Path | str) -> str:
    """Markdown: per arm and probe point the mean [95 % CI] over seeds of the gradient statistics, and the
    arm's final success (the training outcome)."""
    probes = probe_design(design)
    records = load_cells(probes, out)
    header = ["arm", "update", *TABLE_METRICS, "final success_train"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for arm in probes.arms:
        done = [r["result"] for r in records[(arm.name, probes.headline)] if r is not None]
        if not done:
            continue
        success = fmt_interval(mean_interval([r["metrics"]["success_train"] for r in done]))
        for index, point in enumerate(done[0]["probes"]):
            values = [fmt_interval(mean_interval([r["probes"][index][m] for r in done])) for m in TABLE_METRICS]
            lines.append(f"| {arm.label} | {point['update']} | " + " | ".join(values) + f" | {success} |")
    return "\n".join(lines) + "\n"


__all__ = ["PROBE_METRICS", "probe_design", "probe_table"]
