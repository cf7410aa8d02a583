"""The pre-registered transformer C2 collapse test (issue 30): built by name, counted per lag, tested with Fisher's
exact test and Holm over the lags, drawn seed by seed, and put on the transformer page as a section of its own.

The cells are written by hand (finished-cell files with chosen accuracy curves), so the counts and p-values are
known exactly: Fisher's one-sided p for a collapses of n against b of n is the hypergeometric tail
P(X ≥ a), X ~ Hypergeometric(2n seeds, a + b collapses, n drawn).
"""

import json
from math import comb

import pytest

from flashsim.experiments.analysis import load_cells, write_summary
from flashsim.experiments.runner import cell_path, cell_record, to_json
from flashsim.storage import atomic_write_text
from scale.studies.cells import TRANSFORMER_CELL_METRICS
from scale.studies.claims import C2_COLLAPSE_SEEDS, TRANSFORMER_CLAIMS, build_transformer_design, c2_collapse_design
from scale.studies.collapse import (
    fisher_tests,
    section_begin,
    section_end,
    section_of,
    seeds_figure,
    write_collapse_outputs,
    write_collapse_section,
)
from scale.studies.collapse_rules import collapsed

FALLEN = [0.10, 0.30, 0.20, 0.20]  # peak 0.30, then 0.10 below it at each of the last two evaluations
STEADY = [0.10, 0.20, 0.25, 0.30]
COLLAPSES = {  # (arm, lag) → seeds (of 100-105) that collapse
    ("token_gate", "tool30_lag1"): {100},
    ("sequence_gate", "tool30_lag1"): {101},
    ("token_gate", "tool30_lag2"): {100, 101, 102, 103},
    ("no_gate", "tool30_lag2"): {100, 101, 102, 103, 104, 105},
}


def test_the_collapse_test_runs_by_name_on_its_own_pre_registered_seeds_and_not_in_all(tmp_path):
    design = build_transformer_design("C2collapse", "full", tmp_path)
    assert design == c2_collapse_design(tmp_path)
    assert design.seeds == C2_COLLAPSE_SEEDS == tuple(range(100, 130))
    assert [k.value for k in design.knob] == [1, 2]
    assert "C2collapse" not in TRANSFORMER_CLAIMS
    assert build_transformer_design("C2collapse", "smoke", tmp_path, seeds=3).seeds == (100, 101, 102)
    with pytest.raises(ValueError, match="C2collapse"):
        build_transformer_design("C2collapse ", "full", tmp_path)


@pytest.fixture
def finished(tmp_path):
    """A 6-seed smoke design whose cells are written with the curves of :data:`COLLAPSES`."""
    design = build_transformer_design("C2collapse", "smoke", tmp_path / "warmups", seeds=6)
    (tmp_path / design.claim / "cells").mkdir(parents=True)
    for cell in design.cells():
        accuracy = FALLEN if cell.seed in COLLAPSES.get((cell.arm, cell.knob), ()) else STEADY
        metrics = {"collapse": collapsed(accuracy), "auc": sum(accuracy) / 4, "accuracy": accuracy[-1],
                   "drift": 0.5, "acceptance_rate": 0.9, "tool_calls": 1.0}
        curve = {"update": [0, 1, 2, 3], "rollouts": [0, 64, 128, 192], "accuracy": accuracy,
                 "tool_calls": [1.0] * 4}
        atomic_write_text(cell_path(tmp_path, cell), to_json(cell_record(cell, {"metrics": metrics, "curve": curve})))
    return design, tmp_path


