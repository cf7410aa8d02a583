"""From cell files to a claim's summary: per-arm means with 95 % intervals and paired verdicts.

:func:`summarize` reads the finished cells of a design (missing ones count as missing seeds), and
returns plain data: for every knob value and arm the mean and t interval of each metric; for every
comparison and knob value the paired difference, its interval, the smallest effect it had to clear, the
verdict of :func:`~flashsim.experiments.verdict.paired_verdict` (with the ceiling rule for final-success
metrics) and the favoured arm's *factor* (mean of the favoured arm over the baseline's for ``greater``,
baseline over arm for ``less``: a speed-up for C7, GRPO's rollouts over FlashREINFORCE's for C1); and
the primary comparison's verdict at the headline setting, the claim's only confirmatory verdict (every
other comparison-setting is exploratory). :func:`write_summary` writes it as ``summary.json``,
``table.md`` and ``means.csv`` next to the cells.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping
from pathlib import Path

from flashsim.experiments.design import ClaimDesign
from flashsim.experiments.run_cell import CELL_METRICS
from flashsim.experiments.runner import read_cell, to_json
from flashsim.experiments.verdict import (
    CEILINGS,
    FLOORS,
    THRESHOLDS,
    Interval,
    holm,
    mean_interval,
    paired_verdict,
)
from flashsim.storage import atomic_write_text

SUMMARY, TABLE, MEANS, PER_SEED = "summary.json", "table.md", "means.csv", "per_seed.csv"
FACTOR_FLOOR = 1e-9
"""No factor (—) when the denominator's mean is below this: an idle fraction of ±1e-15 is rounding, not a
base for a ratio."""


def load_cells(design: ClaimDesign, out: Path | str) -> dict[tuple[str, str], list[dict | None]]:
    """(arm, knob) → the cell records in ``design.seeds`` order (None where a cell has not run)."""
    records: dict[tuple[str, str], list[dict | None]] = {}
    for cell in design.cells():
        records.setdefault((cell.arm, cell.knob), [None] * len(design.seeds))
        records[(cell.arm, cell.knob)][design.seeds.index(cell.seed)] = read_cell(out, cell)
    return records


def metric_values(records: list[dict | None], metric: str) -> list[float]:
    """One value per seed (NaN for a missing cell or value)."""
    values = []
    for record in records:
        value = None if record is None else record["result"]["metrics"].get(metric)
        values.append(math.nan if value is None else float(value))
    return values


def summarize(design: ClaimDesign, out: Path | str, metrics: Mapping[str, str] = CELL_METRICS) -> dict[str, object]:
    """The claim's summary as plain data (see the module docstring); ``metrics`` describes the cells' metrics
    (the simulator's :data:`CELL_METRICS`, or another runner's, e.g. ``scale``'s transformer claims)."""
    records = load_cells(design, out)
    unknown = [m for m in design.metric_names if m not in metrics]
    if unknown:
        raise ValueError(f"design {design.claim} names unknown metrics {unknown}; valid: {sorted(metrics)}")
    table = {
        knob.name: {
            arm.name: {m: mean_interval(metric_values(records[(arm.name, knob.name)], m)).to_dict()
                       for m in design.metric_names}
            for arm in design.arms
        }
        for knob in design.knob
    }
    comparisons = [_compare(design, comparison, records) for comparison in design.comparisons]
    done = sum(record is not None for seeds in records.values() for record in seeds)
    return {
        "claim": design.claim, "title": design.title, "paper": design.paper, "question": design.question,
        "profile": design.profile, "seeds": len(design.seeds), "cells_done": done, "cells_total": len(design.cells()),
        "knob_name": design.knob_name, "headline": design.headline,
        "arms": [{"name": arm.name, "label": arm.label} for arm in design.arms],
        "knob": [{"name": k.name, "label": k.label, "value": k.value} for k in design.knob],
        "metrics": {m: metrics[m] for m in design.metric_names},
        "table": table,
        "comparisons": comparisons,
        "primary": {**comparisons[0]["by_knob"][design.headline], "comparison": _describe(comparisons[0])},
        "tuned": _tuned(design, records) if design.tuning else None,
    }


TUNING_METRIC = "auc"
"""What picks an arm's best setting in a tuning grid (higher is better; it never saturates)."""


def _tuned(design: ClaimDesign, records) -> dict[str, object]:
    """Each arm at the tuning-grid setting of its highest mean ``auc``, and the comparisons paired across those
    settings (same seeds; exploratory: the selection uses the same runs)."""
    best = {arm.name: max(design.tuning, key=lambda knob: _mean_or_low(records[(arm.name, knob)]))
            for arm in design.arms}
    results = []
    for comparison in design.comparisons:
        arm = metric_values(records[(comparison.arm, best[comparison.arm])], comparison.metric)
        baseline = metric_values(records[(comparison.baseline, best[comparison.baseline])], comparison.metric)
        verdict = paired_verdict(arm, baseline, comparison.direction, comparison.smallest_effect,
                                 size=comparison.size, floor=comparison.metric in FLOORS,
                                 threshold=comparison.metric in THRESHOLDS)
        results.append({"comparison": _describe({"metric": comparison.metric, "arm": comparison.arm,
                                                 "baseline": comparison.baseline, "direction": comparison.direction}),
                        **verdict.to_dict(), "factor": _factor(arm, baseline, comparison.direction)})
    ends = (design.tuning[0], design.tuning[-1]) if len(design.tuning) > 2 else ()
    edge = [arm for arm, knob in best.items() if knob in ends]
    return {"metric": TUNING_METRIC, "best": best, "at_edge": edge, "comparisons": results}


def _mean_or_low(records: list[dict | None]) -> float:
    mean = mean_interval(metric_values(records, TUNING_METRIC)).mean
    return mean if math.isfinite(mean) else -math.inf


def _compare(design: ClaimDesign, comparison, records) -> dict[str, object]:
    knobs = [k.name for k in design.knob if comparison.knobs is None or k.name in comparison.knobs]
    by_knob, seen = {}, {}
    # the headline first, so that a setting identical to it points at the confirmatory one
    for knob in sorted(knobs, key=lambda name: name != design.headline):
        arm = metric_values(records[(comparison.arm, knob)], comparison.metric)
        baseline = metric_values(records[(comparison.baseline, knob)], comparison.metric)
        verdict = paired_verdict(arm, baseline, comparison.direction, comparison.smallest_effect,
                                 gaps=_gaps(records, comparison, knob), size=comparison.size,
                                 floor=comparison.metric in FLOORS, threshold=comparison.metric in THRESHOLDS)
        # settings whose values are identical seed for seed (e.g. a threshold reached before several budgets
        # end) are one result: the later ones point at the first and leave the multiplicity count
        # (only where the values are complete pairs: two settings that no arm ever reached are not one result)
        complete = verdict.pairs > 0 and all(r is not None for r in records[(comparison.arm, knob)])
        key = repr((arm, baseline)) if complete else None
        same_as = seen.get(key) if key is not None else None
        if key is not None and same_as is None:
            seen[key] = knob
        by_knob[knob] = {**verdict.to_dict(), "factor": _factor(arm, baseline, comparison.direction),
                         "exploratory": not (comparison is design.comparisons[0] and knob == design.headline),
                         "same_as": same_as}
    by_knob = {knob: by_knob[knob] for knob in knobs}
    family = [k for k, r in by_knob.items() if r["exploratory"] and r["same_as"] is None]
    for knob, adjusted in zip(family, holm([by_knob[k]["p"] for k in family])):
        by_knob[knob]["p_holm"] = adjusted
    for result in by_knob.values():
        result.setdefault("p_holm", by_knob[result["same_as"]].get("p_holm", math.nan) if result["same_as"]
                          else math.nan)
    return {
        "metric": comparison.metric, "arm": comparison.arm, "baseline": comparison.baseline,
        "direction": comparison.direction, "paper": comparison.paper, "source": comparison.source,
        "smallest_effect": str(comparison.smallest_effect), "size": comparison.size, "by_knob": by_knob,
    }


def _gaps(records, comparison, knob: str) -> tuple[list[float], list[float]] | None:
    """Per seed, optimum − final success of both arms (the ceiling rule), for final-success metrics only."""
    if comparison.metric not in CEILINGS:
        return None
    optimum = CEILINGS[comparison.metric]
    return tuple(
        [o - v for o, v in zip(metric_values(records[(name, knob)], optimum),
                               metric_values(records[(name, knob)], comparison.metric))]
        for name in (comparison.arm, comparison.baseline)
    )


def _factor(arm: list[float], baseline: list[float], direction: str) -> float:
    a, b = mean_interval(arm).mean, mean_interval(baseline).mean
    numerator, denominator = (a, b) if direction == "greater" else (b, a)
    if not (math.isfinite(numerator) and math.isfinite(denominator)) or abs(denominator) < FACTOR_FLOOR:
        return math.nan
    return numerator / denominator


def _describe(comparison: dict) -> str:
    sign = ">" if comparison["direction"] == "greater" else "<"
    return f"{comparison['metric']}: {comparison['arm']} {sign} {comparison['baseline']}"


def fmt(value: float | None, digits: int = 3) -> str:
    """A number for a table (— for missing)."""
    if value is None or not math.isfinite(value):
        return "—"
    if value != 0 and (abs(value) >= 10 ** 4 or abs(value) < 10 ** -digits):
        return f"{value:.{digits - 1}e}"
    return f"{value:.{digits}f}"


def fmt_sci(value: float) -> str:
    """A number in the short scientific form the pages write δ in (``5e-3``, ``2.5e-4``), from its value.

    Example:
        >>> fmt_sci(5e-3), fmt_sci(2.5e-4)
        ('5e-3', '2.5e-4')
    """
    mantissa, exponent = f"{value:e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


def fmt_p(p: float | None) -> str:
    """A p-value for a table (— where no test applies)."""
    if p is None or not math.isfinite(p):
        return "—"
    return f"{p:.2g}" if p >= 1e-4 else "< 1e-4"


def pairs_text(result: dict) -> str:
    """Complete pairs, and the seeds where only one arm has a value (a threshold one arm never reached)."""
    dropped = result.get("dropped_by_arm", 0)
    return f"{result.get('pairs', result['difference']['n'])}" + (f" ({dropped} dropped by one arm)" if dropped else "")


SIZE_LABELS: Mapping[str, str] = {
    "C1": "flashsim's reading of the", "C1size": "flashsim's reading of the", "C3": "flashsim's reading of the",
    "C7": "flashsim's pre-registered",
}
"""Claims whose size the article does not state as a number, by claim: the label printed before the size in place
of "claimed size". C1's 2× is flashsim's reading of "the same score with half the rollouts", C3's 1.57× its
reading of 3,947 vs 2,518 tokens (``experiments/article.json``, "readings"); C7's 2× is a threshold flashsim
pre-registered (the article quotes no speed-up)."""


def size_label(claim: str) -> str:
    """What a page prints before a claim's size: its :data:`SIZE_LABELS` label, else "claimed size"."""
    return SIZE_LABELS.get(claim, "claimed size")


def factor_text(result: dict, claim: str = "") -> str:
    """The factor (of the arms' means), or where a size is tested the factor on the complete pairs with its
    delta-method interval and the size, labelled (:func:`size_label`)."""
    if result.get("size") is None:
        return fmt(result["factor"], 2)
    ratio = result["ratio"]
    interval = f" [{fmt(ratio['low'], 2)}, {fmt(ratio['high'], 2)}]" if ratio["n"] >= 2 else ""
    return f"{fmt(ratio['mean'], 2)}{interval} ({size_label(claim)} {result['size']:.3g}×)"


def fmt_interval(interval: dict | Interval) -> str:
    i = interval.to_dict() if isinstance(interval, Interval) else interval
    if i["n"] < 2:
        return fmt(i["mean"])
    return f"{fmt(i['mean'])} [{fmt(i['low'])}, {fmt(i['high'])}]"


def markdown_tables(summary: dict) -> str:
    """The verdict table (every comparison × knob value) and the means table, as Markdown."""
    labels = {k["name"]: k["label"] for k in summary["knob"]}
    arms = {a["name"]: a["label"] for a in summary["arms"]}
    claim = summary["claim"]
    lines = ["| comparison (paper's direction) | setting | mean difference [95 % CI] | smallest effect | pairs "
             "| factor [95 % CI] (size) | p | Holm p | verdict |", "|---|---|---|---|---|---|---|---|---|"]
    for comparison in summary["comparisons"]:
        for knob, result in comparison["by_knob"].items():
            mark = " **(headline)**" if knob == summary["headline"] else ""
            if result.get("same_as"):
                verdict = f"= {labels[result['same_as']]} (identical values)"
            elif result["exploratory"]:
                verdict = f"{result['verdict']} (exploratory)"
            elif "rule_verdict" not in result:
                verdict = f"**{result['verdict']}** (confirmatory, before Holm across the page)"
            else:
                rule = result["rule_verdict"]
                before = f"; {rule} before Holm" if rule != result["verdict"] else ""
                verdict = f"**{result['verdict']}** (confirmatory, after Holm across the page{before})"
            lines.append(f"| {_describe(comparison)} | {labels[knob]}{mark} | {fmt_interval(result['difference'])} "
                         f"| ±{fmt(result['effect'], 3)} | {pairs_text(result)} | {factor_text(result, claim)} "
                         f"| {fmt_p(result.get('p'))} | {fmt_p(result.get('p_holm'))} | {verdict} |")
    if summary.get("tuned"):
        tuned = summary["tuned"]
        edge = tuned.get("at_edge") or []
        lines += ["", f"Each arm at its best setting of the tuning grid (highest mean `{tuned['metric']}`): "
                  + "; ".join(f"{arms[a]}: {labels[k]}" for a, k in tuned["best"].items()) + " (exploratory)."
                  + (f" At the edge of the grid, so not an optimum: {', '.join(arms[a] for a in edge)}." if edge
                     else ""), "",
                  "| comparison at each arm's best | mean difference [95 % CI] | smallest effect | pairs "
                  "| factor [95 % CI] (size) | p | verdict |", "|---|---|---|---|---|---|---|"]
        for result in tuned["comparisons"]:
            lines.append(f"| {result['comparison']} | {fmt_interval(result['difference'])} "
                         f"| ±{fmt(result['effect'], 3)} | {pairs_text(result)} | {factor_text(result, claim)} "
                         f"| {fmt_p(result.get('p'))} | {result['verdict']} (exploratory) |")
    metrics = list(summary["metrics"])
    lines += ["", "| setting | arm | " + " | ".join(metrics) + " |", "|---|---|" + "---|" * len(metrics)]
    for knob, by_arm in summary["table"].items():
        for arm, values in by_arm.items():
            lines.append(f"| {labels[knob]} | {arms[arm]} | " + " | ".join(fmt_interval(values[m]) for m in metrics)
                         + " |")
    return "\n".join(lines) + "\n"


def means_csv(summary: dict) -> str:
    """Tidy CSV: claim, knob, arm, metric, mean, low, high, n."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["claim", "knob", "arm", "metric", "mean", "low", "high", "n"])
    for knob, by_arm in summary["table"].items():
        for arm, values in by_arm.items():
            for metric, i in values.items():
                writer.writerow([summary["claim"], knob, arm, metric, *(repr(i[k]) for k in ("mean", "low", "high")),
                                 i["n"]])
    return buffer.getvalue()


def per_seed_csv(design: ClaimDesign, out: Path | str) -> str:
    """Tidy CSV of every cell's value of each tabulated metric: claim, setting, arm, seed, then one column per
    metric (empty where a cell has not run or its value is NaN), so that any per-seed statement can be checked."""
    records = load_cells(design, out)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    names = design.metric_names
    writer.writerow(["claim", "setting", "arm", "seed", *names])
    for knob in design.knob:
        for arm in design.arms:
            columns = [metric_values(records[(arm.name, knob.name)], m) for m in names]
            for i, seed in enumerate(design.seeds):
                writer.writerow([design.claim, knob.name, arm.name, seed,
                                 *("" if not math.isfinite(c[i]) else repr(c[i]) for c in columns)])
    return buffer.getvalue()


def write_summary(design: ClaimDesign, out: Path | str, metrics: Mapping[str, str] = CELL_METRICS) -> dict[str, object]:
    """Summarize and write ``summary.json``, ``table.md``, ``means.csv`` and ``per_seed.csv`` in ``out/<claim>/``."""
    summary = summarize(design, out, metrics)
    directory = Path(out) / design.claim
    atomic_write_text(directory / PER_SEED, per_seed_csv(design, out))
    atomic_write_text(directory / SUMMARY, to_json(summary))
    atomic_write_text(directory / TABLE, markdown_tables(summary))
    atomic_write_text(directory / MEANS, means_csv(summary))
    return summary
