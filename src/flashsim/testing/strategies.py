"""Public hypothesis strategies and batch helpers for testing code built on :mod:`flashsim.losses`.

A *kind* of data, stated once, that every property test draws from (the pattern of
``xarray.testing.strategies``): :func:`loss_batches` draws a :class:`LossBatch` — float log-probs
of the current learner and of the behaviour policy that sampled the tokens, one reward and one group
id per trajectory, and a boolean ``action_mask`` — with

- unequal trajectory lengths (every row holds at least one policy token) and policy tokens at any
  positions of the row (left, right or interleaved padding, as with prompt and tool-output slots);
- policy lag: the behaviour log-probs are the learner's plus a drift of bounded size, so some tokens
  are exactly on-policy and others are not;
- junk in the padding slots of both log-prob tensors (NaN, ±inf, huge values) unless asked for zeros;
- GRPO group ids: any labels with groups of any size G ≥ 1, or exactly ``group_size`` per group.

:func:`random_loss_batch` builds the same kind of batch from a seeded ``torch.Generator``, for
parametrised tests and examples that do not use hypothesis.

hypothesis is a development dependency (``pip install 'flashsim[dev]'``); it is imported when a
strategy is built, not when this module is imported, so that importing :mod:`flashsim.testing` (and
collecting its doctests) never needs it.

Shape:
    ``log_probs``, ``behavior_log_probs``: ``[B, T]`` of ``dtype``; ``action_mask``: ``[B, T]`` bool;
    ``rewards``: ``[B]`` of the compute dtype (float32 for bf16/fp16 batches, else ``dtype``);
    ``group_ids``: ``[B]`` int64.

Glossary: B trajectories, T token slots, G trajectories per group.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from flashsim.losses import (
    AGGREGATIONS,
    LOSSES,
    batch_centered,
    flash_reinforce_loss,
    get_loss,
    group_normalized,
    grpo_loss,
)

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from hypothesis.strategies import SearchStrategy

PADDING_JUNK = (math.nan, math.inf, -math.inf, 1e30, -1e30, 3.0, 0.0)
"""Values that padding slots may hold in a junk-padded batch: none of them may leak into a loss."""

FLOAT_DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16)

LOSS_FUNCTIONS = ("flash_reinforce_loss", "grpo_loss", *LOSSES)
"""Names :func:`evaluate_loss` accepts: the two composed losses and every registry entry."""


@dataclass(frozen=True)
class LossBatch:
    """One batch of loss inputs. Tensors are plain (no ``requires_grad``); see :meth:`leaf`.

    Shape:
        log_probs, behavior_log_probs: ``[B, T]``; action_mask: ``[B, T]`` bool;
        rewards: ``[B]`` floating; group_ids: ``[B]`` int64.
    """

    log_probs: Tensor
    behavior_log_probs: Tensor
    rewards: Tensor
    action_mask: Tensor
    group_ids: Tensor

    @property
    def batch_size(self) -> int:
        """B, the number of trajectories."""
        return self.log_probs.shape[0]

    @property
    def width(self) -> int:
        """T, the number of token slots per row."""
        return self.log_probs.shape[1]

    @property
    def lengths(self) -> Tensor:
        """T_i, the number of policy tokens of each trajectory (``[B]`` int64)."""
        return self.action_mask.sum(dim=1)

    @property
    def num_tokens(self) -> int:
        """Σ_i T_i, the number of policy tokens in the batch."""
        return int(self.action_mask.sum())

    def leaf(self) -> Tensor:
        """A fresh copy of ``log_probs`` that requires grad: differentiate the loss with respect to it."""
        return self.log_probs.detach().clone().requires_grad_(True)

    def select(self, rows: Tensor | Sequence[int]) -> LossBatch:
        """The trajectories ``rows`` (in that order): a permutation, a shard, a repeat."""
        index = torch.as_tensor(rows, dtype=torch.long)
        return LossBatch(**{f.name: getattr(self, f.name)[index] for f in fields(self)})

    def with_padding(self, value: float) -> LossBatch:
        """The same batch with every padding slot of both log-prob tensors set to ``value``."""
        return _replace(
            self,
            log_probs=_fill_padding(self.log_probs, self.action_mask, value),
            behavior_log_probs=_fill_padding(self.behavior_log_probs, self.action_mask, value),
        )

    def to(self, dtype: torch.dtype) -> LossBatch:
        """Log-probs cast to ``dtype``; rewards to its compute dtype (float32 for bf16/fp16)."""
        return _replace(
            self,
            log_probs=self.log_probs.to(dtype),
            behavior_log_probs=self.behavior_log_probs.to(dtype),
            rewards=self.rewards.to(torch.promote_types(dtype, torch.float32)),
        )


def _replace(batch: LossBatch, **changes: Tensor) -> LossBatch:
    return LossBatch(**{**{f.name: getattr(batch, f.name) for f in fields(batch)}, **changes})


def _fill_padding(values: Tensor, action_mask: Tensor, fill: float | Tensor) -> Tensor:
    return torch.where(action_mask, values, torch.as_tensor(fill, dtype=values.dtype))


def _check_range(name: str, bounds: tuple[int, int], at_least: int) -> tuple[int, int]:
    if not (isinstance(bounds, tuple) and len(bounds) == 2 and all(isinstance(b, int) for b in bounds)):
        raise TypeError(f"{name} must be a (low, high) tuple of ints, got {bounds!r}")
    low, high = bounds
    if not at_least <= low <= high:
        raise ValueError(f"{name} must satisfy {at_least} ≤ low ≤ high, got {bounds!r}")
    return bounds


def _check_options(dtype: torch.dtype, max_drift: float, min_log_prob: float, padding: str) -> None:
    if dtype not in FLOAT_DTYPES:
        raise TypeError(f"dtype must be one of {FLOAT_DTYPES}, got {dtype!r}")
    if not (isinstance(max_drift, (int, float)) and 0 <= max_drift < math.inf):
        raise ValueError(f"max_drift must be a finite number ≥ 0, got {max_drift!r}")
    if not (isinstance(min_log_prob, (int, float)) and -math.inf < min_log_prob < 0):
        raise ValueError(f"min_log_prob must be a finite negative number, got {min_log_prob!r}")
    if padding not in ("junk", "zeros"):
        raise ValueError(f"padding must be 'junk' or 'zeros', got {padding!r}")


def _assemble(
    log_probs: Tensor, drift: Tensor, rewards: Tensor, action_mask: Tensor, group_ids: Tensor, junk: Tensor,
    dtype: torch.dtype,
) -> LossBatch:
    """Behaviour = learner + drift (kept ≤ 0); junk into padding; cast. Inputs are float64 [B, T] / [B]."""
    behavior = (log_probs + drift).clamp(max=0.0)
    batch = LossBatch(
        log_probs=_fill_padding(log_probs, action_mask, junk),
        behavior_log_probs=_fill_padding(behavior, action_mask, junk.flip(0)),
        rewards=rewards,
        action_mask=action_mask,
        group_ids=group_ids,
    )
    return batch.to(dtype)


def loss_batches(
    *,
    dtype: torch.dtype = torch.float64,
    batch_size: tuple[int, int] = (1, 8),
    width: tuple[int, int] = (1, 8),
    max_drift: float = 0.5,
    min_log_prob: float = -20.0,
    padding: str = "junk",
    rewards: SearchStrategy[float] | None = None,
    group_size: int | None = None,
    equal_lengths: bool = False,
    contiguous_groups: bool = False,
) -> SearchStrategy[LossBatch]:
    """A hypothesis strategy of :class:`LossBatch` (see the module docstring).

    Args:
        dtype: dtype of the log-prob tensors (rewards get its compute dtype, float32 for bf16/fp16).
        batch_size: inclusive range of B. With ``group_size`` the drawn B is a multiple of it.
        width: inclusive range of T (each row has 1..T policy tokens).
        max_drift: largest |log μ − log π| of a token (the policy lag); 0 gives on-policy batches.
        min_log_prob: smallest learner log-prob of a policy token (0 is the largest: certain tokens).
        padding: ``"junk"`` (values of :data:`PADDING_JUNK` in padding slots) or ``"zeros"``.
        rewards: strategy of one reward (default: a mix of 0/1, two-digit decimals and floats in [−1, 1]).
        group_size: if given, every group has exactly this many trajectories (G); otherwise group
            ids are arbitrary labels, with groups of any size including 1.
        equal_lengths: every trajectory has the same number of policy tokens.
        contiguous_groups: with ``group_size``, group g is rows g·G … g·G + G − 1 (the layout of trainers
            that reshape rewards with ``view(-1, G)``); otherwise the rows of a group are anywhere.

    >>> from hypothesis import given, settings
    >>> @settings(max_examples=10, database=None)
    ... @given(loss_batches(batch_size=(2, 4), width=(1, 5)))
    ... def test_every_trajectory_has_a_policy_token(batch):
    ...     assert 2 <= batch.batch_size <= 4 and bool((batch.lengths >= 1).all())
    >>> test_every_trajectory_has_a_policy_token()
    """
    _check_range("batch_size", batch_size, at_least=1)
    _check_range("width", width, at_least=1)
    _check_options(dtype, max_drift, min_log_prob, padding)
    if group_size is not None:
        _check_group_size(group_size, batch_size)
    options = (dtype, batch_size, width, max_drift, min_log_prob, padding, rewards, group_size, equal_lengths,
               contiguous_groups)
    try:
        hash(options)
    except TypeError:  # a list for a range: built for this call only
        return _build_loss_batches(*options)
    return _cached_loss_batches(*options)


def _build_loss_batches(dtype, batch_size, width, max_drift, min_log_prob, padding, rewards, group_size,
                        equal_lengths, contiguous_groups) -> SearchStrategy[LossBatch]:
    """The strategy of :func:`loss_batches` (its options checked)."""
    from hypothesis import strategies as st

    # 0/1 rewards, decimal partial credit (0.7: its mean over a group is inexact) and any float.
    decimals = st.integers(-100, 100).map(lambda k: k / 100)
    reward = rewards if rewards is not None else st.one_of(st.sampled_from([0.0, 1.0]), decimals, st.floats(-1.0, 1.0))

    @st.composite
    def draw_batch(draw) -> LossBatch:
        b, t, group_ids, lengths = _draw_shape(draw, st, batch_size, width, group_size, equal_lengths,
                                               contiguous_groups)
        layout = draw(st.sampled_from(LAYOUTS))
        drift_size = draw(st.sampled_from([0.0, max_drift]) | st.floats(0.0, max_drift))
        # Fractions of tokens that sit exactly on the edge cases: certain (log π = 0), on-policy (μ = π).
        certain, on_policy = draw(st.sampled_from([0.0, 0.2])), draw(st.sampled_from([0.0, 0.5]))
        reward_values = torch.tensor(draw(st.lists(reward, min_size=b, max_size=b)), dtype=torch.float64)
        rng = torch.Generator().manual_seed(draw(st.integers(0, 2**32 - 1)))
        mask = _layout_mask(rng, lengths, t, layout)
        log_probs = torch.where(_uniform(rng, b, t) < certain, 0.0, min_log_prob * _uniform(rng, b, t) ** 2)
        drift = torch.where(_uniform(rng, b, t) < on_policy, 0.0, drift_size * (2 * _uniform(rng, b, t) - 1))
        junk_values = torch.tensor(PADDING_JUNK if padding == "junk" else [0.0], dtype=torch.float64)
        junk_values = junk_values[torch.randint(len(junk_values), (b, t), generator=rng)]
        return _assemble(log_probs, drift, reward_values, mask, group_ids, junk_values, dtype)

    return draw_batch()


_cached_loss_batches = functools.lru_cache(maxsize=None, typed=True)(_build_loss_batches)
"""One strategy per set of options: wrapping ``draw_batch`` in ``st.composite`` parses its source (about 6 ms), and
the invariants of :func:`flashsim.testing.check_loss` ask for a strategy in every example (a quarter of its time).
The draws are the same as with a new strategy each time. Unbounded: the callers use a few dozen option sets (a
numeric ``maxsize`` would also be a new constant of this module, which hypothesis samples from in seeded runs)."""


def _check_group_size(group_size: int, batch_size: tuple[int, int]) -> None:
    low, high = batch_size
    if not (isinstance(group_size, int) and group_size >= 1):
        raise ValueError(f"group_size must be an int ≥ 1, got {group_size!r}")
    if high // group_size < max(1, -(-low // group_size)):
        raise ValueError(f"batch_size {batch_size!r} holds no multiple of group_size={group_size}")


def _uniform(generator: torch.Generator, *shape: int) -> Tensor:
    return torch.rand(*shape, generator=generator, dtype=torch.float64)


def _draw_shape(draw, st, batch_size, width, group_size, equal_lengths, contiguous_groups=False
                ) -> tuple[int, int, Tensor, Tensor]:
    """B, T, group ids [B] and lengths [B] (each in 1..T)."""
    if group_size is None:
        b = draw(st.integers(*batch_size))
        group_ids = torch.tensor(draw(st.lists(st.integers(0, b - 1), min_size=b, max_size=b)), dtype=torch.long)
    else:
        groups = draw(st.integers(max(1, -(-batch_size[0] // group_size)), batch_size[1] // group_size))
        b = groups * group_size
        group_ids = torch.arange(groups).repeat_interleave(group_size)
        if not contiguous_groups:
            group_ids = group_ids[draw(st.permutations(range(b)))]
    t = draw(st.integers(*width))
    if equal_lengths:
        lengths = torch.full((b,), draw(st.integers(1, t)))
    else:
        lengths = torch.tensor(draw(st.lists(st.integers(1, t), min_size=b, max_size=b)), dtype=torch.long)
    return b, t, group_ids, lengths


LAYOUTS = ("right", "left", "scattered")
"""Where a row's policy tokens sit: first (right padding), last (left padding), or anywhere."""


