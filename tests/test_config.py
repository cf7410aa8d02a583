"""flashsim.config: one mechanism from dataclasses to --help, flags, YAML and --set, strict everywhere."""

from __future__ import annotations

import argparse
import typing
from dataclasses import dataclass, field, is_dataclass

import pytest

from flashsim.config import (
    FORMER,
    SECTION_BASE,
    add_flags,
    assign,
    field_docs,
    flag_assignments,
    from_dict,
    load,
    to_dict,
)
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


@dataclass(frozen=True)
class Small:
    size: int = 1
    """A size."""


@dataclass(frozen=True)
class Large:
    size: int = 10
    """A size."""
    extra: float = 0.5
    """Only the large section has it."""


def _small_base(values):
    return Inner(rate=values["count"] / 10)


@dataclass(frozen=True)
class Chosen:
    count: int = 1
    """How many."""
    part: Small | Large = field(default_factory=Small)
    """A section of one of two classes."""
    tuned: Inner | None = field(default=None, metadata={SECTION_BASE: _small_base})
    """Optional; its keys refine Inner(rate=count / 10) (None: not tuned)."""
    renamed: int = field(default=0, metadata={FORMER: "old_name"})
    """A field that had another name."""


def test_load_order_is_defaults_then_yaml_then_set_then_flags(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("count: 2\nrenamed: 2\n")
    config = load(Chosen, path, ["count=3", "renamed=3"], [("count", "4", True)])
    assert (config.count, config.renamed) == (4, 3)
    assert load(Chosen, path, flags=[("count", 5, False)], base=Chosen(renamed=7)) == Chosen(count=5, renamed=2)


def test_a_section_chosen_by_a_later_stage_is_refined_by_keys_set_earlier():
    config = load(Chosen, assignments=["part.extra=0.25"], flags=[("part", {"type": "Large"}, False)])
    assert config.part == Large(extra=0.25)


def test_a_key_of_another_class_of_a_section_names_the_class_that_has_it():
    with pytest.raises(ValueError, match="part.extra is a key of Large, but part is a Small here; choose Large"):
        load(Chosen, assignments=["part.extra=0.25"])


def test_keys_of_an_unset_optional_section_refine_its_section_base(tmp_path):
    assert load(Chosen, assignments=["count=5", "tuned.name=x"]).tuned == Inner(rate=0.5, name="x")
    assert from_dict(Chosen, {"tuned": {"name": "y"}}).tuned == Inner(rate=0.1, name="y")
    assert from_dict(Chosen, {"tuned": {"name": "y"}}, base=Chosen(tuned=Inner(rate=2.0))).tuned == Inner(2.0, "y")
    assert load(Chosen).tuned is None


def test_a_former_key_is_refused_with_an_error_naming_the_new_one(tmp_path):
    with pytest.raises(ValueError, match="^old_name is now called renamed$"):
        from_dict(Chosen, {"old_name": 1})
    with pytest.raises(ValueError, match="^old_name is now called renamed$"):
        load(Chosen, assignments=["old_name=1"])
