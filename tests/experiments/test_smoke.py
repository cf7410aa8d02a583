"""Every claim's smoke configuration runs end to end (cells, summary, tables, figures) in seconds."""

import json

import pytest

from flashsim.experiments import figure_names, run_sweep, write_outputs
from flashsim.experiments.verdict import VERDICTS
from flashsim.studies import CLAIMS, build_design


@pytest.mark.slow
@pytest.mark.parametrize("claim", list(CLAIMS))
def test_the_smoke_configuration_of_each_claim_runs_and_gives_a_verdict(claim, tmp_path):
    design = build_design(claim, "smoke")
    assert run_sweep([design], tmp_path, jobs=1, progress=False) == len(design.cells())
    summary = write_outputs(design, tmp_path)
    assert summary["cells_done"] == summary["cells_total"] == len(design.cells())
    assert summary["primary"]["verdict"] in VERDICTS
    for name in (*figure_names(claim), "summary.json", "table.md", "means.csv"):
        assert (tmp_path / claim / name).stat().st_size > 0
    record = json.loads(next((tmp_path / claim / "cells").glob("*.json")).read_text())
    assert 0.0 <= record["result"]["metrics"]["success_train"] <= 1.0


@pytest.mark.slow
def test_a_cell_run_twice_gives_identical_results():
    from flashsim.experiments.run_cell import run_cell

    cell = build_design("C7", "smoke").cells()[0]
    assert run_cell(cell.config) == run_cell(cell.config)


@pytest.mark.slow
def test_gradient_probes_run_at_the_headline_and_make_a_table(tmp_path):
    from flashsim.experiments.probes import probe_design, probe_table
    from flashsim.experiments.run_cell import PROBE_METRICS, probe_cell, probe_points

    design = build_design("C3", "smoke")
    probes = probe_design(design)
    run_sweep([probes], tmp_path, jobs=1, progress=False, run=probe_cell)
    record = json.loads(next((tmp_path / probes.claim / "cells").glob("*.json")).read_text())
    assert [p["update"] for p in record["result"]["probes"]] == probe_points(design.base.updates)
    assert set(record["result"]["probes"][0]) == {"update", *PROBE_METRICS}
    table = probe_table(design, tmp_path)
    assert table.count("\n") == 2 + len(design.arms) * len(probe_points(design.base.updates))


def test_c5s_primary_counts_updates_because_the_minibatch_arm_collects_m_updates_of_rollouts_at_once():
    import math

    from flashsim.experiments.run_cell import rollouts_to, run_cell

    design = build_design("C5", "quick")  # the smoke run is too short to reach 0.9 of the optimum
    assert design.comparisons[0].metric == "updates_to_90" and design.base.eval_every == 1
    cell = next(c for c in design.cells() if c.arm == "minibatches" and c.knob == "m4")
    result = run_cell(cell.config)
    curve, metrics = result["curve"], result["metrics"]
    done = [k + 1 for k in curve["update"]]  # the curve's update k is the state after k + 1 updates
    assert done == list(range(1, design.base.updates + 1))
    assert curve["rollouts"] == [512.0 * math.ceil(n / 4) for n in done]  # 4 updates' rollouts at once
    success = [metrics["success_initial"], *curve["success_train"]]
    assert metrics["updates_to_90"] == rollouts_to([0.0, *done], success, 0.9 * metrics["optimum"])
    assert 128 * metrics["updates_to_90"] < metrics["rollouts_to_90"]  # the rollouts collected ahead of training
