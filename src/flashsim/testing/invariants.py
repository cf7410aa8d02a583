"""DESIGN.md's loss invariants as checks that run against any loss function, through a convention.

Each :class:`Invariant` draws its batches (hypothesis strategies of :mod:`flashsim.testing.strategies`)
from a :class:`Case` and raises :class:`InvariantViolation` when the loss breaks it;
:func:`flashsim.testing.check_loss` runs the checks with hypothesis and shrinks a failure to a small
counterexample. Gradients are taken with respect to the learner's log-probs ``ℓ_it = log π(a_it)``:
a model's gradient is this one pushed through ``∇_θ ℓ`` by the chain rule.

The reference gradients are the DESIGN.md formulas, written here op by op (they call
:func:`flashsim.losses.bernoulli_kl` and the advantage estimators, each property-tested on its own):

- FlashREINFORCE: ``∂L/∂ℓ_it = −m_i A_i ρ_it / (B T_i)`` with ``A = R − mean R``, ``ρ = exp(ℓ − log μ)``,
  ``m_i = 1[D̄_i ≤ δ]``, ``D̄_i`` the mean over i's tokens of ``KL(Bern(μ(a_it)) ‖ Bern(π(a_it)))``;
- GRPO: ``∂L/∂ℓ_it = −r_it A_i / Σ_j T_j`` unless the token is clipped (``A > 0, r > 1 + ε`` or
  ``A < 0, r < 1 − ε``), then 0; ``A`` group-normalised with ``std + ε_std``.

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
from flashsim.testing.conventions import ALGORITHMS, Convention, algorithm_advantages, shard_of
from flashsim.testing.strategies import LossBatch, loss_batches, shard_sizes


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

    def loss(self, batch: LossBatch, log_probs: Tensor, **overrides) -> Tensor:
        return self.convention.loss(self.fn, self.algorithm, batch, log_probs, eps=self.std_eps, **overrides)

    def run(self, batch: LossBatch, **overrides) -> tuple[Tensor, Tensor]:
        """``(loss, ∂loss/∂log_probs [B, T])``; a log-prob the loss does not use gets gradient 0."""
        leaf = batch.leaf()
        loss = self.loss(batch, leaf, **overrides)
        (gradient,) = torch.autograd.grad(loss, leaf, allow_unused=True) if loss.requires_grad else (None,)
        return loss.detach(), torch.zeros_like(leaf) if gradient is None else gradient

    def advantages(self, batch: LossBatch) -> Tensor:
        return algorithm_advantages(self.algorithm, batch.rewards, batch.group_ids, eps=self.std_eps)

    def reference_gradient(self, batch: LossBatch) -> Tensor:
        """``∂L/∂ℓ`` ``[B, T]`` by the algorithm's formula (module docstring); 0 on padding."""
        mask, advantages = batch.action_mask, self.advantages(batch)[:, None]
        ratio = torch.exp(torch.where(mask, batch.log_probs - batch.behavior_log_probs, 0.0))
        if self.algorithm == "grpo":
            high, low = (advantages > 0) & (ratio > 1 + self.clip_eps), (advantages < 0) & (ratio < 1 - self.clip_eps)
            clipped = high | low
            return torch.where(mask & ~clipped, -ratio * advantages / batch.num_tokens, 0.0)
        admitted = sequence_kl(batch) <= self.delta
        per_token = -ratio * advantages / (batch.batch_size * batch.lengths[:, None])
        return torch.where(mask & admitted[:, None], per_token, 0.0)


def sequence_kl(batch: LossBatch) -> Tensor:
    """``D̄_i``: mean over trajectory i's tokens of the sampled-action Bernoulli KL(μ ‖ π). Shape ``[B]``."""
    mask = batch.action_mask
    p = torch.where(mask, batch.behavior_log_probs, 0.0).exp()
    q = torch.where(mask, batch.log_probs, 0.0).exp()
    return torch.where(mask, bernoulli_kl(p, q), 0.0).sum(dim=1) / batch.lengths


class Case:
    """One hypothesis example: draws values by label and remembers them for the report."""

    def __init__(self, data) -> None:
        self._data, self.drawn = data, {}

    def draw(self, strategy, label: str):
        value = self._data.draw(strategy, label=label)
        self.drawn[label] = value
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
            f"  expected {_short(want)}"
        )


def _short(values: Tensor) -> str:
    return str([round(v, 6) for v in values.flatten().tolist()][:24])


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

