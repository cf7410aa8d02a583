"""The claim registry: a claim is a builder and one row, and ``flashsim reproduce`` runs it by its fields alone.

The throwaway claim below lives in this file only; registering it is its one row. Nothing in flashsim names it, so
what it gets (a probe sweep, curves against the simulated clock, a place in ``all``) comes from its fields, not its
name.
"""

from __future__ import annotations

import json

import pytest
import torch

from flashsim.cli import main
from flashsim.experiments import (
    Arm,
    ClaimDesign,
    Comparison,
    KnobValue,
    Registry,
)
from flashsim.experiments.profiles import base, pick, profile_seeds
from flashsim.studies import CLAIMS, DESIGNS, EXPERIMENTS, build_design

THROWAWAY = "Cthrowaway"


def throwaway_claim(profile: str) -> ClaimDesign:
    """Sample-mean vs token-mean on the bandit: 2 arms × 1 knob value × 2 seeds of 3 updates at the smoke budget."""
    updates = pick(profile, 3, 50, 100)
    return ClaimDesign(
        claim=THROWAWAY, title="a throwaway claim registered by a test", paper="", question="Does it run?",
        base=base(env="bandit", batch_size=16, updates=updates, eval_every=1),
        arms=(Arm("sample_mean", "sample-mean", {"algorithm.loss": "flash_reinforce"}),
              Arm("token_mean", "token-mean", {"algorithm.loss": "token_mean"})),
        knob_name="env", knob=(KnobValue("bandit", "PromptBandit"),),
        comparisons=(Comparison("auc", "sample_mean", "token_mean", source="none"),),
        headline="bandit", seeds=profile_seeds(profile), profile=profile,
        probed=True, time_axis="sim_clock",
    )


@pytest.fixture
def registered():
    """The throwaway claim's row, removed again after the test."""
    DESIGNS.register(THROWAWAY, throwaway_claim)
    try:
        yield
    finally:
        DESIGNS.unregister(THROWAWAY)


@pytest.mark.slow  # 4 cells and 4 probe cells of 3 updates, in this process (~5 s)
def test_a_claim_registered_by_one_row_runs_through_flashsim_reproduce(registered, tmp_path, monkeypatch, capsys):
    import flashsim.experiments.plots as plots

    x_labels = {}
    save = plots._save

    def spy(figure, path):  # what the curves figure is drawn against
        x_labels[path.name] = figure.axes[0].get_xlabel()
        return save(figure, path)

    monkeypatch.setattr(plots, "_save", spy)
    threads = torch.get_num_threads()
    try:
        code = main(["reproduce", THROWAWAY, "--smoke", "--out", str(tmp_path), "--jobs", "1", "--no-progress",
                     "--report", str(tmp_path / "page" / "results.md")])
    finally:
        torch.set_num_threads(threads)  # reproduce sets one thread for its own process
    output = capsys.readouterr().out
    assert code == 0, output
    assert f"{THROWAWAY}: auc: sample_mean > token_mean at PromptBandit:" in output
    assert len(list((tmp_path / THROWAWAY / "cells").glob("*.json"))) == 4
    assert len(list((tmp_path / f"{THROWAWAY}-probes" / "cells").glob("*.json"))) == 4  # probed=True
    assert x_labels[f"{THROWAWAY}_curves.png"] == "simulated seconds"  # time_axis="sim_clock"
    summary = json.loads((tmp_path / THROWAWAY / "summary.json").read_text())
    assert summary["claim"] == THROWAWAY and summary["cells_done"] == 4
    assert f"## {THROWAWAY} · a throwaway claim" in (tmp_path / "page" / "results.md").read_text()


def test_a_registered_claim_is_part_of_all_and_a_follow_up_is_not(registered):
    assert THROWAWAY in CLAIMS and THROWAWAY not in EXPERIMENTS
    assert DESIGNS.names(follow_up=False)[-1] == THROWAWAY
    assert build_design(THROWAWAY, "smoke", seeds=3).seeds == (0, 1, 2)
    DESIGNS.unregister(THROWAWAY)
    DESIGNS.register(THROWAWAY, throwaway_claim, follow_up=True)
    assert THROWAWAY in EXPERIMENTS and THROWAWAY not in CLAIMS and THROWAWAY not in DESIGNS.names(follow_up=False)


def test_the_run_only_fields_stay_out_of_design_json():
    """``probed`` and ``time_axis`` say how a design is run and drawn: design.json is what it was before them."""
    data = build_design("C7", "smoke").to_dict()
    assert "probed" not in data and "time_axis" not in data
    assert build_design("C7", "smoke").time_axis == "sim_clock" and build_design("C1", "smoke").probed


@pytest.mark.parametrize(("action", "error", "match"), [
    (lambda r: r.register("C1", throwaway_claim), ValueError, "already registered"),
    (lambda r: r.register("", throwaway_claim), ValueError, "non-empty"),
    (lambda r: r.register("C0", "not a function"), TypeError, "callable"),
    (lambda r: r.build("C10", "smoke"), ValueError, "one of C1, C2"),
    (lambda r: r.unregister("C10"), ValueError, "one of C1, C2"),
    (lambda r: r.register("C0", throwaway_claim) and r.build("C0", "smoke"), ValueError, "Cthrowaway"),
], ids=["taken", "empty", "not-callable", "unknown", "unregister-unknown", "builder-makes-another-claim"])
def test_bad_registrations_and_lookups_are_one_clear_error(action, error, match):
    registry = Registry(DESIGNS.values())
    with pytest.raises(error, match=match):
        action(registry)


def test_a_bad_time_axis_is_a_value_error():
    with pytest.raises(ValueError, match="time_axis"):
        throwaway_claim("smoke").__class__(**{**throwaway_claim("smoke").__dict__, "time_axis": "wall"})