def test_fisher_counts_each_lag_and_holm_adjusts_over_the_two_lags(finished):
    design, out = finished
    tests = fisher_tests(design, load_cells(design, out))["tests"]
    token, no_gate = tests["token_gate"]["by_knob"], tests["no_gate"]["by_knob"]
    assert tests["token_gate"]["confirmatory"] and not tests["no_gate"]["confirmatory"]
    assert (token["tool30_lag1"]["collapsed"], token["tool30_lag1"]["baseline_collapsed"]) == (1, 1)
    assert (token["tool30_lag2"]["collapsed"], token["tool30_lag2"]["baseline_collapsed"]) == (4, 0)
    p_lag1 = 1 - comb(6, 0) * comb(6, 2) / comb(12, 2)  # 1 − P(both collapses among the sequence gate's 6)
    p_lag2 = comb(6, 4) / comb(12, 4)  # all 4 among the token gate's 6: 15 / 495
    assert token["tool30_lag1"]["p"] == pytest.approx(p_lag1, rel=1e-12)
    assert token["tool30_lag2"]["p"] == pytest.approx(p_lag2, rel=1e-12)
    assert token["tool30_lag2"]["p_holm"] == pytest.approx(2 * p_lag2, rel=1e-12)  # 0.0606: not below 0.025
    assert token["tool30_lag1"]["p_holm"] == pytest.approx(p_lag1, rel=1e-12)
    assert {row["decision"] for row in token.values()} == {"no difference shown"}
    assert no_gate["tool30_lag2"]["p"] == pytest.approx(1 / comb(12, 6), rel=1e-12)  # 6 of 6 vs 0 of 6
    assert no_gate["tool30_lag2"]["p_holm"] == pytest.approx(2 / comb(12, 6), rel=1e-12)
    assert no_gate["tool30_lag2"]["decision"] == "more collapses"


def test_the_section_lands_on_the_page_once_and_is_replaced_on_a_rerun(finished, tmp_path):
    design, out = finished
    write_summary(design, out, TRANSFORMER_CELL_METRICS)
    write_collapse_outputs(design, out)
    assert (out / design.claim / seeds_figure(design.claim)).stat().st_size > 0
    page = tmp_path / "docs" / "results.md"
    page.parent.mkdir()
    page.write_text("# The five claims\n\ntext\n")
    for _ in range(2):
        write_collapse_section(design, out, page, command="python -m scale reproduce C2collapse")
    text = page.read_text()
    assert text.startswith("# The five claims\n\ntext\n")
    assert text.count(section_begin("C2collapse")) == text.count(section_end("C2collapse")) == 1
    section = section_of(text, "C2collapse")
    assert "| token-local gate | L = 2 | 4 / 6 | 0 / 6 |" in section
    assert "token-local gate at L = 2: 100, 101, 102, 103" in section
    rows = (page.parent / "results" / "C2collapse" / "per_seed.csv").read_text().splitlines()
    assert len(rows) == 1 + 3 * 2 * 6  # a header, then arm × lag × seed
    assert json.loads((page.parent / "results" / "C2collapse" / "fisher.json").read_text())["baseline"] == (
        "sequence_gate")


def test_rewriting_the_five_claims_page_keeps_the_collapse_section(finished, tmp_path):
    import argparse

    from scale.cli import _write_pages

    design, out = finished
    write_summary(design, out, TRANSFORMER_CELL_METRICS)
    write_collapse_outputs(design, out)
    claim = build_transformer_design("C3", "smoke", tmp_path / "warmups")
    (out / claim.claim / "cells").mkdir(parents=True)
    for cell in claim.cells():
        metrics = {"length": 10.0 + cell.seed + (cell.arm == "token_mean"), "truncation": 0.1, "auc": 0.2,
                   "accuracy": 0.2, "tool_calls": 1.0}
        curve = {"update": [0, 3], "rollouts": [0, 192], "accuracy": [0.2, 0.2], "tool_calls": [1.0, 1.0]}
        atomic_write_text(cell_path(out, cell), to_json(cell_record(cell, {"metrics": metrics, "curve": curve})))
    write_summary(claim, out, TRANSFORMER_CELL_METRICS)
    page = tmp_path / "docs" / "results.md"
    args = argparse.Namespace(profile="smoke", out=str(out), report=str(page))
    _write_pages(args, ["C2collapse"], [], [design])
    section = section_of(page.read_text(), "C2collapse")
    _write_pages(args, ["C3"], [claim], [])
    text = page.read_text()
    assert "## C3 · " in text and text.endswith(section)
