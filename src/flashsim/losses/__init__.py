"""``flashsim.losses``: FlashREINFORCE, GRPO and their ablations as pure PyTorch functions.

Layer 1 of flashsim, standing on its own: tensors in, ``(loss, detached stats)`` out; no I/O, no config
objects, no global state, no ``.item()``, and no import of flashsim outside this folder. The simulator and
``scale/`` train through these functions unchanged.

- :mod:`~flashsim.losses.loss` — :func:`flash_reinforce_loss`, the paper's formula line by line, with the
  ablations as named options;
- :mod:`~flashsim.losses.grpo` — :func:`grpo_loss`, GRPO's clipped surrogate;
- :mod:`~flashsim.losses.tokens` — the token math both import as peers: the one-batch baseline, the log-ratio,
  the sampled-action KL d and its mean D̄, the aggregation modes;
- :mod:`~flashsim.losses.advantages` — the other advantage estimators (none, GRPO's, Dr. GRPO's, RLOO's);
- :mod:`~flashsim.losses.entropy_filter` — the negative-token entropy filter (an ablation after verl's ``neg_topq``);
- :mod:`~flashsim.losses.registry` — every algorithm and ablation by name (:data:`LOSSES`), one row of data each,
  and :func:`check_loss_options`, the one check of a row's options where they enter;
- :mod:`~flashsim.losses.options` — the vocabulary: :data:`DEFAULT_DELTA`, :data:`GATES`, :data:`AGGREGATIONS`
  and each loss's option table (name → check of the value);
- :mod:`~flashsim.losses.checks` — flashsim's argument checks (scalars, the losses' tensors, options), which
  every other layer imports through :mod:`flashsim.validation`.

``import flashsim.losses`` does not import torch: the torch modules load on the first use of one of their
names (``__getattr__`` below), so ``checks`` and ``options`` stay as cheap as the standard library for the
layers (and ``toy_envs``) that need only argument checks.

Glossary: B trajectories, G group size, T token slots, L policy lag, δ gate threshold.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

from flashsim.losses.options import AGGREGATIONS, DEFAULT_DELTA, GATES

if TYPE_CHECKING:  # what type checkers and the API pages read; at run time __getattr__ imports these on first use
    from flashsim.losses.advantages import group_centered, group_normalized, leave_one_out, positive_only
    from flashsim.losses.entropy_filter import negative_token_filter
    from flashsim.losses.grpo import grpo_loss
    from flashsim.losses.loss import flash_reinforce_loss
    from flashsim.losses.registry import LOSSES, LossSpec, check_loss_options, get_loss, inert_options
    from flashsim.losses.tokens import (
        aggregate,
        batch_centered,
        bernoulli_kl,
        effective_sample_size,
        log_importance_ratio,
        sampled_action_kl,
        sequence_mean,
        token_weights,
    )

__all__ = [
    "AGGREGATIONS", "DEFAULT_DELTA", "GATES", "LOSSES", "LossSpec", "aggregate", "batch_centered", "bernoulli_kl",
    "check_loss_options", "effective_sample_size", "flash_reinforce_loss", "get_loss", "group_centered",
    "group_normalized", "grpo_loss", "inert_options", "leave_one_out", "log_importance_ratio", "negative_token_filter",
    "positive_only", "sampled_action_kl", "sequence_mean", "token_weights",
]

_TORCH_MODULES = ("tokens", "advantages", "entropy_filter", "loss", "grpo", "registry")


def __getattr__(name: str) -> object:
    """A public name of the torch modules: import them all once, then it is an ordinary attribute."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    for module in map(import_module, (f"{__name__}.{m}" for m in _TORCH_MODULES)):
        globals().update({n: getattr(module, n) for n in __all__ if n in vars(module)})
    return globals()[name]
