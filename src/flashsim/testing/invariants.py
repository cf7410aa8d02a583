"""DESIGN.md's loss invariants as checks that run against any loss function, through a convention.

Each :class:`Invariant` draws its batches (hypothesis strategies of :mod:`flashsim.testing.strategies`)
from a :class:`Case` and raises :class:`InvariantViolation` when the loss breaks it;
:func:`flashsim.testing.check_loss` runs the checks with hypothesis and shrinks a failure to a small
counterexample. Gradients are taken with respect to the learner's log-probs ``ℓ_it = log π(a_it)``:
a model's gradient is this one pushed through ``∇_θ ℓ`` by the chain rule.

The reference gradients are the DESIGN.md formulas, written here op by op (they call
:func:`flashsim.losses.bernoulli_kl` and the advantage estimators, each property-tested on its own):

- FlashREINFORCE: ``∂L/∂ℓ_it = −m_i A_i ρ_it u_i`` with ``ρ = exp(ℓ − log μ)``, ``m_i = 1[D̄_i ≤ δ]``,
  ``D̄_i`` the mean over i's tokens of ``KL(Bern(μ(a_it)) ‖ Bern(π(a_it)))``;
- GRPO: ``∂L/∂ℓ_it = −r_it A_i u_i`` unless the token is clipped (``A > 0, r > 1 + ε`` or
  ``A < 0, r < 1 − ε``), then 0;

where ``u_i`` is the declared aggregation's weight and ``A`` the declared estimator's advantage
(:mod:`flashsim.testing.declared`; by default sample-mean and ``R − mean R`` for FlashREINFORCE,
token-mean and the group-normalised ``A`` with ``std + ε_std`` for GRPO).

Not checked here: invariant 7 (δ is the user's constant, not an argument; the off-policy check puts
trajectories on both sides of it instead) and 8 (a property of the KL helper, not of a loss).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from flashsim.losses import LOSSES, bernoulli_kl
from flashsim.testing.conventions import (
    ALGORITHMS,
    Convention,
    Shard,
    ShardContractError,
    accepted_keywords,
)
from flashsim.testing.declared import GROUP_ESTIMATORS, LINEAR_ESTIMATORS, Declared
from flashsim.testing.strategies import LossBatch, loss_batches, random_loss_batch, shard_sizes

SHARD_KEYWORDS = ("advantages", "num_sequences", "num_tokens", "max_tokens", "num_shards")
"""What a shard is handed: the full batch's advantages for its rows, the global B, Σ T_i and width, and
how many shards make up the update (a trainer that divides by its accumulation steps needs it)."""


FLOAT32_RTOL, FLOAT32_ATOL = 1e-3, 1e-6
"""Tolerance floors of a float32 run. Relative 1e-3: group normalisation divides a float32 reward's rounding
(6e-8 at 0.7) by a group std that can be 1e-3 of the rewards (0.52 vs 0.5214), so correct code differs from the
exact reference by a few 1e-5 relative; a wrong normalisation or a micro-batch counted twice errs by tens of per
cent. Absolute 1e-6: far below a group of equal rewards whose rounding is divided by a std of 0 + ε (verl:
5.96e-8 / 1e-6 = 0.06), which the float32 pass exists to show."""


class InvariantViolation(AssertionError):
    """A loss broke an invariant; the message says what was expected and what came."""


@dataclass(frozen=True)
class Context:
    """The loss under test and the hyperparameters the reference formulas use."""

    fn: Callable
    convention: Convention
    algorithm: str
    delta: float
    clip_eps: float
    std_eps: float
    declared: Declared
    equal_shards: bool = False
    """Shards are equal-size microbatches only (a trainer that divides by its count of accumulation steps)."""
    contiguous_groups: bool = False
    """Groups arrive as contiguous blocks of G rows (a trainer that reshapes rewards with ``view(-1, G)``)."""
    local_shards: bool = False
    """Each microbatch is normalised over its own tokens, then divided by the number of microbatches (TRL's
    documented ``bnpo``): ``shards`` checks that instead of the full batch's normalisation."""
    dtype: torch.dtype = torch.float64
    """The dtype of the drawn batches (float64, or float32, the dtype the frameworks' pipelines feed)."""

    def close(self, what: str, got: Tensor, want: Tensor, *, rtol: float = 1e-7, atol: float = 1e-9) -> None:
        """:func:`_close` with :meth:`tolerances`."""
        rtol, atol = self.tolerances(rtol, atol)
        _close(what, got, want, rtol=rtol, atol=atol)

    def tolerances(self, rtol: float, atol: float) -> tuple[float, float]:
        """``(rtol, atol)`` as :meth:`close` applies them: floored at a few float32 ulps when the batches are
        float32."""
        if self.dtype == torch.float32:
            return max(rtol, FLOAT32_RTOL), max(atol, FLOAT32_ATOL)
        return rtol, atol

    def loss(self, batch: LossBatch, log_probs: Tensor, **overrides) -> Tensor:
        return self.convention.loss(self.fn, self.algorithm, batch, log_probs, eps=self.std_eps, **overrides)

    def own_advantages(self, batch: LossBatch) -> Tensor:
        """The advantages the loss forms over ``batch``: its ``advantages(rewards, group_ids)`` method where it
        has one (adapters do), else the declared estimator's."""
        method = getattr(self.fn, "advantages", None)
        if callable(method):
            return method(batch.rewards, batch.group_ids).detach().to(torch.float64)
        return self.advantages(batch)

    def run(self, batch: LossBatch, **overrides) -> tuple[Tensor, Tensor]:
        """``(loss, ∂loss/∂log_probs [B, T])``; a log-prob the loss does not use gets gradient 0."""
        leaf = batch.leaf()
        loss = self.loss(batch, leaf, **overrides)
        (gradient,) = torch.autograd.grad(loss, leaf, allow_unused=True) if loss.requires_grad else (None,)
        return loss.detach(), torch.zeros_like(leaf) if gradient is None else gradient

    def advantages(self, batch: LossBatch) -> Tensor:
        """``A`` ``[B]`` by the declared estimator."""
        return self.declared.advantages(batch.rewards, batch.group_ids)

    def reference_gradient(self, batch: LossBatch) -> Tensor:
        """``∂L/∂ℓ`` ``[B, T]`` by the algorithm's formula (module docstring); 0 on padding."""
        mask, advantages = batch.action_mask, self.advantages(batch)[:, None]
        weights = self.declared.weights(mask)
        ratio = torch.exp(torch.where(mask, batch.log_probs - batch.behavior_log_probs, 0.0))
        if self.algorithm == "grpo":
            high, low = (advantages > 0) & (ratio > 1 + self.clip_eps), (advantages < 0) & (ratio < 1 - self.clip_eps)
            clipped = high | low
            return torch.where(mask & ~clipped, -ratio * advantages * weights, 0.0)
        admitted = sequence_kl(batch) <= self.delta
        return torch.where(mask & admitted[:, None], -ratio * advantages * weights, 0.0)


