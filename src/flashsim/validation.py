"""Argument checks for public inputs: ``TypeError`` for a wrong type, ``ValueError`` for a bad value.

The one validation helper of flashsim (STYLE rules 7 and 22): configs, losses, the simulator, the
variance measurement and ``scale`` all check scalars here, so every message has the same shape —
the argument's name, what was expected, what came::

    batch_size must be an int, got float
    batch_size must be an int >= 1, got 0

Standard library only, so every layer may import it. ``toy_envs`` (layer 2) must not import flashsim;
it keeps the one other copy, ``toy_envs/_checks.py``, with the same rules.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from numbers import Integral, Real
from typing import TypeVar

T = TypeVar("T")


def check_int(name: str, value: object, *, low: int | None = None, high: int | None = None) -> int:
    """An integer (not a bool) in ``[low, high]``; returns it as a Python int.

    >>> check_int("batch_size", 8, low=1)
    8
    """
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    value = int(value)
    if (low is not None and value < low) or (high is not None and value > high):
        raise ValueError(f"{name} must be an int {_interval(low, high)}, got {value}")
    return value


def check_real(
    name: str, value: object, *, low: float = -math.inf, high: float = math.inf,
    low_inclusive: bool = True, high_inclusive: bool = True, finite: bool = True,
) -> float:
    """A real number (not a bool) in the interval; NaN always fails, ±inf unless ``finite=False``.

    >>> check_real("learning_rate", 1, low=0.0, low_inclusive=False)
    1.0
    """
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    value = float(value)
    low_ok = value >= low if low_inclusive else value > low
    high_ok = value <= high if high_inclusive else value < high
    if math.isnan(value) or (finite and math.isinf(value)) or not (low_ok and high_ok):
        lo, hi = ("[" if low_inclusive else "("), ("]" if high_inclusive else ")")
        must = "must be a finite number in" if finite else "must lie in"
        raise ValueError(f"{name} {must} {lo}{low}, {high}{hi}, got {value!r}")
    return value


def check_probability(name: str, value: object) -> float:
    """A real number in [0, 1]."""
    return check_real(name, value, low=0.0, high=1.0)


def check_bool(name: str, value: object) -> bool:
    """``True`` or ``False`` (not 0/1, not a string)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    return value


def check_str(name: str, value: object) -> str:
    """A string."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    return value


def check_choice(name: str, value: object, choices: Iterable[T]) -> T:
    """One of ``choices``; the message lists the valid ones.

    >>> check_choice("optimizer", "lion", ("adam", "sgd"))
    Traceback (most recent call last):
    ...
    ValueError: optimizer must be one of 'adam', 'sgd'; got 'lion'
    """
    choices = tuple(choices)
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(repr(c) for c in choices)}; got {value!r}")
    return value  # type: ignore[return-value]


def check_instance(name: str, value: object, types: type | tuple[type, ...]) -> object:
    """An instance of ``types`` (the message names them)."""
    if not isinstance(value, types):
        names = " or ".join(t.__name__ for t in (types if isinstance(types, tuple) else (types,)))
        raise TypeError(f"{name} must be {names}, got {type(value).__name__}")
    return value


def _interval(low: int | None, high: int | None) -> str:
    if low is not None and high is not None:
        return f"in [{low}, {high}]"
    return f">= {low}" if low is not None else f"<= {high}"


# ----------------------------------------------------------------------------- divisibility (batch designs)


def check_divisible(name: str, value: int, *, by: str, divisor: int) -> int:
    """An int that ``divisor`` (the value of the argument named ``by``) divides exactly.

    >>> check_divisible("budget", 10, by="group_size", divisor=4)
    Traceback (most recent call last):
    ...
    ValueError: budget must be divisible by group_size (4), got 10
    """
    if value % divisor:
        raise ValueError(f"{name} must be divisible by {by} ({divisor}), got {value}")
    return value


# ----------------------------------------------------------------------------- collections


def check_nonempty(name: str, value: object) -> tuple:
    """A non-empty list or tuple; returns it as a tuple (check the items with the helpers above).

    >>> check_nonempty("lags", [0, 2])
    (0, 2)
    """
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"{name} must be a list or tuple, got {type(value).__name__}")
    if not value:
        raise ValueError(f"{name} must not be empty")
    return tuple(value)
