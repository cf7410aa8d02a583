"""A failing cell as Python a framework's maintainer can paste: the framework's own calls and the check that fails.

:func:`counterexample_code` replays a failing example (an :class:`~flashsim.testing.report.InvariantResult`'s
``draws``) through the invariant's own check with the loss wrapped so that every call the check makes is recorded,
with the batch and the shard keywords it was given. Each recorded call is then printed as the row's framework code
(its adapter's :meth:`~flashsim.testing.adapters.Adapter.snippet_call`: the framework's functions and argument
names, every value at full precision), and the check's comparisons as plain ``assert`` lines over those calls'
results, with the check's own tolerances. Pasted into Python with the framework installed, and without flashsim,
the code raises the ``AssertionError`` the page reports: a two-call invariant (``shards``, ``advantage_baseline``,
``padding``, ``permutation``, ``precision``) prints both calls and the comparison between them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields

import torch
from torch import Tensor

from flashsim.testing.adapters import tensor_code
from flashsim.testing.check import build_context
from flashsim.testing.invariants import (
    INVARIANTS,
    Context,
    Replay,
    narrowed,
    on_policy,
    permutation_order,
    repeat_tokens,
    shard_plan,
)
from flashsim.testing.report import InvariantResult
from flashsim.testing.strategies import LossBatch


@dataclass
class RecordedCall:
    """One call of the loss by a check: the batch (log-probs as the check handed them, detached) and the shard
    keywords, if any."""

    batch: LossBatch
    keywords: dict


@dataclass
class RecordedComparison:
    """One ``ctx.close`` of a check, with the tolerances it applied (floored for float32) and whether it held."""

    what: str
    got: Tensor
    want: Tensor
    rtol: float
    atol: float
    held: bool
    message: str = ""


class _Recorder:
    """The loss, with every call recorded; attributes (``advantages``, what it declares) are the loss's own."""

    def __init__(self, loss) -> None:
        self._loss, self.calls, self.comparisons = loss, [], []

    def __getattr__(self, name: str):
        return getattr(self._loss, name)

    def __call__(self, log_probs, behavior_log_probs, rewards, action_mask, group_ids=None, *, advantages=None,
                 num_sequences=None, num_tokens=None, max_tokens=None, num_shards=1):
        keywords = {"advantages": advantages, "num_sequences": num_sequences, "num_tokens": num_tokens,
                    "max_tokens": max_tokens, "num_shards": num_shards}
        batch = LossBatch(log_probs.detach(), behavior_log_probs.detach(), rewards.detach(), action_mask, group_ids)
        self.calls.append(RecordedCall(batch, {k: v for k, v in keywords.items() if v is not None and k != "advantages"}
                                       | ({"advantages": advantages.detach()} if advantages is not None else {})))
        return self._loss(log_probs, behavior_log_probs, rewards, action_mask, group_ids, **keywords)


class _Recording(Context):
    """A :class:`~flashsim.testing.invariants.Context` that records each comparison in its recorder."""

    def close(self, what: str, got: Tensor, want: Tensor, *, rtol: float = 1e-7, atol: float = 1e-9) -> None:
        rtol, atol = self.tolerances(rtol, atol)
        comparison = RecordedComparison(what, got.detach().to(torch.float64), want.detach().to(torch.float64), rtol,
                                        atol, True)
        self.fn.comparisons.append(comparison)
        try:
            super().close(what, got, want, rtol=rtol, atol=atol)
        except AssertionError as error:
            comparison.held, comparison.message = False, str(error).splitlines()[0].removeprefix(f"{what}: ")
            raise


def replay(loss, invariant: str, draws: dict, dtype: torch.dtype = torch.float64) -> tuple[Context, _Recorder,
                                                                                            Exception | None]:
    """Run ``invariant``'s check on the example ``draws`` once more with every call of ``loss`` and every comparison
    recorded; the context, the recorder and what the check raised (None: the example holds)."""
    check = next(item.check for item in INVARIANTS if item.name == invariant)
    recorder = _Recorder(loss)
    base = build_context(loss, dtype=dtype)
    ctx = _Recording(**{f.name: getattr(base, f.name) for f in fields(base)} | {"fn": recorder})
    try:
        check(ctx, Replay(draws))
    except Exception as error:  # the loss may raise anything: that is the failure being replayed
        return ctx, recorder, error
    return ctx, recorder, None


def counterexample_code(loss, result: InvariantResult, dtype: torch.dtype = torch.float64) -> str:
    """The failing example of ``result`` as the row's framework calls and the check's comparisons: Python that
    raises the reported ``AssertionError`` when pasted; "" where the row has no framework call or the invariant no
    template (the harness's description stays the counterexample then)."""
    setup = loss.snippet_setup() if hasattr(loss, "snippet_setup") else []
    template = TEMPLATES.get(result.name)
    if not setup or template is None or not result.draws:
        return ""
    ctx, recorder, error = replay(loss, result.name, result.draws, dtype)
    if error is None or not isinstance(error, AssertionError):
        return ""  # the example holds on replay, or fails by raising: the harness's description stands
    body = template(_Writer(loss, ctx, recorder, result.draws))
    return "\n".join([*setup, *body]) if body else ""