def sequence_kl(batch: LossBatch) -> Tensor:
    """``D̄_i``: mean over trajectory i's tokens of the sampled-action Bernoulli KL(μ ‖ π). Shape ``[B]``."""
    mask = batch.action_mask
    p = torch.where(mask, batch.behavior_log_probs, 0.0).exp()
    q = torch.where(mask, batch.log_probs, 0.0).exp()
    return torch.where(mask, bernoulli_kl(p, q), 0.0).sum(dim=1) / batch.lengths


class Case:
    """One hypothesis example: draws values by label and remembers them for the report. ``drawn`` is what the
    report prints (a check may replace a drawn batch by the one it derived from it); ``draws`` keeps every value as
    drawn, so that :class:`Replay` runs the same example again. ``Case.latest`` is the last case made (the shrunk
    failure, after a search that failed)."""

    latest: Case | None = None

    def __init__(self, data) -> None:
        self._data, self.drawn, self.draws = data, {}, {}
        Case.latest = self

    def draw(self, strategy, label: str):
        value = self._data.draw(strategy, label=label)
        self.drawn[label] = self.draws[label] = value
        return value


class Replay(Case):
    """A :class:`Case` that hands back the values of an earlier example (its ``draws``) instead of drawing: a check
    run on it repeats that example call for call."""

    def __init__(self, draws: dict) -> None:
        super().__init__(None)
        self._draws = draws

    def draw(self, strategy, label: str):
        value = self._draws[label]
        self.drawn[label] = self.draws[label] = value
        return value


