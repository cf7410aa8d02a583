"""Argument checks shared by the toy-env configurations: ``TypeError`` for a wrong type, ``ValueError`` for a
bad value, messages that say how to fix it.

Layer 2's copy of :mod:`flashsim.validation` (``toy_envs`` may import neither flashsim nor torch); same rules.
"""

from __future__ import annotations

import numpy as np


def check_int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}.")
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}.")
    return int(value)


def check_real(
    name: str, value: object, low: float, high: float, *, open_low: bool = False, open_high: bool = False
) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}.")
    ok = bool(np.isfinite(value))
    ok = ok and (value > low if open_low else value >= low) and (value < high if open_high else value <= high)
    if not ok:
        interval = f"{'(' if open_low else '['}{low}, {high}{')' if open_high else ']'}"
        raise ValueError(f"{name} must be a number in {interval}, got {value!r}.")
    return float(value)


def check_array(name: str, value: object, shape: tuple[int | None, ...], *, probability: bool = False) -> np.ndarray:
    """``value`` as a float64 array of ``shape`` (None = any size); optionally entries in [0, 1]."""
    array = np.asarray(value, dtype=np.float64)
    if array.ndim != len(shape) or any(s is not None and s != n for s, n in zip(shape, array.shape)):
        expected = "[" + ", ".join("*" if s is None else str(s) for s in shape) + "]"
        raise ValueError(f"{name} must have shape {expected}, got {list(array.shape)}.")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} must be finite.")
    if probability and (array.min(initial=0.0) < 0.0 or array.max(initial=0.0) > 1.0):
        raise ValueError(
            f"{name} must hold probabilities in [0, 1], got values in [{array.min()}, {array.max()}]; "
            "clip or rescale them."
        )
    return array


def split_prompts(num_prompts: int, heldout_fraction: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Random train / held-out split: ``floor(heldout_fraction * P)`` held-out prompts, sorted ids."""
    num_heldout = int(np.floor(heldout_fraction * num_prompts))
    if num_heldout >= num_prompts:
        raise ValueError(f"heldout_fraction={heldout_fraction} leaves no train prompt out of {num_prompts}; lower it.")
    order = rng.permutation(num_prompts)
    return np.sort(order[num_heldout:]), np.sort(order[:num_heldout])


def answer_features(
    num_prompts: int, num_answers: int, feature_dim: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Prompt features ``[P, d]`` and the answer each predicts (``argmax_k x_p · w_k``), ``[P]``.

    A linear policy ``logits = x_p W`` can represent the good answer of every prompt, including
    held-out ones, because the good answer is a linear argmax of the features.
    """
    features = rng.standard_normal((num_prompts, feature_dim))
    answer_directions = rng.standard_normal((num_answers, feature_dim))
    return features, np.argmax(features @ answer_directions.T, axis=1)
