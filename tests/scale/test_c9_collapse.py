"""The pre-registered transformer C9 collapse test (issue 30): built by name on its own seeds, on the pilot's task,
GRPO's abandoned-tool seeds counted against FlashREINFORCE's with Fisher's exact test, and its section on the
transformer page beside the C2 collapse test's, each kept when the other or the five claims are rewritten.

The cells are written by hand (finished-cell files with chosen tool-call curves), so counts and p-values are known
exactly."""

import argparse
import dataclasses
from math import comb

import pytest

from flashsim.config import to_dict
from flashsim.experiments.analysis import load_cells, write_summary
from flashsim.experiments.runner import cell_path, cell_record, to_json
from flashsim.storage import atomic_write_text
from scale.studies.cells import TRANSFORMER_CELL_METRICS
from scale.studies.claims import (
    C2_COLLAPSE_SEEDS,
    C9_COLLAPSE_SEEDS,
    C9_COLLAPSE_TASK,
    TRANSFORMER_CLAIMS,
    TRANSFORMER_PILOT_SEEDS,
    build_transformer_design,
    c9_collapse_design,
)
from scale.studies.collapse import fisher_tests, section_begin, section_of, write_collapse_outputs
from scale.studies.collapse_rules import collapsed, tool_collapsed

KEPT = [0.25, 0.60, 0.80, 0.90]
ABANDONED = [0.25, 0.30, 0.04, 0.00]  # below 0.05 calls at each of the last two evaluations
RECOVERED = [0.25, 0.00, 0.00, 0.10]  # dropped, then called again at the end: not abandoned
GRPO_ABANDONS = {300, 301, 302, 303}


def test_the_test_runs_by_name_on_fresh_seeds_on_the_pilots_task_and_not_in_all(tmp_path):
    design = build_transformer_design("C9collapse", "full", tmp_path)
    assert design == c9_collapse_design(tmp_path)
    assert design.seeds == C9_COLLAPSE_SEEDS == tuple(range(300, 310))
    claims = {s for claim in TRANSFORMER_CLAIMS for s in build_transformer_design(claim, "full", tmp_path).seeds}
    assert not set(design.seeds) & (set(TRANSFORMER_PILOT_SEEDS) | set(C2_COLLAPSE_SEEDS) | claims)
    assert "C9collapse" not in TRANSFORMER_CLAIMS
    assert build_transformer_design("C9collapse", "smoke", tmp_path, seeds=3).seeds == (300, 301, 302)
    assert [a.name for a in design.arms] == ["flash", "grpo"]
    assert design.comparisons[0].metric == "tool_calls"  # the first comparison is the primary
    c9 = build_transformer_design("C9", "full", tmp_path)
    assert [a.overrides for a in design.arms] == [a.overrides for a in c9.arms]  # C9's arms, on another task
    for cell in design.cells():  # every cell runs the pilot's task, which differs from the claims' task
        config = to_dict(cell.config)
        for path, value in C9_COLLAPSE_TASK.overrides.items():
            section, key = path.split(".")
            assert config[section][key] == value
    assert to_dict(design.cells()[0].config)["data"] != to_dict(c9.cells()[0].config)["data"] or (
        design.cells()[0].config.rollout.tool_error_rate != c9.cells()[0].config.rollout.tool_error_rate)


def test_tool_collapse_is_calls_below_the_floor_at_each_of_the_last_two_evaluations():
    assert (tool_collapsed(KEPT), tool_collapsed(ABANDONED), tool_collapsed(RECOVERED)) == (0.0, 1.0, 0.0)
    assert tool_collapsed([0.0, 0.0]) == 0.0  # too short to say
    assert collapsed(KEPT) == 0.0


@pytest.fixture
def finished(tmp_path):
    """A 6-seed smoke design whose GRPO seeds in GRPO_ABANDONS abandon the tool; FlashREINFORCE's seed 305
    dips and recovers."""
    design = build_transformer_design("C9collapse", "smoke", tmp_path / "warmups", seeds=6)
    (tmp_path / design.claim / "cells").mkdir(parents=True)
    for cell in design.cells():
        calls = (ABANDONED if cell.arm == "grpo" and cell.seed in GRPO_ABANDONS else
                 RECOVERED if cell.arm == "flash" and cell.seed == 305 else KEPT)
        accuracy = [0.3, 0.35, 0.4, 0.4 + 0.01 * cell.seed % 7]
        metrics = {"tool_calls": calls[-1], "tool_collapse": tool_collapsed(calls), "auc": sum(accuracy) / 4,
                   "accuracy": accuracy[-1], "tool_calls_change": calls[-1] - calls[0], "accuracy_tool": 0.6,
                   "accuracy_no_tool": 0.4, "accuracy_tool_start": 0.6, "accuracy_no_tool_start": 0.3,
                   "length": 8.0}
        curve = {"update": [0, 1, 2, 3], "rollouts": [0, 64, 128, 192], "accuracy": accuracy, "tool_calls": calls}
        atomic_write_text(cell_path(tmp_path, cell), to_json(cell_record(cell, {"metrics": metrics, "curve": curve})))
    return design, tmp_path


