"""Figures of a claim: metrics against the knob (means with 95 % intervals) and headline learning curves.

Both are PNG files written atomically (matplotlib, Agg backend): ``<claim>.png`` has one panel per
tabulated metric with each arm's means over the knob's values (joined by a line only where the values are an
increasing quantity, :func:`ordered`; envs and other categories are points); ``<claim>_curves.png`` has the mean
exact train success (band: 95 % t interval across seeds) of each arm at the headline setting, against
the learner update (or the simulated clock, for C7's timing question), and beside it the batch's tool
calls per trajectory where the claim's primary metric is ``tool_calls`` (C9).
"""

from __future__ import annotations

import io
import math
import textwrap
from pathlib import Path

import numpy as np

from flashsim.experiments.analysis import load_cells
from flashsim.experiments.design import ClaimDesign, Panel
from flashsim.experiments.verdict import mean_interval
from flashsim.storage import atomic_write

MAX_PANELS = 8
TICK_WIDTH = 24
"""Characters per line of a knob label under a panel of at most three values (wider panels rotate them)."""


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def _save(figure, path: Path) -> Path:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110, metadata={"Software": None})
    atomic_write(path, lambda file: file.write(buffer.getvalue()))
    return path


def plot_knob(summary: dict, path: Path | str, panels: tuple[Panel, ...] = ()) -> Path:
    """One panel per metric: each arm's mean and 95 % interval at every knob value.

    With ``panels`` each metric gets a row with one axis per panel, so that every x axis holds one kind of
    knob (C1: budget; learning rate; the harder task).
    """
    plt = _pyplot()
    metrics = list(summary["metrics"])[:MAX_PANELS]
    if panels:
        widths = [max(len(panel.knobs), 2) for panel in panels]
        height = 2.6 * len(metrics) + 0.4
        figure, axes = plt.subplots(len(metrics), len(panels), figsize=(1.5 * sum(widths) + 1.5, height),
                                    squeeze=False, gridspec_kw={"width_ratios": widths})
        for row, metric in enumerate(metrics):
            for column, panel in enumerate(panels):
                _plot_metric(axes[row, column], summary, metric, panel.knobs, panel.ticks, lines=panel.lines)
                axes[row, column].set_title(f"{metric} · {panel.title}", fontsize=8)
    else:
        columns = min(4, len(metrics))
        rows = math.ceil(len(metrics) / columns)
        figure, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.3 * rows), squeeze=False)
        names = [k["name"] for k in summary["knob"]]
        for index, metric in enumerate(metrics):
            _plot_metric(axes.flat[index], summary, metric, names, lines=ordered(summary["knob"]))
            axes.flat[index].set_title(metric, fontsize=9)
        for axis in list(axes.flat)[len(metrics):]:
            axis.set_visible(False)
    axes.flat[0].legend(fontsize=7)
    figure.suptitle(f"{summary['claim']} · {summary['title']} · {summary['seeds']} seeds ({summary['profile']})",
                    fontsize=10)
    top = 1 - 0.35 / figure.get_figheight()  # room for the title
    figure.tight_layout(rect=(0, 0, 1, top))
    try:
        return _save(figure, Path(path))
    finally:
        plt.close(figure)


def ordered(knob: list[dict]) -> bool:
    """Whether the knob's values are a quantity that increases along it (lags, minibatches, σ), so that a line
    between neighbours means something; categories (envs, an env × lag grid) are drawn as points.

    >>> ordered([{"value": 2}, {"value": 4}]), ordered([{"value": None}, {"value": None}])
    (True, False)
    >>> ordered([{"value": 0}, {"value": 4}, {"value": 0}, {"value": 4}])  # two envs, each over the lag
    False
    """
    values = [k.get("value") for k in knob]
    return all(isinstance(v, (int, float)) for v in values) and all(a < b for a, b in zip(values, values[1:]))