def _layout_mask(generator: torch.Generator, lengths: Tensor, width: int, layout: str) -> Tensor:
    """[B, T] bool with ``lengths[i]`` policy tokens in row i, placed by ``layout``."""
    slots = torch.arange(width)[None, :]
    if layout == "right":
        return slots < lengths[:, None]
    if layout == "left":
        return slots >= width - lengths[:, None]
    order = torch.rand(lengths.shape[0], width, generator=generator).argsort(dim=1)
    return (slots < lengths[:, None]).gather(1, order.argsort(dim=1))


def evaluate_loss(
    name: str, batch: LossBatch, *, log_probs: Tensor | None = None, **options
) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
    """Run the loss ``name`` (one of :data:`LOSS_FUNCTIONS`) on ``batch``; differentiate it.

    ``grpo_loss`` and the registry losses get ``batch.group_ids``; a registry loss with the
    negative-token filter gets :func:`filter_inputs` of the batch; ``options`` are passed through and
    win (``aggregation=``, ``advantages=``, ``num_sequences=`` ...). ``log_probs`` replaces
    ``batch.log_probs`` (give a tensor that is, or depends on, a leaf you hold); by default a fresh
    leaf copy of ``batch.log_probs`` is used.

    Returns:
        ``(loss, gradient, stats)``: the detached loss, ``∂loss/∂log_probs`` ``[B, T]`` and the stats.

    >>> batch = random_loss_batch(torch.Generator().manual_seed(0), batch_size=4, width=3)
    >>> loss, gradient, stats = evaluate_loss("grpo_loss", batch, aggregation="sample_mean")
    >>> gradient.shape, bool(gradient[~batch.action_mask].eq(0).all())
    (torch.Size([4, 3]), True)
    """
    if name not in LOSS_FUNCTIONS:
        raise ValueError(f"unknown loss {name!r}; valid: {', '.join(LOSS_FUNCTIONS)}")
    leaf = batch.leaf() if log_probs is None else log_probs
    args = (leaf, batch.behavior_log_probs, batch.rewards, batch.action_mask)
    if name == "flash_reinforce_loss":
        loss, stats = flash_reinforce_loss(*args, **options)
    elif name == "grpo_loss":
        loss, stats = grpo_loss(*args, batch.group_ids, **options)
    else:
        loss_fn = get_loss(name)
        extra = filter_inputs(batch) if loss_fn.needs_entropies() else {}
        loss, stats = loss_fn(*args, batch.group_ids, **(extra | options))
    (gradient,) = torch.autograd.grad(loss, leaf)
    return loss.detach(), gradient, stats


