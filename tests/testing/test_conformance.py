"""``flashsim conformance``: registry rows first and passing, frameworks not installed listed as not run,
every recorded cause and its evidence found in the installed framework's source, failures marked by class
with the command that reruns them, a row alone = the same row in the full run, usage errors exit 2."""

import dataclasses
import importlib.util
import re

import pytest
import torch

from flashsim.cli import main
from flashsim.testing.causes import ANY, Cause, Line, cause_of, classify, rounding_level
from flashsim.testing.conformance import (
    CAUSES,
    REGISTRY_ROWS,
    Row,
    check_row,
    drafts_sentence,
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
                        lambda framework, invariant, variant, dtype: causes.get((framework, invariant, "")))
    report = LossReport("x", "grpo", "flashsim", (_result("shards", "FAILS", "max |got − expected| = 0.5 > 1e-9"),
                                                  _result("padding", "FAILS", "non-finite values [nan]"),
                                                  _result("permutation", "holds")))
    rows = [Row("X", "1.0", f"v{i} b", "aggregation token_mean, estimator batch_mean", report, key=f"x:v{i}-b")
            for i in range(2)]
    page = render(rows, max_examples=3, command="flashsim conformance")
    assert ("**2 causes**: 1 ✗ **reachable**, 1 ○ *outside the pipeline*, 0 ≈ *documented* (4 cells of 2 rows"
            in page)
    assert "✗ **`shards`** reachable 0.5; ○ `padding` *outside the pipeline* non-finite; ✓ 1 hold" in page
    assert "The reachable cause has no drafted upstream issue; its section says why." in page
    assert page.count("rerun `flashsim conformance --row x:v0-b --invariant shards`") == 1
    assert page.count("rerun `flashsim conformance --row x:v1-b --invariant padding`") == 1
    assert page.index("| row | declared | float64 | float32 |") < page.index("## Causes by class")
    assert page.index("### a reachable flaw") < page.index("### an outside flaw")


@pytest.mark.parametrize(("reachable", "drafted", "sentence"), [
    (7, 5, "Of the 7 reachable causes, 5 have a drafted upstream issue with a reproducer that runs the framework's own "
           "code ([upstream reports](upstream/README.md)); each of the other 2 says under its section why it has "
           "none."),
    (6, 5, "Of the 6 reachable causes, 5 have a drafted upstream issue with a reproducer that runs the framework's own "
           "code ([upstream reports](upstream/README.md)); the other one says under its section why it has none."),
    (2, 1, "Of the 2 reachable causes, 1 has a drafted upstream issue with a reproducer that runs the framework's own "
           "code ([upstream reports](upstream/README.md)); the other one says under its section why it has none."),
    (3, 3, "All 3 reachable causes have a drafted upstream issue with a reproducer that runs the framework's own code "
           "([upstream reports](upstream/README.md))."),
    (1, 1, "The reachable cause has a drafted upstream issue with a reproducer that runs the framework's own code "
           "([upstream reports](upstream/README.md))."),
    (3, 0, "None of the 3 reachable causes has a drafted upstream issue; each section says why."),
    (0, 0, "No cause is reachable.")])
def test_the_headline_sentence_on_drafts_agrees_with_its_counts(reachable, drafted, sentence):
    assert drafts_sentence(reachable, drafted) == sentence


@pytest.mark.slow  # three rows × three invariants, twice
def test_a_row_run_alone_gives_the_same_cells_as_in_the_full_run():
    rows = run_rows(frameworks=(), max_examples=5)
    names = ["on_policy_gradient", "constant_rewards", "shards"]
    for row in rows[1:]:  # after flash_reinforce ran, as on the page
        alone = check_row(find_row(row.key, ()), max_examples=5, invariants=names)
        assert [(r.name, r.status, r.examples, r.message) for r in alone.results] == \
            [(row.report[n].name, row.report[n].status, row.report[n].examples, row.report[n].message) for n in names]