def _close(what: str, got: Tensor, want: Tensor, *, rtol: float = 1e-7, atol: float = 1e-9) -> None:
    """``|got − want| ≤ atol + rtol · max|want|``; atol absorbs rounding noise such as (R − mean R)/(std + ε)
    on a constant group, 1e-17 / 1e-6."""
    got, want = got.to(torch.float64), want.to(torch.float64)
    scale = float(want.abs().max()) if want.numel() else 0.0
    tolerance = atol + rtol * max(scale, 1e-300)
    if got.shape != want.shape:
        raise InvariantViolation(f"{what}: shape {tuple(got.shape)}, expected {tuple(want.shape)}")
    if not bool(torch.isfinite(got).all()):
        raise InvariantViolation(f"{what}: non-finite values {got.tolist()}")
    error = float((got - want).abs().max()) if got.numel() else 0.0
    if not error <= tolerance:
        raise InvariantViolation(
            f"{what}: max |got − expected| = {error:.3g} > {tolerance:.3g}\n  got      {_short(got)}\n"
            f"  expected {_short(want)}{_worst_beyond_short(got, want)}"
        )


def _worst_beyond_short(got: Tensor, want: Tensor) -> str:
    """The entry with the largest difference, where :func:`_short` cut it off: ``[i, j]`` and both values."""
    flat = int((got - want).abs().flatten().argmax())
    if flat < SHORT:
        return ""
    index = [int(i) for i in torch.unravel_index(torch.tensor(flat), got.shape)]
    return (f"\n  largest at {index}: got {round(float(got.flatten()[flat]), 6)}, "
            f"expected {round(float(want.flatten()[flat]), 6)}")


def _signed(values: Tensor) -> str:
    """``[+0.0596, +0.0596, ...]``: the sign shows whether every member shifts the same way."""
    return "[" + ", ".join(f"{v:+.4g}" for v in values.flatten().tolist()[:12]) + (", …]" if values.numel() > 12
                                                                                   else "]")


SHORT = 24
"""How many entries of a tensor a failure message prints (flattened, from the first)."""


def _short(values: Tensor) -> str:
    return str([round(v, 6) for v in values.flatten().tolist()][:SHORT])


def on_policy(batch: LossBatch) -> LossBatch:
    """The same batch with μ = π on every policy token."""
    behavior = torch.where(batch.action_mask, batch.log_probs, batch.behavior_log_probs)
    return LossBatch(batch.log_probs, behavior, batch.rewards, batch.action_mask, batch.group_ids)


def near_threshold(batch: LossBatch, factors: Tensor, delta: float) -> LossBatch:
    """Behaviour log-probs moved along their drift until each row's ``D̄_i = factors_i · δ`` (bisection).

    Rows whose drift is zero stay on-policy; rows that cannot reach the target keep the largest drift.
    """
    direction = torch.where(batch.action_mask, batch.behavior_log_probs - batch.log_probs, 0.0)
    target = factors.to(torch.float64) * delta
    low, high = torch.zeros(batch.batch_size, dtype=torch.float64), torch.full((batch.batch_size,), 64.0)

    def moved(scale: Tensor) -> LossBatch:
        behavior = (batch.log_probs + scale[:, None] * direction).clamp(max=0.0)
        return LossBatch(batch.log_probs, behavior, batch.rewards, batch.action_mask, batch.group_ids)

    for _ in range(80):
        middle = (low + high) / 2
        below = sequence_kl(moved(middle)) < target
        low, high = torch.where(below, middle, low), torch.where(below, high, middle)
    return moved(high)


def repeat_tokens(batch: LossBatch, row: int, k: int) -> LossBatch:
    """Every slot of trajectory ``row`` repeated k times in place; the other rows padded to width k·T."""
    def widen(x: Tensor) -> Tensor:
        padded = torch.cat([x, torch.zeros((x.shape[0], (k - 1) * x.shape[1]), dtype=x.dtype)], dim=1)
        padded[row] = x[row].repeat_interleave(k)
        return padded

    return LossBatch(widen(batch.log_probs), widen(batch.behavior_log_probs), batch.rewards,
                     widen(batch.action_mask), batch.group_ids)


def with_rewards(batch: LossBatch, rewards: Tensor) -> LossBatch:
    return LossBatch(batch.log_probs, batch.behavior_log_probs, rewards, batch.action_mask, batch.group_ids)


