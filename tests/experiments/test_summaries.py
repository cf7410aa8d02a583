"""The results pages state exactly what was decided: generated summaries, one verdict per claim, a size verdict.

Every sentence of a results page that states a result is generated (:mod:`flashsim.experiments.summaries`) from the
committed ``summary.json``/``fisher.json``; these tests re-render the committed pages from their stores, compare the
overview's verdicts with ``summary.json``, and check the size verdict and the hand-written pages' verdict words
(:mod:`tests.wording`) and attributions (:mod:`tests.attributions`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from flashsim.experiments.pages import PAGES, page_of
from flashsim.experiments.summaries import claim_sentence, decide_page, finalized, size_verdict
from flashsim.studies import rerender
from tests.attributions import attribution_problems, seed_text, text_attribution_problems
from tests.wording import committed_verdicts, text_problems, verdict_word_problems

ROOT = Path(__file__).resolve().parents[2]


def _copy_checkout(target: Path) -> Path:
    """The pages, their stores, README and tutorials under ``target`` (figures linked, not copied)."""
    def copy(source, destination):
        if source.endswith(".png"):
            os.symlink(source, destination)
        else:
            shutil.copy2(source, destination)

    shutil.copytree(ROOT / "docs", target / "docs", copy_function=copy)
    shutil.copytree(ROOT / "tutorials", target / "tutorials", ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    shutil.copy2(ROOT / "README.md", target / "README.md")
    return target


def _overview(page: Path) -> dict[str, str]:
    """``{claim: verdict cell}`` of a page's overview table."""
    rows = {}
    for line in page.read_text().splitlines():
        cells = [cell.strip() for cell in line.split("|")[1:-1]]
        if len(cells) == 8 and re.fullmatch(r"C\d\w*", cells[0]):
            rows[cells[0]] = cells[6]
    return rows


@pytest.mark.parametrize("family", [page.family for page in PAGES if page.family != "transformer"])
def test_a_toy_page_rerenders_from_its_committed_stores_byte_for_byte(family, tmp_path):
    root = _copy_checkout(tmp_path)
    page = page_of(family)
    rerender(page, root)
    assert (root / page.path).read_text() == (ROOT / page.path).read_text(), \
        f"{page.path} differs from its stores: run python -m scale.studies.pages"


def test_the_transformer_page_rerenders_from_its_committed_stores_byte_for_byte(tmp_path):
    root = _copy_checkout(tmp_path)
    from scale.studies.pages import rerender_transformer

    page = page_of("transformer")
    rerender_transformer(page, root)
    assert (root / page.path).read_text() == (ROOT / page.path).read_text()


@pytest.mark.parametrize("page", PAGES, ids=[page.family for page in PAGES])
def test_summary_json_holds_the_verdict_the_page_prints_and_a_holm_p(page):
    overview = _overview(ROOT / page.path)
    assert set(overview) == set(page.claims)
    for claim in page.claims:
        primary = json.loads((ROOT / page.path.replace("results.md", "results") / claim / "summary.json").read_text())[
            "primary"]
        assert overview[claim].startswith(f"**{primary['verdict']}**"), (claim, overview[claim], primary["verdict"])
        assert primary["p_holm"] is not None and primary["p_holm"] >= primary["p"]
        assert primary["holm_family"]
        if primary.get("size_verdict"):
            assert primary["size_verdict"] in overview[claim]
    for claim, _ in page.experiments:
        primary = json.loads((ROOT / page.path.replace("results.md", "results") / claim / "summary.json").read_text())[
            "primary"]
        assert primary["p_holm"] is not None and primary["holm_family"]


def test_every_c1_row_decides_flashsims_reading_of_the_2x_and_the_full_budget_says_both_in_one_line():
    for page in PAGES:
        if "C1" in _overview(ROOT / page.path):
            assert "flashsim's reading of the 2× " in _overview(ROOT / page.path)["C1"], page.path
    full = _overview(ROOT / "docs/full-budget/results.md")["C1"]
    assert full.startswith("**inconclusive** (direction not decided)")
    assert "flashsim's reading of the 2× rejected" in full


def test_no_page_prints_a_size_the_article_does_not_state_as_claimed():
    """C1's 2× and C3's 1.57× are flashsim's readings of the article, C7's 2× flashsim's pre-registered threshold:
    every page, its tables included, says so where it prints them."""
    unlabelled = re.compile(r"claimed (?:size|factor) \d|\(claimed \d")
    for path in [ROOT / page.path for page in PAGES] + sorted(ROOT.glob("docs/**/results/*/table.md")):
        assert unlabelled.findall(path.read_text()) == [], path


def test_each_claims_committed_table_is_the_one_its_page_prints():
    for page in PAGES:
        text = (ROOT / page.path).read_text()
        for table in sorted((ROOT / page.path.replace("results.md", "results")).glob("*/table.md")):
            if not (table.parent / "fisher.json").exists():  # a collapse test's tables are its own section's
                assert table.read_text().strip() in text, table


