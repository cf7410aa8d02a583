"""What a loss says it computes: its aggregation and its advantage estimator.

:func:`~flashsim.testing.check_loss` judges every invariant against the conventions a loss *declares*,
so that a loss which aggregates or forms advantages differently from FlashREINFORCE or GRPO's defaults,
but does so on purpose and consistently (TRL's ``loss_type="grpo"`` per-sequence mean, Dr. GRPO's
unscaled advantages, verl's ``seq-mean-token-sum``), is checked for what it claims, not failed for
being something else.

Aggregation (the weight ``u_i`` every policy token of trajectory i gets, :data:`flashsim.losses.AGGREGATIONS`):

- ``sample_mean`` ``1/(B·T_i)``; ``token_mean`` ``1/Σ_j T_j``; ``seq_mean_token_sum`` ``1/B``;
- ``seq_mean_token_sum_norm`` ``1/(B·T)`` with T the batch's width (verl's default horizon);
- ``constant:N`` ``1/(B·N)`` with a fixed N (Dr. GRPO's generation budget, TRL's ``dr_grpo``);
- ``token_sum`` ``1``: no normalisation (verl's ``token-sum``; declared here only, no registry loss uses it);
- the trainers' names: verl's ``token-mean``, ``seq-mean-token-mean``, ``seq-mean-token-sum``,
  ``seq-mean-token-sum-norm``; TRL's ``trl:grpo``, ``trl:bnpo``, ``trl:dapo`` (``trl:dr_grpo`` needs
  its budget: write ``constant:N``).

Estimators (``A_i`` from the rewards ``R`` ``[B]`` and group ids ``[B]``):

- ``batch_mean`` ``R_i − mean R`` (FlashREINFORCE); ``group_mean`` ``R_i − mean_g R`` (Dr. GRPO);
- ``group_mean_std`` ``(R_i − mean_g R)/(std_g R + ε)``, std unbiased, a group of one gets 0 (GRPO);
- ``rloo`` ``R_i −`` the mean of the others in its group; ``none`` ``A_i = R_i``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from flashsim.losses import AGGREGATIONS, batch_centered, group_centered, group_normalized, leave_one_out, token_weights

ESTIMATORS = ("batch_mean", "group_mean", "group_mean_std", "rloo", "none")
GROUP_ESTIMATORS = ("group_mean", "group_mean_std", "rloo")
"""Estimators whose baseline is the trajectory's group: a group of one has no contrast, so A = 0."""
LINEAR_ESTIMATORS = ("batch_mean", "group_mean", "rloo", "none")
"""Estimators for which doubling the rewards doubles the advantages."""

ALIASES = {
    "token-mean": "token_mean", "seq-mean-token-mean": "sample_mean", "seq-mean-token-sum": "seq_mean_token_sum",
    "seq-mean-token-sum-norm": "seq_mean_token_sum_norm", "token-sum": "token_sum",
    "trl:grpo": "sample_mean", "trl:bnpo": "token_mean", "trl:dapo": "token_mean",
}
"""verl's ``loss_agg_mode`` and TRL's ``loss_type`` names of the aggregations."""

DEFAULTS = {"flash_reinforce": ("sample_mean", "batch_mean"), "grpo": ("token_mean", "group_mean_std")}
"""What each algorithm prescribes (DESIGN.md) when the loss declares nothing."""


