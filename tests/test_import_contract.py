"""Layers import one way (docs/design.md): each module imports only from the layers below it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

_LAYERS = ("flashsim.losses", "flashsim.policies", "flashsim.exact", "flashsim.sim", "flashsim.variance",
           "flashsim.experiments", "flashsim.cli", "flashsim.testing")

# For each layer: the project modules it must never import (prefix match on dotted names).
FORBIDDEN = {
    "src/flashsim/losses": ("flashsim.policies", "flashsim.exact", "flashsim.sim", "flashsim.variance",
                            "flashsim.experiments", "flashsim.cli", "toy_envs", "scale", "numpy", "gymnasium"),
    "toy_envs": ("flashsim", "scale", "torch"),
    # Foundation modules that every layer (and scale) may use: they import no flashsim layer.
    "src/flashsim/validation.py": ("flashsim", "toy_envs", "scale", "torch", "numpy"),
    "src/flashsim/config.py": _LAYERS + ("flashsim.io", "toy_envs", "scale", "torch", "numpy"),
    "src/flashsim/io.py": _LAYERS + ("flashsim.config", "flashsim.validation", "toy_envs", "scale"),
    "src/flashsim/policies.py": ("flashsim.sim", "flashsim.variance", "flashsim.experiments", "flashsim.cli", "scale"),
    "src/flashsim/exact.py": ("flashsim.sim", "flashsim.variance", "flashsim.experiments", "flashsim.cli", "scale"),
    "src/flashsim/sim": ("flashsim.variance", "flashsim.experiments", "flashsim.cli", "scale"),
    "src/flashsim/variance": ("flashsim.cli", "scale"),
    "src/flashsim/experiments": ("flashsim.cli", "scale"),
    "src/flashsim": ("scale",),
    "scale": ("flashsim.sim", "flashsim.variance", "flashsim.experiments", "flashsim.cli", "flashsim.exact",
              "flashsim.policies", "toy_envs"),
}


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def python_files(target: str) -> list[Path]:
    path = ROOT / target
    if path.is_file():
        return [path]
    return sorted(path.rglob("*.py")) if path.exists() else []


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_imports_nothing_from_the_layers_above_it(layer):
    violations = []
    for path in python_files(layer):
        for name in imported_modules(path):
            for banned in FORBIDDEN[layer]:
                if name == banned or name.startswith(banned + "."):
                    violations.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not violations, "layer contract broken:\n" + "\n".join(sorted(set(violations)))


#: The most files a newcomer should have to read to follow one update (issue 10).
MAX_WALK_FILES = 15


def module_name(path: str) -> str:
    dotted = path.removeprefix("src/").removesuffix(".py").replace("/", ".")
    return dotted.removesuffix(".__init__")


def documented_walk() -> list[str]:
    """The numbered file list under "One update, from the CLI to the optimizer step" in docs/design.md."""
    text = (ROOT / "docs" / "design.md").read_text()
    section = text.split("## One update, from the CLI to the optimizer step", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\d+\. `([^`]+)`", section, flags=re.MULTILINE)


def reaches(source: Path, module: str) -> bool:
    """``source`` imports ``module`` or a package above it, or loads it with ``importlib`` by name."""
    parents = {".".join(module.split(".")[:i]) for i in range(1, module.count(".") + 2)}
    if imported_modules(source) & parents:
        return True
    package = module.rsplit(".", 1)[0]
    return f'import_module(f"{package}.{{' in source.read_text()


def test_one_update_walks_from_the_cli_to_the_optimizer_step_through_at_most_fifteen_files():
    walk = documented_walk()
    assert 2 <= len(walk) <= MAX_WALK_FILES, f"docs/design.md's walk has {len(walk)} files"
    missing = [path for path in walk if not (ROOT / path).is_file()]
    assert not missing, f"the walk names files that do not exist: {missing}"
    for index, path in enumerate(walk[1:], start=1):
        earlier = [ROOT / previous for previous in walk[:index]]
        assert any(reaches(source, module_name(path)) for source in earlier), (
            f"{path} is on the walk but no file before it imports it"
        )