def test_c7s_size_is_printed_as_flashsims_pre_registered_2x_on_every_page():
    for page in PAGES:
        overview = _overview(ROOT / page.path)
        if "C7" in overview:
            assert "flashsim's pre-registered 2× " in overview["C7"] and "claimed size" not in overview["C7"], page.path
    ratio = {"mean": 1.9, "low": 1.5, "high": 2.3, "n": 20}
    assert size_verdict({"size": 2.0, "ratio": ratio}, "C7").startswith("consistent with flashsim's pre-registered 2×")


def test_the_size_verdict_rejects_a_size_outside_the_interval_and_keeps_one_inside():
    ratio = {"mean": 1.11, "low": 1.03, "high": 1.19, "n": 20}
    assert size_verdict({"size": 2.0, "ratio": ratio}).startswith("claimed size 2× rejected")
    assert size_verdict({"size": 1.1, "ratio": ratio}).startswith("consistent with the claimed size 1.1×")
    assert size_verdict({"size": 1.0, "ratio": ratio}).startswith("claimed size 1× exceeded")
    assert size_verdict({"size": None, "ratio": ratio}) == ""
    assert size_verdict({"size": 2.0, "ratio": {"mean": None, "low": None, "high": None, "n": 0}}) == ""


def _summary(claim: str, verdict: str, p: float, size: float | None = None) -> dict:
    result = {"verdict": verdict, "p": p, "difference": {"mean": -1.0, "low": -2.0, "high": 0.5, "n": 10},
              "ratio": {"mean": 1.1, "low": 0.9, "high": 1.3, "n": 10}, "size": size, "exploratory": False}
    return {"claim": claim, "headline": "k", "arms": [{"name": "a", "label": "A"}, {"name": "b", "label": "B"}],
            "comparisons": [{"metric": "m", "arm": "a", "baseline": "b", "by_knob": {"k": dict(result)}}],
            "primary": dict(result)}


def test_a_new_designs_summary_flows_through_holm_into_its_sentence():
    summaries = [_summary("CX", "supported", 0.02, size=2.0), _summary("CY", "supported", 0.001),
                 _summary("CZ", "inconclusive", 0.5)]
    final = [finalized(s, d, "quick", 3) for s, d in zip(summaries, decide_page(summaries))]
    assert [s["primary"]["verdict"] for s in final] == ["inconclusive", "supported", "inconclusive"]  # 0.02 × 2 > 0.025
    assert final[0]["primary"]["rule_verdict"] == "supported" and final[0]["primary"]["p_holm"] == pytest.approx(0.04)
    sentence = claim_sentence(final[0])
    assert "CX inconclusive (direction not decided) after Holm (supported before it)" in sentence
    assert "consistent with the claimed size 2×" not in sentence and "claimed size 2× rejected" in sentence
    again = [finalized(s, d, "quick", 3) for s, d in zip(final, decide_page(final))]  # re-rendering is idempotent
    assert again == final


def test_no_hand_written_sentence_uses_a_verdict_word_its_claim_did_not_get():
    assert verdict_word_problems(ROOT) == []


@pytest.mark.parametrize("sentence", [
    "On the full budget C2 is supported.",
    "The toys decided C1: GRPO needs more rollouts.",
    "C9collapse shows that GRPO never abandons the tool.",
    "Signed feedback wins, through per-trajectory length averaging: with a token sum positive-only recovers.",
])
def test_a_typed_verdict_that_differs_from_the_committed_one_fails(sentence, verdicts):
    assert text_problems("docs/new.md", f"# A page\n\n{sentence}\n", verdicts)


@pytest.mark.parametrize("sentence", [
    "On the full budget C9 is supported.",
    "The full budget leaves C1 inconclusive, with the claimed 2× outside [1.03, 1.19].",
    "GRPO's tool calls fall after 40 updates and rise again (exploratory: mean curves); it abandons the tool nowhere.",
])
def test_a_verdict_word_that_matches_the_committed_verdict_or_is_labelled_exploratory_passes(sentence, verdicts):
    assert text_problems("docs/new.md", f"# A page\n\n{sentence}\n", verdicts) == []


@pytest.fixture(scope="module")
def verdicts():
    return committed_verdicts(ROOT)


def test_every_attribution_to_the_article_carries_its_words_or_numbers():
    assert attribution_problems(ROOT) == []


@pytest.mark.parametrize("sentence", [
    "FlashREINFORCE (NVIDIA, 2026) is the method.",
    'The article says the model "improved steadily" at lag 4.',
    "The paper's setting is δ = 3e-3 with 4,096 generated tokens.",
])
def test_an_attribution_the_article_does_not_contain_fails(sentence):
    assert text_attribution_problems("docs/new.md", f"# A page\n\n{sentence}\n", seed_text())
