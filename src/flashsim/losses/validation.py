"""The losses' own checks: each loss's configurable options (names and values), and two input checks.

:func:`check_flash_reinforce_options` and :func:`check_grpo_options` are the one place each loss's
options are checked: the loss functions call them on every call, and
:func:`flashsim.losses.check_loss_options` calls them for a registry row at every entry point (the
simulator's and ``scale``'s configs, ``flashsim variance``, ``reproduce`` and ``check-loss``) before
anything is written. Tensors, global denominators and the ``validate`` switch are plumbing the
trainers pass, not configuration, so they are not options here. The scalar and tensor helpers
these build on are :mod:`flashsim.validation`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
from torch import Tensor

from flashsim import validation as check

GATES = ("sequence", "token", "none")
"""Values of ``gate=``: the paper's Sequence Trust Region, its token-local ablation, no gate."""

AGGREGATIONS = ("sample_mean", "token_mean", "seq_mean_token_sum", "seq_mean_token_sum_norm")
"""How per-token terms become one scalar (:func:`flashsim.losses.token_weights`). Every mode gives the tokens of
trajectory i one weight u_i:

- ``sample_mean``: ``u_i = 1 / (B · T_i)`` (FlashREINFORCE; DeepSeekMath GRPO; TRL ``"grpo"``). Every
  trajectory weighs the same whatever its length; per token, a long trajectory weighs 1/T_i less.
- ``token_mean``: ``u_i = 1 / Σ_j T_j`` (DAPO; TRL's default). Trajectory i weighs ∝ T_i, so long
  trajectories (often long failures) dominate: the length blow-up of the article's §4.3.
- ``seq_mean_token_sum``: ``u_i = 1 / B``, the plain REINFORCE estimate of ∇J; its scale grows with length.
- ``seq_mean_token_sum_norm``: ``u_i = 1 / (B · T_max)`` (Dr. GRPO; TRL ``"dr_grpo"``), T_max the budget.
"""


def _optional(check_value: Callable[[str, object], object]) -> Callable[[str, object], object]:
    return lambda name, value: None if value is None else check_value(name, value)


def _positive(name: str, value: object) -> float:
    return check.check_real(name, value, low=0.0, low_inclusive=False, finite=False)


def _ratio_bounds(name: str, value: object) -> tuple[float, float]:
    if not (isinstance(value, (tuple, list)) and len(value) == 2):
        raise TypeError(f"{name} must be a (low, high) pair, got {value!r}")
    low = check.check_real(f"{name}[0]", value[0], low=0.0, finite=False)
    return low, check.check_real(f"{name}[1]", value[1], low=low, finite=False)


def _max_tokens(name: str, value: object) -> object:
    return check.check_count(name, value, at_least=0)


FLASH_REINFORCE_OPTIONS: dict[str, Callable[[str, object], object]] = {
    "delta": lambda n, v: check.check_real(n, v, low=0.0, finite=False),
    "gate": lambda n, v: check.check_choice(n, v, GATES),
    "aggregation": lambda n, v: check.check_choice(n, v, AGGREGATIONS),
    "importance_sampling": check.check_bool,
    "tis_cap": _optional(_positive),
    "ratio_bounds": _optional(_ratio_bounds),
    "max_tokens": _optional(_max_tokens),
    "log_ratio_clamp": _optional(_positive),
    "negative_token_fraction": lambda n, v: check.check_real(n, v, low=0.0, high=1.0, finite=False),
}
"""The configurable options of :func:`flashsim.losses.flash_reinforce_loss` and the check of each value."""

GRPO_OPTIONS: dict[str, Callable[[str, object], object]] = {
    "clip_eps": lambda n, v: check.check_real(n, v, low=0.0, high=1.0, low_inclusive=False,
                                              high_inclusive=False, finite=False),
    "clip_eps_high": _optional(_positive),
    "scale_by_std": check.check_bool,
    "std_eps": lambda n, v: check.check_real(n, v, low=0.0, finite=False),
    "aggregation": lambda n, v: check.check_choice(n, v, AGGREGATIONS),
    "max_tokens": _optional(_max_tokens),
    "log_ratio_clamp": _optional(_positive),
    "kl_coef": lambda n, v: check.check_real(n, v, low=0.0, finite=False),
}
"""The options of :func:`flashsim.losses.grpo_loss` and the check of each value (``kl_coef`` is one only for
direct callers, who pass ``reference_log_probs``: no trainer has a reference policy)."""


