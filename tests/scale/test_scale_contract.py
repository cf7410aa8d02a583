"""Layer contract and docstring examples: scale uses only flashsim's public modules (losses, config, io,
validation, plotting); flashsim never imports scale; every doctest in scale runs."""

import ast
import doctest
import importlib
import pkgutil
from pathlib import Path

import pytest

pytest.importorskip("transformers")

import scale  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _imported_modules(path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module


PUBLIC = ("flashsim.losses", "flashsim.config", "flashsim.outputs", "flashsim.storage", "flashsim.validation",
          "flashsim.experiments", "flashsim.studies", "flashsim.studies.c1_tuned", "flashsim.studies.c1_tuned.page",
          "flashsim.integrations.trl", "flashsim.moved")
"""flashsim's public modules for scale: the losses, and the one config mechanism, output path (curves.png
included), file seam (atomic writes, checkpoints) and checks; the claims machinery (designs and their registry, the
resumable cell runner, summaries, the verdict rule with its level and Holm's adjustment, the results page), which the
transformer studies (``scale/studies/``) reuse through what ``flashsim.experiments`` exports; of the simulator's
studies, the pages (``rerender``, C1 tuned's page) and C1 tuned's rule and tuning loop, which
``scale/studies/c1_tuned.py`` applies to the transformer; the TRL integration, which the smoke test
``scale/examples/gpu_smoke.py`` runs; and the table of moved module names, to which scale adds its own."""


def test_scale_imports_flashsim_only_through_its_public_modules():
    for path in sorted((ROOT / "scale").rglob("*.py")):
        for module in _imported_modules(path):
            if module.split(".")[0] == "flashsim":
                assert module in PUBLIC, f"{path.relative_to(ROOT)} imports {module}"


def test_scale_uses_only_names_flashsim_experiments_exports():
    import flashsim.experiments

    for path in sorted((ROOT / "scale").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "flashsim.experiments":
                for alias in node.names:
                    assert alias.name in flashsim.experiments.__all__, f"{path.relative_to(ROOT)} imports {alias.name}"


def test_flashsim_never_imports_scale():
    for path in sorted((ROOT / "src" / "flashsim").rglob("*.py")):
        for module in _imported_modules(path):
            assert module.split(".")[0] != "scale", f"{path.relative_to(ROOT)} imports {module}"


MODULES = sorted(m.name for m in pkgutil.walk_packages(scale.__path__, "scale.")
                 if m.name not in ("scale.__main__", "scale.rollouts.engines.vllm_engine"))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0


WINGS = {"rollouts": ("scale.learner", "scale.run", "scale.studies", "scale.cli"),
         "learner": ("scale.run", "scale.studies", "scale.cli"), "run": ("scale.studies", "scale.cli"),
         "studies": ("scale.cli",)}
"""What each wing must not import: rollouts are the bottom, the learner consumes them, the run builds both, the
studies run training runs; ``scale/cli.py`` (``python -m scale``) sits above them all."""


@pytest.mark.parametrize("wing", sorted(WINGS))
def test_each_wing_imports_only_the_wings_below_it(wing):
    for path in sorted((ROOT / "scale" / wing).rglob("*.py")):
        for module in _imported_modules(path):
            assert not module.startswith(WINGS[wing]), f"{path.relative_to(ROOT)} imports {module}"


def test_the_run_modules_import_each_other_without_a_circle():
    """``python -m scale``'s front end (``cli``) imports the rest of ``scale/run`` and nothing imports it back."""
    run = ROOT / "scale" / "run"
    imports = {path.stem: {m.rsplit(".", 1)[1] for m in _imported_modules(path) if m.startswith("scale.run.")}
               for path in run.glob("*.py") if path.stem != "__init__"}
    importers_of_cli = sorted(name for name, modules in imports.items() if "cli" in modules)
    assert importers_of_cli == []

    def reaches(start, goal, seen=()):
        return any(m == goal or (m not in seen and reaches(m, goal, (*seen, m))) for m in imports.get(start, ()))

    assert [name for name in imports if reaches(name, name)] == []
