"""docs/upstream/: every reproducer still demonstrates its bug against the installed framework (each asserts the
wrong value, so a fixed framework fails here and the report can be closed); skipped where the framework is not
installed (CI installs the conformance extra and the no-deps pins)."""

import importlib.util
import pathlib
import runpy

import pytest

UPSTREAM = pathlib.Path(__file__).resolve().parents[2] / "docs" / "upstream"
REPRODUCERS = sorted(UPSTREAM.glob("*.py"))


def test_there_are_at_least_four_reproducers_each_with_a_drafted_issue():
    assert len(REPRODUCERS) >= 4
    for script in REPRODUCERS:
        issue = UPSTREAM / (script.stem.replace("_", "-") + ".md")
        assert issue.is_file(), f"{script.name} has no drafted issue {issue.name}"
        text = issue.read_text()
        for part in ("**Versions:**", "**Expected:**", "**Got:**", "**Proposed fix:**", script.name):
            assert part in text, f"{issue.name} lacks {part}"
        lines = script.read_text().splitlines()
        assert len(lines) <= 80, f"{script.name} has {len(lines)} lines"
        imports = {line.split()[1].split(".")[0] for line in lines if line.startswith(("import ", "from "))}
        assert imports <= {"torch", "verl", "openrlhf", "importlib", "pathlib"}, imports


@pytest.mark.slow  # imports verl / OpenRLHF: seconds each
@pytest.mark.parametrize("script", REPRODUCERS, ids=lambda path: path.stem)
def test_the_reproducer_demonstrates_its_bug_on_the_installed_framework(script, capsys):
    framework = script.stem.split("_")[0]
    if importlib.util.find_spec(framework) is None:
        pytest.skip(f"{framework} is not installed")
    runpy.run_path(str(script), run_name="__main__")  # raises AssertionError if the bug is gone
    assert "reproduced:" in capsys.readouterr().out
