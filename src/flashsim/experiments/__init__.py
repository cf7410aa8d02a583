"""``flashsim.experiments``: the paper's claims as experiments — designs, a parallel resumable runner, verdicts.

Layer 5 of flashsim. A claim (C1–C9) is a :class:`~flashsim.experiments.design.ClaimDesign` built in
:mod:`~flashsim.experiments.claims`: arms, a knob, the paper's direction on named metrics, a headline setting,
seeds (the budgets and seeds of the three profiles: :mod:`~flashsim.experiments.profiles`). Every claim and
follow-up is one row of the registry :data:`DESIGNS` (:mod:`~flashsim.experiments.registry`; ``scale``'s
transformer claims are rows of a :class:`Registry` too). :func:`run_sweep` runs a design's cells (arm × knob
value × seed, one simulated training run each, through the adapter :mod:`~flashsim.experiments.run_cell`) in
parallel processes, one atomic JSON file per cell, resumable after any interruption;
:mod:`~flashsim.experiments.analysis` turns the cells into means with 95 % intervals and paired verdicts
(:mod:`~flashsim.experiments.verdict`: a smallest effect of interest, a claimed size where the paper states one, a
ceiling and a floor, Holm across a page's primaries); :mod:`~flashsim.experiments.plots` draws them;
:mod:`~flashsim.experiments.report` writes ``docs/results.md``; :mod:`~flashsim.experiments.c1_tuned` is the
per-arm learning-rate tuning rule of C1 tuned (issue 38), which ``scale`` applies to the transformer too.
``flashsim reproduce`` is the command. What this package exports is its public API, the one ``scale`` builds its
transformer claims on.

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

from flashsim.experiments import c1_tuned
from flashsim.experiments.analysis import (
    MEANS,
    PER_SEED,
    SUMMARY,
    TABLE,
    fmt_interval,
    fmt_p,
    load_cells,
    markdown_tables,
    summarize,
    write_summary,
)
from flashsim.experiments.design import (
    TIME_AXES,
    Arm,
    Cell,
    ClaimDesign,
    Comparison,
    KnobValue,
    Panel,
    with_overrides,
)
from flashsim.experiments.pages import PAGES, Page, out_dir, page_of
from flashsim.experiments.plots import plot_knob, plot_success_curves
from flashsim.experiments.profiles import PROFILES
from flashsim.experiments.registry import CLAIMS, DESIGNS, EXPERIMENTS, Registered, Registry, build_design
from flashsim.experiments.report import RULE, figure_names, rerender, write_report
from flashsim.experiments.run_cell import CELL_METRICS, run_cell
from flashsim.experiments.runner import run_sweep, to_json
from flashsim.experiments.summaries import finalized_collapse
from flashsim.experiments.verdict import (
    ALPHA,
    AT_CEILING,
    INCONCLUSIVE,
    NEGLIGIBLE,
    NOT_SUPPORTED,
    SMALLEST_EFFECTS,
    SUPPORTED,
    Effect,
    holm,
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
    "ALPHA", "AT_CEILING", "Arm", "CELL_METRICS", "CLAIMS", "Cell", "ClaimDesign", "Comparison", "DESIGNS",
    "EXPERIMENTS", "Effect", "INCONCLUSIVE", "KnobValue", "MEANS", "NEGLIGIBLE", "NOT_SUPPORTED", "PER_SEED",
    "PROFILES", "Panel", "RULE", "Registered", "Registry", "SMALLEST_EFFECTS", "SUMMARY", "SUPPORTED", "TABLE",
    "TIME_AXES", "PAGES", "Page", "build_design", "c1_tuned", "figure_names", "finalized_collapse", "fmt_interval",
    "out_dir", "page_of", "rerender", "fmt_p", "holm", "load_cells", "markdown_tables",
    "mean_interval", "paired_verdict", "plot_knob", "plot_success_curves", "run_cell", "run_sweep", "summarize",
    "to_json", "with_overrides", "write_outputs", "write_report", "write_summary",
]
