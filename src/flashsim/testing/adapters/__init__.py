"""Adapters that put the real loss code of TRL, verl and OpenRLHF under :func:`~flashsim.testing.check_loss`.

Each adapter is a callable in the ``flashsim`` convention (:mod:`flashsim.testing.conventions`)::

    adapter(log_probs, behavior_log_probs, rewards, action_mask, group_ids=None, *, advantages=None,
            num_sequences=None, num_tokens=None, max_tokens=None, num_shards=1) -> loss

that imports its framework when called (never when this package is imported) and runs the framework's
**unmodified, installed** code: TRL's ``GRPOTrainer._compute_loss`` on a minimal stand-in for the
trainer object, verl's ``core_algos`` advantage estimators, policy losses and ``agg_loss``, OpenRLHF's
``PolicyLoss``. The adapter carries what the loss declares (``aggregation``, ``estimator``, ``std_eps``,
``equal_shards``, ``contiguous_groups``; :mod:`flashsim.testing.declared`) and ``advantages(rewards,
group_ids)``, the advantages the framework forms over a batch. What an adapter itself writes (the
stand-in trainer, the framework's inline advantage code where it has no function of its own) is tested
by the invariants too: ``docs/conformance.md`` says which rows depend on it.

``VARIANTS`` lists every row of the conformance table (:mod:`flashsim.testing.conformance`).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import math
import re
import types
from dataclasses import dataclass, field

import torch
from torch import Tensor

from flashsim.losses import DEFAULT_DELTA


class FrameworkMissing(ImportError):
    """The framework an adapter needs is not installed (the conformance table lists it as not run)."""


def require(module: str, distribution: str) -> object:
    """``import module``; a clear :class:`FrameworkMissing` naming the distribution when it is absent."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise FrameworkMissing(f"{distribution} is not installed ({error}); see docs/conformance.md "
                               f"for how to install it") from error


