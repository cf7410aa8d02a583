"""One way to configure: frozen dataclasses → CLI flags, YAML files and ``--set key=value``, all strict.

A config is a frozen dataclass (nested dataclasses are its sections) whose fields carry docstrings;
those docstrings are the ``--help`` text. Every way in goes through the same typed conversion and
ends in the dataclass constructor, whose ``__post_init__`` checks values with
:mod:`flashsim.validation`:

- :func:`from_dict` builds a config from plain data (a parsed YAML file, a checkpoint's config) on top
  of an optional ``base`` config; an unknown key is a ``ValueError``, a value of the wrong type a
  ``TypeError``, a bad value the constructor's ``ValueError`` — each naming the key (``train.lr``);
- :func:`assign` puts one ``path = value`` into such data, converting text by the field's annotation
  (``--set train.updates=10``, or a generated flag);
- :func:`add_flags` generates one argparse flag per field and :func:`flag_assignments` reads them back;
- :func:`load` is the one load order of every command: defaults (or a base config) → YAML file →
  ``--set`` → flags;
- :func:`to_dict` is the inverse of :func:`from_dict` (``from_dict(C, to_dict(c)) == c``).

Annotations understood: ``bool``, ``int``, ``float``, ``str``, ``X | None``, ``tuple[X, ...]``,
``Mapping[str, object]`` / ``dict[str, Any]`` (merged key by key into the base's), a dataclass
(a section), and a union of dataclasses (a mapping with a ``type`` key naming the class). A field may
set ``metadata={"parse": function}`` to read its text form (``--lag workers:64``); an optional section
may set ``metadata={"section_base": function}`` to say what its keys refine while it is None. Nothing is
``eval``-ed: text becomes a value only through ``int``, ``float``, ``json.loads`` or the field's parser.
Why a small helper rather than tyro: ``docs/design.md``.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import io
import json
import os
import textwrap
import tokenize
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import MISSING, fields, is_dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from flashsim.validation import check_bool, check_int, check_real, check_str

T = TypeVar("T")
PARSE = "parse"
"""Field metadata key: a function ``str -> value`` that reads the field's text form."""
FORMER = "former"
"""Field metadata key: the field's former name, which loading refuses with an error naming the new one; or
``{former key: its new path}`` for keys that moved into this field (``{"delta": "loss_options.delta"}``)."""
SECTION_BASE = "section_base"
"""Field metadata key of an optional section (None by default): a function of the config's other field values
(a mapping, name → value) giving the section that keys set in it start from (``timing`` refines the env's own)."""
TYPE_KEY = "type"
"""Key that names the class of a union-of-dataclasses section in plain data."""
UNSET = object()
"""The default that ``_leaves`` gives the fields of an optional section that is None by default
(:func:`add_flags` then shows what None means there)."""


# ----------------------------------------------------------------------------- help text


@functools.cache
def field_docs(cls: type) -> Mapping[str, str]:
    """The docstring under each field of dataclass ``cls`` (and its dataclass bases), by field name.

    Read from the source with :mod:`tokenize`: a class-body line ``name: annotation ...`` followed by a
    line holding only a string literal. Whitespace is collapsed to single spaces.
    """
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if is_dataclass(klass):
            docs.update(_docs_of(klass))
    names = {f.name for f in fields(cls)}
    return types.MappingProxyType({name: docs.get(name, "") for name in names})


def _docs_of(cls: type) -> dict[str, str]:
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):  # no source (frozen app): no help text, nothing breaks
        return {}
    docs, pending, depth, line = {}, None, 0, []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.INDENT:
            depth += 1
        elif token.type == tokenize.DEDENT:
            depth -= 1
        elif token.type in (tokenize.NEWLINE, tokenize.ENDMARKER):
            kinds = [(t.type, t.string) for t in line]
            if depth == 1 and len(kinds) >= 2 and kinds[0][0] == tokenize.NAME and kinds[1] == (tokenize.OP, ":"):
                pending = kinds[0][1]
            elif depth == 1 and pending and kinds and all(k == tokenize.STRING for k, _ in kinds):
                docs[pending] = " ".join("".join(_literal(s) for _, s in kinds).split())
                pending = None
            else:
                pending = None
            line = []
        elif token.type not in (tokenize.NL, tokenize.COMMENT):
            line.append(token)
    return docs


