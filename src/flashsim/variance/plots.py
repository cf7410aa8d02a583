"""Figures of a gradient-variance sweep (matplotlib, Agg backend, PNG files).

* :func:`plot_metrics` — variance, bias, cosine and SNR against the lag or the rollout budget, one
  line per estimator (and group size), with the bootstrap intervals as vertical bars;
* :func:`plot_split` — the between-prompt / within-prompt split of the variance as stacked bars;
* :func:`plot_directions` — every batch's update direction ĝ drawn around ∇J, one panel per estimator
  (from reports measured with ``keep_directions=True``; :func:`direction_coordinates` gives the points).

Rows are the flat dicts of :func:`flashsim.variance.sweep.measure_sweep`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

from flashsim.variance.report import GradientReport
from flashsim.variance.sweep import series_label

SweepRow = Mapping[str, object]

PANELS = (
    ("grad/variance", "variance tr Cov(ĝ)", "log"),
    ("grad/bias_norm_debiased", "bias ‖E ĝ − ∇J‖ (noise removed)", "linear"),
    ("grad/cosine", "mean cos(ĝ, ∇J)", "linear"),
    ("grad/snr", "SNR ‖E ĝ‖² / tr Cov", "log"),
)
AXES = {"lag": ("config/lag", "policy lag L (exact-ascent steps)"), "budget": ("config/budget", "rollout budget B")}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _loggable(rows: Sequence[SweepRow], key: str) -> bool:
    """Whether a log axis can show ``key``: some value is positive and finite (a diverged or zero-variance sweep
    has none; matplotlib refuses a log axis then)."""
    return any(0 < float(row[key]) < float("inf") for row in rows)


def _varying(rows: Sequence[SweepRow], x: str) -> list[str]:
    """The grid axes other than ``x`` that take several values (they split the lines)."""
    return [axis for axis, (key, _) in AXES.items() if axis != x and len({row[key] for row in rows}) > 1]


def plot_metrics(rows: Sequence[SweepRow], path: Path | str, *, x: str = "lag", title: str = "") -> Path:
    """Save a 2 × 2 figure of :data:`PANELS` against ``x`` (``"lag"`` or ``"budget"``) to ``path``."""
    if x not in AXES:
        raise ValueError(f"x must be one of {sorted(AXES)}, got {x!r}")
    key_x, label_x = AXES[x]
    varying = _varying(rows, x)
    series: dict[str, list[SweepRow]] = {}
    for row in rows:
        series.setdefault(series_label(row, varying), []).append(row)
    plt = _pyplot()
    figure, axes = plt.subplots(2, 2, figsize=(12, 8), squeeze=False)
    for index, (label, members) in enumerate(series.items()):
        members = sorted(members, key=lambda row: row[key_x])
        xs = [row[key_x] for row in members]
        for axis, (key, name, scale) in zip(axes.flat, PANELS):
            ys = [float(row[key]) for row in members]
            axis.plot(xs, ys, marker="o", color=f"C{index}", label=label, linewidth=1.3)
            if f"{key}_ci_low" in members[0]:  # basic bootstrap intervals need not contain the point
                lows = [float(row[f"{key}_ci_low"]) for row in members]
                highs = [float(row[f"{key}_ci_high"]) for row in members]
                axis.vlines(xs, lows, highs, color=f"C{index}", alpha=0.6, linewidth=2)
            axis.set_title(name, fontsize=10)
            axis.set_yscale(scale if scale != "log" or _loggable(rows, key) else "linear")
            axis.set_xlabel(label_x)
            axis.grid(alpha=0.3)
    if x == "budget":
        for axis in axes.flat:
            axis.set_xscale("log", base=2)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="lower center", ncol=min(4, len(labels)), fontsize=8)
    if title:
        figure.suptitle(title)
    figure.tight_layout(rect=(0, 0.04 + 0.025 * ((len(labels) - 1) // 4), 1, 1))
    path = Path(path)
    figure.savefig(path, format="png", dpi=110)
    plt.close(figure)
    return path


def plot_split(rows: Sequence[SweepRow], path: Path | str, *, title: str = "") -> Path:
    """Save stacked horizontal bars of between-prompt (dark) and within-prompt (light) variance per cell."""
    labels = [series_label(row, ["budget", "lag"]) for row in rows]
    between = [float(row["grad/between_prompt"]) for row in rows]
    within = [float(row["grad/within_prompt"]) for row in rows]
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(9, 1.5 + 0.3 * len(rows)))
    positions = list(range(len(rows)))
    axis.barh(positions, between, color="C0", label="between prompts: tr Cov E[ĝ | prompts]")
    axis.barh(positions, within, left=[max(b, 0.0) for b in between], color="C1", alpha=0.6,
              label="within prompts: E tr Cov[ĝ | prompts]")
    axis.set_yticks(positions, labels, fontsize=8)
    axis.invert_yaxis()
    axis.set_xlabel("variance (trace of the covariance of ĝ)")
    axis.legend(fontsize=8, loc="lower right")
    axis.grid(alpha=0.3, axis="x")
    if title:
        axis.set_title(title)
    figure.tight_layout()
    path = Path(path)
    figure.savefig(path, format="png", dpi=110)
    plt.close(figure)
    return path


def _unit_scale(report: GradientReport) -> float:
    """c = ‖∇J‖² / ⟨E ĝ, ∇J⟩, so that the mean update's component along ∇J is ∇J itself."""
    true = report.true_gradient.to(torch.float64)
    projection = float(report.mean_gradient.to(torch.float64) @ true)
    if not projection > 0:
        raise ValueError(f"{report.estimator}: the mean update does not point along ∇J (⟨E ĝ, ∇J⟩ = {projection:g}); "
                         f"there is no scale that puts it at (1, 0)")
    return float(true @ true) / projection