# ---- the checks -------------------------------------------------------------------------------------

def _batch(case: Case, ctx: Context, *, padding: str = "zeros", max_group: int = 4, **options) -> LossBatch:
    """A batch of ``ctx.dtype`` (zero padding unless asked); for GRPO (and the registry's other grouped rows),
    groups of G ∈ {2, ..., max_group} (advantages not all 0)."""
    from hypothesis import strategies as st

    if LOSSES[ctx.algorithm].group_size > 1 and "group_size" not in options:
        options["group_size"] = case.draw(st.integers(2, max_group), "G")
        low, high = options.get("batch_size", (1, 8))
        options["batch_size"] = (max(low, options["group_size"]), high)
    if ctx.contiguous_groups:
        options.setdefault("group_size", 1)  # ungrouped algorithms: every trajectory its own block
        options["contiguous_groups"] = True
    return case.draw(loss_batches(padding=padding, dtype=ctx.dtype, **options), "batch")


CLIP_EDGE_RATIOS = (0.5, 0.75, 0.9, 1.0, 1.1, 1.3, 1.8)
"""Token ratios π/μ of the GRPO off-policy check: inside and on both sides outside [1 − ε, 1 + ε]."""


def check_on_policy_gradient(ctx: Context, case: Case) -> None:
    batch = on_policy(_batch(case, ctx))
    _, gradient = ctx.run(batch)
    ctx.close("on-policy ∂L/∂log π", gradient, ctx.reference_gradient(batch))


def check_off_policy_gradient(ctx: Context, case: Case) -> None:
    from hypothesis import strategies as st

    if ctx.algorithm == "grpo":
        base = _batch(case, ctx, max_drift=0.0)
        ratios = case.draw(st.lists(st.sampled_from(CLIP_EDGE_RATIOS), min_size=base.log_probs.numel(),
                                    max_size=base.log_probs.numel()), "token ratios")
        log_ratio = torch.tensor(ratios, dtype=torch.float64).log().view(base.log_probs.shape)
        behavior = torch.where(base.action_mask, (base.log_probs - log_ratio).clamp(max=0.0), 0.0)
        batch = LossBatch(base.log_probs, behavior, base.rewards, base.action_mask, base.group_ids)
        case.drawn["batch"] = batch
    else:
        drifted = _batch(case, ctx, max_drift=0.5)
        levels = st.sampled_from([0.0, 0.5, 0.8, 0.9, 0.95, 1.05, 1.1, 1.25, 2.0, 10.0])
        factors = case.draw(st.lists(levels, min_size=drifted.batch_size, max_size=drifted.batch_size),
                            "D̄_i / δ")
        batch = near_threshold(drifted, torch.tensor(factors), ctx.delta)
        case.drawn["batch"] = batch
    _, gradient = ctx.run(batch)
    ctx.close("off-policy ∂L/∂log π", gradient, ctx.reference_gradient(batch))


def check_rejected_rows(ctx: Context, case: Case) -> None:
    from hypothesis import strategies as st

    batch = _batch(case, ctx, max_drift=0.0, batch_size=(2, 8))
    row = case.draw(st.integers(0, batch.batch_size - 1), "rejected row")
    mask = batch.action_mask[row]
    half = math.log(0.5)  # the row's tokens at π = 0.5, μ = 0.05: D̄ = 0.49, far above any sensible δ
    log_probs, behavior = batch.log_probs.clone(), batch.behavior_log_probs.clone()
    log_probs[row] = torch.where(mask, half, 0.0)
    behavior[row] = torch.where(mask, math.log(0.05), 0.0)
    admitted = LossBatch(log_probs, torch.where(batch.action_mask, log_probs, 0.0), batch.rewards,
                         batch.action_mask, batch.group_ids)
    rejected = LossBatch(log_probs, behavior, batch.rewards, batch.action_mask, batch.group_ids)
    case.drawn["batch"] = rejected
    if not bool(sequence_kl(rejected)[row] > ctx.delta):
        return  # δ ≥ 0.49 admits this row: nothing to reject
    _, gradient = ctx.run(rejected)
    _, gradient_admitted = ctx.run(admitted)
    ctx.close(f"∂L/∂log π of rejected trajectory {row}", gradient[row], torch.zeros_like(gradient[row]))
    others = torch.arange(batch.batch_size) != row
    ctx.close("the other trajectories' ∂L/∂log π (rejected vs admitted)", gradient[others], gradient_admitted[others])


