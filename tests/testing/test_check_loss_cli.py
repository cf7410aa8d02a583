"""``flashsim check-loss``: the table on stdout, exit 0 / 1 / 2 for holds / fails / usage error."""

import subprocess
import sys

import pytest

from flashsim.cli import main


def test_a_correct_loss_exits_zero_and_prints_the_table(capsys):
    code = main(["check-loss", "flashsim.losses:flash_reinforce_loss", "--examples", "5"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "all invariants hold" in out and "on_policy_gradient" in out and "shards" in out


def test_a_mutant_exits_one_and_prints_its_counterexample(capsys):
    code = main(["check-loss", "tests.testing.mutants:verl_grpo_no_clip", "--algorithm", "grpo",
                 "--convention", "verl", "--invariants", "off_policy_gradient,padding", "--examples", "30"])
    out = capsys.readouterr().out
    assert code == 1
    assert "off_policy_gradient" in out and "FAILS" in out and "minimal counterexample" in out


@pytest.mark.parametrize(
    "argv",
    [["no_such_module:fn"], ["flashsim.losses"], ["flashsim.losses:no_such_fn"], ["flashsim.losses:LOSSES"],
     ["flashsim.losses:grpo_loss", "--invariants", "bogus"]],
    ids=["module", "no-colon", "attribute", "not-callable", "invariant"],
)
def test_usage_errors_exit_two_with_a_message(argv, capsys):
    assert main(["check-loss", *argv]) == 2
    assert "flashsim check-loss: error:" in capsys.readouterr().err


@pytest.mark.slow
def test_the_console_command_flags_a_mutant_from_the_working_directory():
    """A process started in the repository imports the mutant from its working directory (the invariant that
    catches it alone: the other twelve are the in-process tests' business)."""
    result = subprocess.run(
        [sys.executable, "-m", "flashsim", "check-loss", "tests.testing.mutants:rejected_dropped", "--examples", "20",
         "--invariants", "rejected_rows"],
        capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 1, result.stderr
    assert "rejected_rows" in result.stdout and "FAILS" in result.stdout
