"""The numbers and sentences of C1 at each arm's own best learning rate, from the driver's cells.

It reads the cells of :mod:`flashsim.studies.c1_tuned.run`, re-applies the committed rule of
:mod:`flashsim.studies.c1_tuned.rule` to the pilot cells (the chosen rate and whether it is interior), and sums them
up; :mod:`flashsim.studies.c1_tuned.page` (``python -m flashsim.studies.c1_tuned.page --out runs/c1-tuned
--page docs/c1-tuned/results.md``) writes ``results/per_seed.csv``, ``results/summary.json``, ``results/grid.png``
and the page from them. Every sentence that states a result is built here from the numbers it states.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from pathlib import Path

from flashsim.experiments.summaries import size_position
from flashsim.experiments.verdict import SMALLEST_EFFECTS, mean_interval, paired_verdict
from flashsim.storage import jsonable
from flashsim.studies.c1_tuned import rule as design
from flashsim.studies.c1_tuned.run import Plan, read_tuned_cell, tuned_cell_path, tuned_pilot_grid

ENV_LABELS = {"gridworld": "ToolGridworld", "bandit": "PromptBandit"}
OPT_LABELS = {"adam": "Adam", "sgd": "SGD"}
CSV_FIELDS = ("optimizer", "env", "arm", "phase", "rate", "exponent", "seed", "rollouts_to_90", "censored",
              "updates", "rollouts", "success_final", "optimum")


def load_tuned_cells(out: Path) -> list[dict]:
    """Every cell record under ``out/cells``, sorted, with its phase (pilot or verdict) added."""
    records = []
    for path in sorted((Path(out) / "cells").rglob("k*_s*.json")):
        record = json.loads(path.read_text())
        record["phase"] = "pilot" if record["seed"] < design.VERDICT_SEEDS_FROM else "verdict"
        records.append(record)
    return sorted(records, key=lambda r: (r["optimizer"], r["env"], r["arm"], r["phase"], r["exponent"], r["seed"]))


def tuned_per_seed_csv(records: Sequence[dict]) -> str:
    """One row per cell (``rollouts_to_90`` empty when censored)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    for r in records:
        writer.writerow({**{k: r.get(k) for k in CSV_FIELDS}, "rollouts_to_90": r["rollouts_to"] or ""})
    return buffer.getvalue()


def tuning(out: Path, plan: Plan | None = None) -> dict[str, dict]:
    """Per ``optimizer/env/arm`` that has pilot cells: its grid (rate → median, censored, runs), the rule's status
    and the chosen rate (the committed rule re-applied to the cells on disk)."""
    plan, result = plan or Plan(), {}
    for optimizer, spec in design.TUNED_OPTIMIZERS.items():
        seeds = plan.pilot_seeds[optimizer]
        for env in design.TUNED_ENVS:
            for arm in spec["arms"]:
                grid = tuned_pilot_grid(out, optimizer, env, arm, seeds)
                if not grid:
                    continue
                status, new = design.next_exponents(grid)
                best = design.best_rate(grid)
                result[f"{optimizer}/{env}/{arm}"] = {
                    "status": "pilot unfinished" if status == "extend" else status,
                    "best_exponent": best, "best_rate": None if best is None else design.tuned_rate(optimizer, best),
                    "grid": [{"rate": design.tuned_rate(optimizer, k), "exponent": k, "runs": len(v),
                              "median": design.censored_median(v), "censored": design.censored(v),
                              "eligible": design.eligible(v), "values": v} for k, v in sorted(grid.items())],
                }
    return result


def verdict_values(out: Path, optimizer: str, env: str, arm: str, exponent: int) -> dict[int, float]:
    """Seed → rollouts to 0.9 of the verdict cells of one arm at its chosen rate."""
    values = {}
    for n in range(design.MAX_VERDICT_SEEDS):
        seed = design.VERDICT_SEEDS_FROM + n
        path = tuned_cell_path(out, optimizer, env, arm, exponent, seed)
        if path.exists():
            values[seed] = read_tuned_cell(path)
    return values


