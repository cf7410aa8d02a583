"""``docs/results.md`` generated from a sweep's outputs: per claim the paper's numbers, ours, the verdict.

:func:`write_report` reads each claim's ``summary.json`` (from :func:`~flashsim.experiments.analysis.write_summary`),
applies Holm across the page's primaries and writes the final verdict back into the ``summary.json`` it keeps beside
the page (:func:`flashsim.experiments.summaries.finalized`), copies the figures and tables into an assets folder
(``results/<claim>/``), and writes one Markdown page: an overview table (verdict with the size verdict; mechanism from
the registered exploratory comparisons), the generated *In short*, then per claim the paper's claim, the design, the
headline numbers beside the paper's, the verdict with where it flips along the knob, the figures, the full tables,
and a discussion. Every sentence that states a result is generated (:mod:`flashsim.experiments.summaries`); the
hand-written parts explain: the discussion of each claim (``<assets>/discussion/<claim>.md``, written by a person
after reading the run; otherwise a generated sentence) and ``discussion/intro.md``, which follows the *In short*.
The quick page opens with the replication summary across every page (:mod:`flashsim.experiments.pages`, the list of
pages); :func:`flashsim.studies.rerender` writes a page again from its committed stores.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from flashsim.config import to_dict
from flashsim.experiments.analysis import (
    MEANS,
    PER_SEED,
    SUMMARY,
    TABLE,
    factor_text,
    fmt,
    fmt_interval,
    fmt_p,
    fmt_sci,
    markdown_tables,
    pairs_text,
    size_label,
)
from flashsim.experiments.design import ClaimDesign
from flashsim.experiments.pages import replication_text
from flashsim.experiments.probes import probe_design, probe_table
from flashsim.experiments.references import Stores, checkout_root, render_references
from flashsim.experiments.run_cell import PROBE_BATCHES
from flashsim.experiments.runner import to_json
from flashsim.experiments.summaries import (
    collapse_sentence,
    decide_page,
    finalized,
    finalized_collapse,
    in_short,
    mechanism_cell,
    verdict_cell,
)
from flashsim.experiments.verdict import CEILING_EPSILON
from flashsim.losses import DEFAULT_DELTA
from flashsim.sim.config import TrainConfig
from flashsim.storage import atomic_write_text

RULE = (
    "**The verdict rule** (`flashsim.experiments.verdict`, whose docstring numbers the outcomes). For a comparison, "
    "take the paired differences arm − baseline over the seeds with both values and their 95 % Student-t interval "
    "[lo, hi]. Each metric has a pre-registered smallest effect of interest e: 0.01 absolute for success, `auc`, "
    "truncation, acceptance and idle fractions, drawdown; 0.1 tool calls; 5 % of the baseline's mean for "
    "rollouts- and updates-to-threshold, length, entropy, drift and seconds per update. Where the quoted number is "
    "a size — "
    "C1's half the rollouts (a factor of 2), C3's 36 % shorter (3,947 / 2,518 = 1.57), C7's pre-registered 2× — the "
    "factor's 95 % interval (delta method on the same pairs) is tested against it too. In order: **at the ceiling** "
    f"(a final success, both arms' mean within ε = {CEILING_EPSILON} of the exact optimum) and **at the floor** (a "
    "fall, truncation or idle fraction, both arms' mean within ε of 0): nothing is decided; **identical arms** (every "
    "pair equal); **inconclusive** with fewer than two complete pairs, or for a rollouts-to-threshold measure when "
    "one arm reached the level on a seed and the other did not (the *pairs* column counts them); **supported** if "
    "the interval clears e on the paper's side and, where a size is claimed, the factor's interval clears the size; "
    "**smaller than claimed** if the direction is right but the factor's interval lies below the size; **not "
    "supported** if the interval clears e on the other side; **negligible** if −e < lo and hi < e (equivalent within "
    "e); **inconclusive** otherwise. Each decision is a one-sided test at 2.5 % whose p is shown; across the page's "
    "nine (five on the transformer) confirmatory primaries the p-values are Holm-adjusted, and a decision whose "
    "adjusted p exceeds 0.025 is reported as inconclusive. Only the primary comparison at the headline is "
    "confirmatory; every other comparison-setting is **exploratory**: tabulated with its p and its Holm-adjusted p "
    "over that comparison's settings, and never quoted in a summary. Settings with identical values for both arms "
    "count once. **This rule was changed after the results it judges had been seen** (a later revision added the size "
    "test, the floor, identical arms, the dropped-pair check and Holm to a rule fixed before the first runs); "
    "every verdict it changed is named in the page's introduction."
)
def figure_names(claim: str) -> tuple[str, str]:
    return f"{claim}.png", f"{claim}_curves.png"


def _headline_numbers(summary: dict) -> str:
    primary = summary["comparisons"][0]
    headline = summary["headline"]
    row = summary["table"][headline]
    arms = {a["name"]: a["label"] for a in summary["arms"]}
    arm, baseline, metric = primary["arm"], primary["baseline"], primary["metric"]
    result = primary["by_knob"][headline]
    return (f"{arms[arm]} {fmt_interval(row[arm][metric])} vs {arms[baseline]} "
            f"{fmt_interval(row[baseline][metric])} ({metric}; factor {factor_text(result, summary['claim'])}; "
            f"{pairs_text(result)} pairs)")


def _verdict_line(comparison: dict, summary: dict) -> str:
    """One comparison's verdicts along the knob (settings with identical values counted once)."""
    labels = {k["name"]: k["label"] for k in summary["knob"]}
    groups: dict[str, list[str]] = {}
    for knob, result in comparison["by_knob"].items():
        if result.get("same_as"):
            continue
        same = [labels[k] for k, r in comparison["by_knob"].items() if r.get("same_as") == knob]
        label = labels[knob] + (f" (= {', '.join(same)}: identical values)" if same else "")
        groups.setdefault(result["verdict"], []).append(label)
    parts = [f"{verdict} at {'; '.join(knobs)}" for verdict, knobs in groups.items()]
    sign = ">" if comparison["direction"] == "greater" else "<"
    size = f"; size: {size_label(summary['claim'])} {comparison['size']:.3g}×" if comparison.get("size") else ""
    return (f"- `{comparison['metric']}`: {comparison['arm']} {sign} {comparison['baseline']} "
            f"({_quoted(comparison)}; smallest effect {comparison['smallest_effect']}{size}) — {' — '.join(parts)}.")


