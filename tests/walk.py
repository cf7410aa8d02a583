"""The walk of one update, measured: which project files run a function during ``flashsim train``.

A reader follows one update from the command line to the optimizer step; every file on that path is
one more file to open. :func:`trace_files` counts them by tracing a call with :func:`sys.settrace`:
a file under one of the roots counts when a function or method body defined in it runs. Module and
class bodies do not count (importing a file is not reading it), nor do comprehensions and generator
expressions (a module-level ``tuple(x for x in ...)`` is part of the module body; one inside a
function adds nothing that the function did not already add). Only ``call`` events are traced and
each code object is looked at once: a traced ``--updates 1`` run makes about 1.4 million calls and
costs about 0.7 s more than the untraced run (1.6 s) on a busy 2-core machine.

:func:`train_walk` traces ``flashsim.cli.main(["train", "--env", "bandit", "--updates", "1", ...])``
with ``src/`` and ``toy_envs/`` as roots; ``docs/walk.md`` is :func:`render` of it, and
``tests/test_walk.py`` fails when that page is stale or the walk has more than :data:`MAX_WALK_FILES`
files. Run from the repository root::

    python -m tests.walk           # rewrite docs/walk.md from a traced run
    python -m tests.walk --json    # print the traced walk as JSON (the training output goes to stderr)

Trace in a fresh process: functions cached by an earlier call (``functools.cache``) do not run again.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import inspect
import json
import os
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

MAX_WALK_FILES = 17
"""The most project files one update may run functions in: a newcomer can read that many (docs/design.md,
"One update"). The losses' shared token math (``losses/tokens.py``) and the file seam of the run directory
(``flashsim/storage.py``: atomic writes, ``jsonable``, the checkpoint codec) are files of their own on that walk."""

TRAIN_ARGS = ("train", "--env", "bandit", "--updates", "1")
"""The traced command, ``flashsim train --env bandit --updates 1`` (plus ``--out`` a temporary folder)."""

WALK_ROOTS = ("src", "toy_envs")
"""The folders whose files count, relative to the repository root."""

WALK_PAGE = ROOT / "docs" / "walk.md"

_COMPREHENSIONS = frozenset({"<genexpr>", "<listcomp>", "<setcomp>", "<dictcomp>"})

_IMPORTED_BEFORE_TRACING = ("numpy", "torch", "gymnasium", "scipy.stats", "matplotlib.pyplot")
"""Libraries the run imports lazily, imported before the trace starts: their import runs no project
function, and tracing it would add about 1.5 million traced calls (the trace would cost 3 times more)."""

Walk = dict[str, str]
"""File (relative to the root given to :func:`trace_files`) → the first function that ran in it, in run order."""


def trace_files(call: Callable[[], object], roots: Iterable[Path | str], *, relative_to: Path | str) -> Walk:
    """Run ``call()`` and return the files under ``roots`` whose function bodies ran, in the order they first ran.

    Threads started during the call are traced too. The tracer that was installed before (a coverage
    tool, a debugger) is put back afterwards.

    Args:
        call: what to run (its result is discarded; an exception propagates after the tracer is removed).
        roots: folders whose files count.
        relative_to: the folder the returned paths are relative to (POSIX separators).

    Returns:
        ``{path: qualified name of the first function that ran in it}``.
    """
    prefixes = tuple(os.path.realpath(root) + os.sep for root in roots)
    base = os.path.realpath(relative_to)
    # Keyed by id: code objects compare equal across files when their source is equal. Holding each one
    # keeps its id from being reused by a later code object.
    looked_at: dict[int, object] = {}
    walk: Walk = {}

    def tracer(frame, event, arg):  # noqa: ARG001 (the settrace signature)
        code = frame.f_code
        if id(code) in looked_at:
            return None
        looked_at[id(code)] = code
        if code.co_flags & inspect.CO_OPTIMIZED and code.co_name not in _COMPREHENSIONS:
            path = os.path.realpath(code.co_filename)
            if path.startswith(prefixes):
                walk.setdefault(Path(os.path.relpath(path, base)).as_posix(), code.co_qualname)
        return None  # no line events: 'call' only

    previous, previous_threads = sys.gettrace(), threading.gettrace()
    threading.settrace(tracer)
    sys.settrace(tracer)
    try:
        call()
    finally:
        sys.settrace(previous)
        threading.settrace(previous_threads)
    return walk


def train_walk() -> Walk:
    """The walk of ``flashsim train --env bandit --updates 1`` (the CLI's own import is not traced)."""
    import matplotlib

    matplotlib.use("Agg")  # as flashsim.outputs.plot_curves does, before pyplot is imported
    for name in _IMPORTED_BEFORE_TRACING:
        importlib.import_module(name)
    import flashsim.cli

    with tempfile.TemporaryDirectory() as folder:
        argv = [*TRAIN_ARGS, "--out", str(Path(folder) / "run")]
        return trace_files(lambda: flashsim.cli.main(argv), [ROOT / root for root in WALK_ROOTS], relative_to=ROOT)


def over_limit(walk: Walk, limit: int = MAX_WALK_FILES) -> list[str]:
    """The files of ``walk`` past the first ``limit`` (empty when the walk is short enough)."""
    return list(walk)[limit:]


def render(walk: Walk) -> str:
    """The text of ``docs/walk.md`` for ``walk``."""
    command = "flashsim " + " ".join(TRAIN_ARGS) + " --out DIR"
    lines = [
        "# The walk of one update",
        "",
        "<!-- Generated by `python -m tests.walk` (from the repository root) from a traced run; do not edit. -->",
        "<!-- tests/test_walk.py fails when this page differs from the traced walk: rerun the command. -->",
        "",
        f"The project files whose functions run during `{command}`, in the order",
        "they first run, each with the first of its functions that runs. A file under `src/` or `toy_envs/`",
        "counts when a function or method body defined in it runs (traced with `sys.settrace`, `call` events);",
        "module and class bodies, comprehensions and generator expressions do not. The limit is",
        f"{MAX_WALK_FILES} files (`MAX_WALK_FILES` in `tests/walk.py`).",
        "",
        f"{len(walk)} files:",
        "",
    ]
    lines += [f"{index}. `{path}` — `{function}`" for index, (path, function) in enumerate(walk.items(), start=1)]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.walk", description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the walk as JSON instead of writing docs/walk.md")
    args = parser.parse_args(argv)
    with contextlib.redirect_stdout(sys.stderr):
        walk = train_walk()
    if args.json:
        print(json.dumps(walk, indent=1))
        return 0
    WALK_PAGE.write_text(render(walk))
    print(f"wrote {WALK_PAGE.relative_to(ROOT)}: {len(walk)} files (limit {MAX_WALK_FILES})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