@pytest.mark.slow  # one verl cell in float32
def test_the_float32_rerun_prints_verls_own_call_at_full_precision_and_the_pasted_call_fails_in_verl(capsys):
    pytest.importorskip("verl.trainer.ppo.core_algos")
    assert main(["conformance", "--row", "verl:grpo-token-mean", "--invariant", "constant_rewards",
                 "--dtype", "float32"]) == 1
    captured = capsys.readouterr()
    out = captured.out
    assert "class: reachable" in out and "advantages the loss forms: [+0.056, +0.056," in out, out
    assert "rewards = [0.699999988079071, 0.699999988079071," in out  # float32(0.7) exactly, not 0.7
    assert "Warning" not in out + captured.err and "WARNING" not in out + captured.err  # third-party noise dropped
    call = out.split("(paste it into python; it raises AssertionError):\n", 1)[1].split("\n(end of the code)", 1)[0]
    assert "compute_grpo_outcome_advantage(token_level_rewards=" in call and "import flashsim" not in call
    namespace = {}
    with pytest.raises(AssertionError, match=re.escape("max |got - expected| = ")):
        exec(compile(call, "<pasted>", "exec"), namespace)  # what a maintainer pastes: verl's own functions only
    advantages = namespace["advantages_constant"].tolist()
    assert len(set(advantages)) == 1 and abs(advantages[0] - 0.056) < 1e-3, advantages  # 0 expected: it fails
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


def test_a_float64_failure_at_rounding_level_is_never_reachable_and_the_table_is_keyed_by_dtype():
    # float64 rounding amplified by 1/ε = 1e6 reaches ~1e-8; verl's float64 cell (1.11e-9) is that, its float32
    # cell (0.056, one float32 ulp / 1e-6) is the reachable flaw
    assert rounding_level(1.11e-9, "float64", 1e6) and not rounding_level(0.056, "float64", 1e6)
    assert rounding_level(0.056, "float32", 1e6)
    assert cause_of("verl", "constant_rewards", "grpo token-sum", "float32").severity == "reachable"
    float64 = cause_of("verl", "constant_rewards", "grpo token-sum", "float64")
    assert float64.severity == "outside" and "float64 rounding" in float64.title
    assert cause_of("OpenRLHF", "advantage_baseline", "group_norm gspo", "float64").severity == "outside"
    reachable = cause_of("verl", "constant_rewards", "grpo token-sum", "float32")
    with pytest.raises(ValueError, match="float64 cell at rounding level"):
        classify(reachable, "float64", 1.11e-9)
    assert classify(reachable, "float32", 0.056) == "reachable"
    for (*_, dtype), cause in CAUSES.items():
        assert dtype in ("float32", "float64", ANY)
        if cause.severity == "reachable" and cause.amplifies:  # a rounding flaw is reachable only in float32
            assert dtype == "float32", cause.title


def test_verls_bf16_causes_are_outside_the_pipeline_with_the_autocast_evidence():
    for variant in ("grpo seq-mean-token-mean", "reinforce bypass_mode seq_mean_k3"):
        cause = cause_of("verl", "precision", variant, "float64")
        assert cause.severity == "outside" and "torch.autocast" in cause.evidence.code
        assert "Only a GPU run can confirm" in cause.evidence.note


def test_each_column_of_the_table_classes_its_cells_by_its_own_dtype():
    float64 = LossReport("x", "grpo", "flashsim", (_result("constant_rewards", "FAILS",
                                                           "max |got − expected| = 1.11e-09 > 1e-12"),))
    float32 = LossReport("x", "grpo", "flashsim", (_result("constant_rewards", "FAILS",
                                                           "max |got − expected| = 0.392 > 1e-06"),))
    page = render([Row("verl", "0.9.1", "grpo token-sum", "", float64, key="verl:grpo-token-sum", float32=float32)],
                  max_examples=3, command="flashsim conformance")
    row = next(line for line in page.splitlines() if line.startswith("| verl 0.9.1 · grpo token-sum |"))
    assert "| ○ `constant_rewards` *outside the pipeline* 1.11e-09; ✓ 0 hold |" in row
    assert "| ✗ **`constant_rewards`** reachable 0.392; ✓ 0 hold |" in row