def check_advantage_baseline(ctx: Context, case: Case) -> None:
    from hypothesis import strategies as st

    batch = _batch(case, ctx, max_drift=0.3)
    shift = case.draw(st.sampled_from([-0.5, 0.25, 3.0]), "reward shift")
    _, gradient = ctx.run(batch)
    _, shifted = ctx.run(with_rewards(batch, batch.rewards + shift))
    if ctx.declared.estimator != "none":
        ctx.close(f"∂L/∂log π with rewards + {shift}", shifted, gradient)
    if ctx.declared.estimator in LINEAR_ESTIMATORS:
        _, doubled = ctx.run(with_rewards(batch, 2 * batch.rewards))
        ctx.close("∂L/∂log π with rewards × 2 (A = R − mean R scales with R)", doubled, 2 * gradient)


def check_constant_rewards(ctx: Context, case: Case) -> None:
    from hypothesis import strategies as st

    # Groups up to 8 over up to 16 rows: a float32 mean of seven or more 0.7s is off by an ulp (GRPO's n = 8).
    batch = _batch(case, ctx, max_drift=0.3, max_group=8, batch_size=(1, 16))
    value = case.draw(st.sampled_from([0.0, 1.0, 0.7, -2.5]), "reward of every trajectory")
    constant = with_rewards(batch, torch.full_like(batch.rewards, value))
    case.drawn["batch"] = constant
    loss, gradient = ctx.run(constant)
    formed = f" (advantages the loss forms: {_signed(ctx.own_advantages(constant))})"
    ctx.close("loss with constant rewards" + formed, loss, torch.zeros_like(loss), rtol=0, atol=1e-9)
    ctx.close("∂L/∂log π with constant rewards" + formed, gradient, torch.zeros_like(gradient), rtol=0, atol=1e-9)


def check_single_rollout_groups(ctx: Context, case: Case) -> None:
    if ctx.declared.singleton == "unit":  # documented fallback (verl): mean 0, std 1, so A = R / (1 + ε)
        batch = on_policy(_batch(case, ctx, group_size=1))
        _, gradient = ctx.run(batch)
        ctx.close("∂L/∂log π with G = 1 vs the documented fallback A = R / (1 + ε)", gradient,
                  ctx.reference_gradient(batch))
        return
    batch = _batch(case, ctx, max_drift=0.3, group_size=1)
    loss, gradient = ctx.run(batch)
    ctx.close("loss with G = 1 (every group one trajectory)", loss, torch.zeros_like(loss), rtol=0, atol=1e-9)
    ctx.close("∂L/∂log π with G = 1", gradient, torch.zeros_like(gradient), rtol=0, atol=1e-9)


def check_permutation(ctx: Context, case: Case) -> None:
    batch = _batch(case, ctx, max_drift=0.3)
    order = permutation_order(ctx, case, batch)
    loss, gradient = ctx.run(batch)
    loss_p, gradient_p = ctx.run(batch.select(order))
    ctx.close("loss of the permuted batch", loss_p, loss, rtol=1e-9)
    ctx.close("∂L/∂log π of the permuted batch", gradient_p, gradient[order], rtol=1e-9)


