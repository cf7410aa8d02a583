"""Layers import one way (docs/design.md): each module imports only from the layers below it.

The walk of one update (which files a reader opens) is measured by tests/test_walk.py.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

_LAYERS = ("flashsim.losses", "flashsim.policies", "flashsim.exact", "flashsim.sim", "flashsim.variance",
           "flashsim.experiments", "flashsim.studies", "flashsim.lab", "flashsim.cli", "flashsim.testing")

# For each layer: the project modules it must never import (prefix match on dotted names), less those of ALLOWED.
FORBIDDEN = {
    # losses/ stands on its own: nothing of flashsim outside losses/ (ALLOWED), no env, no numpy.
    "src/flashsim/losses": ("flashsim", "toy_envs", "scale", "numpy", "gymnasium"),
    # toy_envs stands alone as a gymnasium package: of flashsim it imports only the foundation validator.
    "toy_envs": _LAYERS + ("flashsim.config", "flashsim.outputs", "flashsim.storage", "scale", "torch"),
    # Foundation modules that every layer (and scale) may use: they import no flashsim layer.
    # validation.py re-exports the argument checks of flashsim.losses.checks (standard library only at import;
    # test_validation_imports_no_torch checks that in a fresh process) and imports no other flashsim module.
    "src/flashsim/validation.py": ("flashsim", "toy_envs", "scale", "numpy"),
    "src/flashsim/config.py": _LAYERS + ("flashsim.outputs", "flashsim.storage", "toy_envs", "scale", "torch",
                                         "numpy"),
    # The run directory stands on the file seam (atomic writes, checkpoints), which stands on nothing of flashsim.
    "src/flashsim/outputs.py": _LAYERS + ("flashsim.config", "flashsim.validation", "toy_envs", "scale"),
    "src/flashsim/storage.py": _LAYERS + ("flashsim.outputs", "flashsim.config", "flashsim.validation", "toy_envs",
                                          "scale"),
    # The table of moved module names is imported by flashsim/__init__.py: the standard library only.
    "src/flashsim/moved.py": ("flashsim", "toy_envs", "scale", "numpy", "torch"),
    "src/flashsim/policies.py": ("flashsim.sim", "flashsim.variance", "flashsim.experiments", "flashsim.studies",
                                 "flashsim.cli", "scale"),
    "src/flashsim/exact.py": ("flashsim.sim", "flashsim.variance", "flashsim.experiments", "flashsim.studies",
                              "flashsim.cli", "scale"),
    "src/flashsim/sim": ("flashsim.variance", "flashsim.experiments", "flashsim.studies", "flashsim.lab",
                         "flashsim.cli", "scale"),
    "src/flashsim/variance": ("flashsim.experiments", "flashsim.studies", "flashsim.lab", "flashsim.cli", "scale"),
    # The machinery of experiments never imports a study; the studies import the machinery, never the CLI.
    "src/flashsim/experiments": ("flashsim.studies", "flashsim.cli", "scale"),
    "src/flashsim/studies": ("flashsim.cli", "scale"),
    # The lab page's numbers come from the simulator and the variance measures, not from the claims' experiments.
    "src/flashsim/lab": ("flashsim.experiments", "flashsim.studies", "flashsim.cli", "scale"),
    "src/flashsim": ("scale",),
    # The framework integrations build on the loss core alone (the conformance adapters import them, not back).
    "src/flashsim/integrations": ("flashsim.policies", "flashsim.exact", "flashsim.sim", "flashsim.variance",
                                  "flashsim.experiments", "flashsim.cli", "flashsim.testing", "toy_envs", "scale"),
    # scale/studies/claims.py reuses the claims machinery (flashsim.experiments: designs, cell runner, summaries);
    # tests/scale/test_scale_contract.py checks that scale imports only names flashsim.experiments exports.
    "scale": ("flashsim.sim", "flashsim.variance", "flashsim.cli", "flashsim.exact", "flashsim.policies", "toy_envs"),
}


# Exceptions to FORBIDDEN, by the same prefix match.
ALLOWED = {
    "src/flashsim/losses": ("flashsim.losses",),
    "src/flashsim/validation.py": ("flashsim.losses.checks",),
}


def import_statements(path: Path, root: Path = ROOT) -> list[tuple[str, tuple[str, ...]]]:
    """Each import of ``path``, functions' included, as ``(module, names)``: ``import a.b`` is ``("a.b", ())``,
    ``from a import b, c`` is ``("a", ("b", "c"))``; relative imports are resolved against the file's package (its
    folder under ``src/``, or under ``root``)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = list(path.relative_to(root / "src" if (root / "src") in path.parents else root).parent.parts)
    statements = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            statements += [(alias.name, ()) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            statements.append((module, tuple(alias.name for alias in node.names)))
    return statements


def imported_modules(path: Path, root: Path = ROOT) -> set[str]:
    """Every module ``path`` imports (and ``module.name`` for each name of a ``from`` import)."""
    return {name for module, names in import_statements(path, root)
            for name in (module, *(f"{module}.{n}" for n in names))}


def violations(layer: str, root: Path = ROOT) -> list[str]:
    """``path imports module`` for each import of ``layer`` that FORBIDDEN bans and ALLOWED does not allow."""
    def matches(name: str, prefixes: tuple[str, ...]) -> bool:
        return any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes)

    found = {f"{path.relative_to(root)} imports {name}" for path in python_files(layer, root)
             for name in imported_modules(path, root)
             if matches(name, FORBIDDEN[layer]) and not matches(name, ALLOWED.get(layer, ()))}
    return sorted(found)


