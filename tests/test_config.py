"""flashsim.config: one mechanism from dataclasses to --help, flags, YAML and --set, strict everywhere."""

from __future__ import annotations

import argparse
import typing
from dataclasses import dataclass, field, is_dataclass

import pytest

from flashsim.config import add_flags, assign, field_docs, flag_assignments, from_dict, load, to_dict
from flashsim.sim.config import TrainConfig
from flashsim.variance.sweep import SweepConfig


@dataclass(frozen=True)
class Inner:
    rate: float = 0.5
    """A rate,
    documented over two lines."""
    name: str | None = None
    """An optional name."""


@dataclass(frozen=True)
class Outer:
    count: int = 1
    """How many."""
    sizes: tuple[int, ...] = (1, 2)
    """Sizes, comma-separated on the command line."""
    verbose: bool = False
    """Talk more."""
    inner: Inner = field(default_factory=Inner)
    """A section."""
    options: dict[str, object] = field(default_factory=dict)
    """Free keyword options."""


def _config_classes(root: type) -> set[type]:
    """``root`` and every dataclass reachable through its fields' annotations (sections, union members)."""
    found, stack = set(), [root]
    while stack:
        cls = stack.pop()
        if cls not in found:
            found.add(cls)
            for annotation in typing.get_type_hints(cls).values():
                stack += [t for t in (annotation, *typing.get_args(annotation)) if is_dataclass(t)]
    return found


ROOTS = [TrainConfig, SweepConfig]
try:
    from scale.run.config import Config as ScaleConfig

    ROOTS.append(ScaleConfig)
except ImportError:  # scale's extras (pyyaml) missing: flashsim alone is still checked
    pass


@pytest.mark.parametrize("root", ROOTS, ids=lambda cls: f"{cls.__module__}.{cls.__name__}")
def test_every_config_field_has_a_docstring_for_its_help_text(root):
    for cls in _config_classes(root):
        missing = [name for name, text in field_docs(cls).items() if not text]
        assert not missing, f"{cls.__name__} fields without a docstring: {missing}"


def test_docstrings_spanning_lines_are_read_whole():
    assert field_docs(Inner)["rate"] == "A rate, documented over two lines."


def test_generated_flags_carry_the_docstring_and_read_back_typed():
    parser = argparse.ArgumentParser()
    paths = add_flags(parser, Outer, flat=True, names={"inner.rate": ("--lr", "--rate")})
    assert "How many. [default: 1]" in " ".join(parser.format_help().split())
    args = parser.parse_args(["--count", "3", "--sizes", "4,5", "--verbose", "--lr", "0.25", "--name", "x"])
    data: dict = {}
    for path, value, text in flag_assignments(args, paths):
        assign(Outer, data, path, value, text=text)
    assert from_dict(Outer, data) == Outer(count=3, sizes=(4, 5), verbose=True, inner=Inner(0.25, "x"))


@dataclass(frozen=True)
class WithOptionalSection:
    inner: Inner | None = None
    """A section that may be left out (None: the caller's own values)."""


def test_flags_of_an_unset_optional_section_say_what_none_means_not_the_sections_defaults():
    parser = argparse.ArgumentParser()
    add_flags(parser, WithOptionalSection, flat=True)
    text = " ".join(parser.format_help().split())
    assert "A rate, documented over two lines. [default: the caller's own values]" in text
    assert "[default: 0.5]" not in text


def test_yaml_then_set_then_base_fill_the_same_dataclass(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("count: 2\ninner:\n  rate: 3e-4\noptions:\n  delta: 0.01\n")  # YAML 1.1 reads 3e-4 as text
    config = load(Outer, path, ["inner.name=null", "options.clip=0.2", "sizes=7"], base=Outer(verbose=True))
    assert config == Outer(count=2, sizes=(7,), verbose=True, inner=Inner(3e-4, None),
                           options={"delta": 0.01, "clip": 0.2})
    assert from_dict(Outer, to_dict(config)) == config


@pytest.mark.parametrize(
    ("data", "error", "key"),
    [({"inner": {"rate": "fast"}}, TypeError, "inner.rate"), ({"inner": {"size": 1}}, ValueError, "inner.size"),
     ({"sizes": [1, "two"]}, TypeError, r"sizes\[1\]"), ({"verbose": "yes"}, TypeError, "verbose"),
     ({"count": None}, TypeError, "count"), ({"options": ["a"]}, TypeError, "options")],
    ids=["word-for-float", "unknown-nested-key", "bad-list-item", "string-for-bool", "null-for-int",
         "list-for-mapping"],
)
def test_strict_errors_name_the_key(data, error, key):
    with pytest.raises(error, match=key):
        from_dict(Outer, data)


def test_a_set_without_equals_sign_is_an_error():
    with pytest.raises(ValueError, match="key=value"):
        load(Outer, assignments=["count"])
