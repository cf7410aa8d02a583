"""The grid figure and the markdown page of C1 at each arm's own best learning rate.

Only :func:`write_page` touches matplotlib; the numbers come from
:func:`flashsim.studies.c1_tuned.report.summarize`, and every sentence stating a result is built from them.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from flashsim.config import directory_argument  # noqa: E402
from flashsim.storage import atomic_write, atomic_write_text  # noqa: E402
from flashsim.studies.c1_tuned import rule as design  # noqa: E402
from flashsim.studies.c1_tuned.report import (  # noqa: E402
    ENV_LABELS,
    OPT_LABELS,
    direction_phrase,
    factor_sentence,
    load_tuned_cells,
    number_text,
    summarize_tuned,
    tuned_per_seed_csv,
)
from flashsim.studies.c1_tuned.run import Plan  # noqa: E402

COLOURS = {"flash": "tab:blue", "grpo": "tab:red", "grpo_2batch": "tab:orange", "grpo_sample": "tab:purple"}


def grid_figure(summary: dict, path: Path) -> None:
    """One panel per optimizer and env: each arm's censored median rollouts to 0.9 per rate (pilot seeds), its
    pilot runs as dots, ineligible rates as crosses labelled with their censored runs, the chosen rate ringed."""
    fig, axes = plt.subplots(2, 2, figsize=(11, 8.5), squeeze=False)
    for row, optimizer in enumerate(design.TUNED_OPTIMIZERS):
        for col, env in enumerate(design.TUNED_ENVS):
            ax, notes, rates = axes[row][col], [], set()
            for arm in design.TUNED_OPTIMIZERS[optimizer]["arms"]:
                t = summary["grid"].get(f"{optimizer}/{env}/{arm}")
                if t is None:
                    continue
                colour, cap = COLOURS[arm], design.CAP_ROLLOUTS
                shown = [(g["rate"], g["median"] if g["median"] is not None else cap) for g in t["grid"]]
                ax.plot([r for r, _ in shown], [min(m, cap) for _, m in shown], "-", color=colour, alpha=0.8,
                        label=design.TUNED_ARMS[arm][0])
                if t["status"] != "interior":
                    notes.append(f"{arm}: {t['status']}")
                rates |= {g["rate"] for g in t["grid"]}
                for g in t["grid"]:
                    finite = [v for v in g["values"] if v is not None and math.isfinite(v)]
                    ax.plot([g["rate"]] * len(finite), finite, ".", color=colour, alpha=0.3)
                    y = min(g["median"], cap) if g["median"] is not None else cap
                    ax.plot(g["rate"], y, "o" if g["eligible"] else "x", color=colour, ms=6)
                    if g["censored"]:
                        ax.annotate(f"{g['censored']}/{g['runs']} cens.", (g["rate"], y), fontsize=7, color=colour,
                                    xytext=(3, 3), textcoords="offset points")
                if t["best_rate"] is not None:
                    best = next(g for g in t["grid"] if g["rate"] == t["best_rate"])
                    ax.plot(best["rate"], best["median"], "o", ms=14, mfc="none", mec=colour, mew=2)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xticks(sorted(rates), [f"{r:g}" for r in sorted(rates)], fontsize=8)
            ax.minorticks_off()
            if notes:
                ax.text(0.02, 0.02, "; ".join(notes), transform=ax.transAxes, fontsize=7, color="black")
            ax.axhline(design.CAP_ROLLOUTS, color="grey", lw=0.8, ls=":")
            ax.set_title(f"{OPT_LABELS[optimizer]}, {ENV_LABELS[env]}", fontsize=10)
            ax.set_xlabel("learning rate")
            ax.set_ylabel("rollouts to 0.9 × optimum (pilot median)")
            if not ax.get_legend_handles_labels()[1]:
                ax.text(0.5, 0.5, "not run", transform=ax.transAxes, ha="center")
    fig.suptitle("C1 tuned: each arm's learning-rate grid (pilot seeds: dots; line: censored median; ringed: chosen "
                 "rate; x: ineligible; dotted: the cap, censored runs)", fontsize=10)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=2, fontsize=8)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    atomic_write(path, lambda file: fig.savefig(file, format="png", dpi=110))
    plt.close(fig)


def _arm_table(summary: dict) -> list[str]:
    lines = ["| optimizer, env | arm | chosen lr | rule | verdict seeds | censored "
             "| mean of the finished runs [95 % CI] | median (censored kept) |",
             "|---|---|---|---|---|---|---|---|"]
    for key, a in summary["arms"].items():
        optimizer, env, arm = key.split("/")
        lines.append(f"| {OPT_LABELS[optimizer]}, {ENV_LABELS[env]} | {design.TUNED_ARMS[arm][0]} | {a['rate']:g} | "
                     f"{a['status']} | {a['n']} | {a['censored']} | {number_text(a['mean'], '–')} "
                     f"[{number_text(a['low'], '–')}, {number_text(a['high'], '–')}] | {number_text(a['median'])} |")
    return lines


def _power_lines(summary: dict) -> list[str]:
    """The power rule per comparison (Adam's verdict seed counts; SGD's are fixed at 10)."""
    lines = []
    for key, c in summary["comparisons"].items():
        p = c.get("power") or {}
        if p.get("sd_z") is not None and key.startswith("adam/"):
            lines.append(f"- {key}: sd of the delta-method terms on {p['pilot_pairs']} pilot pairs {p['sd_z']:.2f}, "
                         f"so the power rule asked for {p['seeds_asked']} seeds (minimum "
                         f"{design.MIN_VERDICT_SEEDS}, cap {design.MAX_VERDICT_SEEDS}).")
    return ["**Power rule** (design step 7):", "", *lines, ""] if lines else []


def _grid_table(summary: dict) -> list[str]:
    lines = ["| optimizer, env, arm | lr: median rollouts to 0.9 (censored/runs; x = ineligible) |", "|---|---|"]
    for key, t in summary["grid"].items():
        cells = ", ".join(f"{g['rate']:g}: {number_text(g['median'])} ({g['censored']}/{g['runs']}"
                          f"{'' if g['eligible'] else '; x'})" for g in t["grid"])
        lines.append(f"| {key} | {cells} |")
    return lines


def paired_seeds(per_seed: Sequence[dict], key: str) -> dict[str, object]:
    """Per seed of a comparison's verdict cells (``per_seed.csv`` rows): in how many complete pairs each arm needed
    fewer rollouts, and the median of GRPO's rollouts over FlashREINFORCE's, seed by seed (censored runs kept, as
    the design keeps them: a censored run counts as slower than every finished one)."""
    optimizer, env, arm = key.split("/")
    values: dict[str, dict[str, float]] = {}
    for row in per_seed:
        if (row["optimizer"], row["env"], row["phase"]) == (optimizer, env, "verdict") and row["arm"] in (
                arm, design.BASELINE) and float(row["rate"]) == float(_chosen(per_seed, optimizer, env, row["arm"])):
            value = math.inf if row["censored"] == "True" else float(row["rollouts_to_90"])
            values.setdefault(row["seed"], {})[row["arm"]] = value
    pairs = [v for v in values.values() if len(v) == 2]
    grpo_fewer = sum(v[arm] < v[design.BASELINE] for v in pairs)
    flash_fewer = sum(v[design.BASELINE] < v[arm] for v in pairs)
    ratios = sorted(v[arm] / v[design.BASELINE] for v in pairs if math.isfinite(v[design.BASELINE]))
    median = ratios[len(ratios) // 2] if len(ratios) % 2 else sum(ratios[len(ratios) // 2 - 1:len(ratios) // 2 + 1]) / 2
    return {"pairs": len(pairs), "grpo_fewer": grpo_fewer, "flash_fewer": flash_fewer, "median_ratio": median}


def _chosen(per_seed: Sequence[dict], optimizer: str, env: str, arm: str) -> float:
    """The rate an arm's verdict cells ran at."""
    return next(float(r["rate"]) for r in per_seed if (r["optimizer"], r["env"], r["arm"], r["phase"]) == (
        optimizer, env, arm, "verdict"))


