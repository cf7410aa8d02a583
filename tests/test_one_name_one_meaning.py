"""One name, one meaning: no public name is defined in two modules of ``src/``, ``toy_envs/`` and ``scale/``.

A reader who meets a name twice assumes it is one thing (``../shared/STYLE.md``). The scan reads each
module's top level with ``ast`` (nothing is imported): classes, functions and assigned names, also inside
top-level ``if``/``try`` blocks. What does not count as a definition:

- a re-export (``from x import name``, ``import x``) or an alias ``name = module.name`` of the same name;
- private names (``_name``): they are local to their module by convention, never imported from it, so a
  reader meets each one inside one file only (docs/design.md, "One name, one meaning");
- type variables (``T = TypeVar("T")``): a placeholder of one module's signatures;
- :data:`PROTOCOLS`: a name that a family of sibling modules each define by contract, with one meaning
  (``configure`` / ``run`` of every ``flashsim`` subcommand module, ``variants`` / ``policy_loss`` /
  ``NOT_IN_TABLE`` and ``LEFT_OUT`` of every framework adapter, ``main`` of a runnable module).

Config keys: a key name (a field's own name) used by more than one of the simulator's ``TrainConfig``,
``flashsim variance``'s ``SweepConfig`` and ``scale``'s ``Config``, or by two sections of one of them, is met
in two places; :data:`SHARED_CONFIG_KEYS` states the one meaning of each.
"""

from __future__ import annotations

import ast
import dataclasses
import fnmatch
import typing
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("src", "toy_envs", "scale")

PROTOCOLS = {
    "configure": "src/flashsim/cli/*.py",  # configure(parser) of each subcommand: its flags
    "run": "src/flashsim/cli/*.py",  # run(args) -> exit status of each subcommand
    "variants": "src/flashsim/testing/adapters/*.py",  # the adapter rows of a framework (the package's dispatches)
    "policy_loss": "src/flashsim/testing/adapters/*.py",  # a framework's loss as one check-loss row, from options
    "NOT_IN_TABLE": "src/flashsim/testing/adapters/*.py",  # a framework's variants without a conformance row, and why
    "LEFT_OUT": "src/flashsim/testing/adapters/*.py",  # a framework's pipeline steps an adapter does not run, and why
    "main": "*",  # main(argv) -> exit status: the entry point of a runnable module
}
"""Names that sibling modules each define with one meaning: name → the modules (a glob) allowed to."""


def _is_type_variable(value: ast.expr) -> bool:
    return (isinstance(value, ast.Call) and isinstance(value.func, (ast.Name, ast.Attribute))
            and (value.func.id if isinstance(value.func, ast.Name) else value.func.attr) == "TypeVar")


def _is_alias(name: str, value: ast.expr | None) -> bool:
    """``name = module.name`` (or ``= name``): the same thing under its own name, not a new definition."""
    return (isinstance(value, ast.Attribute) and value.attr == name) or (isinstance(value, ast.Name)
                                                                          and value.id == name)


def _top_level(statements: list[ast.stmt]):
    for node in statements:
        if isinstance(node, (ast.If, ast.Try)):
            yield from _top_level(node.body + node.orelse + getattr(node, "finalbody", []))
            for handler in getattr(node, "handlers", []):
                yield from _top_level(handler.body)
        else:
            yield node