def _batch(case: Case, ctx: Context, *, padding: str = "zeros", **options) -> LossBatch:
    """A float64 batch (zero padding unless asked); for GRPO (and the registry's other grouped rows), groups
    of G ∈ {2, 3, 4} (advantages not all 0)."""
    from hypothesis import strategies as st

    if LOSSES[ctx.algorithm].group_size > 1 and "group_size" not in options:
        options["group_size"] = case.draw(st.integers(2, 4), "G")
        low, high = options.get("batch_size", (1, 8))
        options["batch_size"] = (max(low, options["group_size"]), high)
    return case.draw(loss_batches(padding=padding, **options), "batch")


CLIP_EDGE_RATIOS = (0.5, 0.75, 0.9, 1.0, 1.1, 1.3, 1.8)
"""Token ratios π/μ of the GRPO off-policy check: inside and on both sides outside [1 − ε, 1 + ε]."""


def check_on_policy_gradient(ctx: Context, case: Case) -> None:
    batch = on_policy(_batch(case, ctx))
    _, gradient = ctx.run(batch)
    _close("on-policy ∂L/∂log π", gradient, ctx.reference_gradient(batch))


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
    _close("off-policy ∂L/∂log π", gradient, ctx.reference_gradient(batch))


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
    _close(f"∂L/∂log π of rejected trajectory {row}", gradient[row], torch.zeros_like(gradient[row]))
    others = torch.arange(batch.batch_size) != row
    _close("the other trajectories' ∂L/∂log π (rejected vs admitted)", gradient[others], gradient_admitted[others])


def check_advantage_baseline(ctx: Context, case: Case) -> None:
    from hypothesis import strategies as st

    batch = _batch(case, ctx, max_drift=0.3)
    shift = case.draw(st.sampled_from([-0.5, 0.25, 3.0]), "reward shift")
    _, gradient = ctx.run(batch)
    _, shifted = ctx.run(with_rewards(batch, batch.rewards + shift))
    _close(f"∂L/∂log π with rewards + {shift}", shifted, gradient)
    if ctx.algorithm == "flash_reinforce":
        _, doubled = ctx.run(with_rewards(batch, 2 * batch.rewards))
        _close("∂L/∂log π with rewards × 2 (A = R − mean R scales with R)", doubled, 2 * gradient)


def check_constant_rewards(ctx: Context, case: Case) -> None:
    from hypothesis import strategies as st

    batch = _batch(case, ctx, max_drift=0.3)
    value = case.draw(st.sampled_from([0.0, 1.0, 0.7, -2.5]), "reward of every trajectory")
    loss, gradient = ctx.run(with_rewards(batch, torch.full_like(batch.rewards, value)))
    _close("loss with constant rewards", loss, torch.zeros_like(loss), rtol=0, atol=1e-9)
    _close("∂L/∂log π with constant rewards", gradient, torch.zeros_like(gradient), rtol=0, atol=1e-9)


def check_single_rollout_groups(ctx: Context, case: Case) -> None:
    batch = _batch(case, ctx, max_drift=0.3, group_size=1)
    loss, gradient = ctx.run(batch)
    _close("loss with G = 1 (every group one trajectory)", loss, torch.zeros_like(loss), rtol=0, atol=1e-9)
    _close("∂L/∂log π with G = 1", gradient, torch.zeros_like(gradient), rtol=0, atol=1e-9)


def check_permutation(ctx: Context, case: Case) -> None:
    from hypothesis import strategies as st

    batch = _batch(case, ctx, max_drift=0.3)
    order = torch.tensor(case.draw(st.permutations(range(batch.batch_size)), "order"))
    loss, gradient = ctx.run(batch)
    loss_p, gradient_p = ctx.run(batch.select(order))
    _close("loss of the permuted batch", loss_p, loss, rtol=1e-9)
    _close("∂L/∂log π of the permuted batch", gradient_p, gradient[order], rtol=1e-9)


def check_padding(ctx: Context, case: Case) -> None:
    batch = _batch(case, ctx, padding="junk", max_drift=0.3)
    loss, gradient = ctx.run(batch)
    loss_z, gradient_z = ctx.run(batch.with_padding(0.0))
    _close("loss with NaN/±inf/1e30 in the padding slots", loss, loss_z, rtol=0, atol=0)
    _close("∂L/∂log π with junk in the padding slots", gradient, gradient_z, rtol=0, atol=0)
    _close("∂L/∂log π on padding slots", gradient[~batch.action_mask], torch.zeros(int((~batch.action_mask).sum()),
           dtype=gradient.dtype), rtol=0, atol=0)