def headline_sentences(summary: dict, per_seed: Sequence[dict] = ()) -> list[str]:
    """The headline, generated from the confirmatory comparison's verdict: a direction only where the factor's
    interval decides one, the per-seed count and the median ratio beside the mean; or why there is none."""
    key = summary["headline"]
    if key not in summary["comparisons"]:
        return [f"The confirmatory comparison ({key}) is **not done**: "
                + "; ".join(n for n in summary["not_done"] if n.startswith(key.rsplit("/", 1)[0])) + "."]
    c = summary["comparisons"][key]
    head = [factor_sentence(key, c, summary["arms"])]
    direction = direction_phrase(c["factor"], c["low"], c["high"])
    if c["high"] < 1 or c["low"] > 1:
        bold = f"With each arm at its own best learning rate, {direction}: *{c['verdict']}*."
    else:
        bold = (f"With each arm at its own best learning rate, neither tuned GRPO (32 × 4, token-mean) nor "
                f"FlashREINFORCE needed decidedly fewer rollouts: *{c['verdict']}*.")
    seeds = paired_seeds(per_seed, key) if per_seed else None
    detail = (f" GRPO's rollouts over FlashREINFORCE's: mean {c['factor']:.2f}× [{c['low']:.2f}, {c['high']:.2f}]")
    if seeds and seeds["pairs"]:
        detail += (f", median over seeds {seeds['median_ratio']:.2f}×; FlashREINFORCE needed fewer on "
                   f"{seeds['flash_fewer']} of {seeds['pairs']} seeds, tuned GRPO on {seeds['grpo_fewer']}")
    return [f"**{bold}**{detail}.", "", *head]