def python_files(target: str, root: Path = ROOT) -> list[Path]:
    path = root / target
    if path.is_file():
        return [path]
    return sorted(path.rglob("*.py")) if path.exists() else []


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_imports_nothing_from_the_layers_above_it(layer):
    found = violations(layer)
    assert not found, "layer contract broken:\n" + "\n".join(found)


@pytest.mark.parametrize("statement", [
    "from flashsim.storage import atomic_write_text",
    "import flashsim.config",
    "from flashsim.testing import check_loss",
    "from flashsim import validation",
    "from ..validation import check_int",
    "from .. import io",
    "import numpy as np",
])
def test_the_contract_catches_losses_importing_flashsim_outside_losses(tmp_path, statement):
    """The check itself can fail: a copy of losses/ with one import of flashsim outside losses/ breaks it."""
    import shutil

    copy = tmp_path / "src" / "flashsim" / "losses"
    shutil.copytree(ROOT / "src" / "flashsim" / "losses", copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert violations("src/flashsim/losses", tmp_path) == []
    registry = copy / "registry.py"
    registry.write_text(f"{statement}\n{registry.read_text()}")
    assert violations("src/flashsim/losses", tmp_path), f"{statement!r} in losses/ was not caught"


def test_validation_imports_no_torch():
    """Every layer (and the CLI, before it knows whether it needs torch) may import validation cheaply; so does
    ``import flashsim.losses`` (its torch modules load on the first use of one of their names)."""
    import subprocess
    import sys

    code = "import sys, flashsim.validation, flashsim.losses; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def module_file(name: str, root: Path = ROOT) -> Path | None:
    """The project file of the dotted module ``name`` (``src/flashsim/...``, ``scale/...``, ``toy_envs/...``), or
    None when it names no project module (a name inside a module, or another package's)."""
    parts = name.split(".")
    base = root / "src" if parts[0] == "flashsim" else root
    for candidate in (base.joinpath(*parts).with_suffix(".py"), base.joinpath(*parts, "__init__.py")):
        if candidate.is_file():
            return candidate
    return None


def import_targets(path: Path, root: Path = ROOT) -> set[Path]:
    """The project files ``path`` imports: for ``from package import name`` the file of ``package.name`` when it
    is a module, else the package's ``__init__.py``."""
    targets = set()
    for module, names in import_statements(path, root):
        targets |= {module_file(f"{module}.{name}", root) or module_file(module, root) for name in names}
        if not names:
            targets.add(module_file(module, root))
    return targets - {None}


def import_circles(root: Path = ROOT) -> list[list[str]]:
    """The circles of the file import graph of ``src/``, ``scale/`` and ``toy_envs/`` — imports inside functions
    included, each import an arrow to the most specific project file it names — as lists of paths, each circle once."""
    files = [p for layer in ("src/flashsim", "scale", "toy_envs") for p in python_files(layer, root)]
    arrows = {path: import_targets(path, root) - {path} for path in files}
    circles, state = [], {}

    def visit(path: Path, stack: list[Path]) -> None:  # depth-first; a grey node met again closes a circle
        state[path] = "grey"
        stack.append(path)
        for target in sorted(arrows.get(path, ())):
            if state.get(target) == "grey":
                circles.append([p.relative_to(root).as_posix() for p in stack[stack.index(target):]])
            elif target not in state:
                visit(target, stack)
        stack.pop()
        state[path] = "black"

    for path in sorted(files):
        if path not in state:
            visit(path, [])
    return circles


def test_no_file_imports_a_file_that_imports_it_back():
    """Issue 36: no import circle, not even through an import inside a function (which hides it from Python)."""
    assert import_circles() == []


def test_the_circle_check_finds_a_circle_through_a_function_level_import(tmp_path):
    package = tmp_path / "src" / "flashsim"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from flashsim.b import g\n\ndef f():\n    return g()\n")
    (package / "b.py").write_text("def g():\n    from flashsim.a import f  # hidden in a function\n    return f\n")
    assert import_circles(tmp_path) == [["src/flashsim/a.py", "src/flashsim/b.py"]]


def private_imports(root: Path = ROOT) -> list[str]:
    """``path imports module._name`` for each import of another project module's private name (one underscore)."""
    found = []
    for path in [p for layer in ("src/flashsim", "scale", "toy_envs", "benchmarks") for p in python_files(layer, root)]:
        for module, names in import_statements(path, root):
            if module.split(".")[0] in ("flashsim", "scale", "toy_envs", "tests", "benchmarks"):
                found += [f"{path.relative_to(root)} imports {module}.{name}" for name in names
                          if name.startswith("_") and not name.startswith("__")]
    return found


def test_no_module_imports_another_modules_private_name():
    assert private_imports() == []


def test_the_private_name_check_finds_one(tmp_path):
    package = tmp_path / "src" / "flashsim"
    package.mkdir(parents=True)
    (package / "a.py").write_text("from flashsim.b import _helper\n")
    assert private_imports(tmp_path) == ["src/flashsim/a.py imports flashsim.b._helper"]


def test_benchmarks_import_nothing_from_tests():
    found = [f"{path.relative_to(ROOT)} imports {name}" for path in python_files("benchmarks")
             for name in imported_modules(path) if name == "tests" or name.startswith("tests.")]
    assert found == []


@pytest.mark.parametrize(("command", "new"), [
    (["-c", "import flashsim.io"], "flashsim.outputs"),
    (["-c", "from flashsim.experiments import DESIGNS"], "flashsim.studies.DESIGNS"),
    (["-m", "flashsim.experiments.c1_tuned_page", "--help"], "flashsim.studies.c1_tuned.page"),
    (["-m", "scale.run.pages"], "scale.studies.pages"),
])
def test_an_old_module_name_fails_with_one_line_naming_the_new_one(command, new):
    import subprocess
    import sys

    result = subprocess.run([sys.executable, *command], capture_output=True, text=True, cwd=ROOT, check=False)
    assert result.returncode == 1
    assert f"moved: use {new}" in result.stderr.strip().splitlines()[-1]


HISTORY = re.compile(r"issues? ?#?[0-9]+|notes/")
"""A citation of where code came from (an issue number, a notes file): that lives in git and docs/design.md."""


def test_no_line_of_the_code_cites_an_issue_or_a_notes_file():
    found = [f"{path.relative_to(ROOT)}:{number}" for layer in ("src", "scale", "toy_envs")
             for path in python_files(layer) for number, line in enumerate(path.read_text().splitlines(), 1)
             if HISTORY.search(line)]
    assert found == []