def _literal(token: str) -> str:
    """The text of a plain string literal token (prefix and quotes removed; escapes left as written)."""
    body = token.lstrip("rRuUbBfF")
    quote = body[:3] if body[:3] in ('"""', "'''") else body[:1]
    return body[len(quote): -len(quote)]


# ----------------------------------------------------------------------------- plain data → config


def from_dict(cls: type[T], data: Mapping[str, Any], *, base: T | None = None, name: str = "") -> T:
    """``cls`` built from plain data, on top of ``base`` (default: the class defaults), strictly.

    Raises:
        ValueError: an unknown key, or a value the constructor rejects (the message names the key).
        TypeError: a value of the wrong type (the message names the key).
    """
    if not isinstance(data, Mapping):
        raise TypeError(f"{name or cls.__name__} must be a mapping of its keys, got {type(data).__name__}")
    hints = _hints(cls)
    known = {f.name for f in fields(cls)}
    unknown = sorted(str(key) for key in data if key not in known and key != TYPE_KEY)
    if unknown:
        for key in unknown:
            _check_renamed(cls, key, name)
        raise ValueError(f"unknown key(s) {', '.join(_join(name, k) for k in unknown)}; valid keys of "
                         f"{name or cls.__name__}: {', '.join(sorted(known))}")
    if data.get(TYPE_KEY, cls.__name__) != cls.__name__:
        raise ValueError(f"{_join(name, TYPE_KEY)} is {data[TYPE_KEY]!r} but this section is a {cls.__name__}")
    changes = {}
    for f in fields(cls):
        if f.name in data:
            current = getattr(base, f.name) if base is not None else _default(f)
            if current is None and SECTION_BASE in f.metadata and isinstance(data[f.name], Mapping):
                values = {g.name: changes[g.name] if g.name in changes else
                          getattr(base, g.name) if base is not None else _default(g) for g in fields(cls)}
                current = f.metadata[SECTION_BASE](values)
            changes[f.name] = _convert(hints[f.name], data[f.name], _join(name, f.name), current,
                                       f.metadata.get(PARSE))
    try:
        return replace(base, **changes) if base is not None else cls(**changes)
    except (TypeError, ValueError) as error:
        raise _qualified(error, name, cls) from None


def _convert(annotation: Any, value: Any, name: str, current: Any, parse: Callable | None) -> Any:
    if parse is not None and isinstance(value, str):
        try:
            return parse(value)
        except (TypeError, ValueError) as error:
            raise type(error)(f"{name}: {error}") from None
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return _convert_union(args, value, name, current)
    if is_dataclass(annotation):
        if isinstance(value, annotation):
            return value
        return from_dict(annotation, value, base=current if isinstance(current, annotation) else None, name=name)
    if annotation is bool:
        return check_bool(name, value)
    if annotation is int:
        return check_int(name, value)
    if annotation is float:
        if isinstance(value, str):  # YAML 1.1 reads 3e-4 as a string; a float literal is still a float
            value = _float_from_text(value, name)
        return check_real(name, value, finite=False)
    if annotation is str:
        return check_str(name, value)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"{name} must be a list, got {type(value).__name__}")
        return tuple(_convert(args[0], item, f"{name}[{i}]", None, None) for i, item in enumerate(value))
    if origin in (dict, Mapping) or annotation in (dict, Mapping):
        if not (isinstance(value, Mapping) and all(isinstance(key, str) for key in value)):
            raise TypeError(f"{name} must be a mapping with string keys, got {type(value).__name__}")
        return {**(current if isinstance(current, Mapping) else {}), **value}
    if annotation in (Any, object):
        return value
    raise TypeError(f"{name}: unsupported annotation {annotation!r}")