def transformer_section(t: dict | None, confirmatory: dict | None = None) -> list[str]:
    """The tiny-transformer section from ``scale.studies.c1_tuned``'s summary (None: not run) and, beside it, the
    confirmatory rerun's (``--confirmatory``; None: not run)."""
    head = ["## The tiny transformer (FlashREINFORCE 64 × 1 vs GRPO 16 × 4 token-mean, auc)", ""]
    if t is None:
        return [*head, "Not run (its measured cost: [design.md](design.md), step 10).", ""]
    lines = [*head, "| arm | rule | chosen lr | grid: lr → mean auc of the pilot seeds (collapsed/runs) |",
             "|---|---|---|---|"]
    for arm, g in t["grid"].items():
        cells = ", ".join(f"{x['rate']:g} → {x['mean_auc']:.3f} ({x['collapsed']}/{x['runs']}"
                          f"{'' if x['eligible'] else '; x'})" if x["mean_auc"] is not None else
                          f"{x['rate']:g} → collapsed ({x['collapsed']}/{x['runs']})" for x in g["grid"])
        best = "–" if g["best_rate"] is None else f"{g['best_rate']:g}"
        label = {"flash": "FlashREINFORCE 64 × 1", "grpo": "GRPO 16 × 4, token-mean"}.get(arm, arm)
        lines.append(f"| {label} | {g['status']} | {best} | {cells} |")
    if t["comparison"] is None:
        lines += ["", "The verdict run is **not done**: " + (
            "an arm's best is still at the edge of its grid (" + ", ".join(t["tuned"]["at_edge"]) + ")."
            if t["tuned"]["at_edge"] else _not_done(t)), ""]
        return lines
    lines += ["", "**Exploratory** (the first verdict run): " + _verdict_sentence(t), "", TRANSFORMER_DEVIATION, ""]
    lines += ["**Confirmatory** (the same protocol at the same chosen rates, on fresh seeds, read once both arms' "
              "cells existed): " + ("not run (its cost and command: [design.md](design.md), *Transformer: the "
                                    "deviation and the confirmatory rerun*)." if confirmatory is None else
                                    _not_done(confirmatory) if confirmatory["comparison"] is None else
                                    _verdict_sentence(confirmatory)), ""]
    return lines


