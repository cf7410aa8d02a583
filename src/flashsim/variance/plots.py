"""Figures of a gradient-variance sweep (matplotlib, Agg backend, PNG files).

* :func:`plot_metrics` — variance, bias, cosine and SNR against the lag or the rollout budget, one
  line per estimator (and group size), with the bootstrap intervals as vertical bars;
* :func:`plot_split` — the between-prompt / within-prompt split of the variance as stacked bars.

Rows are the flat dicts of :func:`flashsim.variance.sweep.measure_sweep`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

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
