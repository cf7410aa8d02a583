"""Layers import one way (docs/design.md): each module imports only from the layers below it.

The walk of one update (which files a reader opens) is measured by tests/test_walk.py.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

_LAYERS = ("flashsim.losses", "flashsim.policies", "flashsim.exact", "flashsim.sim", "flashsim.variance",
           "flashsim.experiments", "flashsim.cli", "flashsim.testing")

# For each layer: the project modules it must never import (prefix match on dotted names).
FORBIDDEN = {
    "src/flashsim/losses": ("flashsim.policies", "flashsim.exact", "flashsim.sim", "flashsim.variance",
                            "flashsim.experiments", "flashsim.cli", "toy_envs", "scale", "numpy", "gymnasium"),
    # toy_envs stands alone as a gymnasium package: of flashsim it imports only the foundation validator.
    "toy_envs": _LAYERS + ("flashsim.config", "flashsim.io", "scale", "torch"),
    # Foundation modules that every layer (and scale) may use: they import no flashsim layer.
    # validation.py's tensor checks (the losses' inputs) import torch inside the functions, so importing it
    # stays standard-library only: test_validation_imports_no_torch checks that in a fresh process.
    "src/flashsim/validation.py": ("flashsim", "toy_envs", "scale", "numpy"),
    "src/flashsim/config.py": _LAYERS + ("flashsim.io", "toy_envs", "scale", "torch", "numpy"),
    "src/flashsim/io.py": _LAYERS + ("flashsim.config", "flashsim.validation", "toy_envs", "scale"),
    "src/flashsim/policies.py": ("flashsim.sim", "flashsim.variance", "flashsim.experiments", "flashsim.cli", "scale"),
    "src/flashsim/exact.py": ("flashsim.sim", "flashsim.variance", "flashsim.experiments", "flashsim.cli", "scale"),
    "src/flashsim/sim": ("flashsim.variance", "flashsim.experiments", "flashsim.cli", "scale"),
    "src/flashsim/variance": ("flashsim.cli", "scale"),
    "src/flashsim/experiments": ("flashsim.cli", "scale"),
    "src/flashsim": ("scale",),
    # The framework integrations build on the loss core alone (the conformance adapters import them, not back).
    "src/flashsim/integrations": ("flashsim.policies", "flashsim.exact", "flashsim.sim", "flashsim.variance",
                                  "flashsim.experiments", "flashsim.cli", "flashsim.testing", "toy_envs", "scale"),
    # scale/run/claims.py reuses the claims machinery (flashsim.experiments: designs, cell runner, summaries);
    # tests/scale/test_scale_contract.py checks that scale imports only names flashsim.experiments exports.
    "scale": ("flashsim.sim", "flashsim.variance", "flashsim.cli", "flashsim.exact", "flashsim.policies", "toy_envs"),
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


def test_validation_imports_no_torch():
    """Every layer (and the CLI, before it knows whether it needs torch) may import validation cheaply."""
    import subprocess
    import sys

    code = "import sys, flashsim.validation; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