def _seed_range(seeds: Sequence[int]) -> str:
    return f"{seeds[0]}–{seeds[-1]}" if list(seeds) == list(range(seeds[0], seeds[-1] + 1)) else \
        ", ".join(map(str, seeds))


def _not_done(t: dict) -> str:
    return (f"{t.get('verdict_seeds_done', 0)} of the {len(t['verdict_seeds'])} verdict seeds "
            f"({_seed_range(t['verdict_seeds'])}) ran for both arms; no verdict is read on a partial run.")


def _signed_interval(d: dict) -> str:
    """A paired difference with its interval, signed: ``+0.029 [+0.019, +0.039]``."""
    return f"{d['mean']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]"


def _verdict_sentence(t: dict) -> str:
    """One verdict run's sentence: both arms' auc, the paired difference and its verdict, the seeds it rests on."""
    c = t["comparison"]
    d, f, g = c["difference"], c["flash"], c["grpo"]
    ahead = (f"; FlashREINFORCE ahead on {c['flash_ahead']} of {c['seeds']} seeds" if "flash_ahead" in c else "")
    return (f"at their chosen rates on {c['seeds']} seeds ({_seed_range(t['verdict_seeds'])}), FlashREINFORCE's auc "
            f"is {f['mean']:.3f} [{f['low']:.3f}, {f['high']:.3f}] and GRPO's {g['mean']:.3f} [{g['low']:.3f}, "
            f"{g['high']:.3f}]: a paired difference of {_signed_interval(d)}{ahead}, "
            f"*{c['verdict']}* (smallest effect 0.01; p of the one-sided test against it {c['p']:.2g}). flashsim's "
            "reading of the 2× is a factor in rollouts, which the transformer's auc does not measure, so no size "
            "verdict is read here.")


TRANSFORMER_DEVIATION = (
    "Why it is exploratory: the design's stop rule (step 10: no cell after 01:00 UTC) ended the run with "
    "FlashREINFORCE's 10 verdict cells and GRPO's first 2 done and seen; GRPO's other 8 (seeds 412–419) ran "
    "afterwards, past that rule (2c5ee60), so this verdict rests on seeds that were no longer blind.")
"""What the page says of the first transformer verdict's standing (the run went on past the design's stop rule)."""


def results_sentence(summary: dict, link: str = "c1-tuned/results.md") -> str:
    """The sentence ``docs/results.md``'s C1 discussion quotes, generated from the committed summary."""
    key = summary["headline"]
    if key not in summary["comparisons"]:
        return f"[C1 with each arm at its own best learning rate]({link}): the confirmatory comparison is not done."
    c = summary["comparisons"][key]
    edge = ("every arm's chosen rate interior on its grid" if not summary["tuned"]["at_edge"] else
            f"{len(summary['tuned']['at_edge'])} arm(s) still at an edge of their grid")
    return (f"[With each arm at its own best learning rate]({link}) (per-arm grids extended by a rule committed "
            f"before the runs, {edge}), on {c['pairs']} fresh seeds GRPO 32 × 4 (token-mean) needed "
            f"{c['factor']:.2f}× [{c['low']:.2f}, {c['high']:.2f}] FlashREINFORCE's rollouts to reach 0.9 of the "
            f"optimum on ToolGridworld under Adam: {direction_phrase(c['factor'], c['low'], c['high'])}; against "
            f"flashsim's reading of the 2×, {c['size_verdict']} (verdict: {c['verdict']}).")


TRANSFORMER_ANCHOR = "c1-tuned/results.md#the-tiny-transformer-flashreinforce-64-1-vs-grpo-16-4-token-mean-auc"