def installed_version(distribution: str) -> str | None:
    """The installed version of ``distribution``, None when it is not installed."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


@dataclass
class Adapter:
    """A framework's loss in the flashsim convention, with what it declares. Subclasses define ``_loss``
    and ``advantages``."""

    variant: str
    algorithm: str
    aggregation: str
    estimator: str
    std_eps: float = 1e-6
    equal_shards: bool = False
    contiguous_groups: bool = False
    delta: float = DEFAULT_DELTA
    clip_eps: float = 0.2
    options: dict = field(default_factory=dict)
    framework = ""
    distribution = ""
    singleton_fallback = "zero"
    """A group of one trajectory: ``"zero"`` (A = 0) or ``"unit"`` (mean 0, std 1: verl's documented fallback)."""
    local_shards = False
    """Each microbatch normalised over its own tokens, then divided by the accumulation steps (TRL's bnpo)."""
    documented = types.MappingProxyType({})  # read only; a subclass's __post_init__ sets its own
    """Invariant → where the framework documents the behaviour the row is then checked against."""

    def require_framework(self) -> None:
        """Raise :class:`FrameworkMissing` unless the framework is installed."""
        if self.version is None:
            raise FrameworkMissing(f"{self.distribution} is not installed; see docs/conformance.md for how to "
                                   f"install it")

    def advantages(self, rewards: Tensor, group_ids: Tensor | None) -> Tensor:
        raise NotImplementedError

    def _loss(self, log_probs: Tensor, behavior_log_probs: Tensor, advantages: Tensor, action_mask: Tensor, *,
              num_sequences: int | None, num_tokens: int | None, max_tokens: int | None, num_shards: int) -> Tensor:
        raise NotImplementedError

    def __call__(self, log_probs: Tensor, behavior_log_probs: Tensor, rewards: Tensor, action_mask: Tensor,
                 group_ids: Tensor | None = None, *, advantages: Tensor | None = None,
                 num_sequences: int | None = None, num_tokens: int | None = None, max_tokens: int | None = None,
                 num_shards: int = 1) -> Tensor:
        if advantages is None:
            advantages = self.advantages(rewards, group_ids)
        return self._loss(log_probs, behavior_log_probs, advantages.detach(), action_mask,
                          num_sequences=num_sequences, num_tokens=num_tokens, max_tokens=max_tokens,
                          num_shards=num_shards)

    snippet_mask = "mask"
    """The name the framework gives the mask of a batch (``{snippet_mask}_{name}`` in :meth:`snippet_call`)."""

    def snippet_setup(self) -> list[str]:
        """Python lines that import the framework's code and build what every call of :meth:`snippet_call` shares
        (a config, a loss object); [] where the adapter has no framework call to print."""
        return []

    def snippet_call(self, batch, name: str, *, advantages: str | None = None, num_sequences: int | None = None,
                     num_tokens: int | None = None, max_tokens: int | None = None, num_shards: int = 1) -> list[str]:
        """Python lines that run this row's framework code on ``batch`` (a
        :class:`~flashsim.testing.strategies.LossBatch`) as the adapter runs it, under the framework's own function
        and argument names and with every value at full precision, defining ``advantages_{name}`` (``[B]``, the
        advantages the framework forms from the rewards, or the expression ``advantages``: a shard's rows of the
        full batch's), ``loss_{name}``, ``grad_{name}`` (∂loss/∂log-probs, ``[B, T]``) and the mask
        ``{snippet_mask}_{name}``. The keywords are those the harness hands a shard (the full batch's counts)."""
        return []

    @property
    def report_name(self) -> str:
        """The name :func:`~flashsim.testing.check_loss`'s report gives the loss."""
        return f"{self.framework} {self.version or '(not installed)'}: {self.variant}"

    @property
    def version(self) -> str | None:
        return installed_version(self.distribution)

    @property
    def key(self) -> str:
        """The row's name on the command line: ``flashsim conformance --row KEY`` (e.g. ``verl:grpo-token-mean``)."""
        return row_key(self.framework.lower(), self.variant)


def pipeline_rewards(rewards: Tensor) -> Tensor:
    """The rewards as a framework's pipeline holds them when it forms advantages: float32, or float64 where they came
    in float64 (bf16/fp16 never)."""
    return rewards.to(torch.promote_types(rewards.dtype, torch.float32))


def handed_advantages(name: str, advantages: str, batch: str = "full batch") -> list[str]:
    """The line of :meth:`Adapter.snippet_call` for a shard handed its rows of the ``batch``'s advantages (the
    expression ``advantages``), in place of the framework forming them from this shard's rewards."""
    return [f"advantages_{name} = {advantages}  # the {batch}'s advantages, this micro-batch's rows"]


def tensor_code(tensor: Tensor, grad: bool = False) -> str:
    """``torch.tensor(...)`` that rebuilds ``tensor`` exactly (a float's repr reads back to the same value in its
    dtype; NaN and ±inf as ``float('nan')``, ``float('inf')``)."""
    values = tensor.to(torch.float64).tolist() if tensor.is_floating_point() else tensor.tolist()
    extra = "" if tensor.dtype in (torch.bool, torch.int64) else f", dtype={tensor.dtype}"
    return f"torch.tensor({_literal(values)}{extra}{', requires_grad=True' if grad else ''})"


def _literal(values) -> str:
    """``repr`` of nested lists of numbers, with the non-finite floats spelled so that Python reads them back."""
    if isinstance(values, list):
        return "[" + ", ".join(_literal(value) for value in values) + "]"
    if isinstance(values, float) and not math.isfinite(values):
        return "float('nan')" if math.isnan(values) else "float('inf')" if values > 0 else "-float('inf')"
    return repr(values)


def row_key(framework: str, variant: str) -> str:
    """``framework:variant`` with every run of characters other than letters, digits, ``_ . =`` turned into ``-``."""
    return f"{framework}:{re.sub(r'[^A-Za-z0-9_.=]+', '-', variant).strip('-')}"


def group_rows(group_ids: Tensor, size: int | None = None) -> int:
    """G, after checking that groups are contiguous blocks of G rows (what ``view(-1, G)`` assumes)."""
    size = int((group_ids == group_ids[0]).sum()) if size is None else size
    if group_ids.shape[0] % size or not bool((group_ids.view(-1, size) == group_ids.view(-1, size)[:, :1]).all()):
        raise ValueError("this framework reshapes rewards with view(-1, G): groups must be contiguous blocks of G "
                         "rows (check_loss(..., contiguous_groups=True))")
    return size


FRAMEWORKS = {"trl": "trl", "verl": "verl", "openrlhf": "openrlhf"}
"""Adapter module → PyPI distribution."""


def variants(framework: str) -> list[Adapter]:
    """Every row of ``framework``'s adapter module (its ``VARIANTS``); importing the module imports no framework."""
    module = importlib.import_module(f"flashsim.testing.adapters.{framework}")
    return module.variants()


__all__ = ["Adapter", "FRAMEWORKS", "FrameworkMissing", "group_rows", "installed_version", "pipeline_rewards",
           "require", "row_key", "tensor_code", "variants"]
