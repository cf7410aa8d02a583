"""Every algorithm and ablation by name: one row of plain data each, calling the loss users read.

A row is a :class:`LossSpec`: which loss function (:func:`flash_reinforce_loss` or :func:`grpo_loss`),
which advantage estimator, and the named options it fixes. Calling a row is calling that function, so
training runs exactly the code of the formula. An ablation is a new row, never a new copy of a loss.
The simulator's ``--algo`` and ``scale``'s ``train.loss`` take these names, and
:func:`check_loss_options` is the one check of a row's options, run where they enter.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from torch import Tensor

from flashsim.losses.advantages import group_centered, group_normalized, leave_one_out, positive_only
from flashsim.losses.checks import check_choice, check_instance, check_options
from flashsim.losses.grpo import grpo_loss
from flashsim.losses.loss import flash_reinforce_loss
from flashsim.losses.tokens import batch_centered, resolve_advantages

ADVANTAGE_OPTIONS = ("scale_by_std", "std_eps")
"""Options of a loss that shape its advantage, not its per-token terms: a row honours them only when its
estimator takes them (:attr:`LossSpec.advantage_options`), and refuses them otherwise."""

NEEDS_REFERENCE = ("kl_coef",)
"""Options that act only with a tensor no trainer passes (``reference_log_probs``): direct calls only."""


@dataclass(frozen=True)
class LossSpec:
    """One named loss of :data:`LOSSES`: a loss function, its advantage estimator, its fixed options.

    Calling it computes the advantages with :meth:`compute_advantages` (unless ``advantages=`` is
    given) and calls ``loss`` with ``options`` overridden by the caller's::

        spec(log_probs, behavior_log_probs, rewards, action_mask, group_ids=None, **options) -> (loss, stats)

    Trainers that compute the advantages once over a whole batch call :meth:`compute_advantages` with
    the same options, so an option that shapes the advantage (GRPO's ``scale_by_std``) acts on both paths.
    """

    loss: Callable[..., tuple[Tensor, dict[str, Tensor]]]
    """A loss function that declares its options (``@takes_options(TABLE)``: its ``options`` attribute)."""
    advantage: Callable[..., Tensor]
    description: str
    options: Mapping[str, object] = field(default_factory=dict)
    group_size: int = 1
    """Rollouts per prompt G that the algorithm samples by default (8 for the GRPO family, 1 otherwise)."""
    needs_groups: bool = False
    """True when the advantage can only be formed from sibling rollouts (``group_ids``)."""
    advantage_options: tuple[str, ...] = ()
    """Options of :data:`ADVANTAGE_OPTIONS` that ``advantage`` takes as keywords."""

    def resolved(self, options: Mapping[str, object] = {}) -> dict[str, object]:  # noqa: B006 (read only)
        """Every keyword option a call with ``options`` runs with: the function's defaults, the row's, the caller's."""
        defaults = {name: p.default for name, p in inspect.signature(self.loss).parameters.items()
                    if p.kind is p.KEYWORD_ONLY and name in self.loss.options}
        return {**defaults, **self.options, **options}

    def configurable(self) -> tuple[str, ...]:
        """The names this row takes as configuration (its loss's options, less those it cannot honour)."""
        refused = set(NEEDS_REFERENCE) | (set(ADVANTAGE_OPTIONS) - set(self.advantage_options))
        return tuple(sorted(set(self.loss.options) - refused))

    def needs_entropies(self, options: Mapping[str, object] = {}) -> bool:  # noqa: B006 (read only)
        """True when a call with ``options`` runs the negative-token filter (it needs ``entropies``, ``failures``)."""
        return self.resolved(options).get("negative_token_fraction", 1.0) < 1

    def compute_advantages(self, rewards: Tensor, group_ids: Tensor | None = None,
                           options: Mapping[str, object] = {}) -> Tensor:  # noqa: B006 (read only)
        """``advantage(rewards, group_ids)`` with the advantage options of a call with ``options``. Shape: [B]."""
        resolved = self.resolved(options)
        return self.advantage(rewards, group_ids, **{name: resolved[name] for name in self.advantage_options})

    def __call__(self, log_probs: Tensor, behavior_log_probs: Tensor, rewards: Tensor | None, action_mask: Tensor,
                 group_ids: Tensor | None = None, *, advantages: Tensor | None = None, **options):
        if advantages is None:
            if self.needs_groups and group_ids is None:
                raise ValueError(f"{self.advantage.__name__!r} advantages need group_ids [B] "
                                 "(which prompt each trajectory answers)")
            advantages = resolve_advantages(rewards, None, log_probs, self.advantage_estimator(options), group_ids,
                                            validate=options.get("validate", True))
        return self.loss(log_probs, behavior_log_probs, None, action_mask, advantages=advantages,
                         **{**self.options, **options})

    def advantage_estimator(self, options: Mapping[str, object]) -> Callable[[Tensor, Tensor | None], Tensor]:
        """The advantage estimator with ``options``' advantage options bound."""
        return lambda rewards, group_ids: self.compute_advantages(rewards, group_ids, options)


FR, GRPO = flash_reinforce_loss, grpo_loss

LOSSES: dict[str, LossSpec] = {
    "flash_reinforce": LossSpec(FR, batch_centered, "FlashREINFORCE (the paper)"),
    "token_gate": LossSpec(FR, batch_centered, "token-local gate instead of sequence", {"gate": "token"}),
    "no_gate": LossSpec(FR, batch_centered, "token IS ratios, no trust region", {"gate": "none"}),
    "token_mean": LossSpec(FR, batch_centered, "DAPO's token-mean aggregation", {"aggregation": "token_mean"}),
    "positive_only": LossSpec(FR, positive_only, "A = R, no baseline"),
    "entropy_filter": LossSpec(FR, batch_centered, "failed trajectories keep their 20% highest-entropy tokens",
                               {"negative_token_fraction": 0.2}),
    "ppo_clip": LossSpec(GRPO, batch_centered, "PPO clip instead of the gate", {"aggregation": "sample_mean"}),
    "tis": LossSpec(FR, batch_centered, "truncated IS (cap C) instead of the gate", {"gate": "none", "tis_cap": 2.0}),
    "ratio_mask": LossSpec(FR, batch_centered, "IcePop-style ratio-band token mask",
                           {"gate": "none", "ratio_bounds": (0.5, 2.0)}),
    "rloo": LossSpec(FR, leave_one_out, "RLOO: leave-one-out baseline, unbiased",
                     {"gate": "none", "aggregation": "seq_mean_token_sum"}, group_size=8),
    "grpo": LossSpec(GRPO, group_normalized, "GRPO advantage and clip, DAPO's token-mean", group_size=8,
                     needs_groups=True, advantage_options=ADVANTAGE_OPTIONS),
    "dr_grpo": LossSpec(GRPO, group_centered, "Dr. GRPO (Liu et al. 2025)", {"aggregation": "seq_mean_token_sum_norm"},
                        group_size=8, needs_groups=True),
}
"""Every named loss. Keys are the names accepted by :func:`get_loss`, ``--algo`` and ``train.loss``."""


def get_loss(name: str) -> LossSpec:
    """The loss registered under ``name`` (see :data:`LOSSES`); unknown names list the valid ones.

    >>> spec = get_loss("token_gate")
    >>> spec.loss.__name__, spec.options
    ('flash_reinforce_loss', {'gate': 'token'})
    """
    return LOSSES[check_choice("loss", name, LOSSES)]


def check_loss_options(loss: str, options: Mapping[str, object], where: str = "loss_options") -> dict[str, object]:
    """``options`` for the registry loss ``loss``: every name one it honours, every value valid; returns them checked.

    The one check of a row's options, called where they enter (configs, CLIs) before anything is written.
    An option the row would ignore (``delta`` with ``gate="none"``, ``scale_by_std`` on a row whose
    estimator has no std) is refused, not dropped. ``where`` names the options in messages.

    >>> check_loss_options("flash_reinforce", {"delta": 0.01})
    {'delta': 0.01}
    >>> check_loss_options("grpo", {"delta": 0.01})
    Traceback (most recent call last):
    ...
    ValueError: loss_options has 'delta', which grpo does not take; its options are aggregation, clip_eps, \
clip_eps_high, log_ratio_clamp, max_tokens, scale_by_std, std_eps
    """
    spec = get_loss(loss)
    check_instance(where, options, Mapping)
    checks = spec.loss.options
    checked = check_options(loss, {name: checks[name] for name in spec.configurable()}, options, where)
    inert = inert_options(spec.resolved(checked))
    for name in checked:
        if name in inert:
            raise ValueError(f"{where}.{name} changes nothing for {loss}: {inert[name]}")
    return checked


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
