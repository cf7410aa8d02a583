"""Argument checks for public inputs: ``TypeError`` for a wrong type, ``ValueError`` for a bad value.

Every layer above the losses (and ``scale``, and ``toy_envs``) imports its argument checks from here, so
every message has the same shape — the argument's name, what was expected, what came::

    batch_size must be an int, got float
    batch_size must be an int >= 1, got 0

The scalar checks are :mod:`flashsim.losses.checks`' (the losses check their own inputs and import nothing of
flashsim outside ``losses/``, so the one implementation lives there); this module re-exports them and adds the
checks no loss needs. Standard library only at import time: importing it never imports torch.
"""

from __future__ import annotations

from flashsim.losses.checks import (
    check_bool,
    check_choice,
    check_instance,
    check_int,
    check_probability,
    check_real,
    check_str,
)

__all__ = ["check_bool", "check_choice", "check_divisible", "check_instance", "check_int", "check_nonempty",
           "check_probability", "check_real", "check_str"]

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
