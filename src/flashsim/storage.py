"""Files written safely: atomic writes, strict-JSON values and the checkpoint codec.

The seam of :mod:`flashsim.outputs` that modules without a run directory use too (the experiment cells, the
warm-up, the results pages):

- :func:`atomic_write` / :func:`atomic_write_text` — written to a temporary file in the same directory,
  fsync'ed, and moved into place with ``os.replace``, so a crash leaves either the old file or the new one,
  never half of one;
- :func:`jsonable` — a value with NaN/inf as ``None`` and numpy/torch scalars as Python numbers (strict JSON);
- :func:`save_checkpoint` / :func:`load_checkpoint` — ``torch.save`` of tensors and plain data (dicts, lists,
  tuples, str, numbers, bools, None), read back with ``torch.load(weights_only=True)``, which refuses anything
  else. Loading never runs code from the file: a file crafted to execute something on unpickling is a
  ``ValueError``, and nothing is executed.

**Typed state in checkpoints.** Numpy arrays and scalars, slices, deques, and instances of classes the caller
names in ``types`` (dataclasses and small state holders of its own) are stored as tagged plain data:
``{"__ndarray__": tensor}``, ``{"__object__": "module.Class", "state": {...}}``. Loading rebuilds an object
only when its class is in the caller's ``types``; the file names a class, it never supplies code.
"""

from __future__ import annotations

import collections
import io
import math
import os
import pickle
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

_FILE_MODE = 0o644
"""Permissions of files written atomically (rw-r--r--, like ``open(..., "w")`` under umask 022)."""
_ARRAY, _SCALAR, _DEQUE, _SLICE, _OBJECT = "__ndarray__", "__npscalar__", "__deque__", "__slice__", "__object__"


# ----------------------------------------------------------------------------- atomic files


def atomic_write(path: Path | str, write: Callable[[io.BufferedWriter], object]) -> None:
    """Call ``write(file)`` on a temporary file next to ``path``, then move it onto ``path``."""
    path = Path(path)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(temporary, _FILE_MODE)  # mkstemp creates 0600; results are meant to be shared
        with os.fdopen(handle, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path | str, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    atomic_write(path, lambda file: file.write(text.encode()))


def jsonable(value: object) -> object:
    """``value`` with NaN/inf floats as ``None`` and numpy/torch scalars as Python numbers (strict JSON)."""
    if isinstance(value, Mapping):
        return {str(key): jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(item) for item in value]
    if hasattr(value, "item") and callable(value.item):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


# ----------------------------------------------------------------------------- checkpoints


def save_checkpoint(path: Path | str, state: Mapping[str, Any], *, types: Iterable[type] = ()) -> None:
    """Write ``state`` atomically as tensors and plain data (see the module docstring for ``types``).

    Raises:
        TypeError: ``state`` holds an object that is neither plain data nor of a class in ``types``
            (the message gives its path in ``state``).
    """
    encoded = _encode(dict(state), "state", {_name(cls): cls for cls in types})
    atomic_write(path, lambda file: torch.save(encoded, file))


def load_checkpoint(path: Path | str, *, types: Iterable[type] = ()) -> dict[str, Any]:
    """Read a checkpoint written by :func:`save_checkpoint` with ``torch.load(weights_only=True)``.

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: the file holds anything but tensors and plain data (nothing in it is run), or names
            a class not in ``types``.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    try:
        raw = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, AttributeError) as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ValueError(
            f"{path} is not a flashsim checkpoint of tensors and plain data; refusing to load it "
            f"(torch.load(weights_only=True): {first_line})"
        ) from None
    return _decode(raw, "state", {_name(cls): cls for cls in types})


def _encode(value: Any, where: str, classes: Mapping[str, type]) -> Any:
    if value is None or isinstance(value, (bool, str, bytes, torch.Tensor)) or type(value) in (int, float):
        return value
    if isinstance(value, np.ndarray):
        return {_ARRAY: torch.from_numpy(np.array(value, copy=True))}
    if isinstance(value, np.generic):
        return {_SCALAR: torch.from_numpy(np.array(value))}
    if isinstance(value, slice):
        return {_SLICE: [_encode(part, where, classes) for part in (value.start, value.stop, value.step)]}
    if isinstance(value, collections.deque):
        return {_DEQUE: [_encode(item, f"{where}[{i}]", classes) for i, item in enumerate(value)]}
    if type(value) in (dict, collections.OrderedDict):
        for key in value:
            if not (key is None or type(key) in (str, int, float, bool)):
                raise TypeError(f"{where} has a key of type {type(key).__name__}; checkpoints take str/int keys")
        return {key: _encode(item, f"{where}.{key}", classes) for key, item in value.items()}
    if type(value) in (list, tuple):
        return type(value)(_encode(item, f"{where}[{i}]", classes) for i, item in enumerate(value))
    name = _name(type(value))
    if name in classes:
        state = {f.name: getattr(value, f.name) for f in fields(value)} if is_dataclass(value) else vars(value)
        return {_OBJECT: name, "state": _encode(dict(state), f"{where}.{type(value).__name__}", classes)}
    raise TypeError(
        f"{where} is a {name}, which a checkpoint cannot hold: store tensors, numpy arrays and plain data, "
        "or pass the class in types="
    )


def _decode(value: Any, where: str, classes: Mapping[str, type]) -> Any:
    if isinstance(value, dict):
        if _ARRAY in value and len(value) == 1:
            return value[_ARRAY].numpy()
        if _SCALAR in value and len(value) == 1:
            return value[_SCALAR].numpy()[()]
        if _SLICE in value and len(value) == 1:
            return slice(*value[_SLICE])
        if _DEQUE in value and len(value) == 1:
            return collections.deque(_decode(item, where, classes) for item in value[_DEQUE])
        if _OBJECT in value and set(value) == {_OBJECT, "state"}:
            name = value[_OBJECT]
            if name not in classes:
                raise ValueError(f"{where} names class {name!r}, which this loader does not accept")
            obj = object.__new__(classes[name])  # no __init__: the state below is the object's whole state
            vars(obj).update(_decode(value["state"], f"{where}.{name}", classes))
            return obj
        return {key: _decode(item, f"{where}.{key}", classes) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_decode(item, where, classes) for item in value)
    return value


def _name(cls: type) -> str:
    """The name a checkpoint stores for ``cls``: ``module.qualname``, or the class's own ``checkpoint_name``
    (a class that moved to another module keeps the name its checkpoints were written under: they still load,
    and a run writes the same bytes as before the move)."""
    return vars(cls).get("checkpoint_name", f"{cls.__module__}.{cls.__qualname__}")


__all__ = ["atomic_write", "atomic_write_text", "jsonable", "load_checkpoint", "save_checkpoint"]
