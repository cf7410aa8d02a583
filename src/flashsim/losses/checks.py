"""Argument checks: ``TypeError`` for a wrong type, ``ValueError`` for a bad value (STYLE rules 7 and 22).

The one implementation of flashsim's argument checks. It sits in ``losses/``, the bottom layer, because the
losses check their own inputs and may import nothing of flashsim outside ``losses/``; every other layer (and
``toy_envs``) imports the scalar checks through :mod:`flashsim.validation`. Every message has the same shape —
the argument's name, what was expected, what came::

    batch_size must be an int, got float
    batch_size must be an int >= 1, got 0

Standard library only at import time: the tensor checks import torch when they run, and
``flashsim/losses/__init__.py`` imports its torch modules on first use, so importing this module costs no torch.
In order: scalars, the losses' tensors, and the losses' options (:func:`check_options`, :func:`takes_options`).
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Callable, Iterable, Mapping
from numbers import Integral, Real
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:  # the tensor checks take torch tensors; the scalar checks need no torch
    from torch import Tensor

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


# ----------------------------------------------------------------------------- tensors (the losses)
#
# Two kinds, kept apart on purpose (STYLE rule 7): *structural* checks read only metadata (types, shapes,
# dtypes, devices) and always run; *value* checks read tensor values, so they synchronise with the device,
# and hot loops that have already checked their data turn them off with ``validate=False``.

# log_softmax in float32 can round a certain token's log-prob to a tiny positive number; anything
# above this is a caller's bug (probabilities passed instead of log-probs, a sign error).
POSITIVE_LOG_PROB_TOLERANCE = 1e-6


def check_token_tensor(name: str, x: object, reference: Tensor | None = None, *, same_dtype: bool = True) -> Tensor:
    """A floating [B, T] tensor, matching ``reference`` in shape, device (and dtype if ``same_dtype``) when given."""
    import torch

    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of shape [B, T], got {type(x).__name__}")
    if not torch.is_floating_point(x):
        raise TypeError(f"{name} must be a floating tensor (log-probabilities), got dtype {x.dtype}")
    if x.dim() != 2:
        raise ValueError(f"{name} must have shape [B, T], got shape {tuple(x.shape)}")
    if x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(f"{name} must hold at least one trajectory and one token, got {tuple(x.shape)}")
    if reference is not None:
        _check_matches(name, x, reference, check_dtype=same_dtype)
    return x


def check_action_mask(action_mask: object, reference: Tensor) -> Tensor:
    """A boolean [B, T] mask with the shape and device of ``reference``."""
    import torch

    if not isinstance(action_mask, torch.Tensor):
        raise TypeError(f"action_mask must be a bool torch.Tensor [B, T], got {type(action_mask).__name__}")
    if action_mask.dtype != torch.bool:
        raise TypeError(
            f"action_mask must have dtype torch.bool (True on policy tokens), got {action_mask.dtype}; "
            "convert with action_mask.bool()"
        )
    _check_matches("action_mask", action_mask, reference, check_dtype=False)
    return action_mask


def check_per_trajectory(
    name: str, x: object, reference: Tensor, *, integer: bool = False, boolean: bool = False
) -> Tensor:
    """A [B] tensor on the device of ``reference`` (floating, or integer / bool when asked)."""
    import torch

    batch = reference.shape[0]
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of shape [B]={batch}, got {type(x).__name__}")
    if integer and (torch.is_floating_point(x) or x.dtype == torch.bool or x.is_complex()):
        raise TypeError(f"{name} must be an integer tensor, got dtype {x.dtype}")
    if boolean and x.dtype != torch.bool:
        raise TypeError(f"{name} must have dtype torch.bool, got {x.dtype}; convert with .bool()")
    if not (integer or boolean) and not torch.is_floating_point(x):
        raise TypeError(f"{name} must be a floating tensor, got dtype {x.dtype}")
    if tuple(x.shape) != (batch,):
        raise ValueError(f"{name} must have shape [B]=({batch},), got shape {tuple(x.shape)}")
    if x.device != reference.device:
        raise ValueError(f"{name} is on {x.device} but log_probs are on {reference.device}")
    return x


def check_advantage_inputs(rewards: object, advantages: object, group_ids: object, log_probs: object, *,
                           validate: bool = True) -> Tensor | None:
    """The loss's per-trajectory inputs: ``advantages`` [B] when given (returned), else finite ``rewards`` [B].

    Returns the checked advantages, or None when the loss forms them from ``rewards``.
    """
    import torch

    check_token_tensor("log_probs", log_probs)
    if advantages is not None:
        return check_per_trajectory("advantages", advantages, log_probs)
    if rewards is None:
        raise ValueError("pass rewards [B] (or precomputed advantages=[B]); both are None")
    check_per_trajectory("rewards", rewards, log_probs)
    if group_ids is not None:
        check_per_trajectory("group_ids", group_ids, log_probs, integer=True)
    if validate and not bool(torch.isfinite(rewards).all()):
        raise ValueError("rewards must be finite, found NaN or inf")
    return None


def check_loss_inputs(log_probs: Tensor, behavior_log_probs: Tensor, action_mask: Tensor, advantages: Tensor) -> None:
    """The structural checks of every loss (metadata only: they never synchronise with the device)."""
    check_token_tensor("behavior_log_probs", behavior_log_probs, log_probs)
    check_action_mask(action_mask, log_probs)
    check_per_trajectory("advantages", advantages, log_probs)


def check_loss_values(log_probs: Tensor, behavior_log_probs: Tensor, action_mask: Tensor, advantages: Tensor,
                      entropies: Tensor | None = None) -> None:
    """The value checks of a loss's ``validate=True`` (they synchronise with the device), in a fixed order."""
    import torch

    check_nonempty_rows(action_mask)
    check_token_values("log_probs", log_probs, action_mask)
    check_token_values("behavior_log_probs", behavior_log_probs, action_mask)
    if not bool(torch.isfinite(advantages).all()):
        raise ValueError("advantages must be finite, found NaN or inf")
    if entropies is not None:
        check_token_values("entropies", entropies, action_mask, log_probs=False)