def test_fisher_counts_grpos_abandoned_tools_against_flash_reinforces_and_is_not_the_primary(finished):
    design, out = finished
    fisher = fisher_tests(design, load_cells(design, out))
    assert fisher["baseline"] == "flash" and fisher["indicator"] == "tool_collapse"
    grpo = fisher["tests"]["grpo"]
    assert not grpo["confirmatory"]  # the primary is the paired comparison of tool calls
    row = grpo["by_knob"][C9_COLLAPSE_TASK.name]
    assert (row["collapsed"], row["runs"], row["baseline_collapsed"]) == (4, 6, 0)
    assert row["p"] == pytest.approx(comb(6, 4) / comb(12, 4), rel=1e-12)  # all 4 among GRPO's 6 seeds
    assert row["p_holm"] == row["p"]  # one setting


def test_both_experiments_keep_their_sections_when_either_or_the_claims_page_is_rewritten(finished, tmp_path):
    from scale.cli import _write_pages

    design, out = finished
    write_summary(design, out, TRANSFORMER_CELL_METRICS)
    write_collapse_outputs(design, out)
    c2 = build_transformer_design("C2collapse", "smoke", tmp_path / "warmups", seeds=2)
    (out / c2.claim / "cells").mkdir(parents=True)
    for cell in c2.cells():
        metrics = {"collapse": 0.0, "auc": 0.2, "accuracy": 0.2, "drift": 0.5, "acceptance_rate": 0.9,
                   "tool_calls": 1.0}
        curve = {"update": [0, 3], "rollouts": [0, 192], "accuracy": [0.2, 0.2], "tool_calls": [1.0, 1.0]}
        atomic_write_text(cell_path(out, cell), to_json(cell_record(cell, {"metrics": metrics, "curve": curve})))
    write_summary(c2, out, TRANSFORMER_CELL_METRICS)
    write_collapse_outputs(c2, out)
    page = tmp_path / "docs" / "results.md"
    args = argparse.Namespace(profile="smoke", out=str(out), report=str(page))
    _write_pages(args, ["C9collapse"], [], [design])
    _write_pages(args, ["C2collapse"], [], [c2])  # rendered second, it still goes first: the experiments' order
    first = page.read_text()
    assert first.index(section_begin("C2collapse")) < first.index(section_begin("C9collapse"))
    c9_section = section_of(first, "C9collapse")
    assert "| GRPO G = 4, same rollouts | " in c9_section and "| 4 / 6 | 0 / 6 |" in c9_section
    assert "GRPO G = 4, same rollouts at " in c9_section and ": 300, 301, 302, 303" in c9_section
    assert "secondary, every row exploratory" in c9_section
    _write_pages(args, ["C2collapse"], [], [c2])  # a rerun replaces C2's section in place
    assert page.read_text() == first
    claim = dataclasses.replace(build_transformer_design("C9", "smoke", tmp_path / "warmups"))
    (out / claim.claim / "cells").mkdir(parents=True)
    for cell in claim.cells():
        metrics = {"tool_calls": 1.0 + 0.01 * cell.seed, "tool_calls_change": 0.7, "accuracy": 0.3, "length": 9.0}
        curve = {"update": [0, 3], "rollouts": [0, 192], "accuracy": [0.2, 0.3], "tool_calls": [0.3, 1.0]}
        atomic_write_text(cell_path(out, cell), to_json(cell_record(cell, {"metrics": metrics, "curve": curve})))
    write_summary(claim, out, TRANSFORMER_CELL_METRICS)
    _write_pages(args, ["C9"], [claim], [])
    text = page.read_text()
    assert "## C9 · " in text
    assert text.index(section_begin("C2collapse")) < text.index(section_begin("C9collapse"))
    assert text.endswith(c9_section) and section_of(text, "C2collapse") == section_of(first, "C2collapse")
