"""From cells to summaries: per-arm intervals, paired verdicts per knob value, tables and the report."""

import math

from flashsim.experiments import run_sweep, summarize, write_report, write_summary
from flashsim.experiments.analysis import markdown_tables, means_csv
from flashsim.experiments.verdict import INCONCLUSIVE, NOT_SUPPORTED, SUPPORTED
from tests.experiments.fakes import WOBBLE, fake_run
from tests.experiments.test_design import small_design


def test_verdicts_follow_the_constructed_effect_and_only_the_headline_primary_is_confirmatory(tmp_path):
    design = small_design()  # a = flash_reinforce, b = no_gate; the fake effect exists at lr 0.1 only
    run_sweep([design], tmp_path, jobs=1, progress=False, run=fake_run)
    summary = summarize(design, tmp_path)
    comparison = summary["comparisons"][0]
    assert comparison["by_knob"]["lr0.1"]["verdict"] == SUPPORTED
    assert comparison["by_knob"]["lr0.5"]["verdict"] == INCONCLUSIVE  # only the ±0.02 wobble is left
    assert [comparison["by_knob"][k]["exploratory"] for k in ("lr0.1", "lr0.5")] == [False, True]
    assert comparison["by_knob"]["lr0.1"]["effect"] == 0.01  # success: the pre-registered 0.01
    assert summary["primary"]["verdict"] == SUPPORTED
    expected = [0.2 + WOBBLE[(s + 15) % 6] - WOBBLE[(s + 7) % 6] for s in design.seeds]
    assert math.isclose(comparison["by_knob"]["lr0.1"]["difference"]["mean"], sum(expected) / 3, rel_tol=1e-12)


def test_the_opposite_direction_is_not_supported(tmp_path):
    from flashsim.experiments import Comparison

    design = small_design(comparisons=(Comparison("success_train", "a", "b", "less"),))
    run_sweep([design], tmp_path, jobs=1, progress=False, run=fake_run)
    assert summarize(design, tmp_path)["primary"]["verdict"] == NOT_SUPPORTED


def test_missing_cells_count_as_missing_seeds(tmp_path):
    design = small_design()
    summary = summarize(design, tmp_path)  # nothing has run
    assert summary["cells_done"] == 0
    assert summary["primary"]["verdict"] == INCONCLUSIVE
    assert summary["table"]["lr0.1"]["a"]["success_train"]["n"] == 0


def test_tables_csv_and_report_are_written_and_name_the_verdict(tmp_path):
    design = small_design()
    out = tmp_path / "out"
    run_sweep([design], out, jobs=1, progress=False, run=fake_run)
    summary = write_summary(design, out)
    assert "supported" in markdown_tables(summary)
    assert means_csv(summary).splitlines()[0] == "claim,knob,arm,metric,mean,low,high,n"
    discussion = tmp_path / "docs" / "results" / "discussion"
    discussion.mkdir(parents=True)
    (discussion / "CX.md").write_text("Hand-written words.\n")
    report = write_report([design], out, tmp_path / "docs" / "results.md", command="flashsim reproduce CX")
    text = report.read_text()
    assert "flashsim reproduce CX" in text and "Hand-written words." in text
    assert "**Verdict:** **supported**" in text  # one primary on the page: Holm leaves its p as it is
    assert "changed after the results it judges had been seen" in text
    assert "**The verdict rule**" in text and "ε = 0.01" in text
    assert (tmp_path / "docs" / "results" / "CX" / "table.md").exists()


def test_a_final_success_comparison_between_arms_at_the_optimum_decides_nothing(tmp_path):
    from tests.experiments.fakes import fake_run as base

    def near_optimum(config):
        result = base(config)
        result["metrics"]["optimum"] = result["metrics"]["success_train"] + 0.005  # both arms within ε
        return result

    design = small_design()
    run_sweep([design], tmp_path, jobs=1, progress=False, run=near_optimum)
    assert summarize(design, tmp_path)["primary"]["verdict"] == "at the ceiling"


