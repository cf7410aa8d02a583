"""``flashsim conformance``: registry rows first and passing, frameworks not installed listed as not run,
every recorded cause found in the installed framework's source, usage errors exit 2."""

import importlib.util

import pytest

from flashsim.cli import main
from flashsim.testing.conformance import CAUSES, REGISTRY_ROWS, Row, locate, render, run_rows


def test_a_framework_that_is_not_installed_is_listed_as_not_run():
    rows = [Row("TRL", None, "grpo", "", None, "not run: trl is not installed")]
    page = render(rows, max_examples=5, command="flashsim conformance")
    assert "| TRL | – | grpo | not run: trl is not installed |" in page
    assert "## Not run" in page and "## Failures (0)" in page


@pytest.mark.slow  # four registry rows × every invariant
def test_flashsims_registry_rows_open_the_table_and_pass_everything():
    rows = run_rows(frameworks=(), max_examples=5)
    assert [row.variant for row in rows] == [row.name for row in REGISTRY_ROWS]
    for row in rows:
        assert row.report.passed, str(row.report)
    page = render(rows, max_examples=5, command="flashsim conformance --examples 5")
    assert page.index("| flashsim |") < page.index("## Failures (0)")


@pytest.mark.parametrize("key", list(CAUSES), ids=lambda key: f"{key[0]}-{key[1]}-{key[2] or 'all'}")
def test_every_recorded_cause_is_found_in_the_installed_framework(key):
    cause = CAUSES[key]
    if importlib.util.find_spec(cause.file.split("/")[0]) is None:
        pytest.skip(f"{cause.file.split('/')[0]} is not installed")
    assert locate(cause).startswith(cause.file + ":"), f"{cause.code!r} not in the installed {cause.file}"


@pytest.mark.parametrize("argv", [["--frameworks", "slime"], ["--examples", "0"], ["--out", "/no/such/dir/x.md"]],
                         ids=["framework", "examples", "out"])
def test_usage_errors_exit_two(argv, capsys):
    assert main(["conformance", *argv]) == 2
    assert "flashsim conformance: error:" in capsys.readouterr().err
