"""docs/upstream/: every reproducer still demonstrates its bug against the installed framework (each asserts the
wrong value, so a fixed framework fails here and the report can be closed), prints the numbers its draft's **Got**
line quotes, and imports nothing of flashsim; every reachable cause on the conformance page has a draft or says why
not. Skipped where the framework is not installed (CI installs the conformance extra and the no-deps pins)."""

import importlib.util
import pathlib
import re
import runpy
import sys

import pytest

from flashsim.testing.causes import CAUSES

UPSTREAM = pathlib.Path(__file__).resolve().parents[2] / "docs" / "upstream"
REPRODUCERS = sorted(UPSTREAM.glob("*.py"))


def _draft(script: pathlib.Path) -> pathlib.Path:
    return UPSTREAM / (script.stem.replace("_", "-") + ".md")


def test_there_are_at_least_five_reproducers_each_with_a_drafted_issue_and_no_flashsim_import():
    assert len(REPRODUCERS) >= 5
    for script in REPRODUCERS:
        issue = _draft(script)
        assert issue.is_file(), f"{script.name} has no drafted issue {issue.name}"
        text = issue.read_text()
        for part in ("**Versions:**", "**Expected:**", "**Got:**", "**Proposed fix:**", script.name):
            assert part in text, f"{issue.name} lacks {part}"
        lines = script.read_text().splitlines()
        assert len(lines) <= 80, f"{script.name} has {len(lines)} lines"
        imports = {line.split()[1].split(".")[0] for line in lines if line.startswith(("import ", "from "))}
        assert imports - set(sys.stdlib_module_names) <= {"torch", "verl", "openrlhf", "tensordict"}, imports


def test_every_reachable_cause_has_a_draft_or_says_why_not_and_the_readme_lists_them():
    readme = (UPSTREAM / "README.md").read_text()
    reachable = {cause.title: cause for cause in CAUSES.values() if cause.severity == "reachable"}
    for title, cause in reachable.items():
        assert bool(cause.draft) != bool(cause.no_draft), f"{title!r}: a draft or a reason, exactly one"
        if cause.draft:
            assert (UPSTREAM / cause.draft).is_file() and f"]({cause.draft})" in readme, cause.draft
        else:
            assert title in readme, f"README does not say why {title!r} has no draft"
    assert {cause.draft for cause in reachable.values() if cause.draft} == {_draft(s).name for s in REPRODUCERS}


def _got(issue: pathlib.Path) -> list[str]:
    """The numbers with four or more decimals, or in exponent form, in the draft's **Got:** paragraph (− as -)."""
    paragraph = issue.read_text().split("**Got:**", 1)[1].split("\n\n", 1)[0]
    return [number.replace("−", "-") for number in re.findall(r"[+−-]?\d+\.\d+e[+-]\d+|[+−-]?\d+\.\d{4,}", paragraph)]


@pytest.mark.slow  # imports verl / OpenRLHF (DeepSpeed): seconds each
@pytest.mark.parametrize("script", REPRODUCERS, ids=lambda path: path.stem)
def test_the_reproducer_fails_on_the_installed_framework_as_its_draft_says(script, capsys):
    framework = script.stem.split("_")[0]
    if importlib.util.find_spec(framework) is None:
        pytest.skip(f"{framework} is not installed")
    before = set(sys.modules)
    try:
        runpy.run_path(str(script), run_name="__main__")  # raises AssertionError if the bug is gone
    finally:  # the OpenRLHF script registers packages by path: leave later imports as they were
        for name in set(sys.modules) - before:
            if name.startswith("openrlhf"):
                del sys.modules[name]
    out = capsys.readouterr().out
    assert "reproduced:" in out
    numbers = _got(_draft(script))
    assert numbers, f"{_draft(script).name}'s Got line quotes no number the script prints"
    for number in numbers:
        assert number in out, f"{_draft(script).name} says {number}; {script.name} printed:\n{out}"