class _Writer:
    """What a template needs: the recorded calls and comparisons, and the lines that print them."""

    def __init__(self, loss, ctx: Context, recorder: _Recorder, draws: dict) -> None:
        self.loss, self.ctx, self.draws = loss, ctx, draws
        self.calls, self.comparisons = recorder.calls, recorder.comparisons
        self.mask = loss.snippet_mask

    def call(self, index: int, name: str, comment: str, **keywords) -> list[str]:
        """Call ``index`` of the check, printed as the framework's code defining ``loss_{name}``, ``grad_{name}``."""
        call = self.calls[index]
        shard = {k: v for k, v in call.keywords.items() if k != "advantages"}
        return [f"# {comment}", *self.loss.snippet_call(call.batch, name, **shard, **keywords)]

    def compare(self, index: int, got: str, want: str) -> list[str]:
        """Comparison ``index`` of the check as an assert of ``got`` against ``want`` (Python expressions of
        float64 tensors) with its tolerance; a comparison the check did not reach is left out."""
        if index >= len(self.comparisons):
            return []
        comparison = self.comparisons[index]
        lines = [f"# the check: {comparison.what}"]
        if not comparison.held:
            lines.append(f"# it fails here (flashsim got {comparison.message})")
        return [*lines, f"got, expected = ({got}).double(), ({want}).double()",
                f"error, tolerance = (got - expected).abs().max().item(), {comparison.atol!r} + {comparison.rtol!r} "
                f"* expected.abs().max().item()",
                "assert error <= tolerance, f'max |got - expected| = {error!r} > {tolerance!r}: got {got.tolist()}, "
                "expected {expected.tolist()}'"]

    def literal(self, index: int, side: str = "want") -> str:
        """The ``want`` (or ``got``) values of comparison ``index`` as a float64 tensor literal: a reference the
        harness computed from the invariant's formula, not from a framework call."""
        return tensor_code(getattr(self.comparisons[index], side))


def _zero_loss_and_gradient(writer: _Writer, name: str, comment: str) -> list[str]:
    return [*writer.call(0, name, comment),
            *writer.compare(0, f"loss_{name}", "torch.zeros(())"),
            *writer.compare(1, f"grad_{name}", f"torch.zeros_like(grad_{name})")]


def _constant_rewards(writer: _Writer) -> list[str]:
    return _zero_loss_and_gradient(writer, "constant", "every trajectory has the same reward: loss and gradient 0")


def _single_rollout_groups(writer: _Writer) -> list[str]:
    if writer.ctx.declared.singleton == "unit":
        return [*writer.call(0, "single", "every group one trajectory, on-policy"),
                *writer.compare(0, "grad_single", writer.literal(0) + "  # the documented fallback A = R / (1 + ε)")]
    return _zero_loss_and_gradient(writer, "single", "every group one trajectory (G = 1): loss and gradient 0")


def _gradient_formula(comment: str) -> Callable[[_Writer], list[str]]:
    def template(writer: _Writer) -> list[str]:
        return [*writer.call(0, "batch", comment),
                f"expected_grad = {writer.literal(0)}  # the algorithm's ∂L/∂log π (flashsim's reference formula)",
                *writer.compare(0, "grad_batch", "expected_grad")]
    return template


def _advantage_baseline(writer: _Writer) -> list[str]:
    shift = writer.draws["reward shift"]
    lines = [*writer.call(0, "base", "the batch"),
             *writer.call(1, "shifted", f"the same batch with every reward {shift:+}: a baseline removes the shift"),
             *writer.compare(0, "grad_shifted", "grad_base")]
    if len(writer.calls) > 2:
        lines += [*writer.call(2, "doubled", "the same batch with every reward × 2: A = R − mean R doubles"),
                  *writer.compare(1, "grad_doubled", "2 * grad_base")]
    return lines


def _permutation(writer: _Writer) -> list[str]:
    batch = writer.calls[0].batch
    order = permutation_order(writer.ctx, Replay(writer.draws), batch).tolist()
    return [*writer.call(0, "base", "the batch"),
            *writer.call(1, "permuted", f"the same trajectories in the order {order}"),
            f"order = {order!r}",
            *writer.compare(0, "loss_permuted", "loss_base"),
            *writer.compare(1, "grad_permuted", "grad_base[order]")]


def _padding(writer: _Writer) -> list[str]:
    return [*writer.call(0, "junk", "the batch with NaN, ±inf and huge values in the padding slots"),
            *writer.call(1, "zeros", "the same batch with zeros in the padding slots"),
            *writer.compare(0, "loss_junk", "loss_zeros"),
            *writer.compare(1, "grad_junk", "grad_zeros"),
            *writer.compare(2, f"grad_junk[{writer.mask}_junk == 0]",
                            f"torch.zeros(int(({writer.mask}_junk == 0).sum()))")]