def filter_inputs(batch: LossBatch) -> dict[str, Tensor]:
    """``entropies`` and ``failures`` for the negative-token filter, each row's from that row alone.

    ``entropies`` is the surprisal −log μ(a_it) of the sampled token (its expectation is the
    behaviour entropy), 0 on padding; ``failures`` marks rewards ≤ 0.

    Shape:
        ``{"entropies": [B, T] of the log-prob dtype, "failures": [B] bool}``.
    """
    entropies = torch.where(batch.action_mask, -batch.behavior_log_probs.detach(), 0.0)
    return {"entropies": entropies, "failures": batch.rewards <= 0}


def global_advantages(name: str, batch: LossBatch, *, scale_by_std: bool = True) -> Tensor:
    """The advantages that loss ``name`` computes from the whole batch's rewards (``[B]``).

    This is what a distributed caller computes once, before splitting the batch, and passes to every
    shard with ``advantages=``. ``scale_by_std`` is ``grpo_loss``'s option.
    """
    if name == "flash_reinforce_loss":
        return batch_centered(batch.rewards)
    if name == "grpo_loss":
        return group_normalized(batch.rewards, batch.group_ids, scale_by_std=scale_by_std)
    return get_loss(name).compute_advantages(batch.rewards, batch.group_ids)


