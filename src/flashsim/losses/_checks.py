"""Input validation shared by the loss functions.

Two kinds of checks, kept apart on purpose (STYLE rule 7):
- *structural* checks (types, shapes, dtypes, devices, hyperparameters) read only metadata, cost
  nothing, and always run;
- *value* checks (non-finite or positive log-probs on policy tokens, empty trajectories) read tensor
  values, so they synchronise with the device; they run when ``validate=True`` (the default) and hot
  loops that have already checked their data may turn them off.

Every message says what was expected and what came, and names the argument.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from flashsim.validation import check_choice as check_choice  # re-exported for the loss modules
from flashsim.validation import check_real

# log_softmax in float32 can round a certain token's log-prob to a tiny positive number; anything
# above this is a caller's bug (probabilities passed instead of log-probs, a sign error).
POSITIVE_LOG_PROB_TOLERANCE = 1e-6


def check_token_tensor(name: str, x: object, reference: Tensor | None = None, *, same_dtype: bool = True) -> Tensor:
    """A floating [B, T] tensor, matching ``reference`` in shape, device (and dtype if ``same_dtype``) when given."""
    if not isinstance(x, Tensor):
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
    if not isinstance(action_mask, Tensor):
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
    batch = reference.shape[0]
    if not isinstance(x, Tensor):
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


def _check_matches(name: str, x: Tensor, reference: Tensor, *, check_dtype: bool) -> None:
    if x.shape != reference.shape:
        raise ValueError(
            f"{name} must have the shape of log_probs {tuple(reference.shape)}, got {tuple(x.shape)}"
        )
    if x.device != reference.device:
        raise ValueError(f"{name} is on {x.device} but log_probs are on {reference.device}")
    if check_dtype and x.dtype != reference.dtype:
        raise TypeError(
            f"{name} has dtype {x.dtype} but log_probs have {reference.dtype}; "
            "cast both to one dtype (e.g. .float()) before calling the loss"
        )


def check_values(name: str, x: Tensor, action_mask: Tensor, *, log_probs: bool = True) -> None:
    """Values on policy tokens are finite (and ≤ 0 for log-probabilities). Synchronises."""
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
    empty = ~action_mask.any(dim=1)
    if bool(empty.any()):
        rows = torch.nonzero(empty).flatten().tolist()[:8]
        raise ValueError(
            f"every trajectory needs at least one policy token (action_mask True), but rows {rows} have none; "
            "drop empty trajectories before the loss"
        )


def check_finite_vector(name: str, x: Tensor) -> None:
    """A per-trajectory vector with no NaN or inf. Synchronises."""
    if not bool(torch.isfinite(x).all()):
        raise ValueError(f"{name} must be finite, found NaN or inf")


def check_number(
    name: str, value: object, *, low: float = -math.inf, high: float = math.inf,
    low_inclusive: bool = True, high_inclusive: bool = True,
) -> float:
    """A real number (not bool) within the interval; ±inf pass where the interval allows them (δ = ∞)."""
    return check_real(name, value, low=low, high=high, low_inclusive=low_inclusive, high_inclusive=high_inclusive,
                      finite=False)


def check_count(name: str, value: object, *, at_least: int) -> float | Tensor:
    """An outer denominator: a positive number ≥ ``at_least`` or a 0-dim tensor (not checked: no sync)."""
    if isinstance(value, Tensor):
        if value.dim() != 0:
            raise ValueError(f"{name} must be a number or a 0-dim tensor, got shape {tuple(value.shape)}")
        return value
    count = check_number(name, value, low=0.0, low_inclusive=False)
    if count < at_least:
        raise ValueError(
            f"{name} is a global count and must be at least the local count {at_least}, got {count:g}"
        )
    return count


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """bf16/fp16 are promoted to float32 before exp and log; float32 and float64 are kept."""
    return torch.promote_types(dtype, torch.float32)
