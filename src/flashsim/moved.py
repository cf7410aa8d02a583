"""Modules that moved: importing one under its old name fails with one line that names the new one.

``import flashsim.io`` raises ``ModuleNotFoundError: flashsim.io moved: use flashsim.outputs (...)``, and
``python -m flashsim.experiments.c1_tuned_page`` exits 1 with the same line, instead of a bare "No module named".

How: a package that lost modules appends :data:`ENTRY` to its ``__path__`` (:func:`watch`); the import system
searches that entry only after the package's real folder, so it never hides a module that exists, and its finder
is a plain dictionary look-up (:data:`MOVED`'s specs), so a successful import runs no code of this module.
``scale`` adds its own moved modules with :func:`add`.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, MutableSequence
from importlib.machinery import ModuleSpec

ENTRY = "<flashsim: moved modules>"
"""The ``__path__`` entry under which the moved names are found (not a folder)."""

_OUTPUTS = ("flashsim.outputs (the run directory, metrics, progress bar, curves) or flashsim.storage "
            "(atomic writes, jsonable, checkpoints)")

MOVED: dict[str, str] = {
    "flashsim.io": _OUTPUTS,
    "flashsim.experiments.claims": "flashsim.studies.claims",
    "flashsim.experiments.follow_ups": "flashsim.studies.follow_ups",
    "flashsim.experiments.c1_tuned": "flashsim.studies.c1_tuned.rule",
    "flashsim.experiments.c1_tuned_run": "flashsim.studies.c1_tuned.run",
    "flashsim.experiments.c1_tuned_report": "flashsim.studies.c1_tuned.report",
    "flashsim.experiments.c1_tuned_page": "flashsim.studies.c1_tuned.page",
}
"""Old module name → where it is now."""


class _Refusal:
    """The loader of a moved name: every way of loading it fails with the new name."""

    def create_module(self, spec: ModuleSpec) -> None:
        raise ModuleNotFoundError(f"{spec.name} moved: use {MOVED[spec.name]}")  # no name=: ``from package
        # import name`` would take a ModuleNotFoundError naming the module for "not a module" and say less

    def get_code(self, name: str) -> None:  # what ``python -m NAME`` asks for
        raise ModuleNotFoundError(f"{name} moved: use {MOVED[name]}")

    def exec_module(self, module: object) -> None:  # never reached: create_module refuses first
        raise ModuleNotFoundError(module.__name__)


class _Finder:
    """The path-entry finder of :data:`ENTRY`: ``find_spec(name, target)`` is a dictionary's ``get``."""

    def __init__(self) -> None:
        self.specs: dict[str, ModuleSpec] = {}
        self.find_spec = self.specs.get


_FINDER = sys.path_importer_cache.setdefault(ENTRY, _Finder())


def add(moves: Mapping[str, str]) -> None:
    """Add old name → new name rows to :data:`MOVED`."""
    MOVED.update(moves)
    _FINDER.specs.update({name: ModuleSpec(name, _Refusal()) for name in MOVED})


def watch(path: MutableSequence[str]) -> None:
    """Search :data:`ENTRY` after the folders of a package's ``path`` (its ``__path__``)."""
    if ENTRY not in path:
        path.append(ENTRY)


add({})