def page_verdicts(summaries: list[dict]) -> list[dict[str, object]]:
    """Holm across the page's confirmatory primaries (:func:`flashsim.experiments.summaries.decide_page`)."""
    return decide_page(summaries)


def verdict_text(decision: dict) -> str:
    """``**verdict**`` with the rule's outcome where Holm changed it."""
    text = f"**{decision['verdict']}**"
    if decision["verdict"] != decision["rule"]:
        text += f" ({decision['rule']} before Holm)"
    return text


def _quoted_from_design(summary: dict, design: ClaimDesign) -> dict:
    """``summary`` with each comparison's quoted number and its label (``paper``) as the design now words it: the
    label is the design's, not the run's, so a corrected label reaches the page without a rerun."""
    words = {(c.metric, c.arm, c.baseline): c.paper for c in design.comparisons}
    for comparison in summary["comparisons"]:
        comparison["paper"] = words.get((comparison["metric"], comparison["arm"], comparison["baseline"]),
                                        comparison.get("paper", ""))
    return summary


def _quoted(comparison: dict) -> str:
    """The quoted number with its source: the article, the reference implementation, or other systems."""
    if comparison["source"] == "none" or not comparison["paper"]:
        return "no number quoted"
    return f"{comparison['source']}: {comparison['paper']}"


