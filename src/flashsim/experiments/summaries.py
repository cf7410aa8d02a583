"""Every sentence of a results page that states a result, generated from the committed verdicts.

A page's verdicts live in its claims' ``summary.json`` (the rule's outcome, :mod:`flashsim.experiments.verdict`) and,
for the transformer's collapse tests, ``fisher.json``. This module turns them into the sentences a reader quotes:

- :func:`decide_page` applies Holm across a page's confirmatory primaries (its *family*) and
  :func:`finalized` writes the final, post-Holm verdict, the adjusted p and the size verdict into the summary, so
  ``summary.json`` and the page say the same thing;
- :func:`size_verdict` decides a quoted size (C1's 2×, C3's 1.57×, C7's 2×) beside the direction: the claimed size
  is *rejected* where the factor's 95 % interval excludes it, *consistent* where it contains it;
- :func:`claim_sentence`, :func:`in_short` and :func:`mechanism_cell` write a page's "In short" and the overview's
  verdict and mechanism cells; :func:`replication_summary` writes ``docs/results.md``'s opening from every page.

Every sentence carries the number and interval it rests on; an exploratory result says "exploratory" in the same
sentence. A new design's ``summary.json`` flows through unchanged: nothing here names a claim's outcome.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from flashsim.experiments.analysis import fmt, fmt_interval, fmt_p, size_label
from flashsim.experiments.verdict import INCONCLUSIVE, holm, with_holm

FAMILIES = {
    "quick": "the quick toy page's primaries",
    "full": "the full-budget toy page's primaries",
    "transformer": "the transformer page's primaries",
    "follow-ups": "the follow-ups page's primaries",
    "C2collapse": "the C2collapse test alone",
    "C9collapse": "the C9collapse test alone",
}
"""Each results page's Holm family, by the page's family name (:data:`flashsim.experiments.pages.PAGES`)."""

EXPLORATORY_PRIMARIES: Mapping[tuple[str, str], str] = {
    ("quick", "C5"): "its primary measure was changed to `updates_to_90` (3b86649) after seeds 10–19 had been "
                     "seen, and it was judged on the same seeds, so its verdict is exploratory; it stays in the "
                     "page's Holm family, which only makes the other eight adjustments more conservative",
}
"""Primaries that lost their confirmatory standing, by (family, claim), with why (said on every page that quotes
them). C5 on the full budget is confirmatory: its primary was committed before seeds 1100–1119 ran."""

SIZE_NOT_TESTED: Mapping[tuple[str, str], str] = {
    ("transformer", "C1"): "flashsim's reading of the 2× not tested here (the primary is the area under the accuracy "
                           "curve at a matched budget, which has no rollout factor)",
}
"""Primaries of a claim whose article quotes a size but whose measure cannot test it, by (family, claim): said in
the size verdict's place, so that every page's row of the claim speaks to the size."""

MECHANISMS: Mapping[str, tuple[tuple[str, str, str], ...]] = {
    "C4": (("auc", "positive_only_token_sum", "positive_only"), ("auc", "signed_token_sum", "positive_only_token_sum")),
    "C7": (("seconds_per_update", "flash_async", "flash_sync"),),
    "C9": (("tool_calls", "flash", "positive_only"),),
}
"""The exploratory comparisons (metric, arm, baseline) that bear on a claim's mechanism, shown at the headline in the
overview's mechanism column with their verdict, difference and Holm p over that comparison's settings."""


def rule_verdict(result: Mapping) -> str:
    """The verdict rule's outcome for a primary, before Holm (kept as ``rule_verdict`` once Holm is applied)."""
    return result.get("rule_verdict", result["verdict"])


def decide_page(summaries: Sequence[Mapping]) -> list[dict[str, object]]:
    """Holm across a page's confirmatory primaries: per summary the rule's verdict, its p, the adjusted p and the
    final verdict (:func:`flashsim.experiments.verdict.with_holm`)."""
    ps = [_p(summary["primary"]) for summary in summaries]
    return [{"rule": rule_verdict(summary["primary"]), "p": p, "p_holm": p_holm,
             "verdict": with_holm(rule_verdict(summary["primary"]), p_holm)}
            for summary, p, p_holm in zip(summaries, ps, holm(ps))]


def _p(result: Mapping) -> float:
    p = result.get("p")
    return float("nan") if p is None else p