def _convert_union(options: tuple, value: Any, name: str, current: Any) -> Any:
    if value is None:
        if type(None) in options:
            return None
        raise TypeError(f"{name} must not be null")
    classes = [option for option in options if is_dataclass(option)]
    if classes and isinstance(value, tuple(classes)):
        return value
    if classes and isinstance(value, Mapping):
        if len(classes) == 1:
            cls = classes[0]
        elif TYPE_KEY in value:
            by_name = {cls.__name__: cls for cls in classes}
            if value[TYPE_KEY] not in by_name:
                raise ValueError(
                    f"{_join(name, TYPE_KEY)} must be one of {', '.join(by_name)}; got {value[TYPE_KEY]!r}"
                )
            cls = by_name[value[TYPE_KEY]]
        elif type(current) in classes:
            cls = type(current)
        else:
            raise ValueError(f"{name} needs a {TYPE_KEY!r} key: one of {', '.join(c.__name__ for c in classes)}")
        return from_dict(cls, value, base=current if type(current) is cls else None, name=name)
    errors = []
    for option in (o for o in options if o is not type(None) and not is_dataclass(o)):
        try:
            return _convert(option, value, name, current, None)
        except (TypeError, ValueError) as error:
            errors.append(error)
    if errors and all(isinstance(e, ValueError) for e in errors):
        raise errors[0]
    expected = " or ".join(getattr(o, "__name__", str(o)).replace("NoneType", "null") for o in options)
    raise TypeError(f"{name} must be {expected}, got {type(value).__name__} {value!r}")


# ----------------------------------------------------------------------------- config → plain data


def to_dict(config: Any) -> dict[str, Any]:
    """Plain data (dicts, lists, str, numbers, bools, None) that :func:`from_dict` turns back into ``config``."""
    hints = _hints(type(config))
    return {f.name: _plain(getattr(config, f.name), hints[f.name]) for f in fields(config)}


def _plain(value: Any, annotation: Any) -> Any:
    if is_dataclass(value):
        data = to_dict(value)
        options = typing.get_args(annotation)
        if sum(is_dataclass(option) for option in options) > 1:
            data = {TYPE_KEY: type(value).__name__, **data}
        return data
    if isinstance(value, Mapping):
        return {key: _plain(item, Any) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item, Any) for item in value]
    return value


# ----------------------------------------------------------------------------- text: --set and flags


def assign(cls: type, data: dict[str, Any], path: str, value: Any, *, text: bool = True,
           base: Any = None) -> None:
    """Put ``path = value`` (``"train.lr"``, dotted) into the plain data of a ``cls`` config, in place.

    With ``text=True`` the value is a string read by the field's type (``int("10")``, ``"a,b"`` → a
    tuple, ``null`` → None, JSON for mappings, the field's ``parse`` metadata). Keys inside a mapping
    field (``algorithm.loss_options.delta``) take numbers, ``true``/``false``/``null`` or strings.
    ``base`` resolves which class a union-of-dataclasses section has (``lag.crash_prob``).
    """
    keys = path.split(".")
    target, owner, current = data, cls, base
    for depth, key in enumerate(keys):
        name = ".".join(keys[: depth + 1])
        valid = {f.name: f for f in fields(owner)}
        if key not in valid:
            _check_renamed(owner, key, ".".join(keys[:depth]))
            raise ValueError(f"unknown key {name}; valid keys of {'.'.join(keys[:depth]) or owner.__name__}: "
                             f"{', '.join(sorted(valid))}")
        annotation, current = _hints(owner)[key], getattr(current, key, None)
        last = depth == len(keys) - 1
        if last:
            parse = valid[key].metadata.get(PARSE)
            target[key] = _from_text(annotation, value, name, parse) if text else value
            if is_dataclass(target[key]):
                target[key] = _plain(target[key], annotation)
            return
        if _is_mapping(annotation):
            section = target.setdefault(key, {})
            section[".".join(keys[depth + 1:])] = _scalar_from_text(value) if text else value
            return
        section = target.get(key)
        if isinstance(section, str) and valid[key].metadata.get(PARSE):  # text form first (lag: workers:8)
            section = _plain(_convert(annotation, section, name, None, valid[key].metadata[PARSE]), annotation)
        section = {} if section is None else section
        if not isinstance(section, dict):
            raise TypeError(f"{name} is a section; it cannot hold {section!r}")
        doc = field_docs(owner).get(key, "")
        owner = _section_class(annotation, section, current, name)
        _check_section_key(annotation, owner, keys[depth + 1], name, doc)
        if len(_dataclass_options(annotation)) > 1:
            section.setdefault(TYPE_KEY, owner.__name__)
        target[key] = target = section


