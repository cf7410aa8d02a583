"""``flashsim conformance``: registry rows first and passing, frameworks not installed listed as not run,
every recorded cause and its evidence found in the installed framework's source, failures marked by class
with the command that reruns them, a row alone = the same row in the full run, usage errors exit 2."""

import dataclasses
import importlib.util

import pytest
import torch

from flashsim.cli import main
from flashsim.testing.causes import Cause, Line
from flashsim.testing.conformance import (
    CAUSES,
    REGISTRY_ROWS,
    Row,
    check_row,
    find_row,
    locate,
    render,
    run_rows,
)
from flashsim.testing.report import InvariantResult, LossReport


def test_a_framework_that_is_not_installed_is_listed_as_not_run():
    rows = [Row("TRL", None, "grpo", "", None, "not run: trl is not installed")]
    page = render(rows, max_examples=5, command="flashsim conformance")
    assert "| TRL · grpo | not run: trl is not installed |" in page
    assert "## Not run" in page and "## Causes (0 cells)" in page


@pytest.mark.slow  # four registry rows × every invariant
def test_flashsims_registry_rows_open_the_table_and_pass_everything():
    rows = run_rows(frameworks=(), max_examples=5)
    assert [row.variant for row in rows] == [row.name for row in REGISTRY_ROWS]
    for row in rows:
        assert row.report.passed, str(row.report)
    page = render(rows, max_examples=5, command="flashsim conformance --examples 5")
    assert page.index("| flashsim 0.1.0 · flash_reinforce |") < page.index("## Causes (0 cells)")


@pytest.mark.parametrize("key", list(CAUSES), ids=lambda key: f"{key[0]}-{key[1]}-{key[2] or 'all'}")
def test_every_recorded_cause_and_its_evidence_are_found_in_the_installed_framework(key):
    cause = CAUSES[key]
    for line in (cause.line, cause.evidence):
        if importlib.util.find_spec(line.file.split("/")[0]) is None:
            pytest.skip(f"{line.file.split('/')[0]} is not installed")
        assert locate(line).startswith(line.file + ":"), f"{line.code!r} not in the installed {line.file}"


def _result(name, status, message=""):
    return InvariantResult(name, "", "", status, 3, message, "  batch: B = 1" if status == "FAILS" else "")


def test_each_failure_carries_its_class_and_the_command_that_reruns_it_and_the_headline_counts_causes(monkeypatch):
    reachable = Cause("a reachable flaw", Line("x.py", "a"), "bites", "reachable", Line("x.py", "b", "the pipeline"))
    outside = Cause("an outside flaw", Line("x.py", "c"), "never fed", "outside", Line("x.py", "d", "guaranteed"))
    causes = {("X", "shards", ""): reachable, ("X", "padding", ""): outside}
    monkeypatch.setattr("flashsim.testing.conformance.cause_of",
                        lambda framework, invariant, variant: causes.get((framework, invariant, "")))
    report = LossReport("x", "grpo", "flashsim", (_result("shards", "FAILS", "max |got − expected| = 0.5 > 1e-9"),
                                                  _result("padding", "FAILS", "non-finite values [nan]"),
                                                  _result("permutation", "holds")))
    rows = [Row("X", "1.0", f"v{i} b", "aggregation token_mean, estimator batch_mean", report, key=f"x:v{i}-b")
            for i in range(2)]
    page = render(rows, max_examples=3, command="flashsim conformance")
    assert "**2 causes**: **1 reachable**, 1 outside the pipeline, 0 documented (4 cells of 2 rows" in page
    assert "**✗ `shards`** (reachable) 0.5; ✗ `padding` *(outside the pipeline)* non-finite; ✓ 1 hold" in page
    assert page.count("rerun `flashsim conformance --row x:v0-b --invariant shards`") == 1
    assert page.count("rerun `flashsim conformance --row x:v1-b --invariant padding`") == 1
    assert page.index("| row | declared | float64 | float32 |") < page.index("## Causes by class")
    assert page.index("### a reachable flaw") < page.index("### an outside flaw")


@pytest.mark.slow  # three rows × three invariants, twice
def test_a_row_run_alone_gives_the_same_cells_as_in_the_full_run():
    rows = run_rows(frameworks=(), max_examples=5)
    names = ["on_policy_gradient", "constant_rewards", "shards"]
    for row in rows[1:]:  # after flash_reinforce ran, as on the page
        alone = check_row(find_row(row.key, ()), max_examples=5, invariants=names)
        assert [(r.name, r.status, r.examples, r.message) for r in alone.results] == \
            [(row.report[n].name, row.report[n].status, row.report[n].examples, row.report[n].message) for n in names]


@pytest.mark.slow  # one verl cell in float32
def test_the_float32_rerun_shows_verls_constant_group_advantages_of_every_member_the_same_sign(capsys):
    pytest.importorskip("verl.trainer.ppo.core_algos")
    assert main(["conformance", "--row", "verl:grpo-token-mean", "--invariant", "constant_rewards",
                 "--dtype", "float32"]) == 1
    out = capsys.readouterr().out
    assert "class: reachable" in out and "advantages the loss forms: [+0.056, +0.056," in out, out
    assert "rewards = [0.7, 0.7," in out and "reward of every trajectory = 0.7" in out
    assert main(["conformance", "--row", "flashsim:grpo", "--invariant", "constant_rewards", "--dtype", "float32",
                 "--frameworks", "verl"]) == 0  # flashsim centres exactly: float32 constant groups get 0


def test_a_row_is_one_entry_and_unknown_rows_list_the_valid_keys():
    row = find_row("flashsim:dr_grpo", ())
    assert row is REGISTRY_ROWS[2] and dataclasses.is_dataclass(row)
    with pytest.raises(ValueError, match="valid: flashsim:flash_reinforce, flashsim:grpo"):
        find_row("flashsim:nope", ())
    assert check_row(row, max_examples=2, invariants=["permutation"], dtype=torch.float32).results == ()


@pytest.mark.parametrize("argv", [["--frameworks", "slime"], ["--examples", "0"], ["--out", "{missing}/x.md"],
                                  ["--row", "trl:no-such-row"], ["--invariant", "padding"],
                                  ["--row", "flashsim:grpo", "--invariant", "nope"]],
                         ids=["framework", "examples", "out", "row", "invariant-without-row", "invariant"])
def test_usage_errors_exit_two(argv, capsys, tmp_path):
    argv = [arg.format(missing=tmp_path / "no-such-dir") for arg in argv]  # a fixed path may exist on a shared machine
    assert main(["conformance", *argv]) == 2
    assert "flashsim conformance: error:" in capsys.readouterr().err