def check_options(loss: str, checks: Mapping[str, Callable], options: Mapping[str, object],
                  where: str = "loss_options") -> dict[str, object]:
    """Every key of ``options`` is one of ``checks`` and its value passes; returns the checked values."""
    unknown = sorted(set(options) - set(checks))
    if unknown:
        raise ValueError(f"{where} has {', '.join(map(repr, unknown))}, which {loss} does not take; "
                         f"its options are {', '.join(sorted(checks))}")
    checked = {}
    for name, value in options.items():
        result = checks[name](f"{where}.{name}" if where != "options" else name, value)
        checked[name] = value if result is None or isinstance(value, Tensor) else result
    return checked


def check_flash_reinforce_options(options: Mapping[str, object], where: str = "options") -> dict[str, object]:
    """Names and values of :func:`~flashsim.losses.flash_reinforce_loss` options (:data:`FLASH_REINFORCE_OPTIONS`).

    >>> check_flash_reinforce_options({"delta": -1.0})
    Traceback (most recent call last):
    ...
    ValueError: delta must lie in [0.0, inf], got -1.0
    """
    return check_options("flash_reinforce_loss", FLASH_REINFORCE_OPTIONS, options, where)


def check_grpo_options(options: Mapping[str, object], where: str = "options") -> dict[str, object]:
    """Names and values of :func:`~flashsim.losses.grpo_loss` options (:data:`GRPO_OPTIONS`)."""
    return check_options("grpo_loss", GRPO_OPTIONS, options, where)


def inert_options(options: Mapping[str, object]) -> dict[str, str]:
    """Options that would change nothing given the others, each with the reason (for a clear refusal).

    ``options`` is the full set a call runs with (function defaults, a row's, the caller's).
    """
    inert = {}
    if options.get("gate") == "none":
        inert["delta"] = "gate='none' has no threshold"
    if options.get("aggregation") != "seq_mean_token_sum_norm":
        inert["max_tokens"] = f"aggregation={options.get('aggregation')!r} does not use T_max"
    if options.get("tis_cap") is not None:
        inert["importance_sampling"] = "tis_cap weights by min(ρ, C) whatever importance_sampling says"
    if options.get("scale_by_std") is False:
        inert["std_eps"] = "scale_by_std=False does not divide by the std"
    return inert


# ----------------------------------------------------------------------------- input checks


def check_filter(fraction: float, entropies: Tensor | None, failures: Tensor | None, log_probs: Tensor) -> None:
    """The negative-token filter's inputs: with q < 1, entropies [B, T] and failures [B] bool."""
    if fraction < 1 and (entropies is None or failures is None):
        missing = " and ".join(n for n, v in (("entropies", entropies), ("failures", failures)) if v is None)
        raise ValueError(
            f"negative_token_fraction={fraction:g} < 1 needs entropies [B, T] (the behaviour policy's per-token "
            f"entropies) and failures [B] bool; {missing} not given (or set negative_token_fraction=1.0)"
        )
    if entropies is not None:
        check.check_token_tensor("entropies", entropies, log_probs, same_dtype=False)
    if failures is not None:
        check.check_per_trajectory("failures", failures, log_probs, boolean=True)


def check_overflow(ratio: Tensor, kept: Tensor) -> None:
    """A kept token whose ratio π/μ overflowed would poison the loss: say how to fix it."""
    if not bool(torch.isfinite(torch.where(kept, ratio, 0.0)).all()):
        raise FloatingPointError(
            "an importance ratio π/μ overflowed on an admitted token (log-ratio too large); pass "
            "log_ratio_clamp=30.0 to clamp it, or check that behavior_log_probs belong to these tokens"
        )

