"""Reward functions: math answer checking, custom functions by import path, and safe scoring.

A reward function has the signature ``fn(prompt, response, answer) -> float`` where ``prompt`` is the
example's prompt (text or chat messages), ``response`` the text the model wrote (tool outputs removed)
and ``answer`` the reference answer string.

The built-in :func:`math_reward` extracts the final answer from the response — the content of the last
``\\boxed{...}`` if there is one, else the last number — and compares it with the reference (from
which GSM8K's ``#### x`` or a ``\\boxed{}`` is extracted the same way). With ``math-verify`` installed it
decides equivalence; otherwise the two are compared as exact numbers (``"19"``, ``"19.0"`` and
``"1,9"``-free ``"19"`` are equal; fractions ``a/b`` are compared exactly).

:func:`score` calls a reward function and turns an exception or a non-finite value into a
:class:`RewardError` that names the prompt, or — with ``on_error="drop"`` — into ``None`` so that the
caller drops the trajectory and counts it.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import re
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from types import ModuleType
from typing import Any

from flashsim.validation import check_choice

RewardFn = Callable[[Any, str, str], float]
ON_ERROR = ("raise", "drop")

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?|-?\.\d+")


class RewardError(ValueError):
    """A reward function raised or returned a non-finite value."""


def _boxed_contents(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (balanced braces), or ``None``."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 1, start + len("\\boxed{")
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i:j].strip()
    return None


def extract_answer(text: str) -> str | None:
    """The final answer in ``text``: GSM8K ``#### x``, else the last ``\\boxed{}``, else the last number.

    >>> extract_answer("so 3+4 = 7, then 7*2 = 14")
    '14'
    >>> extract_answer("the answer is \\\\boxed{\\\\frac{1}{2}} (approx 0.5)")
    '\\\\frac{1}{2}'
    >>> extract_answer("no digits here") is None
    True
    """
    if "####" in text:
        tail = text.rsplit("####", 1)[1].strip()
        if tail:
            return tail.split()[0].rstrip(".")
    boxed = _boxed_contents(text)
    if boxed is not None:
        return boxed
    numbers = _NUMBER.findall(text)
    return numbers[-1] if numbers else None


def parse_number(text: str) -> Fraction | None:
    """An exact number from ``"1,234"``, ``"-3.50"``, ``"7/2"``, ``"\\frac{7}{2}"``; ``None`` otherwise.

    >>> parse_number("1,234.50"), parse_number("\\\\frac{7}{2}"), parse_number("x")
    (Fraction(2469, 2), Fraction(7, 2), None)
    """
    text = text.strip().strip("$").replace(",", "").rstrip(".")
    frac = re.fullmatch(r"\\d?frac\{(-?\d+)\}\{(\d+)\}", text)
    if frac:
        text = f"{frac.group(1)}/{frac.group(2)}"
    try:
        value = Fraction(text)
    except (ValueError, ZeroDivisionError):
        return None
    return value


def answers_match(predicted: str, reference: str) -> bool:
    """Exact numeric equality when both parse as numbers, else whitespace-insensitive string equality."""
    a, b = parse_number(predicted), parse_number(reference)
    if a is not None and b is not None:
        return a == b
    return "".join(predicted.split()) == "".join(reference.split())


def _math_verify_match(predicted: str, reference: str) -> bool | None:
    """``math_verify``'s verdict, or ``None`` when the package is not installed."""
    try:
        import math_verify
    except ImportError:
        return None
    return bool(math_verify.verify(math_verify.parse(f"${reference}$"), math_verify.parse(f"${predicted}$")))


def math_reward(prompt: Any, response: str, answer: str) -> float:
    """1.0 if the response's final answer equals the reference answer, else 0.0.

    >>> math_reward("12+7=", "19", "19"), math_reward("12+7=", "it is 18", "19")
    (1.0, 0.0)
    >>> math_reward("q", "\\\\boxed{0.5}", "#### 1/2")
    1.0
    """
    predicted = extract_answer(response)
    reference = extract_answer(answer) or answer.strip()
    if predicted is None:
        return 0.0
    if answers_match(predicted, reference):
        return 1.0
    verdict = _math_verify_match(predicted, reference)
    return 1.0 if verdict else 0.0


BUILTIN_REWARDS: dict[str, RewardFn] = {"math": math_reward}


def resolve_reward(spec: str) -> RewardFn:
    """A reward function from a built-in name (``"math"``), a file (``"my_rewards.py:score"``) or an importable
    module (``"package.module:score"``; the working directory is importable under ``python -m scale``).

    A file is loaded as a module of its own (not added to ``sys.modules``), so it needs no ``PYTHONPATH``.
    A missing file, a module that fails to import (whatever it raises) or a missing function is a one-line
    ``ValueError`` naming ``spec``.
    """
    if spec in BUILTIN_REWARDS:
        return BUILTIN_REWARDS[spec]
    source, _, attribute = spec.rpartition(":")
    if not source or not attribute:
        raise ValueError(f"reward must be one of {sorted(BUILTIN_REWARDS)}, 'file.py:function' or "
                         f"'module:function'; got {spec!r}")
    try:
        module = _load_file(source) if source.endswith(".py") or "/" in source else importlib.import_module(source)
    except ValueError:
        raise
    except Exception as error:  # the user's module runs at import and may raise anything
        raise ValueError(f"reward {spec!r}: cannot import {source!r} ({type(error).__name__}: {error})") from error
    fn = getattr(module, attribute, None)
    if not callable(fn):
        raise ValueError(f"reward {spec!r}: {source!r} has no function {attribute!r}")
    return fn


def _load_file(path: str) -> ModuleType:
    """The module in the Python file ``path``, run once; kept out of ``sys.modules``, so that Ray actors receive
    its functions by value (an actor could not import it by name)."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise ValueError(f"reward file {path!r} does not exist")
    spec = importlib.util.spec_from_file_location(f"scale_reward_{file.stem}", file)
    if spec is None or spec.loader is None:
        raise ValueError(f"reward file {path!r} is not a Python module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_reward(fn: RewardFn, spec: str, example_prompt: Any, example_answer: str) -> None:
    """Call the reward on one training prompt, with the reference answer and with an empty response as the
    model's, so that a reward that raises or returns a non-number stops the run before anything is written
    (:class:`RewardError`, one line naming ``spec``)."""
    for response in (example_answer, ""):
        try:
            score(fn, example_prompt, response, example_answer)
        except RewardError as error:
            raise RewardError(f"reward {spec!r} failed on the first training prompt with the response "
                              f"{response!r}: {error}") from None


def score(fn: RewardFn, prompt: Any, response: str, answer: str, *, on_error: str = "raise") -> float | None:
    """``fn(prompt, response, answer)`` as a finite float; on failure raise or (``on_error="drop"``) ``None``.

    >>> score(lambda p, r, a: float("nan"), "1+1=", "2", "2", on_error="drop") is None
    True
    """
    check_choice("on_error", on_error, ON_ERROR)
    try:
        value = float(fn(prompt, response, answer))
    except Exception as error:  # the user's function may raise anything
        if on_error == "drop":
            return None
        raise RewardError(f"reward function raised {type(error).__name__}: {error} (prompt {prompt!r})") from error
    if not math.isfinite(value):
        if on_error == "drop":
            return None
        raise RewardError(f"reward function returned {value} for prompt {prompt!r} (response {response!r})")
    return value