def size_position(low: float | None, high: float | None, size: float) -> str:
    """Where a factor's interval [low, high] lies against the claimed ``size``: ``"below"`` (the size is
    rejected), ``"above"`` (exceeded), ``"inside"`` (consistent with it); ``""`` without a finite interval.

    >>> size_position(0.8, 1.4, 2.0), size_position(1.5, 2.6, 2.0), size_position(2.1, 3.0, 2.0)
    ('below', 'inside', 'above')
    """
    if low is None or high is None or not (math.isfinite(low) and math.isfinite(high)):
        return ""
    return "below" if high < size else "above" if low > size else "inside"


def size_verdict(result: Mapping, claim: str = "") -> str:
    """The claimed size beside the direction: '' where no size is quoted or the factor has no interval; a size of
    :data:`~flashsim.experiments.analysis.SIZE_LABELS` is printed with its label.

    >>> size_verdict({"size": 2.0, "ratio": {"mean": 1.11, "low": 1.03, "high": 1.19, "n": 20}})
    'claimed size 2× rejected (factor 1.11 [1.03, 1.19], below it)'
    >>> size_verdict({"size": 1.5675, "ratio": {"mean": 1.4, "low": 1.1, "high": 1.7, "n": 10}})
    'consistent with the claimed size 1.57× (factor 1.40 [1.10, 1.70])'
    >>> size_verdict({"size": 2.0, "ratio": {"mean": 3.67, "low": 3.57, "high": 3.78, "n": 20}}, "C7")
    "flashsim's pre-registered 2× exceeded (factor 3.67 [3.57, 3.78], above it)"
    """
    size, ratio = result.get("size"), result.get("ratio") or {}
    low, high = ratio.get("low"), ratio.get("high")
    position = size_position(low, high, size) if size else ""
    if not position:
        return ""
    factor = f"factor {fmt(ratio['mean'], 2)} [{fmt(low, 2)}, {fmt(high, 2)}]"
    name = size_label(claim)
    return {"below": f"{name} {size:.3g}× rejected ({factor}, below it)",
            "above": f"{name} {size:.3g}× exceeded ({factor}, above it)",
            "inside": f"consistent with {'the ' if name == 'claimed size' else ''}{name} {size:.3g}× ({factor})"}[
        position]


def finalized(summary: Mapping, decision: Mapping, family: str, size: int) -> dict:
    """``summary`` with its primary's final verdict: post-Holm ``verdict`` and ``p_holm``, the rule's outcome as
    ``rule_verdict``, the Holm family, the size verdict and, for a primary that lost its standing, why."""
    out = copy.deepcopy(dict(summary))
    fields = {"rule_verdict": decision["rule"], "verdict": decision["verdict"], "p_holm": decision["p_holm"],
              "holm_family": f"{FAMILIES.get(family, family)} ({size})",
              "size_verdict": (size_verdict(out["primary"], out["claim"])
                               or SIZE_NOT_TESTED.get((family, out["claim"]), ""))}
    reason = EXPLORATORY_PRIMARIES.get((family, out["claim"]))
    if reason:
        fields["exploratory_reason"] = reason
    out["primary"].update(fields)
    headline = out["comparisons"][0]["by_knob"].get(out["headline"])
    if headline is not None and not headline.get("exploratory"):
        headline.update({k: v for k, v in fields.items() if k != "size_verdict"})
    return out


def verdict_cell(summary: Mapping) -> str:
    """The overview's verdict cell: the final verdict, the rule's where Holm changed it, the size verdict."""
    primary = summary["primary"]
    text = f"**{primary['verdict']}**" + _undecided(primary)
    if rule_verdict(primary) != primary["verdict"]:
        text += f" ({rule_verdict(primary)} before Holm)"
    if primary.get("exploratory_reason"):
        text += " — exploratory: primary changed after its seeds were seen"
    if primary.get("size_verdict"):
        text += f"; {primary['size_verdict']}"
    return text


def _undecided(primary: Mapping) -> str:
    """`` (direction not decided)`` for an inconclusive primary with a size verdict: the two are separate outcomes."""
    decides_size = primary.get("size_verdict") and "not tested" not in primary["size_verdict"]
    return " (direction not decided)" if primary["verdict"] == INCONCLUSIVE and decides_size else ""


def _labels(summary: Mapping) -> dict[str, str]:
    return {arm["name"]: arm["label"] for arm in summary["arms"]}