def check_length_normalisation(ctx: Context, case: Case) -> None:
    from hypothesis import strategies as st

    batch = _batch(case, ctx, max_drift=0.3)
    row = case.draw(st.integers(0, batch.batch_size - 1), "repeated row")
    k = case.draw(st.integers(2, 3), "k")
    _, gradient = ctx.run(batch)
    repeated = repeat_tokens(batch, row, k)
    _, gradient_k = ctx.run(repeated)
    if ctx.algorithm == "grpo":  # token-mean: every token weighs 1/N, and N grew to N'
        shrink = batch.num_tokens / repeated.num_tokens
        factor, others = k * shrink, shrink
    else:  # sample-mean: a trajectory weighs 1/B whatever its length
        factor, others = 1.0, 1.0
    total = gradient_k[row].view(batch.width, k).sum(dim=1)
    _close(f"∂L/∂log π of trajectory {row} summed over its {k} copies of each token", total, factor * gradient[row])
    keep = torch.arange(batch.batch_size) != row
    _close("the other trajectories' ∂L/∂log π", gradient_k[keep, : batch.width], others * gradient[keep])


def check_shards(ctx: Context, case: Case) -> None:
    from hypothesis import strategies as st

    batch = _batch(case, ctx, max_drift=0.3, batch_size=(2, 8))
    order = torch.tensor(case.draw(st.permutations(range(batch.batch_size)), "row order"))
    sizes = case.draw(shard_sizes(batch.batch_size, max_shards=4), "dp × microbatch shard sizes")
    loss, gradient = ctx.run(batch)
    total, assembled = torch.zeros((), dtype=torch.float64), torch.zeros_like(gradient)
    for rows in torch.split(order, sizes):
        part, shard = shard_of(ctx.algorithm, batch, rows, eps=ctx.std_eps)
        part_loss, part_gradient = ctx.run(part, shard=shard)
        total, assembled[rows] = total + part_loss, part_gradient
    _close("Σ shard losses vs the full batch's loss", total, loss.to(torch.float64), rtol=1e-9)
    _close("∂L/∂log π assembled from the shards", assembled, gradient, rtol=1e-9)


def check_precision(ctx: Context, case: Case) -> None:
    batch = _batch(case, ctx, max_drift=0.3, batch_size=(2, 8))
    loss64, _ = ctx.run(batch)
    if loss64.dtype != torch.float64:
        raise InvariantViolation(f"float64 inputs gave a {loss64.dtype} loss; float64 must stay float64")
    low = batch.to(torch.bfloat16)
    loss_low, _ = ctx.run(low)
    exact, _ = ctx.run(low.to(torch.float64))  # the same (rounded) inputs, computed in float64
    terms = (batch.log_probs.abs() * batch.rewards.abs().max() * math.exp(0.3)).masked_fill(~batch.action_mask, 0)
    _close("bf16-input loss vs the same inputs in float64 (promote before exp)", loss_low, exact,
           rtol=1e-4, atol=1e-5 * float(terms.max()) + 1e-7)


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
            _close(f"∂L/∂({name})", value, torch.zeros_like(value), rtol=0, atol=0)


@dataclass(frozen=True)
class Invariant:
    """One check: its DESIGN.md number, what must hold, the algorithms it applies to."""

    name: str
    design: str
    statement: str
    check: Callable[[Context, Case], None]
    algorithms: tuple[str, ...] = ALGORITHMS
    needs_own_advantages: bool = False


INVARIANTS: tuple[Invariant, ...] = (
    Invariant("on_policy_gradient", "1", "μ = π: ∂L/∂log π is the algorithm's formula", check_on_policy_gradient),
    Invariant("off_policy_gradient", "1, 6, 13",
              "μ ≠ π: ∂L/∂log π is the formula (sequence gate at δ / PPO clip at ε)", check_off_policy_gradient),
    Invariant("rejected_rows", "6", "a rejected trajectory has zero gradient and stays in B",
              check_rejected_rows, algorithms=("flash_reinforce",)),
    Invariant("advantage_baseline", "2", "reward shift leaves the gradient; scaling scales it (flash)",
              check_advantage_baseline, needs_own_advantages=True),
    Invariant("constant_rewards", "9", "constant rewards: zero loss and zero gradient", check_constant_rewards),
    Invariant("single_rollout_groups", "13", "G = 1: zero loss and zero gradient", check_single_rollout_groups,
              algorithms=("grpo",), needs_own_advantages=True),
    Invariant("permutation", "3", "permuting trajectories permutes gradients, keeps the loss", check_permutation),
    Invariant("padding", "4", "padding slots (NaN, ±inf) change neither loss nor gradient", check_padding),
    Invariant("length_normalisation", "5", "tokens repeated k×: gradient scales as the aggregation says",
              check_length_normalisation),
    Invariant("shards", "10", "dp × microbatch shards add up to the full batch", check_shards),
    Invariant("precision", "11", "bf16 promoted before exp; float64 stays float64", check_precision),
    Invariant("no_gradient_to_behavior", "12", "no gradient reaches behaviour log-probs or rewards",
              check_no_gradient_to_behavior),
)
"""Every check, in report order."""