def _length_normalisation(writer: _Writer) -> list[str]:
    row, k = writer.draws["repeated row"], writer.draws["k"]
    base = writer.calls[0].batch
    before = writer.ctx.declared.weights(base.action_mask).max(dim=1).values
    after = writer.ctx.declared.weights(repeat_tokens(base, row, k).action_mask).max(dim=1).values
    scale = after / before
    keep = [i for i in range(base.batch_size) if i != row]
    return [*writer.call(0, "base", "the batch"),
            *writer.call(1, "repeated", f"trajectory {row}'s tokens each repeated {k} times (the others padded)"),
            f"scale = {tensor_code(scale)}  # each row's token weight after / before, by the declared aggregation",
            *writer.compare(0, f"grad_repeated[{row}].view({base.width}, {k}).sum(dim=1)",
                            f"{k} * scale[{row}] * grad_base[{row}]"),
            *writer.compare(1, f"grad_repeated[{keep!r}, :{base.width}]",
                            f"scale[{keep!r}, None] * grad_base[{keep!r}]")]


def _rejected_rows(writer: _Writer) -> list[str]:
    if len(writer.calls) < 2:
        return []
    row = writer.draws["rejected row"]
    others = [i for i in range(writer.calls[0].batch.batch_size) if i != row]
    return [*writer.call(0, "rejected", f"trajectory {row} far off-policy (D̄ = 0.49, above δ): rejected"),
            *writer.call(1, "admitted", f"the same batch with trajectory {row} on-policy: admitted"),
            *writer.compare(0, f"grad_rejected[{row}]", f"torch.zeros_like(grad_rejected[{row}])"),
            *writer.compare(1, f"grad_rejected[{others!r}]", f"grad_admitted[{others!r}]")]


def _batch_advantages(writer: _Writer) -> list[str]:
    batch = on_policy(writer.draws["batch"]) if isinstance(writer.draws.get("batch"), LossBatch) else None
    if batch is None or writer.calls:
        return []
    lines = writer.loss.snippet_call(batch, "batch")
    cut = next(i for i, line in enumerate(lines) if line.startswith(f"{writer.mask}_batch = "))
    return ["# the advantages the framework forms over the batch", *lines[:cut],
            f"expected_advantages = {writer.literal(0)}  # the declared estimator's, in float64",
            *writer.compare(0, "advantages_batch", "expected_advantages")]


def _shards(writer: _Writer) -> list[str]:
    if writer.ctx.local_shards:
        return []  # a documented local normalisation: its reference is not one call
    full = writer.calls[0].batch
    order, sizes, narrow = shard_plan(writer.ctx, Replay(writer.draws), full)
    lines = [*writer.call(0, "full", "the full batch in one call"),
             "grad_assembled = torch.zeros_like(grad_full)"]
    losses = []
    for number, rows in enumerate(torch.split(order, sizes), start=1):
        columns = narrowed(full.select(rows))[1] if narrow else torch.arange(full.width)
        where = f"rows {rows.tolist()}" + (f", columns {int(columns[0])}..{int(columns[-1])}" if narrow else "")
        name = f"shard_{number}"
        comment = f"micro-batch {number} of {len(sizes)}: the full batch's {where}, with the full batch's counts"
        lines += [*writer.call(number, name, comment, advantages=f"advantages_full[{rows.tolist()}]"),
                  f"grad_assembled[torch.tensor({rows.tolist()})[:, None], torch.arange({int(columns[0])}, "
                  f"{int(columns[-1]) + 1})] = grad_{name}"]
        losses.append(f"loss_{name}")
    return [*lines, *writer.compare(0, " + ".join(losses), "loss_full"),
            *writer.compare(1, "grad_assembled", "grad_full")]


def _precision(writer: _Writer) -> list[str]:
    if len(writer.calls) < 3:
        return []
    return [*writer.call(0, "float64", "the batch in float64"),
            "assert loss_float64.dtype == torch.float64, f'float64 inputs gave a {loss_float64.dtype} loss'",
            *writer.call(1, "bf16", "the batch in bfloat16"),
            *writer.call(2, "rounded", "the same bfloat16 values, in float64"),
            *writer.compare(0, "grad_bf16", "grad_rounded")]


TEMPLATES: dict[str, Callable[[_Writer], list[str]]] = {
    "on_policy_gradient": _gradient_formula("the batch, on-policy (μ = π)"),
    "off_policy_gradient": _gradient_formula("the batch, off-policy"),
    "rejected_rows": _rejected_rows,
    "advantage_baseline": _advantage_baseline,
    "constant_rewards": _constant_rewards,
    "single_rollout_groups": _single_rollout_groups,
    "permutation": _permutation,
    "padding": _padding,
    "length_normalisation": _length_normalisation,
    "batch_advantages": _batch_advantages,
    "shards": _shards,
    "precision": _precision,
}
"""Invariant → its comparisons over the recorded calls (``no_gradient_to_behavior`` has none: it differentiates
with respect to the behaviour log-probs and rewards, which no framework call exposes as leaves)."""


__all__ = ["RecordedCall", "RecordedComparison", "TEMPLATES", "counterexample_code", "replay"]