def _check_matches(name: str, x: Tensor, reference: Tensor, *, check_dtype: bool) -> None:
    if x.shape != reference.shape:
        raise ValueError(f"{name} must have the shape of log_probs {tuple(reference.shape)}, got {tuple(x.shape)}")
    if x.device != reference.device:
        raise ValueError(f"{name} is on {x.device} but log_probs are on {reference.device}")
    if check_dtype and x.dtype != reference.dtype:
        raise TypeError(
            f"{name} has dtype {x.dtype} but log_probs have {reference.dtype}; "
            "cast both to one dtype (e.g. .float()) before calling the loss"
        )


def check_token_values(name: str, x: Tensor, action_mask: Tensor, *, log_probs: bool = True) -> None:
    """Values on policy tokens are finite (and ≤ 0 for log-probabilities). Synchronises."""
    import torch

    on_policy = torch.where(action_mask, x.detach(), 0.0)  # padding may hold anything; 0 passes both checks
    if not bool(torch.isfinite(on_policy).all()):
        raise ValueError(f"{name} must be finite on policy tokens (action_mask True); found NaN or inf")
    if log_probs and bool((on_policy > POSITIVE_LOG_PROB_TOLERANCE).any()):
        worst = float(on_policy.max())
        raise ValueError(
            f"{name} must be log-probabilities (≤ 0) on policy tokens, got a value of {worst:.3g}; "
            "did you pass probabilities or a negated log-prob?"
        )


def check_nonempty_rows(action_mask: Tensor) -> None:
    """Every trajectory has at least one policy token. Synchronises."""
    import torch

    empty = ~action_mask.any(dim=1)
    if bool(empty.any()):
        rows = torch.nonzero(empty).flatten().tolist()[:8]
        raise ValueError(
            f"every trajectory needs at least one policy token (action_mask True), but rows {rows} have none; "
            "drop empty trajectories before the loss"
        )


def check_count(name: str, value: object, *, at_least: int) -> float | Tensor:
    """An outer denominator: a positive number ≥ ``at_least``, or a 0-dim tensor (not read: no sync)."""
    import torch

    if isinstance(value, torch.Tensor):
        if value.dim() != 0:
            raise ValueError(f"{name} must be a number or a 0-dim tensor, got shape {tuple(value.shape)}")
        return value
    count = check_real(name, value, low=0.0, low_inclusive=False, finite=False)
    if count < at_least:
        raise ValueError(f"{name} is a global count and must be at least the local count {at_least}, got {count:g}")
    return count