def arm_summary(values: Sequence[float]) -> dict[str, object]:
    """Mean and t interval over the runs that reached the level, the censored median, and censoring."""
    interval = mean_interval([v for v in values if math.isfinite(v)])
    return {"n": len(values), "censored": design.censored(values), "median": design.censored_median(values),
            "mean": interval.mean, "low": interval.low, "high": interval.high}


def compare(flash: dict[int, float], grpo: dict[int, float]) -> dict[str, object]:
    """GRPO's factor over FlashREINFORCE on the seeds both ran, with the project's verdict at size 2."""
    seeds = sorted(set(flash) & set(grpo))
    a, b = [flash[s] for s in seeds], [grpo[s] for s in seeds]
    verdict = paired_verdict(a, b, "less", SMALLEST_EFFECTS["rollouts_to_90"], size=2.0, threshold=True)
    ratio = verdict.ratio
    return {"seeds": len(seeds), "factor": ratio.mean, "low": ratio.low, "high": ratio.high,
            "verdict": verdict.verdict, "p": verdict.p, "pairs": verdict.pairs,
            "dropped_by_arm": verdict.dropped_by_arm, "size_verdict": tuned_size_verdict(ratio.low, ratio.high)}


TUNED_SIZE_WORDS = {"below": "claimed size rejected", "inside": "consistent with the claimed size",
                    "above": "larger than the claimed size", "": "no interval"}
"""This page's words for :func:`~flashsim.experiments.summaries.size_position` (the committed page's wording)."""


def tuned_size_verdict(low: float, high: float, size: float = 2.0) -> str:
    """The size verdict of a factor's interval against the claimed ``size``: the project's
    :func:`~flashsim.experiments.summaries.size_position` in :data:`TUNED_SIZE_WORDS`.

    >>> tuned_size_verdict(0.8, 1.4), tuned_size_verdict(1.5, 2.6), tuned_size_verdict(2.1, 3.0)
    ('claimed size rejected', 'consistent with the claimed size', 'larger than the claimed size')
    """
    return TUNED_SIZE_WORDS[size_position(low, high, size)]


def power(tuned: dict, base: str, key: str) -> dict[str, float]:
    """The power rule's inputs and output for one comparison: sd of the delta-method terms on the pilot seeds at
    both arms' chosen rates, and the verdict seeds it asks for (before the cap and the minimum)."""
    values = {k: next(g["values"] for g in tuned[k]["grid"] if g["exponent"] == tuned[k]["best_exponent"])
              for k in (base, key)}
    z = design.delta_terms(values[key], values[base])
    sd = float(z.std(ddof=1)) if z.size >= 2 else math.nan
    return {"sd_z": sd, "pilot_pairs": int(z.size),
            "seeds_asked": design.seeds_for_power(sd) if math.isfinite(sd) else None}


def summarize_tuned(out: Path, plan: Plan | None = None) -> dict[str, object]:
    """Everything the page states: tuning per arm, verdict values per arm, comparisons, what is not done."""
    plan = plan or Plan()
    tuned = tuning(out, plan)
    arms, comparisons, not_done = {}, {}, []
    for optimizer, env, stage_arms in plan.stages:
        for arm in stage_arms:
            key = f"{optimizer}/{env}/{arm}"
            if key in arms or any(n.startswith(f"{key}:") for n in not_done):
                continue
            if key not in tuned or tuned[key]["status"] == "pilot unfinished":
                not_done.append(f"{key}: pilot not finished")
                continue
            if tuned[key]["best_exponent"] is None:
                not_done.append(f"{key}: no eligible rate")
                continue
            values = verdict_values(out, optimizer, env, arm, tuned[key]["best_exponent"])
            arms[key] = {**arm_summary(list(values.values())), "rate": tuned[key]["best_rate"],
                         "status": tuned[key]["status"], "values": values}
    for key in arms:
        optimizer, env, arm = key.split("/")
        base = f"{optimizer}/{env}/{design.BASELINE}"
        if arm != design.BASELINE and base in arms and arms[key]["n"] >= 2:
            comparisons[key] = compare(arms[base]["values"], arms[key]["values"])
            twins = [k.split("/")[2] for k in arms if k < key and k.startswith(f"{optimizer}/{env}/")
                     and k != base and arms[k]["values"] == arms[key]["values"]]
            comparisons[key]["same_as"] = twins[0] if twins else None
            comparisons[key]["power"] = power(tuned, base, key)
    at_edge = sorted(key for key, t in tuned.items() if t["status"] == "at edge")
    return jsonable({"tuned": {"at_edge": at_edge, "best": {k: t["best_rate"] for k, t in tuned.items()},
                               "status": {k: t["status"] for k, t in tuned.items()}},
                     "grid": tuned, "arms": {k: {f: v for f, v in a.items() if f != "values"} for k, a in arms.items()},
                     "comparisons": comparisons, "not_done": not_done,
                     "headline": "/".join(design.HEADLINE), "threshold": design.THRESHOLD,
                     "cap_rollouts": design.CAP_ROLLOUTS})


