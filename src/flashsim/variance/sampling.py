"""Batches as in training, simulated from a toy env's exact tables, many batches at once.

A *design* fixes which prompts every batch answers; a *chunk* of rollouts is then simulated for many
batches in one vectorised pass (lockstep over the H time steps, no per-trajectory Python):

* prompts are drawn uniformly **with replacement** from the train prompts (as the trainer does);
* a single-rollout batch answers ``budget`` prompts once; a grouped batch answers ``budget // G``
  prompts G times each (siblings are adjacent rows and share a group id);
* every prompt draw is answered by ``replicates`` independent rollout sets (batches ``i·r .. i·r + r − 1``
  share the prompts of draw i): the nested design behind the between/within-prompt split;
* a trajectory starts in ``x ~ initial_distribution[p]``, takes ``a ~ μ(· | o(x))``, earns a Bernoulli
  reward of mean ``reward[x, a]`` (the tables hold the mean; the coin is sampled here) and moves to
  ``next_state[x, a]`` until it ends (``-1``) or is truncated after H steps; ``log μ(a | o)`` is stored
  at sampling time. R_i is the sum of the step rewards.

All randomness is inverse-CDF sampling from uniforms drawn up front per chunk from one
``torch.Generator``, so the reference loop and the fast path see identical rollouts.

Glossary: M batches, B trajectories per batch (the rollout budget), K prompts per batch, G group size,
r replicates per prompt draw, H horizon, T token slots (≤ H), O observations, A actions, X states.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import Tensor

from flashsim.exact import TorchTables

#: Trajectories simulated together in one chunk (bounds memory: a few [chunk, H] tensors at a time).
CHUNK_TRAJECTORIES = 1 << 16


@dataclass(frozen=True)
class BatchDesign:
    """Which prompts each of the M batches answers, and how its trajectories are grouped.

    Shape:
        prompts: ``[M, B] int64`` (each prompt repeated G times in adjacent rows when grouped);
        group_ids: ``[B] int64`` (the same for every batch: ``arange(K).repeat_interleave(G)``).
    """

    prompts: Tensor
    group_ids: Tensor
    group_size: int
    replicates: int

    @property
    def num_batches(self) -> int:
        return int(self.prompts.shape[0])

    @property
    def budget(self) -> int:
        return int(self.prompts.shape[1])

    @property
    def prompts_per_batch(self) -> int:
        return self.budget // self.group_size


@dataclass(frozen=True)
class Rollouts:
    """A chunk of c batches of B trajectories, padded to the longest trajectory (T ≤ H slots).

    Shape:
        observations, actions: ``[c, B, T] int64`` (0 on padding); behavior_log_probs: ``[c, B, T]
        float64`` (0 on padding); action_mask: ``[c, B, T] bool``; rewards: ``[c, B] float64``;
        lengths: ``[c, B] int64``; prompts: ``[c, B] int64``.
    """

    observations: Tensor
    actions: Tensor
    behavior_log_probs: Tensor
    action_mask: Tensor
    rewards: Tensor
    lengths: Tensor
    prompts: Tensor


def draw_design(
    tables: TorchTables, *, num_batches: int, budget: int, group_size: int, replicates: int,
    generator: torch.Generator,
) -> BatchDesign:
    """Draw the prompts of ``num_batches // replicates`` prompt draws, each used by ``replicates`` batches.

    Args:
        tables: the env's tables (its ``train_prompts`` are sampled).
        num_batches: M, a multiple of ``replicates``.
        budget: B rollouts per batch, a multiple of ``group_size``.
        group_size: G siblings per prompt (1 for single-rollout estimators).
        replicates: r rollout sets per prompt draw.
        generator: the seeded source of the prompt draws.
    """
    draws, per_batch = num_batches // replicates, budget // group_size
    index = torch.randint(len(tables.train_prompts), (draws, per_batch), generator=generator)
    prompts = tables.train_prompts.cpu()[index].repeat_interleave(group_size, dim=1)
    group_ids = torch.arange(per_batch).repeat_interleave(group_size)
    return BatchDesign(prompts.repeat_interleave(replicates, dim=0), group_ids, group_size, replicates)


def chunk_bounds(design: BatchDesign) -> list[tuple[int, int]]:
    """``[start, stop)`` batch ranges of the chunks, a deterministic function of the design's shape."""
    per_chunk = max(1, CHUNK_TRAJECTORIES // design.budget)
    return [(start, min(start + per_chunk, design.num_batches)) for start in range(0, design.num_batches, per_chunk)]


Uniforms = tuple[Tensor, Tensor, Tensor]
"""Start-state ``[N]``, action ``[H, N]`` and reward-coin ``[H, N]`` uniforms of N trajectories."""


def iterate_chunks(
    design: BatchDesign, horizon: int, generator: torch.Generator
) -> Iterator[tuple[int, Tensor, Uniforms]]:
    """Yield ``(start, prompts [c, B], uniforms)`` for the chunks of batches ``start .. start + c − 1``.

    The uniforms of trajectory b of batch m sit in column ``(m − start)·B + b``, so simulating one batch
    from its columns gives the same trajectories as simulating the whole chunk.
    """
    for start, stop in chunk_bounds(design):
        prompts = design.prompts[start:stop]
        yield start, prompts, draw_uniforms(prompts.numel(), horizon, generator)


def batch_uniforms(uniforms: Uniforms, index: int, budget: int) -> Uniforms:
    """The columns of batch ``index`` of a chunk's uniforms."""
    columns = slice(index * budget, (index + 1) * budget)
    start, actions, coins = uniforms
    return start[columns], actions[:, columns], coins[:, columns]


def draw_uniforms(count: int, horizon: int, generator: torch.Generator) -> Uniforms:
    """Uniforms for ``count`` trajectories: start state ``[N]``, actions ``[H, N]``, reward coins ``[H, N]``."""
    start = torch.rand(count, generator=generator, dtype=torch.float64)
    actions = torch.rand(horizon, count, generator=generator, dtype=torch.float64)
    coins = torch.rand(horizon, count, generator=generator, dtype=torch.float64)
    return start, actions, coins


def simulate(
    tables: TorchTables, behavior_log_table: Tensor, prompts: Tensor, uniforms: Uniforms
) -> Rollouts:
    """Simulate one trajectory per entry of ``prompts`` under μ (see the module docstring).

    Only running trajectories are stepped (the active set shrinks as episodes end), so the work is
    proportional to the number of tokens, not to N·H.

    Shape:
        behavior_log_table: ``[O, A]``; prompts: ``[c, B]``; uniforms: ``([N], [H, N], [H, N])`` with
        N = c·B, column n for trajectory n of the flattened prompts. Returns a :class:`Rollouts` chunk.
    """
    start_u, action_u, coin_u = uniforms
    flat_prompts = prompts.reshape(-1)
    count, num_actions = flat_prompts.shape[0], behavior_log_table.shape[1]
    obs_of_state = tables.observation_of_state.cpu()
    state_cdf = _normalised_cdf(behavior_log_table.exp())[obs_of_state]
    state_log_mu = behavior_log_table[obs_of_state].reshape(-1)
    next_state, reward = tables.next_state.cpu().reshape(-1), tables.reward.cpu().reshape(-1)
    observations = torch.zeros(tables.horizon, count, dtype=torch.int64)
    actions, behavior = torch.zeros_like(observations), torch.zeros(tables.horizon, count, dtype=torch.float64)
    rewards = torch.zeros(count, dtype=torch.float64)
    lengths = torch.zeros(count, dtype=torch.int64)
    active = torch.arange(count)
    state = _sample_start(tables.initial_distribution.cpu(), flat_prompts, start_u)
    for t in range(tables.horizon):
        action = torch.searchsorted(state_cdf[state], action_u[t, active, None], right=True).squeeze(-1)
        index = state * num_actions + action.clamp_(max=num_actions - 1)
        rewards[active] += (coin_u[t, active] < reward[index]).to(torch.float64)
        observations[t, active], actions[t, active] = obs_of_state[state], action
        behavior[t, active] = state_log_mu[index]
        lengths[active] += 1
        successor = next_state[index]
        running = successor >= 0
        active, state = active[running], successor[running]
        if active.numel() == 0:
            break
    width = int(lengths.max())
    mask = torch.arange(width)[:, None] < lengths[None, :]
    shape = (*prompts.shape, width)

    def batched(column: Tensor) -> Tensor:
        return column[:width].T.reshape(shape)

    return Rollouts(
        batched(observations), batched(actions), batched(behavior), batched(mask),
        rewards.view(prompts.shape), lengths.view(prompts.shape), prompts,
    )


def _normalised_cdf(probs: Tensor) -> Tensor:
    """Row-wise CDF whose last entry is exactly 1 (so a uniform in [0, 1) always lands in a row)."""
    cdf = probs.cumsum(dim=-1)
    return cdf / cdf[..., -1:]


def _sample_start(initial_distribution: Tensor, prompts: Tensor, uniforms: Tensor) -> Tensor:
    """Start states ``x ~ initial_distribution[p]`` by one ``searchsorted`` over all prompts' CDFs.

    Row p's CDF is shifted by p, so the concatenation is non-decreasing and ``p + u`` (u in [0, 1))
    falls inside row p; zero-probability states are never chosen (``right=True``).

    Shape:
        initial_distribution ``[P, X]``; prompts, uniforms ``[N]``; returns ``[N] int64``.
    """
    num_states = initial_distribution.shape[1]
    offsets = torch.arange(initial_distribution.shape[0], dtype=torch.float64)[:, None]
    shifted = (_normalised_cdf(initial_distribution) + offsets).reshape(-1)
    flat = torch.searchsorted(shifted, prompts.to(torch.float64) + uniforms, right=True)
    return (flat - prompts * num_states).clamp_(0, num_states - 1)