def claim_sentence(summary: Mapping, family: str = "") -> str:
    """One claim's result in one sentence: final verdict, the difference and interval, the size verdict, p and
    Holm p with the family, and "exploratory" where the primary lost its standing."""
    primary, arms = summary["primary"], _labels(summary)
    comparison = summary["comparisons"][0]
    verdict = primary["verdict"] + _undecided(primary)
    if rule_verdict(primary) != primary["verdict"]:
        verdict += f" after Holm ({rule_verdict(primary)} before it)"
    where = f" ({family})" if family else ""
    text = (f"**{summary['claim']}{where} {verdict}**: {arms[comparison['arm']]} − {arms[comparison['baseline']]} "
            f"in `{comparison['metric']}` {_signed(primary['difference'])}")
    if primary.get("size_verdict"):
        text += f"; {primary['size_verdict']}"
    text += f" (p {fmt_p(primary.get('p'))}, Holm p {fmt_p(primary.get('p_holm'))}"
    text += f" over {primary['holm_family']})" if primary.get("holm_family") else ")"
    if primary.get("exploratory_reason"):
        text += f" — exploratory: {primary['exploratory_reason']}"
    return text + "."


def _signed(interval: Mapping) -> str:
    """``+0.220 [0.173, 0.267]``: a difference with its sign and interval."""
    mean = interval.get("mean")
    if mean is None:
        return "—"
    return ("+" if mean > 0 else "") + fmt_interval(interval)


def in_short(summaries: Sequence[Mapping], family: str) -> str:
    """The page's "In short": how many of the family's primaries each final verdict got, then one sentence each."""
    counts: dict[str, list[str]] = {}
    for summary in summaries:
        counts.setdefault(summary["primary"]["verdict"], []).append(summary["claim"])
    tally = "; ".join(f"{len(claims)} {verdict} ({', '.join(claims)})" for verdict, claims in counts.items())
    head = (f"**In short** (generated by `flashsim.experiments.summaries` from each claim's committed `summary.json`; "
            f"confirmatory primaries only, final verdicts after Holm; Holm family: {FAMILIES.get(family, family)}, "
            f"{len(summaries)} of them, and no other page's). Of the {len(summaries)}: {tally}.")
    return "\n".join([head, "", *[f"- {claim_sentence(summary)}" for summary in summaries]]) + "\n"


def mechanism_cell(summary: Mapping) -> str:
    """The overview's mechanism cell: each registered exploratory comparison at the headline, with its verdict,
    difference and Holm p over that comparison's settings, labelled exploratory; — where none is registered."""
    arms, parts = _labels(summary), []
    for metric, arm, baseline in MECHANISMS.get(summary["claim"], ()):
        for comparison in summary["comparisons"]:
            result = comparison["by_knob"].get(summary["headline"])
            if (comparison["metric"], comparison["arm"], comparison["baseline"]) != (metric, arm, baseline) or (
                    result is None):
                continue
            parts.append(f"exploratory: {arms[arm]} − {arms[baseline]} in `{metric}` {_signed(result['difference'])}, "
                         f"{result['verdict']} (Holm p over its settings {fmt_p(result.get('p_holm'))})")
    return "; ".join(parts) or "—"


def upper_bound(count: int, runs: int, confidence: float = 0.95) -> float:
    """Clopper–Pearson upper bound (two-sided ``confidence``) on a rate with ``count`` events in ``runs``.

    >>> round(upper_bound(0, 10), 3), round(upper_bound(3, 30), 3)
    (0.308, 0.265)
    """
    from scipy.stats import beta

    return 1.0 if count >= runs else float(beta.ppf(1 - (1 - confidence) / 2, count + 1, runs - count))


def collapse_sentence(claim: str, fisher: Mapping, summary: Mapping) -> str:
    """A collapse test's result: per setting the arms' collapse counts with a 95 % upper bound on each rate, Fisher's
    p and Holm p over the settings and the decision where Fisher's test is the primary; else the counts, and the
    paired primary comparison's final verdict (``summary`` :func:`finalized`)."""
    arms, labels = _labels(summary), {knob["name"]: knob["label"] for knob in summary["knob"]}
    parts = []
    for arm, test in fisher["tests"].items():
        if not test["confirmatory"]:
            continue
        for knob, row in test["by_knob"].items():
            parts.append(
                f"at {labels.get(knob, knob)} {arms[arm]} {row['collapsed']}/{row['runs']} (95 % upper bound on the "
                f"rate {upper_bound(row['collapsed'], row['runs']):.0%}) vs {arms[fisher['baseline']]} "
                f"{row['baseline_collapsed']}/{row['baseline_runs']}, Fisher p {fmt_p(row['p'])}, Holm p over the "
                f"settings {fmt_p(row['p_holm'])}: {row['decision']}")
    if parts:
        return (f"**{claim}** (pre-registered; Fisher's test of `{fisher['indicator']}` is its primary): "
                f"{'; '.join(parts)}.")
    return (f"**{claim}** (pre-registered) — `{fisher['indicator']}`, secondary: {_zero_counts(fisher, arms, labels)}; "
            f"its primary: {claim_sentence(summary)}")