def evaluate_sharded_loss(
    name: str, batch: LossBatch, shards: Sequence[Tensor], **options
) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
    """Run loss ``name`` shard by shard under the distributed contract and add the shards up.

    Each shard (a tensor of row indices; together a partition of the batch) gets the global
    advantages (:func:`global_advantages`) and the global denominators ``num_sequences`` = B,
    ``num_tokens`` = Σ T_i and ``max_tokens`` = T, as a data-parallel rank or a microbatch would.

    Returns:
        ``(Σ shard losses, gradient [B, T] assembled from the shards, per-trajectory stats [B])`` —
        to compare with :func:`evaluate_loss` on the whole batch. The per-trajectory stats are
        ``advantages``, ``sequence_kl`` and (losses with a gate) ``admitted``.

    >>> batch = random_loss_batch(torch.Generator().manual_seed(0), batch_size=4, width=3)
    >>> full, _, _ = evaluate_loss("flash_reinforce_loss", batch)
    >>> shards = [torch.tensor([0, 3]), torch.tensor([1, 2])]
    >>> sharded, _, _ = evaluate_sharded_loss("flash_reinforce_loss", batch, shards)
    >>> torch.allclose(full, sharded, rtol=1e-12, atol=0)
    True
    """
    advantages = global_advantages(name, batch, **{k: v for k, v in options.items() if k == "scale_by_std"})
    counts = {"num_sequences": batch.batch_size, "num_tokens": batch.num_tokens, "max_tokens": batch.width}
    total = torch.zeros((), dtype=torch.promote_types(batch.log_probs.dtype, torch.float32))
    gradient = torch.zeros_like(batch.log_probs)
    per_trajectory: dict[str, list] = {}
    covered = torch.zeros(batch.batch_size, dtype=torch.long)
    for rows in shards:
        rows = torch.as_tensor(rows, dtype=torch.long)
        covered.index_add_(0, rows, torch.ones_like(rows))
        loss, shard_gradient, stats = evaluate_loss(
            name, batch.select(rows), advantages=advantages[rows], **counts, **options
        )
        total, gradient[rows] = total + loss, shard_gradient
        for key in ("advantages", "sequence_kl", "admitted"):  # GRPO has no gate: no admitted
            if key in stats:
                per_trajectory.setdefault(key, []).append((rows, stats[key]))
    if not bool((covered == 1).all()):
        raise ValueError(f"shards must partition the rows 0..{batch.batch_size - 1}; row counts {covered.tolist()}")
    return total, gradient, {key: _scatter_rows(values, batch.batch_size) for key, values in per_trajectory.items()}


