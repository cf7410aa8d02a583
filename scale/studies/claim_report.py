"""The transformer results page's own parts: its title and opening, and each claim's figure.

``python -m scale reproduce ... --report PAGE`` writes the page with flashsim's
:func:`~flashsim.experiments.write_report` under :data:`REPORT_TITLE` and :data:`REPORT_ABOUT`; each claim's
figure is :func:`plot_claim_curves` (held-out accuracy and tool calls against rollouts, per arm). The collapse
tests' sections are :mod:`scale.studies.collapse`'s.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from flashsim.experiments import RULE, ClaimDesign, load_cells

REPORT_TITLE = "Does the paper hold on a transformer? The claims of FlashREINFORCE on the tiny Llama"
REPORT_ABOUT = (
    "Each claim is a pre-registered design (`scale/studies/claims.py`) run by flashsim's claims machinery: arms, the "
    "paper's direction, a headline setting, a primary comparison, paired seeds. The model is the tiny CPU preset "
    "(`scale/configs/tiny_cpu.yaml`: a 2-layer character-level Llama built from a config), warmed up on two-digit "
    "multiplication with a calculator that answers 30 % of the expressions wrong, then trained with each arm's loss "
    "(60 updates × 64 rollouts at the full budget). Every arm of a seed starts from the same warm-up checkpoint. "
    "Accuracy, tool calls, length and truncation are measured on held-out prompts sampled at temperature 1 "
    "(500 at the full budget), so, unlike the simulator's exact expectations, they carry evaluation noise; "
    "the intervals are over seeds.",
    RULE,
    "The primary measures: `auc`, the area under the held-out accuracy curve against rollouts spent (divided by "
    "the rollouts: a mean accuracy per rollout), for C1, C2 and C4; the held-out length for C3; the held-out tool "
    "calls per trajectory at the end for C9. No arm comes near the ceiling (best accuracy ≈ 0.4), so *at the "
    "ceiling* cannot occur here.",
    "Every quoted number is labelled by its source: **article** (the source article about the FlashREINFORCE "
    "paper), **reference implementation**, or **other systems**. The paper's numbers come from Qwen2.5 models "
    "with billions of parameters and thousands of tokens per answer; ours from a 2-layer model writing ~10-token "
    "answers. The comparison is of directions, never of raw magnitudes.",
)
"""The opening paragraphs of the transformer results page (``python -m scale reproduce ... --report``)."""

CURVE_PANELS = (("accuracy", "held-out accuracy"), ("tool_calls", "tool calls per trajectory"))
"""The panels of a claim's figure (keys of a cell's curve)."""


def plot_claim_curves(design: ClaimDesign, out: Path | str) -> Path:
    """``OUT/<claim>/<claim>_curves.png``: per arm at the headline, the mean over seeds of each
    :data:`CURVE_PANELS` curve against rollouts spent (finished cells only)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = load_cells(design, out)
    figure, axes = plt.subplots(1, len(CURVE_PANELS), figsize=(5.2 * len(CURVE_PANELS), 3.8))
    for arm in design.arms:
        curves = [r["result"]["curve"] for r in records[(arm.name, design.headline)] if r is not None]
        if not curves:
            continue
        length = min(len(c["rollouts"]) for c in curves)
        x = np.mean([c["rollouts"][:length] for c in curves], axis=0)
        for axis, (key, _) in zip(axes, CURVE_PANELS):
            axis.plot(x, np.mean([c[key][:length] for c in curves], axis=0), marker=".", label=arm.label)
    for axis, (_, label) in zip(axes, CURVE_PANELS):
        axis.set_xlabel("rollouts spent")
        axis.set_ylabel(label)
        axis.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    figure.suptitle(f"{design.claim} · {design.knob_value(design.headline).label} · mean of {len(design.seeds)} "
                    "seeds", fontsize=10)
    figure.tight_layout()
    path = Path(out) / design.claim / f"{design.claim}_curves.png"
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path
