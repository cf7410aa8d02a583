"""Learning-curve figures of simulated runs (matplotlib, Agg backend, PNG files).

:func:`plot_curves` draws one or several runs (label → metric rows) on shared panels: success
(exact, train solid and held-out dashed), batch reward, gate acceptance rate, mean sequence KL,
observed lag and policy entropy, against the learner update. Used by ``flashsim train`` (one run)
and ``flashsim demo`` (FlashREINFORCE vs GRPO at two lags).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

PANELS = (
    ("env/success_train", "exact success (train; held-out dashed)"),
    ("env/reward", "batch reward"),
    ("trust/acceptance_rate", "gate acceptance rate"),
    ("trust/sequence_kl", "mean sequence KL"),
    ("lag/mean", "observed lag (mean)"),
    ("policy/entropy", "policy entropy (nats)"),
)


def plot_curves(
    runs: Mapping[str, Sequence[Mapping[str, float]]], path: Path | str, *, title: str = "", smooth: int = 1,
    heldout: bool = True,
) -> Path:
    """Save a 2 × 3 panel figure of ``runs`` to ``path`` (PNG) and return the path.

    Args:
        runs: label → metric rows (dicts with ``update`` and the keys of :data:`PANELS`).
        path: where to write the PNG (written atomically).
        title: figure title.
        smooth: moving-average window for the noisy per-batch panels (1: none).
        heldout: also draw held-out success (dashed); pointless for tabular policies, which never change
            their logits on prompts they do not train on.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from flashsim.io import atomic_write

    figure, axes = plt.subplots(2, 3, figsize=(13, 6.5), constrained_layout=True)
    for index, (label, rows) in enumerate(runs.items()):
        color = f"C{index}"
        for axis, (key, name) in zip(axes.flat, PANELS):
            x, y = _series(rows, key, 1 if key.startswith("env/success") else smooth)
            axis.plot(x, y, color=color, label=label, linewidth=1.3)
            if key == "env/success_train" and heldout:
                x, y = _series(rows, "env/success_heldout", 1)
                if y:
                    axis.plot(x, y, color=color, linestyle="--", linewidth=1.0)
            axis.set_title(name, fontsize=10)
            axis.set_xlabel("learner update")
            axis.grid(alpha=0.3)
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
