"""``flashsim.experiments``: the machinery every study runs on — designs, a parallel resumable runner, verdicts,
summaries, pages.

Layer 5 of flashsim. An experiment is a :class:`~flashsim.experiments.design.ClaimDesign`: arms, a knob, the
paper's direction on named metrics, a headline setting, seeds (the budgets and seeds of the three profiles:
:mod:`~flashsim.experiments.profiles`). Designs are rows of a :class:`Registry`
(:mod:`~flashsim.experiments.registry`). :func:`run_sweep` runs a design's cells (arm × knob value × seed, one
simulated training run each, through the adapter :mod:`~flashsim.experiments.run_cell`) in parallel processes,
one atomic JSON file per cell, resumable after any interruption; :mod:`~flashsim.experiments.analysis` turns the
cells into means with 95 % intervals and paired verdicts (:mod:`~flashsim.experiments.verdict`: a smallest effect
of interest, a claimed size where the paper states one, a ceiling and a floor, Holm across a page's primaries);
:mod:`~flashsim.experiments.probes` measures a probed design's updates against the exact gradient;
:mod:`~flashsim.experiments.plots` draws them; :mod:`~flashsim.experiments.report` writes a results page.

No study lives here. The studies — the paper's claims C1–C9, the follow-ups, C1 tuned — are
:mod:`flashsim.studies` (their table: :data:`flashsim.studies.DESIGNS`); ``scale``'s transformer studies are
``scale.studies``. ``flashsim reproduce`` is the command. What this package exports is its public API, the one
both build on.

Example (the smoke design of C4; ``run_sweep([design], out)`` would run its 8 cells):

    >>> from flashsim.studies import build_design
    >>> design = build_design("C4", "smoke")
    >>> [(cell.arm, cell.knob, cell.seed) for cell in design.cells()][:2]
    [('signed', 'gridworld', 0), ('positive_only', 'gridworld', 0)]
    >>> design.comparisons[0].metric, design.comparisons[0].direction
    ('auc', 'greater')
"""

from __future__ import annotations

from pathlib import Path

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
from flashsim.experiments.references import Stores, checkout_root, render_references
from flashsim.experiments.registry import Registered, Registry
from flashsim.experiments.report import RULE, figure_names, write_report
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
from flashsim.moved import watch

watch(__path__)  # the studies' old module names fail with their new name


def write_outputs(design: ClaimDesign, out: Path | str) -> dict:
    """Summary, tables and both figures of ``design`` in ``out/<claim>/``; returns the summary."""
    summary = write_summary(design, out)
    knob_figure, curves_figure = figure_names(design.claim)
    plot_knob(summary, Path(out) / design.claim / knob_figure, panels=design.panels)
    plot_success_curves(design, out, Path(out) / design.claim / curves_figure)
    return summary


MOVED_NAMES = {"CLAIMS": "flashsim.studies.CLAIMS", "DESIGNS": "flashsim.studies.DESIGNS",
              "EXPERIMENTS": "flashsim.studies.EXPERIMENTS", "build_design": "flashsim.studies.build_design",
              "rerender": "flashsim.studies.rerender", "c1_tuned": "flashsim.studies.c1_tuned.rule"}
"""Names this package exported before the studies moved out of it → where they are now."""


def __getattr__(name: str) -> object:
    if name in MOVED_NAMES:
        raise ImportError(f"flashsim.experiments.{name} moved: use {MOVED_NAMES[name]}")
    raise AttributeError(f"module 'flashsim.experiments' has no attribute {name!r}")


__all__ = [
    "ALPHA", "AT_CEILING", "Arm", "CELL_METRICS", "Cell", "ClaimDesign", "Comparison",
    "Effect", "INCONCLUSIVE", "KnobValue", "MEANS", "NEGLIGIBLE", "NOT_SUPPORTED", "PER_SEED",
    "PROFILES", "Panel", "RULE", "Registered", "Registry", "SMALLEST_EFFECTS", "SUMMARY", "SUPPORTED", "TABLE",
    "Stores", "checkout_root", "render_references",
    "TIME_AXES", "PAGES", "Page", "figure_names", "finalized_collapse", "fmt_interval",
    "out_dir", "page_of", "fmt_p", "holm", "load_cells", "markdown_tables",
    "mean_interval", "paired_verdict", "plot_knob", "plot_success_curves", "run_cell", "run_sweep", "summarize",
    "to_json", "with_overrides", "write_outputs", "write_report", "write_summary",
]