def _plot_metric(axis, summary: dict, metric: str, names: tuple[str, ...] | list[str], ticks: tuple[str, ...] = (),
                 *, lines: bool = True) -> None:
    """Each arm's mean and 95 % interval of ``metric`` at the knob values ``names``, on ``axis``."""
    labels = {k["name"]: k["label"] for k in summary["knob"]}
    ticks = ticks or tuple(labels[name] for name in names)
    x = np.arange(len(names))
    shown = False
    for offset, arm in enumerate(summary["arms"]):
        values = [summary["table"][name][arm["name"]][metric] for name in names]
        means = np.array([v["mean"] if v["mean"] is not None else np.nan for v in values], dtype=float)
        low = np.array([v["low"] if v["low"] is not None else np.nan for v in values], dtype=float)
        high = np.array([v["high"] if v["high"] is not None else np.nan for v in values], dtype=float)
        shift = (offset - (len(summary["arms"]) - 1) / 2) * 0.06
        error = np.vstack([means - low, high - means])
        axis.errorbar(x + shift, means, yerr=np.nan_to_num(error), marker="o", ms=3, capsize=2, label=arm["label"],
                      linestyle="-" if lines else "none")
        shown = shown or bool(np.isfinite(means).any())
    if not shown:
        axis.text(0.5, 0.5, "no arm has a value here", transform=axis.transAxes, ha="center", fontsize=7)
        axis.set_yticks([])
    _log_scale_if_wide(axis, summary, metric)
    wide = len(names) > 3
    if not wide:  # a few long labels ("gridworld, each arm at its pilot's best lr") side by side: wrapped
        ticks = tuple(textwrap.fill(tick, TICK_WIDTH) for tick in ticks)
    axis.set_xticks(x, ticks, rotation=45 if wide else 0, ha="right" if wide else "center", fontsize=7)
    axis.set_xlim(-0.5, len(names) - 0.5)
    axis.grid(alpha=0.3)


def _log_scale_if_wide(axis, summary: dict, metric: str) -> None:
    """Logarithmic y axis when a positive metric spans more than a factor of 50 (C7's seconds per update)."""
    means = [v[metric]["mean"] for by_arm in summary["table"].values() for v in by_arm.values()]
    means = [m for m in means if m is not None and math.isfinite(m)]
    if means and min(means) > 0 and max(means) / min(means) > 50:
        axis.set_yscale("log")


def plot_success_curves(design: ClaimDesign, out: Path | str, path: Path | str, knob: str | None = None) -> Path:
    """Mean exact train success per arm at ``knob`` (default: the headline), with a 95 % band; a second panel
    with the batch's tool calls per trajectory when the primary comparison is on ``tool_calls``."""
    plt = _pyplot()
    knob = knob or design.headline
    records = load_cells(design, out)
    x_key = design.time_axis
    series = [("success_train", "exact train success")]
    if design.comparisons[0].metric == "tool_calls":
        series.append(("tool_calls", "tool calls per trajectory (batch mean)"))
    figure, axes = plt.subplots(1, len(series), figsize=(6.4 * len(series), 4.0), squeeze=False)
    for axis, (name, ylabel) in zip(axes.flat, series):
        for arm in design.arms:
            curves = [r["result"]["curve"] for r in records[(arm.name, knob)] if r is not None]
            if not curves:
                continue
            length = min(len(c[name]) for c in curves)
            xs = np.mean([c[x_key][:length] for c in curves], axis=0)
            intervals = [mean_interval([c[name][i] for c in curves]) for i in range(length)]
            axis.plot(xs, [i.mean for i in intervals], label=arm.label)
            if len(curves) > 1:
                axis.fill_between(xs, [i.low for i in intervals], [i.high for i in intervals], alpha=0.2)
        axis.set_xlabel("simulated seconds" if x_key == "sim_clock" else "learner update")
        axis.set_ylabel(ylabel)
        axis.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=8)
    figure.suptitle(f"{design.claim} · {design.knob_value(knob).label} · {len(design.seeds)} seeds", fontsize=10)
    figure.tight_layout()
    try:
        return _save(figure, Path(path))
    finally:
        plt.close(figure)
