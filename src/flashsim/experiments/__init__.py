"""``flashsim.experiments``: the paper's claims as experiments — designs, a parallel resumable runner, verdicts.

Layer 5 of flashsim. A claim (C1–C9) is a :class:`~flashsim.experiments.design.ClaimDesign` built in
:mod:`~flashsim.experiments.claims`: arms, a knob, the paper's direction on named metrics, a headline
setting, seeds. :func:`run_sweep` runs its cells (arm × knob value × seed, one simulated training run
each, through the adapter :mod:`~flashsim.experiments.run_cell`) in parallel processes, one atomic JSON
file per cell, resumable after any interruption; :mod:`~flashsim.experiments.analysis` turns the cells
into means with 95 % intervals and paired verdicts (:mod:`~flashsim.experiments.verdict`: a smallest
effect of interest, a claimed size where the paper states one, a ceiling and a floor, Holm across a
page's primaries);
:mod:`~flashsim.experiments.plots` draws them; :mod:`~flashsim.experiments.report` writes
``docs/results.md``. ``flashsim reproduce`` is the command.

Example (the smoke design of C4; ``run_sweep([design], out)`` would run its 8 cells):

    >>> from flashsim.experiments import build_design
    >>> design = build_design("C4", "smoke")
    >>> [(cell.arm, cell.knob, cell.seed) for cell in design.cells()][:2]
    [('signed', 'gridworld', 0), ('positive_only', 'gridworld', 0)]
    >>> design.comparisons[0].metric, design.comparisons[0].direction
    ('auc', 'greater')
"""

from __future__ import annotations

from pathlib import Path

from flashsim.experiments.analysis import summarize, write_summary
from flashsim.experiments.claims import CLAIMS, PROFILES, build_design
from flashsim.experiments.design import Arm, Cell, ClaimDesign, Comparison, KnobValue, Panel, with_overrides
from flashsim.experiments.plots import plot_knob, plot_success_curves
from flashsim.experiments.report import figure_names, write_report
from flashsim.experiments.run_cell import CELL_METRICS, run_cell
from flashsim.experiments.runner import run_sweep
from flashsim.experiments.verdict import (
    AT_CEILING,
    INCONCLUSIVE,
    NEGLIGIBLE,
    NOT_SUPPORTED,
    SUPPORTED,
    Effect,
    mean_interval,
    paired_verdict,
)


def write_outputs(design: ClaimDesign, out: Path | str) -> dict:
    """Summary, tables and both figures of ``design`` in ``out/<claim>/``; returns the summary."""
    summary = write_summary(design, out)
    knob_figure, curves_figure = figure_names(design.claim)
    plot_knob(summary, Path(out) / design.claim / knob_figure, panels=design.panels)
    plot_success_curves(design, out, Path(out) / design.claim / curves_figure)
    return summary


__all__ = [
    "AT_CEILING", "Arm", "CELL_METRICS", "CLAIMS", "Cell", "ClaimDesign", "Comparison", "Effect", "INCONCLUSIVE",
    "KnobValue", "NEGLIGIBLE", "NOT_SUPPORTED", "PROFILES", "Panel", "SUPPORTED", "build_design", "mean_interval",
    "paired_verdict",
    "plot_knob", "plot_success_curves", "run_cell", "run_sweep", "summarize", "with_overrides", "write_outputs",
    "write_report", "write_summary",
]