def transformer_sentence(first: dict | None, confirmatory: dict | None, link: str = TRANSFORMER_ANCHOR) -> str:
    """The sentence the transformer page's C1 discussion quotes: the confirmatory rerun's verdict, the first run's
    beside it (exploratory), generated from the two committed summaries."""
    opening = (f"[With each arm at its own learning rate]({link}) (per-arm grids extended by a rule committed before "
               "the runs)")
    if first is None or first["comparison"] is None:
        return f"{opening}, the verdict run is not done."

    def said(t: dict) -> str:
        c = t["comparison"]
        ahead = f", FlashREINFORCE ahead on {c['flash_ahead']} of {c['seeds']}" if "flash_ahead" in c else ""
        seeds = _seed_range(t["verdict_seeds"])
        return f"{_signed_interval(c['difference'])} on seeds {seeds}{ahead}: *{c['verdict']}*"

    exploratory = ("the first run, exploratory (it ran past the design's stop rule on seeds no longer blind), gave "
                   + said(first))
    if confirmatory is None or confirmatory["comparison"] is None:
        return (f"{opening}: {exploratory} as the paired auc difference (FlashREINFORCE − GRPO); the confirmatory "
                "rerun on fresh seeds is not done.")
    return (f"{opening}: the confirmatory rerun on fresh seeds gives a paired auc difference (FlashREINFORCE − GRPO) "
            f"of {said(confirmatory)}; {exploratory}.")


def bounded_by_instability(summary: dict) -> list[str]:
    """The arms whose next higher rate than the chosen one is ineligible (a censored pilot run)."""
    keys = []
    for key, t in summary["grid"].items():
        above = [g for g in t["grid"] if t["best_rate"] is not None and g["rate"] > t["best_rate"]]
        if above and not min(above, key=lambda g: g["rate"])["eligible"]:
            keys.append(key)
    return keys


def render_tuned_page(summary: dict, transformer: dict | None = None, per_seed: Sequence[dict] = (),
                      confirmatory: dict | None = None) -> str:
    at_edge = summary["tuned"]["at_edge"]
    unstable = bounded_by_instability(summary)
    edge = ("Every tuned arm's chosen rate is interior on its grid (`tuned.at_edge` is empty)." if not at_edge else
            "Still at an edge of its grid when the budget ended (**not done**): " + ", ".join(at_edge) + ".")
    others = [factor_sentence(k, c, summary["arms"]) for k, c in summary["comparisons"].items()
              if k != summary["headline"]]
    lines = [
        "<!-- Generated by flashsim.studies.c1_tuned.page.write_page: edit the code, not this page -->", "",
        "# C1 with each arm at its own best learning rate", "",
        "Generated by `python -m flashsim.studies.c1_tuned.page --out runs/c1-tuned --page "
        "docs/c1-tuned/results.md` from the cells of `python -m flashsim.studies.c1_tuned.run --out "
        "runs/c1-tuned`. The protocol ([design.md](design.md), `src/flashsim/studies/c1_tuned/rule.py`) was "
        "committed before any cell ran; one sentence of its step 8 was reworded after the toy results (design.md "
        "says which and when). *GRPO* alone means the registry's `grpo` (DAPO's token-mean); the "
        "sample-mean arm is DeepSeekMath's GRPO.", "",
        "## Headline (confirmatory: Adam, ToolGridworld, FlashREINFORCE 128 × 1 vs GRPO 32 × 4 token-mean)", "",
        *headline_sentences(summary, per_seed), "", edge + (
            f" For {len(unstable)} of the {len(summary['grid'])} tuned arms the next higher rate is ineligible under "
            f"the instability rule (at least one censored pilot run), so what bounds the best from above is "
            f"instability as much as speed: {', '.join(unstable)}." if unstable
            else ""), "",
        "## Every comparison (exploratory except the headline)", "",
        *(f"- {s}" for s in others), *([] if others else ["- none finished"]), "",
        "## Each arm at its chosen rate (verdict seeds from 3900)", "", *_arm_table(summary), "",
        *_power_lines(summary),
        "Censored runs (no 0.9 of the optimum within the cap of "
        f"{summary['cap_rollouts']:,} rollouts) are kept, as design.md step 1 says, and handled the same way in every "
        "table: a median counts them as slower than every finished run; a mean, its interval and a factor cannot "
        "hold them, so they are over the runs (or the seed pairs) that finished, and each says how many were left "
        "out; where a pair was dropped the rule cannot decide the direction (design.md step 8), so no size verdict "
        "is read.", "",
        "## The grids (pilot seeds 3800–3803, SGD 3800–3802)", "", "![grid](results/grid.png)", "",
        *_grid_table(summary), "",
    ]
    lines += transformer_section(transformer, confirmatory)
    if summary["not_done"]:
        lines += ["## Not done", "", *(f"- {n}" for n in summary["not_done"]), ""]
    return "\n".join(lines)