def _zero_counts(fisher: Mapping, arms: Mapping[str, str], labels: Mapping[str, str]) -> str:
    """The collapse counts of every arm (where Fisher's test is secondary), each with a 95 % upper bound."""
    parts = []
    for knob, by_arm in fisher["counts"].items():
        parts.append(f"at {labels.get(knob, knob)} " + ", ".join(
            f"{arms[arm]} {len(row['collapsed'])}/{row['runs']} (95 % upper bound on the rate "
            f"{upper_bound(len(row['collapsed']), row['runs']):.0%})" for arm, row in by_arm.items()))
    return "; ".join(parts)


def finalized_collapse(summary: Mapping, fisher: Mapping) -> dict:
    """A collapse test's summary with its final verdict: where Fisher's test is the primary (a confirmatory arm in
    ``fisher``), its decisions per setting, their Holm p (over the settings) and one verdict; else the paired primary
    alone in its own family (:func:`finalized`)."""
    rows = {knob: row for test in fisher["tests"].values() if test["confirmatory"]
            for knob, row in test["by_knob"].items()}
    if not rows:
        return finalized(summary, decide_page([summary])[0], summary["claim"], 1)
    out = copy.deepcopy(dict(summary))
    decisions = sorted({row["decision"] for row in rows.values()})
    out["primary"].update({
        "rule_verdict": rule_verdict(out["primary"]), "fisher": rows, "p_holm": min(r["p_holm"] for r in rows.values()),
        "verdict": decisions[0] if len(decisions) == 1 else "; ".join(decisions),
        "holm_family": f"Fisher's test over {len(rows)} settings of {summary['claim']} alone", "size_verdict": ""})
    return out


def load_family(stores: Path, claims: Sequence[str], family: str) -> list[dict]:
    """The family's committed summaries, each :func:`finalized` (Holm over ``claims``)."""
    summaries = [json.loads((stores / claim / "summary.json").read_text()) for claim in claims]
    return [finalized(s, d, family, len(summaries)) for s, d in zip(summaries, decide_page(summaries))]


def decided(summary: Mapping) -> bool:
    """Whether a final verdict decides something (not inconclusive, not at the ceiling or floor, not identical)."""
    return summary["primary"]["verdict"] not in (INCONCLUSIVE, "at the ceiling", "at the floor", "identical arms")


def replication_summary(families: Sequence[tuple[str, str, Sequence[Mapping], Mapping[str, tuple]]]) -> str:
    """``docs/results.md``'s opening: per claim, its final verdict on every page that tests it.

    ``families``: per page (family, its link, its :func:`finalized` summaries, its collapse tests as
    ``{claim: (fisher, finalized summary)}``)."""
    names = [f"{FAMILIES.get(family, family)} ({len(summaries)})" for family, _, summaries, _ in families]
    lines = [
        "**What the replication found** (generated by `flashsim.experiments.summaries` from the committed "
        "`summary.json` and `fisher.json` of the four results pages; final verdicts after Holm). The claims below come "
        f"from different Holm families — {', '.join(names)}, and each collapse test alone — so each verdict holds "
        "within its own family, and one claim can get different verdicts on different pages.", ""]
    by_claim: dict[str, list[str]] = {}
    for family, link, summaries, tests in families:
        for summary in summaries:
            base = summary["claim"][:2]
            by_claim.setdefault(base, []).append(f"[{family}]({link}): {claim_sentence(summary)}")
        for claim, (fisher, summary) in tests.items():
            sentence = collapse_sentence(claim, fisher, summary)
            by_claim.setdefault(claim[:2], []).append(f"[{family}]({link}): {sentence}")
    for claim in sorted(by_claim, key=lambda c: int(c[1:])):
        lines.append(f"- **{claim}**")
        lines += [f"    - {sentence}" for sentence in by_claim[claim]]
    return "\n".join(lines) + "\n"