def _scatter_rows(pieces: list[tuple[Tensor, Tensor]], batch_size: int) -> Tensor:
    out = torch.empty(batch_size, dtype=pieces[0][1].dtype)
    for rows, values in pieces:
        out[rows] = values
    return out


def aggregations() -> SearchStrategy[str]:
    """One of the aggregation modes of :func:`flashsim.losses.aggregate`."""
    from hypothesis import strategies as st

    return st.sampled_from(AGGREGATIONS)


def loss_names(*, registry_only: bool = False) -> SearchStrategy[str]:
    """A name of :data:`LOSS_FUNCTIONS` (only the :data:`flashsim.losses.LOSSES` entries if ``registry_only``)."""
    from hypothesis import strategies as st

    return st.sampled_from(tuple(LOSSES) if registry_only else LOSS_FUNCTIONS)


def shard_sizes(batch_size: int, *, max_shards: int = 3) -> SearchStrategy[list[int]]:
    """Sizes of 1..``max_shards`` non-empty contiguous shards that together hold ``batch_size`` rows.

    >>> from hypothesis import find, settings
    >>> find(shard_sizes(5), lambda sizes: len(sizes) == 3, settings=settings(database=None))
    [1, 1, 3]
    """
    from hypothesis import strategies as st

    if not (isinstance(batch_size, int) and batch_size >= 1):
        raise ValueError(f"batch_size must be an int ≥ 1, got {batch_size!r}")
    most = min(max_shards, batch_size)
    cuts = st.lists(st.integers(1, batch_size - 1), max_size=most - 1, unique=True) if batch_size > 1 else st.just([])
    return cuts.map(lambda c: [high - low for low, high in zip([0, *sorted(c)], [*sorted(c), batch_size])])