def check_filter(fraction: float, entropies: Tensor | None, failures: Tensor | None, log_probs: Tensor) -> None:
    """The negative-token filter's inputs: with q < 1, entropies [B, T] and failures [B] bool."""
    if fraction < 1 and (entropies is None or failures is None):
        missing = " and ".join(n for n, v in (("entropies", entropies), ("failures", failures)) if v is None)
        raise ValueError(
            f"negative_token_fraction={fraction:g} < 1 needs entropies [B, T] (the behaviour policy's per-token "
            f"entropies) and failures [B] bool; {missing} not given (or set negative_token_fraction=1.0)"
        )
    if entropies is not None:
        check_token_tensor("entropies", entropies, log_probs, same_dtype=False)
    if failures is not None:
        check_per_trajectory("failures", failures, log_probs, boolean=True)


def check_overflow(ratio: Tensor, kept: Tensor) -> None:
    """A kept token whose ratio π/μ overflowed would poison the loss: say how to fix it."""
    import torch

    if not bool(torch.isfinite(torch.where(kept, ratio, 0.0)).all()):
        raise FloatingPointError(
            "an importance ratio π/μ overflowed on an admitted token (log-ratio too large); pass "
            "log_ratio_clamp=30.0 to clamp it, or check that behavior_log_probs belong to these tokens"
        )



# ----------------------------------------------------------------------------- the losses' options
# Each loss's options are the rows of one table (flashsim.losses.options): name → the check of its value. The
# registry checks a row's options where they enter (configs, CLIs: flashsim.losses.check_loss_options); a direct
# call of a loss checks the options it is given (takes_options). Tensors, global denominators and the validate
# switch are plumbing the trainers pass, not configuration.


def check_optional(check_value: Callable[[str, object], object]) -> Callable[[str, object], object]:
    """``check_value`` for an option that may also be None (None: the option is off)."""
    return lambda name, value: None if value is None else check_value(name, value)


def check_bounds(name: str, value: object) -> tuple[float, float]:
    """A ``(low, high)`` pair of reals with ``0 <= low <= high`` (±inf allowed)."""
    if not (isinstance(value, (tuple, list)) and len(value) == 2):
        raise TypeError(f"{name} must be a (low, high) pair, got {value!r}")
    low = check_real(f"{name}[0]", value[0], low=0.0, finite=False)
    return low, check_real(f"{name}[1]", value[1], low=low, finite=False)


def check_options(loss: str, checks: Mapping[str, Callable], options: Mapping[str, object],
                  where: str = "loss_options") -> dict[str, object]:
    """Every key of ``options`` is one of ``checks`` and its value passes; returns the checked values.

    >>> check_options("my_loss", {"delta": check_real}, {"delta": 1}, "options")
    {'delta': 1.0}
    """
    unknown = sorted(set(options) - set(checks))
    if unknown:
        raise ValueError(f"{where} has {', '.join(map(repr, unknown))}, which {loss} does not take; "
                         f"its options are {', '.join(sorted(checks))}")
    checked = {}
    for name, value in options.items():
        result = checks[name](f"{where}.{name}" if where != "options" else name, value)
        checked[name] = value if result is None or _is_tensor(value) else result
    return checked


def takes_options(table: Mapping[str, Callable]) -> Callable[[Callable], Callable]:
    """Declare a loss's options: ``table`` (name → check of the value) becomes the loss's ``options`` attribute,
    and a call with ``validate=True`` checks the options it is given (the defaults are valid).

    Options are keyword-only, so a call's options are its keyword arguments that are rows of ``table``. Trainers
    that checked the options where they entered (:func:`flashsim.losses.check_loss_options`) pass
    ``validate=False`` and skip the re-check, as they skip the checks that synchronise with the device.
    """
    def declare(loss: Callable) -> Callable:
        @functools.wraps(loss)
        def checked(*tensors, **keywords):
            if keywords.get("validate", True):
                check_options(loss.__name__, table, {k: v for k, v in keywords.items() if k in table}, "options")
            return loss(*tensors, **keywords)

        checked.options = table  # type: ignore[attr-defined]
        return checked

    return declare


def _is_tensor(value: object) -> bool:
    torch = sys.modules.get("torch")  # a tensor exists only once torch is imported: no import here
    return torch is not None and isinstance(value, torch.Tensor)
