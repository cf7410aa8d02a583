"""Learning-curve figures of training runs (matplotlib, Agg backend, PNG files): ``curves.png``.

:func:`plot_curves` draws one or several runs (label → metric rows) on shared panels, each a metric
against the learner update, with an optional second metric dashed on the same axes. The panels are
data (:class:`CurvePanel`): :data:`SIMULATOR_PANELS` are those of ``flashsim train`` and ``flashsim demo``
(success, reward, gate acceptance, sequence KL, lag, entropy); ``scale`` passes its own
(``scale.run.trainer.SCALE_PANELS``), so a simulated run and an LLM run are drawn by one function.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CurvePanel:
    """One panel of :func:`plot_curves`."""

    key: str
    """The metric drawn solid against ``update``."""
    title: str
    """The panel's title."""
    dashed: str | None = None
    """A second metric drawn dashed in the same colour with a dot at each point, never smoothed (held-out
    success, evaluation: measured every few updates)."""
    smooth: bool = True
    """Whether ``key`` takes the moving average of :func:`plot_curves` (noisy per-batch metrics do)."""


SIMULATOR_PANELS = (
    CurvePanel("env/success_train", "exact success (train; held-out dashed)", dashed="env/success_heldout",
               smooth=False),
    CurvePanel("env/reward", "batch reward"),
    CurvePanel("trust/acceptance_rate", "gate acceptance rate"),
    CurvePanel("trust/sequence_kl", "mean sequence KL"),
    CurvePanel("lag/mean", "observed lag (mean)"),
    CurvePanel("policy/entropy", "policy entropy (nats)"),
)
"""The simulator's panels (the metric names of :data:`flashsim.sim.simulation.METRIC_KEYS`)."""


def plot_curves(
    runs: Mapping[str, Sequence[Mapping[str, float]]], path: Path | str, *, title: str = "", smooth: int = 1,
    heldout: bool = True, panels: Sequence[CurvePanel] = SIMULATOR_PANELS,
) -> Path:
    """Save a figure of ``runs``, one panel per entry of ``panels`` in two rows, to ``path`` (PNG); return the path.

    Args:
        runs: label → metric rows (dicts with ``update`` and the panels' keys; a missing key or NaN is
            no point). A panel that no run reports says so.
        path: where to write the PNG (written atomically).
        title: figure title.
        smooth: moving-average window for the panels with ``smooth`` set (1: none).
        heldout: also draw the panels' dashed metrics; pointless for tabular policies, whose held-out
            success never changes (they do not train on those prompts).
        panels: what to draw (default: the simulator's).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from flashsim.io import atomic_write

    columns = max(1, math.ceil(len(panels) / 2))
    figure, axes = plt.subplots(2, columns, figsize=(13 / 3 * columns, 6.5), constrained_layout=True, squeeze=False)
    for axis, panel in zip(axes.flat, panels):
        drawn = False
        for index, (label, rows) in enumerate(runs.items()):
            x, y = _series(rows, panel.key, smooth if panel.smooth else 1)
            axis.plot(x, y, color=f"C{index}", label=label, linewidth=1.3)
            drawn = drawn or bool(y)
            if panel.dashed is not None and heldout:
                x, y = _series(rows, panel.dashed, 1)
                axis.plot(x, y, color=f"C{index}", linestyle="--", linewidth=1.0, marker=".", markersize=4)
                drawn = drawn or bool(y)
        if not drawn:
            axis.text(0.5, 0.5, f"no {panel.key} in these runs", ha="center", va="center", fontsize=8,
                      color="0.5", transform=axis.transAxes)
        axis.set_title(panel.title, fontsize=10)
        axis.set_xlabel("learner update")
        axis.grid(alpha=0.3)
    for axis in axes.flat[len(panels):]:
        axis.set_visible(False)
    axes.flat[0].legend(fontsize=8)
    if title:
        figure.suptitle(title)
    path = Path(path)
    atomic_write(path, lambda file: figure.savefig(file, format="png", dpi=110))
    plt.close(figure)
    return path


def _series(rows: Sequence[Mapping[str, float]], key: str, smooth: int) -> tuple[list[float], list[float]]:
    """(update, value) pairs of ``key`` without NaN, as a trailing moving average of ``smooth`` points."""
    points = [(row["update"], row[key]) for row in rows if key in row and not _missing(row[key])]
    if smooth > 1:
        values = [v for _, v in points]
        windows = [values[max(0, i - smooth + 1) : i + 1] for i in range(len(values))]
        points = [(x, sum(window) / len(window)) for (x, _), window in zip(points, windows)]
    return [x for x, _ in points], [v for _, v in points]


def _missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))