def random_loss_batch(
    generator: torch.Generator,
    *,
    batch_size: int = 8,
    width: int = 6,
    drift: float = 0.1,
    min_log_prob: float = -6.0,
    group_size: int = 2,
    padding: str = "junk",
    dtype: torch.dtype = torch.float64,
) -> LossBatch:
    """A :class:`LossBatch` from a seeded generator (no hypothesis): lengths 1..T, scattered masks.

    Rewards are 0/1 draws; groups are contiguous blocks of ``group_size`` (the last may be smaller).

    >>> batch = random_loss_batch(torch.Generator().manual_seed(0), batch_size=4, width=3)
    >>> batch.lengths.tolist(), batch.group_ids.tolist(), bool((batch.log_probs[batch.action_mask] <= 0).all())
    ([3, 1, 3, 1], [0, 0, 1, 1], True)
    """
    _check_options(dtype, drift, min_log_prob, padding)
    for name, value in (("batch_size", batch_size), ("width", width), ("group_size", group_size)):
        if not (isinstance(value, int) and value >= 1):
            raise ValueError(f"{name} must be an int ≥ 1, got {value!r}")
    b, t = batch_size, width
    lengths = torch.randint(1, t + 1, (b,), generator=generator)
    order = torch.rand(b, t, generator=generator).argsort(dim=1)
    mask = torch.zeros(b, t, dtype=torch.bool).scatter_(1, order, torch.arange(t)[None, :] < lengths[:, None])
    log_probs = min_log_prob * torch.rand(b, t, generator=generator, dtype=torch.float64)
    noise = drift * (2 * torch.rand(b, t, generator=generator, dtype=torch.float64) - 1)
    rewards = torch.randint(0, 2, (b,), generator=generator).to(torch.float64)
    pick = torch.randint(len(PADDING_JUNK), (b, t), generator=generator)
    junk = torch.tensor(PADDING_JUNK, dtype=torch.float64)[pick] if padding == "junk" else torch.zeros(b, t)
    return _assemble(log_probs, noise, rewards, mask, torch.arange(b) // group_size, junk.double(), dtype)


__all__ = [
    "FLOAT_DTYPES", "LAYOUTS", "LOSS_FUNCTIONS", "LossBatch", "PADDING_JUNK", "aggregations", "evaluate_loss",
    "evaluate_sharded_loss", "filter_inputs", "global_advantages", "loss_batches", "loss_names",
    "random_loss_batch", "shard_sizes",
]