def permutation_order(ctx: Context, case: Case, batch: LossBatch) -> Tensor:
    """The drawn order of :func:`check_permutation`: any, or whole groups and rows within them when groups must stay
    contiguous."""
    from hypothesis import strategies as st

    order = torch.tensor(case.draw(st.permutations(range(batch.batch_size)), "order"))
    if ctx.contiguous_groups:  # move whole groups, and rows within each group, so groups stay contiguous
        size = int((batch.group_ids == batch.group_ids[0]).sum())
        blocks = torch.tensor(case.draw(st.permutations(range(batch.batch_size // size)), "group order"))
        within = torch.tensor(case.draw(st.permutations(range(size)), "order within groups"))
        order = (blocks[:, None] * size + within[None, :]).flatten()
    return order


def check_padding(ctx: Context, case: Case) -> None:
    batch = _batch(case, ctx, padding="junk", max_drift=0.3)
    loss, gradient = ctx.run(batch)
    loss_z, gradient_z = ctx.run(batch.with_padding(0.0))
    ctx.close("loss with NaN/±inf/1e30 in the padding slots", loss, loss_z, rtol=0, atol=0)
    ctx.close("∂L/∂log π with junk in the padding slots", gradient, gradient_z, rtol=0, atol=0)
    ctx.close("∂L/∂log π on padding slots", gradient[~batch.action_mask], torch.zeros(int((~batch.action_mask).sum()),
           dtype=gradient.dtype), rtol=0, atol=0)


def check_length_normalisation(ctx: Context, case: Case) -> None:
    from hypothesis import strategies as st

    batch = _batch(case, ctx, max_drift=0.3)
    row = case.draw(st.integers(0, batch.batch_size - 1), "repeated row")
    k = case.draw(st.integers(2, 3), "k")
    _, gradient = ctx.run(batch)
    repeated = repeat_tokens(batch, row, k)
    _, gradient_k = ctx.run(repeated)
    # Each row's tokens weigh u_i (the declared aggregation); the repeated row's k copies weigh k · u'_row.
    before = ctx.declared.weights(batch.action_mask).max(dim=1).values
    after = ctx.declared.weights(repeated.action_mask).max(dim=1).values
    scale = after / before
    total = gradient_k[row].view(batch.width, k).sum(dim=1)
    ctx.close(f"∂L/∂log π of trajectory {row} summed over its {k} copies of each token", total,
           k * scale[row] * gradient[row])
    keep = torch.arange(batch.batch_size) != row
    ctx.close("the other trajectories' ∂L/∂log π", gradient_k[keep, : batch.width], scale[keep, None] * gradient[keep])


def check_batch_advantages(ctx: Context, case: Case) -> None:
    batch = on_policy(_batch(case, ctx))
    want = ctx.advantages(batch)
    method = getattr(ctx.fn, "advantages", None)
    if callable(method):
        ctx.close("the loss's advantages over the full batch (its advantages(rewards, group_ids))",
               method(batch.rewards, batch.group_ids).detach(), want, rtol=1e-7, atol=1e-9)
        return
    # μ = π: the ratio is 1, nothing is clipped or gated, so ∂L/∂ℓ_it = −A_i u_i and A_i = −Σ_t ∂L/∂ℓ_it / Σ_t u_i.
    _, gradient = ctx.run(batch)
    recovered = -gradient.sum(dim=1) / ctx.declared.weights(batch.action_mask).sum(dim=1)
    ctx.close("the advantages the loss applies (−Σ_t ∂L/∂log π_it / Σ_t u_i, on-policy)", recovered, want)


def narrowed(part: LossBatch) -> tuple[LossBatch, Tensor]:
    """The shard with the columns that are padding in all of its rows cut from both ends (a microbatch padded
    only to its longest row), and the kept column indices."""
    used = part.action_mask.any(dim=0).nonzero().flatten()
    columns = torch.arange(int(used.min()), int(used.max()) + 1)
    cut = LossBatch(part.log_probs[:, columns], part.behavior_log_probs[:, columns], part.rewards,
                    part.action_mask[:, columns], part.group_ids)
    return cut, columns


def shard_plan(ctx: Context, case: Case, batch: LossBatch) -> tuple[Tensor, list[int], bool]:
    """The drawn layout of :func:`check_shards`: the row order, the shard sizes along it, and whether each shard is
    narrowed to its longest row."""
    from hypothesis import strategies as st

    order = torch.tensor(case.draw(st.permutations(range(batch.batch_size)), "row order"))
    divisors = [k for k in range(1, min(4, batch.batch_size) + 1) if batch.batch_size % k == 0]
    layout = "equal" if ctx.equal_shards else case.draw(st.sampled_from(["any", "equal"]), "shard sizes")
    if layout == "equal":
        k = case.draw(st.sampled_from(divisors), "equal-size microbatches")
        sizes = [batch.batch_size // k] * k
    else:
        sizes = case.draw(shard_sizes(batch.batch_size, max_shards=4), "dp × microbatch shard sizes")
    narrow = case.draw(st.booleans(), "shards narrowed to their longest row")
    return order, sizes, narrow


def check_shards(ctx: Context, case: Case) -> None:
    accepted = accepted_keywords(ctx.fn, SHARD_KEYWORDS)
    if ctx.convention.name == "flashsim" and accepted is not None and "advantages" not in accepted:
        raise ShardContractError("the loss takes no advantages= keyword (nor num_sequences= / num_tokens=): a rank "
                                 "or a microbatch cannot be given the full batch's advantages and counts")
    batch = _batch(case, ctx, max_drift=0.3, batch_size=(2, 8))
    order, sizes, narrow = shard_plan(ctx, case, batch)
    loss, gradient = ctx.run(batch)
    advantages = ctx.own_advantages(batch)
    total, assembled = torch.zeros((), dtype=torch.float64), torch.zeros_like(gradient)
    if ctx.local_shards:  # documented local normalisation: Σ_k (1/K) · (shard k's loss over its own tokens)
        loss, gradient = torch.zeros((), dtype=torch.float64), torch.zeros_like(gradient)
    for rows in torch.split(order, sizes):
        part, columns = batch.select(rows), torch.arange(batch.width)
        if narrow:
            part, columns = narrowed(part)
        shard = Shard(advantages[rows], batch.batch_size, batch.num_tokens, batch.width, len(sizes))
        part_loss, part_gradient = ctx.run(part, shard=shard)
        total = total + part_loss
        assembled[rows[:, None], columns[None, :]] = part_gradient
        if ctx.local_shards:
            alone = Shard(advantages[rows], part.batch_size, part.num_tokens, part.width, 1)
            local_loss, local_gradient = ctx.run(part, shard=alone)
            loss = loss + local_loss / len(sizes)
            gradient[rows[:, None], columns[None, :]] = local_gradient / len(sizes)
    reference = "Σ_k (1/K) · shard k's own token mean (documented)" if ctx.local_shards else "the full batch's loss"
    ctx.close(f"Σ shard losses vs {reference} (the loss's own advantages handed to each shard)", total,
              loss.to(torch.float64), rtol=1e-9)
    ctx.close("∂L/∂log π assembled from the shards", assembled, gradient, rtol=1e-9)


PRECISION_RTOL = 2e-2
"""A few bf16 ulps (2⁻⁸ ≈ 4e-3 each) of the largest gradient: bf16 stores the gradient itself to half an ulp, and
a loss computed in bf16 end to end adds a few more. A token clipped or gated on the wrong side of ε or δ, or a
log-ratio ℓ − log μ exponentiated in bf16 (both rounded at |ℓ| · 2⁻⁹ before the difference), errs far more."""


def check_precision(ctx: Context, case: Case) -> None:
    batch = _batch(case, ctx, max_drift=0.3, batch_size=(2, 8))
    loss64, _ = ctx.run(batch)
    if loss64.dtype != torch.float64:
        raise InvariantViolation(f"float64 inputs gave a {loss64.dtype} loss; float64 must stay float64")
    low = batch.to(torch.bfloat16)
    _, gradient_low = ctx.run(low)
    _, exact = ctx.run(low.to(torch.float64))  # the same (rounded) inputs, computed in float64
    ctx.close("∂L/∂log π of bf16 inputs vs the same inputs in float64 (promote before exp)",
              gradient_low.to(torch.float64), exact, rtol=PRECISION_RTOL, atol=1e-12)


def precision_frequency(ctx: Context, *, samples: int = 200, seed: int = 0) -> str:
    """How often :func:`check_precision` fails: over ``samples`` seeded random batches (B ≤ 8, T ≤ 6, drift 0.3)
    the fraction of batches whose bf16 gradient is off and the fraction of policy tokens that are off (each
    judged by the check's tolerance)."""
    generator = torch.Generator().manual_seed(seed)
    grouped = LOSSES[ctx.algorithm].group_size > 1
    failed = wrong = tokens = 0
    for _ in range(samples):
        group, groups, width = (int(torch.randint(low, high, (1,), generator=generator))
                                for low, high in ((2, 5), (1, 3), (1, 7)))
        size = group * groups if grouped else int(torch.randint(2, 9, (1,), generator=generator))
        batch = random_loss_batch(generator, batch_size=size, width=width, drift=0.3,
                                  group_size=group if grouped else 1, padding="zeros").to(torch.bfloat16)
        _, gradient_low = ctx.run(batch)
        _, exact = ctx.run(batch.to(torch.float64))
        error = (gradient_low.to(torch.float64) - exact).abs()
        tolerance = 1e-12 + PRECISION_RTOL * float(exact.abs().max())
        off = (error > tolerance) & batch.action_mask
        failed, wrong, tokens = failed + bool(off.any()), wrong + int(off.sum()), tokens + batch.num_tokens
    return (f"how often: {failed} of {samples} random batches ({failed / samples:.1%}) and {wrong:,} of "
            f"{tokens:,} policy tokens ({wrong / tokens:.2%}) are off by more than the tolerance")


def check_no_gradient_to_behavior(ctx: Context, case: Case) -> None:
    batch = _batch(case, ctx, max_drift=0.3)
    behavior = batch.behavior_log_probs.clone().requires_grad_(True)
    rewards = batch.rewards.clone().requires_grad_(True)
    leaf = batch.leaf()
    loss = ctx.loss(batch, leaf, behavior_log_probs=behavior, rewards=rewards)
    inputs = [behavior, rewards]
    gradients = torch.autograd.grad(loss, inputs, allow_unused=True) if loss.requires_grad else [None, None]
    for name, value in zip(("behaviour log-probs", "rewards"), gradients):
        if value is not None:
            ctx.close(f"∂L/∂({name})", value, torch.zeros_like(value), rtol=0, atol=0)


@dataclass(frozen=True)
class Invariant:
    """One check: its DESIGN.md number, what must hold, the algorithms it applies to."""

    name: str
    design: str
    statement: str
    check: Callable[[Context, Case], None]
    algorithms: tuple[str, ...] = ALGORITHMS
    needs_own_advantages: bool = False
    not_applicable: Callable[[Context], str | None] = lambda ctx: None
    """Why the invariant does not apply to what the loss declares (None: it applies)."""
    frequency: Callable[[Context], str] | None = None
    """After a failure: how often it happens over seeded random batches (one line)."""


INVARIANTS: tuple[Invariant, ...] = (
    Invariant("on_policy_gradient", "1", "μ = π: ∂L/∂log π is the algorithm's formula", check_on_policy_gradient),
    Invariant("off_policy_gradient", "1, 6, 13",
              "μ ≠ π: ∂L/∂log π is the formula (sequence gate at δ / PPO clip at ε)", check_off_policy_gradient,
              not_applicable=lambda ctx: getattr(ctx.fn, "off_policy_rule", None)),
    Invariant("rejected_rows", "6", "a rejected trajectory has zero gradient and stays in B",
              check_rejected_rows, algorithms=("flash_reinforce",)),
    Invariant("advantage_baseline", "2", "reward shift leaves the gradient; scaling scales it (flash)",
              check_advantage_baseline, needs_own_advantages=True),
    Invariant("constant_rewards", "9", "constant rewards: zero loss and zero gradient", check_constant_rewards,
              not_applicable=lambda ctx: "the declared estimator has no baseline" if ctx.declared.estimator == "none"
              else None),
    Invariant("single_rollout_groups", "13", "G = 1: zero loss and zero gradient", check_single_rollout_groups,
              needs_own_advantages=True,
              not_applicable=lambda ctx: None if ctx.declared.estimator in GROUP_ESTIMATORS
              else "the declared estimator is not a group baseline"),
    Invariant("permutation", "3", "permuting trajectories permutes gradients, keeps the loss", check_permutation),
    Invariant("padding", "4", "padding slots (NaN, ±inf) change neither loss nor gradient", check_padding),
    Invariant("length_normalisation", "5", "tokens repeated k×: gradient scales as the aggregation says",
              check_length_normalisation),
    Invariant("batch_advantages", "2, 10", "the advantages over the full batch are the declared estimator's",
              check_batch_advantages, needs_own_advantages=True),
    Invariant("shards", "10", "dp × microbatch shards (any or equal sizes, narrowed widths) add up to the full "
              "batch, given the loss's own advantages", check_shards),
    Invariant("precision", "11", "bf16 gradient within 2e-2 (relative) of float64's; float64 stays float64",
              check_precision, frequency=precision_frequency),
    Invariant("no_gradient_to_behavior", "12", "no gradient reaches behaviour log-probs or rewards",
              check_no_gradient_to_behavior),
)
"""Every check, in report order."""