def defined_names(source: str) -> set[str]:
    """Public names a module's top level defines (see the module docstring for what is left out)."""
    names: set[str] = set()
    for node in _top_level(ast.parse(source).body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if node.value is not None and _is_type_variable(node.value):
                continue
            names.update(target.id for target in targets
                         if isinstance(target, ast.Name) and not _is_alias(target.id, node.value))
    return {name for name in names if not name.startswith("_")}


def clashes(modules: dict[str, str]) -> dict[str, list[str]]:
    """Names defined in more than one of ``modules`` (relative path → source), protocols excepted."""
    where: dict[str, list[str]] = defaultdict(list)
    for path, source in sorted(modules.items()):
        for name in defined_names(source):
            where[name].append(path)
    return {name: paths for name, paths in sorted(where.items()) if len(paths) > 1
            and not (name in PROTOCOLS and all(fnmatch.fnmatch(path, PROTOCOLS[name]) for path in paths))}


def project_modules() -> dict[str, str]:
    return {path.relative_to(ROOT).as_posix(): path.read_text()
            for folder in SCANNED for path in sorted((ROOT / folder).rglob("*.py"))}


def test_no_public_name_is_defined_in_two_modules():
    found = clashes(project_modules())
    assert not found, "names defined in two modules (rename one so that each name has one meaning): " + "; ".join(
        f"{name} in {', '.join(paths)}" for name, paths in found.items())


# ----------------------------------------------------------------------------- the scan itself


def test_a_function_and_a_class_of_one_name_in_two_modules_are_a_clash():
    assert clashes({"a.py": "def evaluate():\n    pass\n", "b.py": "class evaluate:\n    pass\n"}) == {
        "evaluate": ["a.py", "b.py"]}


def test_module_constants_clash_also_when_assigned_inside_a_top_level_if_or_try():
    a = "try:\n    import numpy\nexcept ImportError:\n    MODES = ()\n"
    b = "if True:\n    MODES: tuple = ('sync',)\n"
    assert clashes({"a.py": a, "b.py": b}) == {"MODES": ["a.py", "b.py"]}


@pytest.mark.parametrize("second", [
    pytest.param("from a import shard\n", id="re-export"),
    pytest.param("import a\nshard = a.shard\n", id="alias of the same name"),
    pytest.param("def _shard():\n    pass\n_shard_count = 2\n", id="private names"),
    pytest.param("from typing import TypeVar\nshard = TypeVar('shard')\n", id="type variable"),
    pytest.param("class Sharding:\n    def shard(self):\n        pass\n", id="a method is not top level"),
])
def test_what_is_not_a_second_definition(second):
    assert clashes({"a.py": "def shard():\n    pass\n", "b.py": second}) == {}


def test_a_protocol_name_is_allowed_only_in_its_modules():
    configure = "def configure(parser):\n    pass\n"
    assert clashes({"src/flashsim/cli/train.py": configure, "src/flashsim/cli/variance.py": configure}) == {}
    assert clashes({"src/flashsim/cli/train.py": configure, "scale/cli.py": configure}) == {
        "configure": ["scale/cli.py", "src/flashsim/cli/train.py"]}


# ----------------------------------------------------------------------------- config keys

SHARED_CONFIG_KEYS = {
    "seed": "the seed of all the run's randomness",
    "env": "an env preset or a gymnasium id with exact tables",
    "policy": "the policy kind of flashsim.policies (tabular, linear, ...)",
    "loss": "a name of flashsim.losses.LOSSES",
    "loss_options": "keyword options of that loss, checked by flashsim.losses.check_loss_options",
    "group_size": "G, the trajectories sampled per prompt",
    "updates": "learner updates (optimizer steps) to run",
    "learning_rate": "the optimizer's (peak) learning rate of its section's steps",
    "batch_size": "items processed together in one step of its section (trajectories per update, "
                  "demonstrations per warm-up step, prompts per evaluation engine call)",
    "steps": "optimization steps of its section (exact-ascent steps to θ_N, supervised warm-up steps)",
    "checkpoint_every": "updates between checkpoints",
}
"""Config key names (a field's own name) used by more than one config, each with its one meaning."""


def config_keys(config: type, prefix: str = "") -> list[str]:
    """Dotted keys of a config dataclass, sections (dataclass-typed fields, optional or not) expanded."""
    keys, hints = [], typing.get_type_hints(config)
    for field in dataclasses.fields(config):
        sections = [kind for kind in (hints[field.name], *typing.get_args(hints[field.name]))
                    if dataclasses.is_dataclass(kind)]
        keys += config_keys(sections[0], f"{prefix}{field.name}.") if sections else [prefix + field.name]
    return keys


def shared_key_names(configs: dict[str, type]) -> dict[str, list[str]]:
    """Key names used more than once across ``configs`` (label → config dataclass) → where each is used."""
    where: dict[str, list[str]] = defaultdict(list)
    for label, config in configs.items():
        for key in config_keys(config):
            where[key.rsplit(".", 1)[-1]].append(f"{label}: {key}")
    return {name: keys for name, keys in where.items() if len(keys) > 1}


def test_a_config_key_name_in_two_places_has_one_stated_meaning():
    from flashsim.sim.config import TrainConfig
    from flashsim.variance.sweep import SweepConfig
    from scale.run.config import Config

    shared = shared_key_names({"flashsim train": TrainConfig, "flashsim variance": SweepConfig, "scale": Config})
    unstated = {name: keys for name, keys in shared.items() if name not in SHARED_CONFIG_KEYS}
    assert not unstated, f"config key names in two places without a stated meaning (rename, or state it): {unstated}"
    assert set(SHARED_CONFIG_KEYS) <= set(shared), f"no longer shared: {set(SHARED_CONFIG_KEYS) - set(shared)}"


@dataclasses.dataclass(frozen=True)
class _Warmup:
    steps: int = 1


@dataclasses.dataclass(frozen=True)
class _Run:
    warmup: _Warmup | None = None
    mode: str = "sync"


@dataclasses.dataclass(frozen=True)
class _Sweep:
    mode: str = "grid"
    steps: int = 2


def test_a_key_name_in_two_configs_or_two_sections_is_found_with_where_it_is():
    assert config_keys(_Run) == ["warmup.steps", "mode"]
    assert shared_key_names({"run": _Run, "sweep": _Sweep}) == {
        "steps": ["run: warmup.steps", "sweep: steps"], "mode": ["run: mode", "sweep: mode"]}