def write_page(out: Path, page: Path) -> dict:
    """Write the page, ``results/per_seed.csv``, ``results/summary.json``, ``results/grid.png`` and
    ``results/results_sentence.txt`` (what ``docs/results.md`` quotes); the
    transformer section comes from ``results/transformer_summary.json`` (``python -m scale.studies.c1_tuned --out
    runs/c1-tuned-transformer --summary docs/c1-tuned/results/transformer_summary.json``) and its confirmatory
    rerun's ``results/transformer_confirmatory_summary.json`` (the same with ``--confirmatory``) when they exist."""
    page = Path(page)
    results = page.parent / "results"
    results.mkdir(parents=True, exist_ok=True)
    summary = summarize_tuned(Path(out))
    atomic_write_text(results / "per_seed.csv", tuned_per_seed_csv(load_tuned_cells(Path(out))))
    atomic_write_text(results / "summary.json", json.dumps(summary, indent=1, sort_keys=True) + "\n")
    grid_figure(summary, results / "grid.png")
    _write_page_and_sentences(page, results, summary)
    return summary


def _write_page_and_sentences(page: Path, results: Path, summary: dict) -> None:
    """The page and the two sentences other pages quote (``results_sentence.txt``, ``transformer_sentence.txt``),
    from ``summary`` and the transformer summaries committed in ``results``."""
    transformer, confirmatory = _transformer_summaries(results)
    atomic_write_text(page, render_tuned_page(summary, transformer, _per_seed_rows(results / "per_seed.csv"),
                                              confirmatory))
    atomic_write_text(results / "results_sentence.txt", results_sentence(summary) + "\n")
    atomic_write_text(results / "transformer_sentence.txt", transformer_sentence(transformer, confirmatory) + "\n")


def _transformer_summaries(results: Path) -> tuple[dict | None, dict | None]:
    """The transformer's first run's summary and its confirmatory rerun's (None where a file is absent)."""
    paths = (results / "transformer_summary.json", results / "transformer_confirmatory_summary.json")
    return tuple(json.loads(path.read_text()) if path.exists() else None for path in paths)


def _per_seed_rows(path: Path) -> list[dict]:
    with open(path, newline="") as file:
        return list(csv.DictReader(file))


def rerender_tuned_page(page: Path | str = "docs/c1-tuned/results.md") -> Path:
    """Write the page again from the stores committed beside it (``results/summary.json``,
    ``transformer_summary.json``, ``per_seed.csv``): no cell is run (``python -m scale.studies.pages`` calls this)."""
    page = Path(page)
    results = page.parent / "results"
    summary = json.loads((results / "summary.json").read_text())
    order = [f"{optimizer}/{env}/{arm}" for optimizer, env, arms in Plan().stages for arm in arms]
    summary["comparisons"] = dict(sorted(summary["comparisons"].items(),  # the run's order (the store sorts keys)
                                         key=lambda item: order.index(item[0]) if item[0] in order else len(order)))
    for part in ("arms", "grid"):
        summary[part] = dict(sorted(summary[part].items(),
                                    key=lambda item: order.index(item[0]) if item[0] in order else len(order)))
    _write_page_and_sentences(page, results, summary)
    return page


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=directory_argument, required=True, help="the driver's folder")
    parser.add_argument("--page", type=Path, required=True, help="the page to write (results/ beside it)")
    args = parser.parse_args(argv)
    write_page(args.out, args.page)


if __name__ == "__main__":
    main()