def direction_coordinates(report: GradientReport, *, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Each batch's ĝ as a point of the plane where ∇J is (1, 0), rescaled so that E ĝ reaches 1 along ∇J.

    With c = ‖∇J‖² / ⟨E ĝ, ∇J⟩ (E ĝ: the mean over the batches), ``along`` = ⟨c ĝ, ∇J⟩ / ‖∇J‖² and
    ``across`` = ±‖c ĝ − along · ∇J‖ / ‖∇J‖: each point's angle to the x axis is exactly the angle between
    ĝ and ∇J, and its distance from the origin is ‖c ĝ‖ / ‖∇J‖. The sign of ``across`` is the sign of ĝ's
    component along one fixed random direction orthogonal to ∇J (drawn from ``seed``): the other dimensions do
    not fit on a page. c puts estimators of different scales (GRPO's std division) in ∇J's units; an
    unbiased estimator's mean lands on (1, 0).

    Shape:
        returns two ``[M]`` float64 tensors.
    """
    if report.directions is None:
        raise ValueError("report.directions is None; measure with measure_gradient(..., keep_directions=True)")
    true = report.true_gradient.to(torch.float64)
    squared_norm = float(true @ true)
    scaled = _unit_scale(report) * report.directions.to(torch.float64)
    along = scaled @ true / squared_norm
    orthogonal = scaled - along[:, None] * true
    side = torch.randn(true.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    side -= (side @ true) / squared_norm * true
    sign = torch.where(orthogonal @ side < 0, -1.0, 1.0).to(torch.float64)
    return along, sign * torch.linalg.vector_norm(orthogonal, dim=1) / squared_norm**0.5


def plot_directions(
    reports: Mapping[str, GradientReport], path: Path | str, *, count: int = 60, title: str = ""
) -> Path:
    """Save one half-disc per report: the first ``count`` batches' ĝ (grey), their mean E ĝ (blue), ∇J (black).

    ∇J points up; a batch's angle from the vertical is its angle to ∇J, its radius ‖c ĝ‖ / ‖∇J‖ with the
    scale c of :func:`direction_coordinates` (E ĝ reaches 1 along ∇J), the same radius in every panel; each
    panel's title gives the report's mean cos(ĝ, ∇J); ``title`` replaces the default one, which says how to read
    the figure. Sized for a page column (8 inches wide, two panels a row).
    """
    if not reports:
        raise ValueError("reports must name at least one GradientReport")
    polar = {}
    for label, report in reports.items():
        along, across = direction_coordinates(report)
        polar[label] = (torch.atan2(across, along)[:count], torch.hypot(along, across)[:count])
    reach = 1.1 * max(1.2, *(float(radius.max()) for _, radius in polar.values()))
    from matplotlib.figure import Figure  # no pyplot: a notebook's backend (inline figures) stays as it is

    columns = min(2, len(reports))
    rows = -(-len(reports) // columns)
    figure = Figure(figsize=(8, 3.3 * rows))
    axes = figure.subplots(rows, columns, squeeze=False, subplot_kw={"projection": "polar"})
    for axis, (label, report) in zip(axes.flat, reports.items()):
        angles, radii = polar[label]
        for angle, radius in zip(angles.tolist(), radii.tolist()):
            axis.plot([angle, angle], [0, radius], color="0.6", alpha=0.5, linewidth=0.8)
        axis.scatter(angles, radii, s=8, color="0.3", zorder=3, label=f"one batch's ĝ (first {len(angles)})")
        mean = _unit_scale(report) * report.mean_gradient.to(torch.float64)
        true = report.true_gradient.to(torch.float64)
        mean_across = float(torch.linalg.vector_norm(mean - true) / torch.linalg.vector_norm(true))  # along: 1
        arrow = {"arrowstyle": "-|>", "linewidth": 2, "shrinkA": 0, "shrinkB": 0}
        axis.annotate("", (0.0, 1.0), (0.0, 0.0), arrowprops={**arrow, "color": "black"}, zorder=4)
        axis.annotate("", (math.atan2(mean_across, 1.0), math.hypot(1.0, mean_across)), (0.0, 0.0),
                      arrowprops={**arrow, "color": "C0"}, zorder=5)
        axis.plot([], [], color="C0", linewidth=2, label="their mean E ĝ")
        axis.plot([], [], color="black", linewidth=2, label="∇J, the exact gradient")
        axis.set_theta_zero_location("N")
        axis.set_thetamin(-90)
        axis.set_thetamax(90)
        axis.set_rmax(reach)
        axis.set_rticks([radius for radius in (1, 2, 3, 4, 5, 6) if radius < reach])
        axis.set_thetagrids((-90, -60, -30, 0, 30, 60, 90), ("90°", "60°", "30°", "0°", "30°", "60°", "90°"))
        axis.set_title(f"{label}\nmean cos(ĝ, ∇J) = {report.cosine:.3f}", fontsize=10)
        axis.tick_params(labelsize=8)
    for axis in axes.flat[len(reports):]:
        axis.set_visible(False)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="lower center", ncol=3, fontsize=9)
    figure.suptitle(title or "angle to ∇J (from the vertical) and length in units of ‖∇J‖", fontsize=10)
    figure.tight_layout(rect=(0, 0.08 / rows, 1, 1), w_pad=3)
    path = Path(path)
    figure.savefig(path, format="png", dpi=110, bbox_inches="tight")
    return path
