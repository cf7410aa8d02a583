"""``assert_implements``: an object implements a ``typing.Protocol`` by signature, not only by attribute names.

``isinstance(x, SomeProtocol)`` with ``@runtime_checkable`` looks only at whether the names exist: an engine
whose ``generate`` takes the wrong arguments, or whose ``version`` is a method, passes it. This checks what a
caller relies on: each method takes the protocol's parameters (same names, kinds and order; extra ones only with
defaults), and each property is an attribute, not a method.
"""

from __future__ import annotations

import inspect
from typing import Any


def protocol_members(protocol: type) -> dict[str, Any]:
    """The protocol's own methods and properties, by name (not those of ``typing.Protocol`` or ``object``)."""
    return {name: value for name, value in vars(protocol).items()
            if not name.startswith("_") and (inspect.isfunction(value) or isinstance(value, property))}


def implementation_errors(obj: object, protocol: type) -> list[str]:
    """What ``obj`` (an instance, or a class) lacks or gets wrong of ``protocol``, one line each (empty: it
    implements it)."""
    cls, missing = (obj if isinstance(obj, type) else type(obj)), object()
    errors = []
    for name, member in protocol_members(protocol).items():
        declared = inspect.getattr_static(cls, name, missing)
        if declared is missing and (isinstance(obj, type) or not hasattr(obj, name)):
            errors.append(f"{name}: missing")
        elif isinstance(member, property):
            if inspect.isfunction(declared) or isinstance(declared, (staticmethod, classmethod)):
                errors.append(f"{name}: a method, but {protocol.__name__} reads it as an attribute")
        elif not inspect.isfunction(declared):
            errors.append(f"{name}: not a method")
        else:
            wanted = list(inspect.signature(member).parameters.values())[1:]  # less self
            given = list(inspect.signature(declared).parameters.values())[1:]
            errors += [f"{name}: {problem}" for problem in _parameter_errors(wanted, given)]
    return errors


def assert_implements(obj: object, protocol: type) -> None:
    errors = implementation_errors(obj, protocol)
    assert not errors, f"{type(obj).__name__} does not implement {protocol.__name__}:\n" + "\n".join(errors)


def _parameter_errors(wanted: list[inspect.Parameter], given: list[inspect.Parameter]) -> list[str]:
    accepts_any = any(p.kind is p.VAR_KEYWORD for p in given) and any(p.kind is p.VAR_POSITIONAL for p in given)
    if accepts_any:
        return []
    names = [p.name for p in given]
    errors = []
    for position, parameter in enumerate(wanted):
        if parameter.name not in names:
            errors.append(f"takes no parameter {parameter.name!r} (wanted {_show(wanted)}, got {_show(given)})")
        elif names.index(parameter.name) != position or given[position].kind is not parameter.kind:
            errors.append(f"parameter {parameter.name!r} is not where {_show(wanted)} puts it (got {_show(given)})")
    extra = [p for p in given if p.name not in {w.name for w in wanted}
             and p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    errors += [f"requires {p.name!r}, which callers of the protocol never pass" for p in extra]
    return errors


def _show(parameters: list[inspect.Parameter]) -> str:
    return "(" + ", ".join(p.name for p in parameters) + ")"