def test_a_tuning_grid_compares_each_arm_at_its_own_best_setting(tmp_path):
    design = small_design(tuning=("lr0.1", "lr0.5"))  # arm a's auc is 0.2 higher at lr 0.1; b's is flat
    run_sweep([design], tmp_path, jobs=1, progress=False, run=fake_run)
    tuned = summarize(design, tmp_path)["tuned"]
    assert tuned["best"]["a"] == "lr0.1"
    assert tuned["comparisons"][0]["verdict"] == SUPPORTED
    assert "at each arm's best" in markdown_tables(summarize(design, tmp_path))


def test_panels_and_a_tool_call_primary_give_both_figures(tmp_path):
    from flashsim.experiments import Comparison, Panel, figure_names, write_outputs

    design = small_design(panels=(Panel("low", ("lr0.1",), ("0.1",)), Panel("both", ("lr0.1", "lr0.5"))),
                          comparisons=(Comparison("tool_calls", "a", "b"),))
    run_sweep([design], tmp_path, jobs=1, progress=False, run=fake_run)
    write_outputs(design, tmp_path)
    for name in figure_names("CX"):
        assert (tmp_path / "CX" / name).stat().st_size > 0


def test_per_seed_csv_holds_every_cells_value_and_is_copied_beside_the_page(tmp_path):
    import csv

    design = small_design()
    out = tmp_path / "out"
    run_sweep([design], out, jobs=1, progress=False, run=fake_run)
    write_summary(design, out)
    rows = list(csv.DictReader((out / "CX" / "per_seed.csv").open()))
    assert len(rows) == len(design.knob) * len(design.arms) * len(design.seeds)
    assert list(rows[0])[:4] == ["claim", "setting", "arm", "seed"] and "success_train" in rows[0]
    for row in rows:
        config = next(c.config for c in design.cells()
                      if (c.arm, c.knob, c.seed) == (row["arm"], row["setting"], int(row["seed"])))
        assert float(row["success_train"]) == fake_run(config)["metrics"]["success_train"]  # exact (repr)
    write_report([design], out, tmp_path / "docs" / "results.md")
    copied = tmp_path / "docs" / "results" / "CX" / "per_seed.csv"
    assert copied.read_text() == (out / "CX" / "per_seed.csv").read_text()


def test_settings_with_identical_values_get_one_verdict_and_leave_the_holm_family(tmp_path):
    from flashsim.experiments import Comparison, KnobValue

    # the fake's success ignores the budget: three budgets at lr 0.5 give identical values seed for seed
    knob = tuple(KnobValue(f"u{u}", f"{u} updates", {"updates": u, "algorithm.learning_rate": 0.5}) for u in (2, 3, 4))
    design = small_design(knob=(KnobValue("lr0.1", "lr 0.1", {"algorithm.learning_rate": 0.1}), *knob),
                          comparisons=(Comparison("success_train", "a", "b"),))
    run_sweep([design], tmp_path, jobs=1, progress=False, run=fake_run)
    by_knob = summarize(design, tmp_path)["comparisons"][0]["by_knob"]
    assert [by_knob[k]["same_as"] for k in ("lr0.1", "u2", "u3", "u4")] == [None, None, "u2", "u2"]
    assert by_knob["u2"]["p_holm"] == by_knob["u2"]["p"]  # a family of one distinct exploratory setting
    assert by_knob["u3"]["p_holm"] == by_knob["u2"]["p_holm"]
    assert "= u2" not in markdown_tables(summarize(design, tmp_path))
    assert "= 2 updates (identical values)" in markdown_tables(summarize(design, tmp_path))


def test_settings_where_no_pair_is_complete_are_not_merged(tmp_path):
    from flashsim.experiments import Comparison
    from flashsim.experiments.analysis import _compare, load_cells

    design = small_design(comparisons=(Comparison("rollouts_to_90", "a", "b", "less"),))
    run_sweep([design], tmp_path, jobs=1, progress=False, run=fake_run)  # the fake's rollouts_to_90 is 0.0 everywhere
    records = load_cells(design, tmp_path)
    for seeds in records.values():
        for record in seeds:
            record["result"]["metrics"]["rollouts_to_90"] = None  # no arm reached the level in any setting
    by_knob = _compare(design, design.comparisons[0], records)["by_knob"]
    assert [r["same_as"] for r in by_knob.values()] == [None, None] and by_knob["lr0.5"]["pairs"] == 0