def parse_assignment(text: str) -> tuple[str, str]:
    """``"section.key=value"`` → ``("section.key", "value")``."""
    path, separator, value = text.partition("=")
    if not separator or not path.strip():
        raise ValueError(f"--set expects section.key=value, got {text!r}")
    return path.strip(), value


def load(cls: type[T], path: str | Path | None = None, assignments: Iterable[str] = (),
         flags: Iterable[tuple[str, Any, bool]] = (), *, base: T | None = None) -> T:
    """A ``cls`` config in the load order of every command: ``base`` (default: the class defaults), then the
    YAML file at ``path``, then the ``--set`` texts ``assignments`` (``"key=value"``), then ``flags``.

    ``flags`` are ``(path, value, is_text)`` triples: from :func:`flag_assignments`, or from code (an
    experiment's overrides, ``is_text=False``). Later ones win. An assignment that chooses a section
    (``lag=workers:8``) goes before those that set keys inside it (``lag.crash_prob=0.1``), whichever
    stage each came from, so that the keys refine the chosen section.

    Raises:
        ValueError: an unknown key, a malformed ``--set``, a value the constructor rejects.
        TypeError: a value of the wrong type. Both name the key.
    """
    data = read_yaml(path) if path is not None else {}
    given = [(*parse_assignment(text), True) for text in assignments] + list(flags)
    paths = [key for key, _, _ in given]
    given.sort(key=lambda item: not any(other.startswith(item[0] + ".") for other in paths))  # stable
    for key, value, text in given:
        assign(cls, data, key, value, text=text, base=base if base is not None else cls())
    return from_dict(cls, data, base=base)


