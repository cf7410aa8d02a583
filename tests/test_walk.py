"""One update walks through at most ``MAX_WALK_FILES`` project files, and ``docs/walk.md`` prints that walk.

The walk is traced (``tests/walk.py``), not listed by hand: a file that joins the walk is counted
whether or not anyone remembers to write it down.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.walk import MAX_WALK_FILES, ROOT, WALK_PAGE, over_limit, render, trace_files

PROBE = '''
VALUES = tuple(value for value in range(3))  # a module body, and a generator expression in it


class Probe:
    doubled = [value * 2 for value in range(3)]  # a class body, and a comprehension in it

    def method(self):
        return 1


def function():
    return 1
'''


@pytest.fixture(scope="module")
def traced_walk() -> dict[str, str]:
    """The walk of ``flashsim train --env bandit --updates 1``, traced in a fresh process (nothing cached)."""
    result = subprocess.run(
        [sys.executable, "-m", "tests.walk", "--json"], cwd=ROOT, capture_output=True, text=True, timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout)


@pytest.mark.slow  # a training subprocess (~3 s)
def test_one_update_runs_functions_in_at_most_max_walk_files_project_files(traced_walk):
    assert not over_limit(traced_walk), (
        f"one update runs functions in {len(traced_walk)} project files (limit {MAX_WALK_FILES}); "
        f"past the limit: {over_limit(traced_walk)}. Fold a file into its caller, or keep the work out of the walk."
    )


@pytest.mark.slow  # shares the training subprocess
def test_docs_walk_md_prints_the_traced_walk(traced_walk):
    assert WALK_PAGE.read_text() == render(traced_walk), (
        "docs/walk.md differs from the traced walk; regenerate it with `python -m tests.walk`"
    )


def probes(folder: Path, count: int) -> list[Path]:
    """``count`` files with a module body, a class body, a method and a function."""
    paths = [folder / f"probe_{index:02d}.py" for index in range(count)]
    for path in paths:
        path.write_text(PROBE)
    return paths


def load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_module_and_class_bodies_do_not_count(tmp_path):
    paths = probes(tmp_path, 3)
    assert trace_files(lambda: [load(path) for path in paths], [tmp_path], relative_to=tmp_path) == {}


def test_a_file_counts_once_a_function_or_method_in_it_runs(tmp_path):
    first, second, third = (load(path) for path in probes(tmp_path, 3))
    walk = trace_files(lambda: (third.function(), first.Probe().method()), [tmp_path], relative_to=tmp_path)
    assert walk == {"probe_02.py": "function", "probe_00.py": "Probe.method"}


def test_functions_run_in_a_thread_started_during_the_call_count(tmp_path):
    (module,) = (load(path) for path in probes(tmp_path, 1))

    def in_a_thread():
        thread = threading.Thread(target=module.function)
        thread.start()
        thread.join()

    assert trace_files(in_a_thread, [tmp_path], relative_to=tmp_path) == {"probe_00.py": "function"}


def test_the_check_fails_when_one_file_more_joins_the_walk(tmp_path):
    modules = [load(path) for path in probes(tmp_path, MAX_WALK_FILES + 1)]
    allowed = trace_files(lambda: [m.function() for m in modules[:MAX_WALK_FILES]], [tmp_path], relative_to=tmp_path)
    one_more = trace_files(lambda: [m.function() for m in modules], [tmp_path], relative_to=tmp_path)
    assert len(allowed) == MAX_WALK_FILES and over_limit(allowed) == []
    assert over_limit(one_more) == [f"probe_{MAX_WALK_FILES:02d}.py"]


def test_files_outside_the_roots_do_not_count(tmp_path):
    inside, outside = tmp_path / "inside", tmp_path / "outside"
    inside.mkdir(), outside.mkdir()
    kept, ignored = load(probes(inside, 1)[0]), load(probes(outside, 1)[0])
    walk = trace_files(lambda: (ignored.function(), kept.function()), [inside], relative_to=tmp_path)
    assert walk == {"inside/probe_00.py": "function"}
