"""The result of :func:`flashsim.testing.check_loss`: one row per invariant, printable as a table."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import torch

from flashsim.testing.strategies import LossBatch

STATUSES = ("holds", "FAILS", "documented", "unsupported", "n/a")
"""``unsupported``: the invariant applies, but the loss's interface cannot express it (a loss without the
sharding keywords cannot be split across ranks); kept apart from FAILS. ``documented``: the loss breaks the
invariant the way its framework documents (its ``documented`` attribute cites where), and the check holds
against that documented behaviour."""


@dataclass(frozen=True)
class InvariantResult:
    """One invariant's verdict; ``counterexample`` is the shrunk failing example, printed at full precision (a
    float's shortest repr, which reads back to the same value in the tensor's dtype), and ``drawn`` the values
    themselves (label → value, for an adapter to print as its framework's call); ``draws`` the values as drawn,
    before a check derived others from them (:class:`~flashsim.testing.invariants.Replay` reruns the example from
    them)."""

    name: str
    design: str
    statement: str
    status: str
    examples: int = 0
    message: str = ""
    counterexample: str = ""
    drawn: dict | None = field(default=None, compare=False, repr=False)
    draws: dict | None = field(default=None, compare=False, repr=False)

    @property
    def failed(self) -> bool:
        return self.status == "FAILS"


@dataclass(frozen=True)
class LossReport:
    """Every invariant's result for one loss function, algorithm and convention."""

    function: str
    algorithm: str
    convention: str
    results: tuple[InvariantResult, ...]
    declared: str = ""
    """The aggregation and estimator the loss was judged against (:class:`flashsim.testing.declared.Declared`)."""

    @property
    def passed(self) -> bool:
        """True when no invariant fails."""
        return not self.failures

    @property
    def failures(self) -> tuple[InvariantResult, ...]:
        return tuple(result for result in self.results if result.failed)

    def __getitem__(self, name: str) -> InvariantResult:
        for result in self.results:
            if result.name == name:
                return result
        raise KeyError(f"no invariant {name!r}; valid: {', '.join(r.name for r in self.results)}")

    def table(self) -> str:
        """A fixed-width table: invariant, DESIGN.md number, status, examples, what must hold."""
        width = max(len(r.name) for r in self.results)
        lines = [f"{'invariant':<{width}}  {'#':<9}  {'status':<11}  {'examples':>8}  must hold",
                 f"{'-' * width}  {'-' * 9}  {'-' * 11}  {'-' * 8}  {'-' * 9}"]
        for r in self.results:
            lines.append(f"{r.name:<{width}}  {r.design:<9}  {r.status:<11}  {r.examples:>8}  {r.statement}")
        return "\n".join(lines)

    def __str__(self) -> str:
        verdict = "all invariants hold" if self.passed else f"{len(self.failures)} invariant(s) FAIL"
        parts = [f"check_loss({self.function}, algorithm={self.algorithm!r}, convention={self.convention!r}): "
                 f"{verdict}"]
        if self.declared:
            parts.append(f"judged against the declared {self.declared}")
        parts.append(self.table())
        for r in self.failures:
            parts.append(f"\n{r.name} FAILS: {r.message}\nminimal counterexample:\n{r.counterexample}")
        for r in self.results:
            if r.status == "unsupported":
                parts.append(f"\n{r.name} unsupported: {r.message}")
        return "\n".join(parts)


def describe(drawn: dict[str, object]) -> str:
    """The drawn values of a failing example, at full precision: pasted back with the dtype printed beside them,
    they are the same tensors."""
    lines = []
    for label, value in drawn.items():
        if isinstance(value, LossBatch):
            lines.append(f"  {label}: B = {value.batch_size}, T = {value.width}, dtype {value.log_probs.dtype}")
            lines.extend(f"    {item.name} = {exact(getattr(value, item.name))}" for item in fields(value))
        else:
            lines.append(f"  {label} = {value}")
    return "\n".join(lines)


def exact(tensor: torch.Tensor) -> list:
    """``tensor`` as nested lists of Python numbers; a float32 or bf16 value is held exactly by a Python float, whose
    repr reads back to it."""
    if tensor.is_floating_point():
        return tensor.to(torch.float64).tolist()
    return tensor.tolist()