def read_yaml(path: str | Path) -> dict[str, Any]:
    """A YAML mapping from a file (``yaml.safe_load``: plain data only, no tags that build objects)."""
    import yaml  # only configs from files need PyYAML

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"config file {str(path)!r} does not exist")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        raise ValueError(f"config file {str(path)!r} is not valid YAML: {error}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise TypeError(f"config file {str(path)!r} must hold a mapping of keys, got {type(data).__name__}")
    return data


def add_flags(
    parser: argparse.ArgumentParser, cls: type, *, prefix: str = "", flat: bool = False,
    names: Mapping[str, str | Sequence[str]] | None = None, exclude: Iterable[str] = (),
) -> list[str]:
    """One flag per leaf field of ``cls`` (recursing into sections); returns the paths they set.

    A flag is ``--field-name`` (``flat``) or ``--section.field-name``; ``names`` gives some paths their
    own flags (first one primary). Its help is the field's docstring and default. Mapping fields and
    unions of dataclasses without a ``parse`` function are left to ``--set``. Flags store raw text
    (bools: ``--x/--no-x``), read back with :func:`flag_assignments`.
    """
    names, exclude, paths = dict(names or {}), set(exclude), []
    defaults = cls()
    for path, f, annotation, default in _leaves(cls, defaults, prefix):
        if path in exclude:
            continue
        flags = names.get(path) or "--" + (path.rsplit(".", 1)[-1] if flat else path).replace("_", "-")
        flags = [flags] if isinstance(flags, str) else list(flags)
        doc = field_docs(_owner(cls, path, prefix)).get(f.name, "")
        if default is UNSET:  # a field of an unset optional section: say what None means there
            section = path.rsplit(".", 1)[0]
            section_doc = field_docs(_owner(cls, section, prefix)).get(section.rsplit(".", 1)[-1], "")
            shown = section_doc.partition("(None: ")[2].partition(")")[0] or f"{section} unset"
        else:
            shown = ",".join(map(str, default)) if isinstance(default, tuple) else default
        help_text = f"{doc} [default: {shown}]".replace("%", "%%")  # argparse %-formats help
        options: dict[str, Any] = {"dest": _dest(path), "default": None, "help": help_text}
        if annotation is bool:
            options["action"] = argparse.BooleanOptionalAction
        elif f.metadata.get(PARSE) is not None:
            options["metavar"] = "SPEC"
        else:
            options["metavar"] = "A,B,..." if typing.get_origin(annotation) is tuple else _metavar(annotation)
        parser.add_argument(*flags, **options)
        paths.append(path)
    return paths


def flag_assignments(args: argparse.Namespace, paths: Iterable[str]) -> list[tuple[str, Any, bool]]:
    """``(path, value, is_text)`` for every generated flag given on the command line."""
    given = []
    for path in paths:
        value = getattr(args, _dest(path))
        if value is not None:
            given.append((path, value, not isinstance(value, bool)))
    return given


# ----------------------------------------------------------------------------- helpers


def _from_text(annotation: Any, text: Any, name: str, parse: Callable | None) -> Any:
    if not isinstance(text, str):
        raise TypeError(f"{name}: expected text, got {type(text).__name__}")
    if parse is not None:
        return _convert(annotation, text, name, None, parse)
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        if text.strip().lower() in ("null", "none") and type(None) in args:
            return None
        options = [o for o in args if o is not type(None)]
        if len(options) == 1:
            return _from_text(options[0], text, name, None)
        return _convert(annotation, _scalar_from_text(text), name, None, None)
    if annotation is bool:
        word = text.strip().lower()
        if word not in ("true", "false"):
            raise TypeError(f"{name} must be a bool (true or false), got {text!r}")
        return word == "true"
    if annotation is int:
        try:
            return int(text)
        except ValueError:
            raise TypeError(f"{name} must be an int, got {text!r}") from None
    if annotation is float:
        return _float_from_text(text, name)
    if annotation is str:
        return text
    if origin is tuple:
        return tuple(_from_text(args[0], part.strip(), f"{name}[{i}]", None)
                     for i, part in enumerate(p for p in text.split(",") if p.strip()))
    if _is_mapping(annotation):
        try:
            return _convert(annotation, json.loads(text), name, None, None)
        except json.JSONDecodeError:
            raise TypeError(f"{name} must be a JSON mapping such as {{\"delta\": 0.01}}, got {text!r}") from None
    raise TypeError(f"{name} is a section; set its keys ({name}.KEY=VALUE)")


def _float_from_text(text: str, name: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise TypeError(f"{name} must be a real number, got {text!r}") from None


def _scalar_from_text(text: str) -> Any:
    """A value inside a mapping field: JSON scalar (number, true/false/null, quoted string) or the text."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return text
    return value if value is None or isinstance(value, (bool, int, float, str)) else text


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    # Resolves the class's own annotation strings (written by its author, never data from a file).
    return typing.get_type_hints(cls)


def _default(f: Any) -> Any:
    if f.default is not MISSING:
        return f.default
    return f.default_factory() if f.default_factory is not MISSING else None


def _dataclass_options(annotation: Any) -> list[type]:
    if is_dataclass(annotation):
        return [annotation]
    return [option for option in typing.get_args(annotation) if is_dataclass(option)]


def _is_mapping(annotation: Any) -> bool:
    return typing.get_origin(annotation) in (dict, Mapping) or annotation in (dict, Mapping)


def _section_class(annotation: Any, data: Any, current: Any, name: str) -> type:
    classes = _dataclass_options(annotation)
    if not classes:
        raise ValueError(f"{name} is not a section (it has no keys)")
    if isinstance(data, Mapping) and TYPE_KEY in data:
        for cls in classes:
            if cls.__name__ == data[TYPE_KEY]:
                return cls
    if len(classes) == 1:
        return classes[0]
    if type(current) in classes:
        return type(current)
    raise ValueError(f"{name} is one of {', '.join(c.__name__ for c in classes)}; set it first")


def _check_renamed(cls: type, key: str, section: str) -> None:
    for f in fields(cls):
        former = f.metadata.get(FORMER)
        if former == key:
            raise ValueError(f"{_join(section, key)} is now called {_join(section, f.name)}")
        if isinstance(former, Mapping) and key in former:  # a key that moved into this field: {old: new path}
            raise ValueError(f"{_join(section, key)} is now {_join(section, former[key])}")


def _check_section_key(annotation: Any, owner: type, key: str, section: str, doc: str) -> None:
    """A key of another class of a union section (``lag.crash_prob`` while ``lag`` is a FixedLag): say which."""
    others = [cls for cls in _dataclass_options(annotation) if key in {g.name for g in fields(cls)}]
    if others and owner not in others:
        raise ValueError(f"{section}.{key} is a key of {others[0].__name__}, but {section} is a {owner.__name__} "
                         f"here; choose {others[0].__name__} for {section} first ({section}: {doc})")


def _leaves(cls: type, instance: Any, prefix: str) -> Iterable[tuple[str, Any, Any, Any]]:
    hints = _hints(cls)
    for f in fields(cls):
        path, annotation, default = _join(prefix, f.name), hints[f.name], getattr(instance, f.name)
        classes = _dataclass_options(annotation)
        if f.metadata.get(PARSE) is not None:
            yield path, f, annotation, default
        elif len(classes) == 1 and default is None:  # an optional section, unset: its fields have no default
            for leaf_path, leaf, leaf_annotation, _ in _leaves(classes[0], classes[0](), path):
                yield leaf_path, leaf, leaf_annotation, UNSET
        elif len(classes) == 1:
            section = default if isinstance(default, classes[0]) else classes[0]()
            yield from _leaves(classes[0], section, path)
        elif not classes and not _is_mapping(annotation):
            yield path, f, annotation, default


def _owner(cls: type, path: str, prefix: str) -> type:
    keys = path.split(".")[len(prefix.split(".")) if prefix else 0: -1]
    for key in keys:
        cls = _dataclass_options(_hints(cls)[key])[0]
    return cls


def _metavar(annotation: Any) -> str:
    options = [o for o in typing.get_args(annotation) if o is not type(None)] or [annotation]
    return getattr(options[0], "__name__", "VALUE").upper()


def _dest(path: str) -> str:
    return "config__" + path.replace(".", "__")


def _join(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def _qualified(error: Exception, section: str, cls: type) -> Exception:
    """The constructor's error with the key's full path (``batch_size must ...`` → ``train.batch_size must ...``)."""
    message = str(error)
    if section and any(message.startswith(f"{f.name} ") for f in fields(cls)):
        message = f"{section}.{message}"
    elif section and not message.startswith(section):
        message = f"{section}: {message}"
    return type(error)(message)


# ----------------------------------------------------------------------------- output directories
# A command's ``--out`` and a config's ``out`` are checked here, beside the flags every command is parsed with,
# rather than in flashsim.validation: the flag parsing is part of one update's walk (docs/walk.md), a file more
# is not.


def check_directory(name: str, value: object) -> str | os.PathLike:
    """A directory name: a path, or a string that is not empty or blank. ``Path("")`` is the working directory, so
    an empty ``--out`` (an unset shell variable, ``--out "$OUT"``) would otherwise write a run's files, or resume a
    sweep, in whatever directory the command ran from.

    >>> check_directory("out", "")
    Traceback (most recent call last):
    ...
    ValueError: out must name a directory, got '' (an empty name would mean the working directory; pass . for that)
    """
    if isinstance(value, os.PathLike):  # a Path is never empty: Path("") is already "."
        return value
    check_str(name, value)
    if not value.strip():
        raise ValueError(f"{name} {_empty_directory(value)}")
    return value


def directory_argument(text: str) -> Path:
    """``type=`` for a command's ``--out``: the refusal of :func:`check_directory` as argparse's one-line usage error
    (``error: argument --out: must name a directory, ...``, exit status 2)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(_empty_directory(text))
    return Path(text)


def _empty_directory(value: str) -> str:
    return f"must name a directory, got {value!r} (an empty name would mean the working directory; pass . for that)"