def number_text(x: float | None, missing: str = "censored") -> str:
    """A rollout count for the page; a censored median (stored as None, +inf in memory) reads ``missing``."""
    if x is None or math.isinf(x):
        return missing
    return "–" if math.isnan(x) else f"{x:,.0f}"


def direction_phrase(factor: float, low: float, high: float) -> str:
    """Which arm needed fewer rollouts, as far as the factor's interval decides it.

    >>> direction_phrase(0.8, 0.6, 0.95)
    'tuned GRPO needed fewer rollouts than FlashREINFORCE'
    >>> direction_phrase(0.94, 0.66, 1.22)
    'the interval contains 1, so neither needed decidedly fewer rollouts (the point estimate favours tuned GRPO)'
    """
    if high < 1:
        return "tuned GRPO needed fewer rollouts than FlashREINFORCE"
    if low > 1:
        return "FlashREINFORCE needed fewer rollouts than tuned GRPO"
    favoured = "tuned GRPO" if factor < 1 else "FlashREINFORCE"
    return ("the interval contains 1, so neither needed decidedly fewer rollouts (the point estimate favours "
            f"{favoured})")


def factor_sentence(key: str, c: dict, arms: dict) -> str:
    """The generated sentence of one comparison (which GRPO, the factor, its interval, both verdicts)."""
    optimizer, env, arm = key.split("/")
    label = design.TUNED_ARMS[arm][0]
    flash, grpo = arms[f"{optimizer}/{env}/{design.BASELINE}"], arms[key]
    fewer = direction_phrase(c["factor"], c["low"], c["high"])
    if c.get("same_as"):
        fewer += (f" (its runs are those of {design.TUNED_ARMS[c['same_as']][0]}, seed for seed: the two GRPO arms "
                  "differ only in how tokens are averaged)")
    return (f"{OPT_LABELS[optimizer]}, {ENV_LABELS[env]}: {label} at lr {grpo['rate']:g} needed "
            f"{c['factor']:.2f}× [{c['low']:.2f}, {c['high']:.2f}] the rollouts of FlashREINFORCE at lr "
            f"{flash['rate']:g} to reach 0.9 of the optimum ({c['pairs']} paired seeds, "
            f"{c['dropped_by_arm']} dropped by one arm): {fewer}; against flashsim's reading of the 2×: "
            f"{_size_text(c)}; verdict on the direction and size: *{c['verdict']}*.")


def _size_text(c: dict) -> str:
    """The size verdict, or why none is read: a pair censored in one arm leaves the rule undecided (design step 8)."""
    if c.get("dropped_by_arm"):
        return (f"no size verdict ({c['dropped_by_arm']} pair(s) censored in one arm: the mean factor leaves them "
                "out, which the rule does not cover)")
    return f"**{c['size_verdict']}**"


if __name__ == "__main__":  # the page is written by the page module, which imports this one
    raise SystemExit("the page is written by: python -m flashsim.studies.c1_tuned.page --out DIR --page FILE")
