"""Hand-written prose bound to its data: references render the committed stores, discussions type no result, the
article's table stands where it says, and the wording and attribution checks fail on each kind of planted mistake."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from flashsim.experiments.pages import PAGES
from flashsim.experiments.references import (
    REFERENCE,
    Stores,
    article_table,
    numbers_outside_references,
    render_references,
    resolve,
)
from tests.attributions import MISSING, SEEDS, seed_text, text_attribution_problems
from tests.wording import committed_settings, committed_verdicts, text_problems

ROOT = Path(__file__).resolve().parents[2]
DISCUSSIONS = sorted(path for page in PAGES
                     for path in (ROOT / page.path.replace("results.md", "results") / "discussion").glob("*.md"))
NOT_YET_BOUND: set[str] = set()
"""Discussions that still type some of their numbers (each quote of the article, every verdict word and every number
the wording checks flagged is already a reference in them). The list may only shrink: a file that types no result
fails the test below until it is taken off."""


@pytest.fixture(scope="module")
def stores():
    return Stores(ROOT)


@pytest.fixture(scope="module")
def article():
    """The article's text; a missing article fails (it never skips: CI has it at ../shared/seeds/)."""
    if SEEDS is None:
        pytest.fail(MISSING)
    return seed_text()


@pytest.mark.parametrize("path", DISCUSSIONS, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_discussion_types_no_result_number(path):
    typed = numbers_outside_references(path.read_text())
    name = str(path.relative_to(ROOT))
    if name in NOT_YET_BOUND:
        assert typed, f"{name} types no result any more: take it off NOT_YET_BOUND"
    else:
        assert typed == [], f"{name} types results instead of referring to the stores: {typed}"


@pytest.mark.parametrize("path", DISCUSSIONS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_reference_in_a_discussion_resolves(path, stores):
    for match in REFERENCE.finditer(path.read_text()):
        assert resolve(match["body"], stores)


@pytest.mark.parametrize("typed", [
    "The full budget's 20 other seeds gave 1.09×.",  # a factor
    "The gap was +0.36 [0.27, 0.44] at the full budget.",  # an interval
    "It survives Holm (p = 0.0019).",  # a p
    "GRPO was slower in 18 of 20 seeds.",  # a count of seeds
    "The two runs were identical in all 20 seeds.",  # a count of seeds, as all of them
    "None of the 30 token-gate runs collapsed.",  # a count of runs, as none of them
    "The token-local gate collapsed in 3/30 runs.",  # a count of runs
    "Lag 4 costs 0.027 in area.",  # a bare value
    "GRPO's lowest final count is 0.95.",  # a value that ends a sentence
    "Token-mean is 36 % longer.",  # a percentage
    "The design predicted a factor near 1.3 and got 1.18.",  # a result beside a prediction
    "The gap ran from 0.54–0.58 in area.",  # a range of results
    "At lr 0.3 every arm reached 0.9 after 4,808 rollouts.",  # a result after a setting
    "Seed 112 ended 0.048 below its peak of 0.080.",  # a fall, beside the collapse drop's words
    "The sequence gate admitted 64 % of the calculator's trajectories.",  # a share, beside the error rate's words
    "With the tool the model reaches 0.28.",  # an accuracy, beside the pilot rule's words
    "The gate keeps FlashREINFORCE within 0.02 of GRPO.",  # a gap, beside the rule's ε words
])
def test_a_typed_result_in_a_discussion_is_found(typed):
    assert numbers_outside_references(typed)


@pytest.mark.parametrize("typed, result", [
    ("It ends at 0.396 against 0.344 in accuracy.", "0.344"),  # the second of two results
    ("FlashREINFORCE climbs back faster: 1.39 against 1.23 at update 100.", "1.23"),
])
def test_a_result_after_against_is_found(typed, result):
    assert result in numbers_outside_references(typed)


def test_settings_and_references_are_not_typed_results():
    text = ("At lr 0.03 and L = 8 with 32 × 4, the smallest effect of 0.01 and 0.9 of the optimum, "
            "{{ quick:C3 times }} against {{ article:length_factor }}; commit 3b86649, seeds 10–19, `a 0.5 code`; "
            "rollouts to 0.6 and 0.7 of the optimum; the grid 0.1–3 was extended to 0.03; within 0.01 of 0. "
            "Within 0.01 of the optimum, within ±0.01. "
            "At lr ≤ 0.1 and on lr ∈ {0.03, 0.1, 0.3}, pre-registered at 50 % of the time, the design predicted a "
            "factor near 1.3 and a gain (predicted +0.005 to +0.02); the design gives 0.70 against 0.54–0.58; "
            "error rate 45 %. The collapse drop of 0.05; the pre-registered drop of 0.05; a calculator wrong on 30 % "
            "of the expressions; the calculator is wrong on 30 %; a task on which the model alone reaches 0.2.")
    assert numbers_outside_references(text) == []


def test_a_cross_page_reference_reads_the_other_pages_store(stores):
    full = json.loads((ROOT / "docs/full-budget/results/C3/summary.json").read_text())["primary"]["ratio"]
    expected = f"{full['mean']:.2f}× [{full['low']:.2f}, {full['high']:.2f}]"
    assert render_references("{{ full:C3 times }}", stores) == expected


def test_a_point_is_the_difference_without_its_interval(stores):
    difference = render_references("{{ follow-ups:C1mech#auc:flash_depth/grpo_nostd difference }}", stores)
    point = render_references("{{ follow-ups:C1mech#auc:flash_depth/grpo_nostd point }}", stores)
    assert difference.startswith(point + " [") and "[" not in point


def test_a_value_is_the_arms_mean_without_its_interval(stores):
    mean = render_references("{{ full:C8#drawdown:lag4/no_gate_lag4 mean:lag0 }}", stores)
    value = render_references("{{ full:C8#drawdown:lag4/no_gate_lag4 value:lag0 }}", stores)
    assert mean.startswith(value + " [") and "[" not in value


def _means_row(page: str, claim: str, knob: str, arm: str, metric: str) -> dict:
    with open(ROOT / page / claim / "means.csv", newline="") as file:
        return next(r for r in csv.DictReader(file) if (r["knob"], r["arm"], r["metric"]) == (knob, arm, metric))


def test_an_arms_mean_reaches_a_metric_no_comparison_holds(stores):
    summary = json.loads((ROOT / "docs/full-budget/results/C8/summary.json").read_text())
    assert "acceptance_rate" not in {c["metric"] for c in summary["comparisons"]}
    row = _means_row("docs/full-budget/results", "C8", "chain_h32", "lag4", "acceptance_rate")
    assert render_references("{{ full:C8#acceptance_rate value:lag4 4 }}", stores) == f"{float(row['mean']):.4f}"
    percent = render_references("{{ full:C8#acceptance_rate percent:lag4 }}", stores)
    assert percent == f"{100 * float(row['mean']):.0f} %"
    kl = _means_row("docs/full-budget/results", "C8", "chain_h32", "lag4", "sequence_kl")
    assert render_references("{{ full:C8 drift:lag4 3 }}", stores) == f"{float(kl['mean']) / 3e-3:.3f} δ"
    drift = _means_row("docs/transformer/results", "C2", "tool30_lag1", "sequence_gate", "drift")  # already in δ
    assert render_references("{{ transformer:C2 drift:sequence_gate 3 }}", stores) == f"{float(drift['mean']):.3f} δ"


def test_a_whole_number_is_written_with_thousands_commas(stores):
    row = _means_row("docs/full-budget/results", "C1", "u400", "flash", "rollouts_to_90")
    mean, low, high = (float(row[k]) for k in ("mean", "low", "high"))
    assert mean > 1000
    assert (render_references("{{ full:C1 mean:flash 0 }}", stores)
            == f"{mean:,.0f} [{low:,.0f}, {high:,.0f}]")


def test_reached_counts_the_seeds_whose_run_reached_the_level(stores):
    with open(ROOT / "docs/follow-ups/results/C1size/per_seed.csv", newline="") as file:
        rows = [r for r in csv.DictReader(file) if (r["setting"], r["arm"]) == ("chain", "grpo")]
    values = [float(r["rollouts_to_70"]) for r in rows if r["rollouts_to_70"] not in ("", "nan")]
    within = [v for v in values if v <= 51200]
    assert len(within) < len(values) < len(rows)  # the bound and the missing values both count here
    assert render_references("{{ follow-ups:C1size@chain reached:grpo }}", stores) == f"{len(values)} of {len(rows)}"
    assert (render_references("{{ follow-ups:C1size@chain reached:grpo:51200 }}", stores)
            == f"{len(within)} of {len(rows)}")


def test_largest_is_the_worst_single_run_of_an_arm_at_a_setting(stores):
    with open(ROOT / "docs/full-budget/results/C2/per_seed.csv", newline="") as file:
        rows = [r for r in csv.DictReader(file) if (r["setting"], r["arm"]) == ("lr0.1_lag2", "token_gate")]
    worst = max(float(r["drawdown"]) for r in rows)
    mean = sum(float(r["drawdown"]) for r in rows) / len(rows)
    assert worst > mean + 1e-3  # one run's fall, not the mean's
    assert render_references("{{ full:C2@lr0.1_lag2#drawdown largest:token_gate 4 }}", stores) == f"{worst:.4f}"


def test_a_probe_reads_its_cell_of_the_probe_table(stores):
    table = (ROOT / "docs/full-budget/results/C1/probes.md").read_text()
    row = next(line for line in table.splitlines() if line.startswith("| GRPO (64 × 4), twice the batch | 100 |"))
    cell = row.split("|")[3].strip()  # cosine_of_mean, the third column
    mean, low, high = (float(x) for x in re.findall(r"[\d.]+(?:e-\d+)?", cell))
    assert (render_references("{{ full:C1 probe:grpo_2batch:100:cosine_of_mean 3 }}", stores)
            == f"{mean:.3f} [{low:.3f}, {high:.3f}]")


def test_an_effect_is_the_comparisons_smallest_effect_in_its_units(stores):
    summary = json.loads((ROOT / "docs/full-budget/results/C1/summary.json").read_text())
    effect = summary["comparisons"][0]["by_knob"][summary["headline"]]["effect"]
    assert summary["comparisons"][0]["smallest_effect"] == "5% of the baseline"
    assert render_references("{{ full:C1 effect 0 }}", stores) == f"{effect:,.0f}"


def test_quoted_renders_the_number_a_comparison_quotes(stores):
    comparison = json.loads((ROOT / "docs/full-budget/results/C7/summary.json").read_text())["comparisons"][0]
    assert comparison["source"] == "other systems"
    assert render_references("{{ full:C7 quoted }}", stores) == comparison["paper"]


def _csv(path):
    with open(ROOT / path, newline="") as file:
        return list(csv.DictReader(file))


def test_per_seed_fields_read_one_arms_runs(stores):
    rows = [r for r in _csv("docs/transformer/results/C9collapse/per_seed.csv") if r["arm"] == "grpo"]
    calls = {r["seed"]: float(r["tool_calls"]) for r in rows}
    lowest = min(calls, key=calls.get)
    assert render_references("{{ transformer:C9collapse lowest:grpo }}", stores) == f"{calls[lowest]:.3f}"
    assert render_references("{{ transformer:C9collapse lowest-seed:grpo }}", stores) == lowest
    assert render_references("{{ transformer:C9collapse range:grpo 2 }}", stores) == (
        f"{min(calls.values()):.2f}–{max(calls.values()):.2f}")
    seed = rows[3]["seed"]
    assert render_references(f"{{{{ transformer:C9collapse#auc run:grpo/{seed} 4 }}}}", stores) == (
        f"{float(rows[3]['auc']):.4f}")


def test_same_counts_the_seeds_where_two_arms_runs_agree(stores):
    rows = _csv("docs/full-budget/results/C1/per_seed.csv")
    for setting in ("u400", "u50", "u25"):
        runs = {(r["arm"], r["seed"]): r["rollouts_to_90"] for r in rows if r["setting"] == setting}
        seeds = sorted({seed for arm, seed in runs if arm == "grpo"})
        same = sum(runs[("grpo", seed)] == runs[("grpo_2x", seed)] for seed in seeds)  # '' == '': neither reached
        rendered = render_references(f"{{{{ full:C1@{setting}#rollouts_to_90 same:grpo/grpo_2x }}}}", stores)
        assert rendered == f"{same} of {len(seeds)}"
    # the three budgets differ (all, some and few of the seeds), so a count that ignored the setting would show
    assert len({render_references(f"{{{{ full:C1@{s}#rollouts_to_90 same:grpo/grpo_2x }}}}", stores)
                for s in ("u400", "u50", "u25")}) == 3


def test_a_start_value_is_the_final_value_less_its_change(stores):
    rows = [r for r in _csv("docs/transformer/results/C9/per_seed.csv") if r["arm"] == "flash"]
    assert "tool_calls_start" not in rows[0]
    start = [float(r["tool_calls"]) - float(r["tool_calls_change"]) for r in rows]
    assert render_references("{{ transformer:C9#tool_calls_start range:flash }}", stores) == (
        f"{min(start):.3f}–{max(start):.3f}")


def test_ahead_behind_and_spread_count_the_pairs_each_way(stores):
    rows = _csv("docs/transformer/results/C9/per_seed.csv")
    flash = {r["seed"]: float(r["tool_calls"]) for r in rows if r["arm"] == "flash"}
    differences = [flash[r["seed"]] - float(r["tool_calls"]) for r in rows if r["arm"] == "grpo"]
    ahead, behind = sum(d > 0 for d in differences), sum(d < 0 for d in differences)
    assert ahead and behind  # both ways occur on this comparison, so a swapped count would show
    assert render_references("{{ transformer:C9 ahead }}", stores) == f"{ahead} of {len(differences)}"
    assert render_references("{{ transformer:C9 -ahead }}", stores) == f"{behind} of {len(differences)}"
    low, high = min(differences), max(differences)
    assert render_references("{{ transformer:C9 spread }}", stores) == (
        f"{low:.3f} to +{high:.3f}".replace("-", "−"))
    assert render_references("{{ transformer:C9 -spread }}", stores) == (
        f"{-high:.3f} to +{-low:.3f}".replace("-", "−"))


def test_a_collapse_tests_seeds_and_the_count_it_needed(stores):
    from scipy.stats import fisher_exact

    from flashsim.experiments.analysis import fmt_p
    from flashsim.experiments.verdict import holm
    fisher = json.loads((ROOT / "docs/transformer/results/C2collapse/fisher.json").read_text())
    seeds = fisher["counts"]["tool30_lag2"]["token_gate"]["collapsed"]
    assert render_references("{{ transformer:C2collapse@tool30_lag2 seeds:token_gate }}", stores) == (
        ", ".join(map(str, seeds)))
    assert render_references("{{ transformer:C2collapse@tool30_lag1 seeds:token_gate }}", stores) == "none"
    text = render_references("{{ transformer:C2collapse@tool30_lag2 needed }}", stores)
    needed = int(text.split("/")[0])
    by_knob = fisher["tests"]["token_gate"]["by_knob"]
    row, other = by_knob["tool30_lag2"], by_knob["tool30_lag1"]["p"]

    def decided(k):
        baseline = [row["baseline_collapsed"], row["baseline_runs"] - row["baseline_collapsed"]]
        p = fisher_exact([[k, row["runs"] - k], baseline], alternative="greater").pvalue
        return holm([p, other])[0] <= fisher["alpha"], p

    assert decided(needed)[0] and not decided(needed - 1)[0] and needed > row["collapsed"]
    assert text == f"{needed}/{row['runs']} (p {fmt_p(decided(needed)[1])} before Holm)"


def test_an_exploratory_verdict_renders_exploratory_with_its_holm_p(stores):
    result = json.loads((ROOT / "docs/results/C3/summary.json").read_text())["comparisons"][0]["by_knob"]["chain_lag0"]
    text = render_references("{{ quick:C3@chain_lag0 verdict }}", stores)
    assert result["exploratory"] and "exploratory, Holm p" in text and result["verdict"] in text
    assert render_references("{{ quick:C3 verdict }}", stores) == "smaller than claimed"  # a primary: its final one


def test_a_primarys_rule_outcome_is_the_one_before_holm(stores):
    primary = json.loads((ROOT / "docs/transformer/results/C3/summary.json").read_text())["primary"]
    assert primary["rule_verdict"] != primary["verdict"]  # Holm over the page undid the rule's decision here
    assert render_references("{{ transformer:C3 rule }}", stores) == primary["rule_verdict"]
    assert render_references("{{ transformer:C3 verdict }}", stores) == primary["verdict"]
    with pytest.raises(ValueError, match="reference"):
        render_references("{{ transformer:C3#auc rule }}", stores)


def test_an_exploratory_decision_that_holm_undoes_says_so(stores):
    text = render_references("{{ full:C3@gridworld_lag4 verdict }}", stores)  # smaller than claimed; Holm p 0.026
    assert text.startswith("inconclusive after Holm (smaller than claimed before it; exploratory, Holm p")


@pytest.mark.parametrize("reference", [
    "{{ nowhere:C3 times }}", "{{ quick:C42 verdict }}", "{{ quick:C3@lag99 verdict }}", "{{ quick:C3 colour }}",
    "{{ quick:C2 times }}", "{{ article:no_such_row }}", "{{ quick:C3#entropy verdict }}",
    "{{ full:C8#no_metric value:lag4 }}", "{{ full:C8 percent:nobody }}", "{{ full:C8 reached:nobody }}",
    "{{ full:C1 probe:flash:7:cosine_of_mean }}", "{{ full:C1 probe:flash:0:colour }}",
    "{{ full:C8 probe:lag4:0:cosine }}",
    "{{ full:C8#drawdown:lag4/no_gate_lag4 quoted }}", "{{ full:C2#no_metric largest:token_gate }}",
    "{{ transformer:C9#colour value:flash }}", "{{ transformer:C9 range:nobody }}",
    "{{ transformer:C9 run:flash/999 }}", "{{ full:C1#rollouts_to_90 same:grpo/nobody }}",
    "{{ transformer:C9@tool99 value:flash }}",
    "{{ transformer:C9#colour_start range:flash }}",
    "{{ transformer:C2collapse seeds:token_gate }}", "{{ transformer:C2collapse@tool30_lag9 needed }}",
])
def test_a_reference_the_stores_do_not_hold_fails_naming_it(reference, stores):
    with pytest.raises(ValueError, match=r"reference|page|field|article"):
        render_references(reference, stores)


def test_every_row_of_the_article_table_stands_where_it_says(article):
    raw = "\n".join(path.read_text() for path in sorted(SEEDS.glob("*.txt")))
    headings = [line.strip() for line in raw.splitlines() if re.match(r"^\d+(?:\.\d+)*\.? \S", line)]
    for row in article_table()["quotes"]:
        assert row["quote"] in row["sentence"], row["id"]
        at = raw.find(row["sentence"])
        assert at >= 0, f"{row['id']}: its sentence is not in the article"
        before = [h for h in headings if 0 <= raw.find(h) < at]
        assert (before[-1] if before else "(opening)") == row["section"], row["id"]
    for row in article_table()["readings"]:
        assert row["reading"].startswith("flashsim's") and row["render"], row["id"]


@pytest.fixture(scope="module")
def verdicts():
    return committed_verdicts(ROOT)


@pytest.fixture(scope="module")
def settings():
    return committed_settings(ROOT)


@pytest.mark.parametrize("sentence", [
    "On the full budget C2 is confirmed.",  # an outcome word the rule does not use
    "The replication of C3 on the full budget replicated the shortening.",
    "On the full budget FlashREINFORCE beats GRPO in C1.",  # one arm beats another, no verdict word
    "The full budget shows C8: lag costs nothing.",  # an outcome verb
    "On the full budget C3 at L = 0 is negligible.",  # a setting's verdict said as the claim's
    "On the quick page C7 at σ = 0 is supported.",
])
def test_a_planted_outcome_the_committed_verdict_does_not_give_fails(sentence, verdicts, settings):
    assert text_problems("docs/new.md", f"# A page\n\n{sentence}\n", verdicts, settings)


@pytest.mark.parametrize("sentence", [
    "On the full budget C9 is supported.",
    "On the quick page C3 at L = 0 is negligible (exploratory).",
    "The full budget does not show that C8's lag costs anything.",
])
def test_an_outcome_the_committed_verdict_gives_passes(sentence, verdicts, settings):
    assert text_problems("docs/new.md", f"# A page\n\n{sentence}\n", verdicts, settings) == []


@pytest.mark.parametrize("sentence", [
    "The paper finds that one rollout per prompt is enough.",  # any verb, neither words nor numbers
    "The article notes that GRPO needs 128K rollouts.",  # a number in K notation the article does not give
    "The article reports 3 Python calls per trajectory for GRPO.",  # a digit the article has only as a heading's
    "The article reports a 3.75× speed-up.",  # a factor it does not give
    "The article's 2× holds at the matched budget.",  # a reading without its label
    'The article says failures "never push it away".',  # a quote not in the article
    "According to the paper, truncation hit 17.2% for the token-mean variant at 2,518 tokens.",  # wrong quantity
])
def test_a_planted_misattribution_fails(sentence, article):
    assert text_attribution_problems("docs/new.md", f"# A page\n\n{sentence}\n", article)


@pytest.mark.parametrize("sentence", [
    "The article reports 256K rollouts for FlashREINFORCE against 512K for GRPO.",
    "The article reports 45.3% truncation for the token-mean variant.",
    "The paper's threshold remains \"an empirical design choice\"; δ = 3e-3 is flashsim's choice.",
    "Against the article's 2× (flashsim's reading of the 2×) the factor is small.",
    "The article gives no formula.",
])
def test_an_attribution_the_article_and_its_table_hold_passes(sentence, article):
    assert text_attribution_problems("docs/new.md", f"# A page\n\n{sentence}\n", article) == []