def _drift_table(summary: dict) -> str:
    """Mean sequence KL per knob value and arm, in units of δ (only for claims that tabulate it)."""
    if "sequence_kl" not in summary["metrics"]:
        return ""
    arms = summary["arms"]
    lines = [f"Drift (mean sequence KL D̄ between behaviour and learner, after warm-up; in units of δ = "
             f"{fmt_sci(DEFAULT_DELTA)}, this project's default; the article gives no δ, the reference "
             "implementation's quick-start sets 5e-3):", "",
             "| setting | " + " | ".join(a["label"] for a in arms) + " |", "|---|" + "---|" * len(arms)]
    for knob in summary["knob"]:
        cells = []
        for arm in arms:
            mean = summary["table"][knob["name"]][arm["name"]]["sequence_kl"]["mean"]
            cells.append("—" if mean is None else f"{fmt(mean, 4)} ({mean / DEFAULT_DELTA:.1f} δ)")
        lines.append(f"| {knob['label']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


INSTANCE = "; the seed also draws the task instance, env_options.seed"


def _design_block(design: ClaimDesign) -> str:
    defaults = _dotted(to_dict(TrainConfig()))
    base = {path: value for path, value in _dotted(to_dict(design.base)).items()
            if path == "env" or defaults.get(path) != value}
    arms = "; ".join(f"**{arm.label}** `{dict(arm.overrides)}`" for arm in design.arms)
    knob = ", ".join(value.label for value in design.knob)
    return (f"- Base run (the env, and the `TrainConfig` paths that differ from the defaults): `{base}`\n"
            f"- Arms: {arms}\n"
            f"- Knob ({design.knob_name}): {knob}; headline: {design.knob_value(design.headline).label}\n"
            f"- Seeds: {len(design.seeds)} ({design.seeds[0]}–{design.seeds[-1]}; paired: every arm and setting runs "
            f"every seed{INSTANCE if design.vary_instance else ''})\n")


def _dotted(data: dict, prefix: str = "") -> dict[str, object]:
    """Nested plain data as ``{"algorithm.batch_size": 128, ...}`` (the paths that arms and knobs override)."""
    flat = {}
    for key, value in data.items():
        if isinstance(value, dict) and value:
            flat.update(_dotted(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def claim_section(
    design: ClaimDesign, summary: dict, assets: str, discussion: str | None, probes: str = "",
    figures: tuple[str, ...] | None = None, decision: dict | None = None,
) -> str:
    """The Markdown section of one claim (figure paths relative to the report; ``probes``: a gradient table;
    ``figures``: the names of :func:`figure_names` that exist, default both)."""
    if probes:
        probes = ("Gradients along training at the headline setting (`flashsim.variance.measure_gradient` of each "
                  f"arm's own estimator at θ_k against the exact ∇J, {PROBE_BATCHES} batches per point; mean "
                  "[95 % CI] over seeds):\n\n" + probes)
    knob_figure, curves_figure = figure_names(design.claim)
    figures = (knob_figure, curves_figure) if figures is None else figures
    primary = summary["primary"]
    decision = decision or page_verdicts([summary])[0]
    generated = (f"At the headline setting the primary comparison is {verdict_text(decision)} "
                 f"(mean difference {fmt_interval(primary['difference'])}).")
    parts = [
        f"## {design.claim} · {design.title}", "",
        f"**Paper.** {design.paper}", "",
        f"**Question and design.** {design.question}", "",
        _design_block(design),
        f"**Ours (headline, {design.knob_value(design.headline).label}).** {_headline_numbers(summary)}. "
        f"**Verdict:** {verdict_text(decision)} (p = {fmt_p(decision['p'])}, Holm-adjusted over the page's "
        f"primaries {fmt_p(decision['p_holm'])})"
        + (f"; {primary['size_verdict']}" if primary.get("size_verdict") else "")
        + (f". Exploratory: {primary['exploratory_reason']}" if primary.get("exploratory_reason") else "") + ".", "",
        "Verdicts of every comparison along the knob (paired 95 % CI of arm − baseline; all but the primary "
        "comparison at the headline are exploratory):", "",
        *[_verdict_line(c, summary) for c in summary["comparisons"]], "",
        _drift_table(summary),
        probes,
        *([f"![{design.claim} metrics along the knob]({assets}/{design.claim}/{knob_figure})", ""]
          if knob_figure in figures else []),
        *([f"![{design.claim} learning curves at the headline setting]({assets}/{design.claim}/{curves_figure})", ""]
          if curves_figure in figures else []),
        "<details><summary>Full tables (means with 95 % t intervals)</summary>", "",
        markdown_tables(summary),
        "</details>", "",
        "**Discussion.** " + (discussion.strip() if discussion else generated), "",
    ]
    return "\n".join(parts) + "\n"


SIMULATION_TITLE = "Does the paper hold? The claims of FlashREINFORCE in simulation"
SIMULATION_ABOUT = (
    "Each claim is a pre-registered design (`flashsim.studies.claims`): arms, a knob, the paper's direction, "
    "a headline setting, a primary comparison. Success, length, truncation and tool calls are exact "
    "expectations of the policy (no evaluation noise); the intervals are over seeds.",
    RULE,
    "Primary measures cannot saturate: `auc` is the area under the exact success curve against rollouts spent "
    "(divided by the rollouts: a mean success per rollout), `rollouts_to_90`/`rollouts_to_95` the rollouts "
    "spent until success first reaches 0.9/0.95 of the exact optimum (NaN, and the pair dropped, where a run "
    "never reaches it), `updates_to_90` (C5's) the learner updates until then. Final success is secondary, and at "
    "the ceiling it decides nothing.",
    "Every quoted number is labelled by its source: **article** (the source article about the FlashREINFORCE "
    "paper), **reference implementation** (FlashREINFORCE's published code and defaults), or **other systems** "
    "(published numbers of other asynchronous RL systems, not of FlashREINFORCE).",
    "The paper's numbers come from LLM training (Qwen2.5-Math-1.5B, Qwen2.5-7B-Instruct, ...); ours from small "
    "tabular or linear policies on toy envs. The comparison is of directions and of ratios (C1's rollouts, C7's "
    "speed-up), never of raw magnitudes.",
)
"""The simulator page's opening paragraphs (what a design is, the rule, the measures, the sources)."""

FOLLOW_UP_TITLE = "Follow-up experiments: C1 at the claimed size, and C1's mechanism"
FOLLOW_UP_ABOUT = (
    "Two experiments asked for after the first results, each pre-registered in `flashsim.studies.follow_ups` "
    "(design, prediction and cost committed before its run; the commits are named in the introduction) and run on "
    "fresh seeds 2000–2019. They are not part of `flashsim reproduce all`. Success is the exact expected success of "
    "the policy; the intervals are over seeds.",
    RULE.replace("nine (five on the transformer)", "two"),
    "`rollouts_to_60`/`rollouts_to_70`/`rollouts_to_90` are the rollouts spent until exact success first reaches "
    "that share of the exact optimum (NaN where a run never does: the *pairs* column counts the seeds where only "
    "one arm reached it, which makes a verdict inconclusive); `auc` is the area under the success curve per rollout.",
)
"""The follow-up page's opening paragraphs."""


PROBES = "probes.md"
"""The gradient-probe table of a probed claim, kept beside its summary so that the page re-renders from docs alone."""


def _probes(design: ClaimDesign, out: Path | str, target: Path) -> str:
    """The probe table: from the probe cells in ``out`` (and then kept in ``target``), else the kept one."""
    if (Path(out) / probe_design(design).claim).exists():
        table = probe_table(design, out)
        atomic_write_text(target / PROBES, table)
        return table
    return (target / PROBES).read_text() if (target / PROBES).exists() else ""


def _collapse_findings(assets: Path) -> str:
    """The collapse tests' results beside the page (each its own Holm family), for the page's "In short"."""
    lines = []
    for fisher_path in sorted(assets.glob("*/fisher.json")):
        claim = fisher_path.parent.name
        fisher = json.loads(fisher_path.read_text())
        summary = finalized_collapse(json.loads((fisher_path.parent / SUMMARY).read_text()), fisher)
        lines.append(f"- {collapse_sentence(claim, fisher, summary)}")
    return "\n".join(["", "The pre-registered collapse tests, each its own family (sections at the end of the page):",
                      "", *lines]) + "\n" if lines else ""


def _keep_assets(claim: str, source: Path, target: Path, summary: dict) -> Path:
    """Copy a claim's figures and data from ``source`` to ``target`` (unless they are the same folder) and write
    its finalized ``summary.json`` and its tables (``table.md``) there; returns ``target``."""
    target.mkdir(parents=True, exist_ok=True)
    for name in (*figure_names(claim), MEANS, PER_SEED):
        if (source / name).exists() and (source / name).resolve() != (target / name).resolve():
            shutil.copyfile(source / name, target / name)
    atomic_write_text(target / SUMMARY, to_json(summary))
    atomic_write_text(target / TABLE, markdown_tables(summary))  # the tables of the final summary, as the page's
    return target


def _findings(report: Path) -> str:
    """The replication summary that opens the quick page, from every page's committed stores beside ``report``."""
    return replication_text(report.parent)


def write_report(
    designs: list[ClaimDesign], out: Path | str, report: Path | str, *, command: str = "",
    title: str = SIMULATION_TITLE, about: tuple[str, ...] = SIMULATION_ABOUT, family: str = "",
) -> Path:
    """Write the report for ``designs`` (summaries and figures already in ``out``) to ``report``.

    Figures and tables are copied to ``<report dir>/results/<claim>/`` (``out`` may be that folder itself: the page
    then re-renders from its committed stores), with each ``summary.json`` holding its final verdict after Holm over
    the page's primaries (``family`` names the page: ``quick``, ``full``, ``transformer``, ``follow-ups``; the quick
    page opens with the replication summary of every page); hand-written discussions are read from
    ``<report dir>/results/discussion/<claim>.md``, their references to the committed stores rendered
    (:mod:`flashsim.experiments.references`). ``title`` and the paragraphs of ``about`` open the page (the
    transformer claims of ``scale`` give their own).
    """
    report = Path(report)
    assets = report.parent / "results"
    stores = Stores(checkout_root(report, family))
    sections = []
    overview = ["| claim | what | quoted (source) | primary comparison | ours (headline) | p (Holm) | verdict "
                "| mechanism (exploratory comparisons at the headline) |", "|---|---|---|---|---|---|---|---|"]
    summaries = [_quoted_from_design(json.loads((Path(out) / design.claim / SUMMARY).read_text()), design)
                 for design in designs]
    decisions = page_verdicts(summaries)
    summaries = [finalized(summary, decision, family, len(summaries))
                 for summary, decision in zip(summaries, decisions)]
    for design, summary, decision in zip(designs, summaries, decisions):
        target = _keep_assets(design.claim, Path(out) / design.claim, assets / design.claim, summary)
        discussion_path = assets / "discussion" / f"{design.claim}.md"
        discussion = render_references(discussion_path.read_text(), stores) if discussion_path.exists() else None
        probes = _probes(design, out, target)
        figures = tuple(name for name in figure_names(design.claim) if (target / name).exists())
        sections.append(claim_section(design, summary, assets.name, discussion, probes, figures, decision))
        primary = summary["comparisons"][0]
        overview.append(f"| {design.claim} | {design.title} | {_quoted(primary)} | {summary['primary']['comparison']} "
                        f"| {_headline_numbers(summary)} | {fmt_p(decision['p'])} ({fmt_p(decision['p_holm'])}) "
                        f"| {verdict_cell(summary)} | {mechanism_cell(summary)} |")
    profiles = sorted({design.profile for design in designs})
    seeds = sorted({len(design.seeds) for design in designs})
    findings = _findings(report) if family == "quick" else ""
    header = [
        f"# {title}", "",
        "<!-- Generated by flashsim.experiments.report.write_report; edit the designs or "
        "results/discussion/*.md beside this page, not this file, then re-render: "
        "python -m scale.studies.pages -->", "",
        *([findings.strip(), ""] if findings else []),
        f"Produced by `{command}` (profile{'s' if len(profiles) > 1 else ''} {', '.join(profiles)}; "
        f"{'/'.join(map(str, seeds))} seeds per cell)." if command else
        f"Profile {', '.join(profiles)}; {'/'.join(map(str, seeds))} seeds.", "",
        *[line for paragraph in about for line in (paragraph, "")],
        *overview, "",
        "In the tables, *factor* is the favoured arm's mean over the baseline's (the baseline's over the arm's for a "
        "`<` comparison: a speed-up for C7, GRPO's rollouts over FlashREINFORCE's for C1's rollouts-to-threshold, to "
        "set beside the article's 2×); — where a mean is 0.", "",
        in_short(summaries, family) + _collapse_findings(assets),
    ]
    intro = assets / "discussion" / "intro.md"
    if intro.exists():
        header += [render_references(intro.read_text(), stores).strip(), ""]
    text = "\n".join(header) + "\n" + "\n".join(sections)
    report.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(report, text)
    return report