@dataclass(frozen=True)
class Declared:
    """A loss's declared aggregation and advantage estimator (module docstring).

    ``budget`` is N of ``constant:N`` (None: the mode needs none, or the batch's width for
    ``seq_mean_token_sum_norm``); ``std_eps`` is the ε of ``group_mean_std``.
    """

    aggregation: str
    estimator: str
    budget: int | None = None
    std_eps: float = 1e-6
    singleton: str = "zero"
    """A group of one trajectory: ``"zero"`` (A = 0, no contrast) or ``"unit"`` (mean 0, std 1, so
    A = R / (1 + ε): verl's documented fallback)."""

    def __str__(self) -> str:
        aggregation = f"constant:{self.budget}" if self.budget is not None else self.aggregation
        estimator = f"group_mean_std (ε = {self.std_eps:g})" if self.estimator == "group_mean_std" else self.estimator
        if self.singleton == "unit":
            estimator += ", a group of one: mean 0, std 1"
        return f"aggregation {aggregation}, estimator {estimator}"

    def weights(self, action_mask: Tensor, *, dtype: torch.dtype = torch.float64) -> Tensor:
        """``u_i`` on the policy tokens of row i, 0 on padding. Shape ``[B, T]``."""
        if self.aggregation == "token_sum":
            return action_mask.to(dtype)
        return token_weights(action_mask, self.aggregation, dtype=dtype, max_tokens=self.budget)

    def advantages(self, rewards: Tensor, group_ids: Tensor) -> Tensor:
        """``A`` ``[B]`` by the declared estimator."""
        if self.estimator == "none":
            return rewards.to(torch.promote_types(rewards.dtype, torch.float32))
        if self.estimator == "group_mean_std":
            advantages = group_normalized(rewards, group_ids, std_eps=self.std_eps)
        else:
            advantages = {"batch_mean": batch_centered, "group_mean": group_centered, "rloo": leave_one_out}[
                self.estimator](rewards, group_ids)
        if self.singleton == "unit" and self.estimator in ("group_mean", "group_mean_std"):
            alone = (group_ids[:, None] == group_ids[None, :]).sum(dim=1) == 1
            scale = 1 + self.std_eps if self.estimator == "group_mean_std" else 1.0
            advantages = torch.where(alone, rewards.to(advantages.dtype) / scale, advantages)
        return advantages


def parse_aggregation(text: str) -> tuple[str, int | None]:
    """``(mode, budget)`` of an aggregation name (module docstring); a bad name raises ValueError."""
    if not isinstance(text, str):
        raise TypeError(f"aggregation must be a string, got {type(text).__name__}")
    if text.startswith("constant:"):
        count = text.partition(":")[2]
        if not (count.isdigit() and int(count) >= 1):
            raise ValueError(f"aggregation constant:N needs an integer N ≥ 1, got {text!r}")
        return "seq_mean_token_sum_norm", int(count)
    mode = ALIASES.get(text, text)
    if mode not in (*AGGREGATIONS, "token_sum"):
        valid = ", ".join([*AGGREGATIONS, "token_sum", "constant:N", *ALIASES])
        hint = "; trl:dr_grpo divides by B × max_completion_length: write constant:N" if text == "trl:dr_grpo" else ""
        raise ValueError(f"aggregation {text!r} is not one of {valid}{hint}")
    return mode, None


def declared(
    algorithm: str, fn: object, aggregation: str | None, estimator: str | None, std_eps: float
) -> Declared:
    """The declaration in force: the arguments, else the function's ``aggregation`` / ``estimator`` /
    ``std_eps`` attributes (adapters carry them), else the algorithm's defaults."""
    default_aggregation, default_estimator = DEFAULTS.get(algorithm, DEFAULTS["flash_reinforce"])
    aggregation = aggregation or getattr(fn, "aggregation", None) or default_aggregation
    estimator = estimator or getattr(fn, "estimator", None) or default_estimator
    if estimator not in ESTIMATORS:
        raise ValueError(f"estimator {estimator!r} is not one of {', '.join(ESTIMATORS)}")
    std_eps = getattr(fn, "std_eps", std_eps)
    mode, budget = parse_aggregation(aggregation)
    singleton = getattr(fn, "singleton_fallback", "zero")
    if singleton not in ("zero", "unit"):
        raise ValueError(f"singleton_fallback must be 'zero' or 'unit', got {singleton!r}")
    return Declared(mode, estimator, budget, float(std_eps), singleton)


__all__ = ["ALIASES", "DEFAULTS", "Declared", "ESTIMATORS", "GROUP_ESTIMATORS", "LINEAR_ESTIMATORS", "declared",
           "parse_aggregation"]
