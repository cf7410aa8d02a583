"""Batches as in training, simulated through the toy envs' dynamics core, many batches at once.

A *design* fixes which prompts every batch answers; a *chunk* of rollouts is then simulated for many
batches in one vectorised pass (lockstep over the H time steps, no per-trajectory Python):

* prompts are drawn uniformly **with replacement** from the train prompts (as the trainer does);
* a single-rollout batch answers ``budget`` prompts once; a grouped batch answers ``budget // G``
  prompts G times each (siblings are adjacent rows and share a group id);
* every prompt draw is answered by ``replicates`` independent rollout sets (batches ``i·r .. i·r + r − 1``
  share the prompts of draw i): the nested design behind the between/within-prompt split;
* a trajectory is rolled out by the simulator's own loop, :func:`flashsim.sim.rollouts.roll_out`
  (actions ``a ~ μ(· | o)`` by inverse CDF of the behaviour :class:`~flashsim.sim.rollouts.Snapshot`,
  ``log μ(a | o)`` stored at sampling time), stepping the env's own batched dynamics
  (:class:`toy_envs.TabularDynamics`, the code every toy gymnasium env and vector env steps through),
  which draw its start state, outcome and reward coin, until it ends or is truncated after H steps.
  R_i is the sum of the step rewards.

Randomness, as :func:`~flashsim.sim.rollouts.roll_out` expects it: one 64-bit episode key per
trajectory (the core's counter-based draws) and the ``[H, N]`` action uniforms, drawn up front per
chunk from one ``torch.Generator`` (the measurement's seed also drives the prompt design and the
bootstrap), so the reference loop and the fast path see identical rollouts.

Glossary: M batches, B trajectories per batch (the rollout budget), K prompts per batch, G group size,
r replicates per prompt draw, H horizon, T token slots (≤ H), O observations, A actions, X states.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

import toy_envs
from flashsim.exact import TorchTables
from flashsim.sim.rollouts import Snapshot, roll_out

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


Uniforms = tuple[Tensor, Tensor]
"""Episode keys ``[N] int64`` (the core's counter-based draws: start, outcome, reward) and action
uniforms ``[H, N]`` of N trajectories."""


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
    keys, actions = uniforms
    return keys[columns], actions[:, columns]


def draw_uniforms(count: int, horizon: int, generator: torch.Generator) -> Uniforms:
    """Randomness of ``count`` trajectories: episode keys ``[N]`` and action uniforms ``[H, N]``."""
    keys = torch.randint(0, 2**63 - 1, (count,), generator=generator, dtype=torch.int64)
    actions = torch.rand(horizon, count, generator=generator, dtype=torch.float64)
    return keys, actions


def simulate(
    dynamics: toy_envs.TabularDynamics, behavior: Snapshot, prompts: Tensor, uniforms: Uniforms
) -> Rollouts:
    """Simulate one trajectory per entry of ``prompts`` under μ = ``behavior`` (see the module docstring).

    Shape:
        prompts: ``[c, B]``; uniforms: ``([N], [H, N])`` with N = c·B, column n for trajectory n of the
        flattened prompts. Returns a :class:`Rollouts` chunk.
    """
    keys, action_uniforms = uniforms[0].numpy().view(np.uint64), uniforms[1].numpy()
    _, states = dynamics.reset(keys, prompts.reshape(-1).numpy())

    def step(active: np.ndarray, actions: np.ndarray, t: int) -> tuple:
        result = dynamics.step(states[active], actions, np.full(actions.shape, t), keys[active])
        states[active] = result.state
        return result.observation, result.reward, result.terminated, result.truncated, result.tool_call, result.duration

    first = dynamics.tables.observation_of_state[states]
    rows = roll_out([behavior], np.zeros(keys.shape[0], np.int64), first, action_uniforms, step)
    width = int(rows.lengths.max())
    shape = (*prompts.shape, width)

    def batched(column: np.ndarray) -> Tensor:
        return torch.from_numpy(np.ascontiguousarray(column[:, :width])).reshape(shape)

    mask = np.arange(width) < rows.lengths[:, None]
    return Rollouts(
        batched(rows.observations), batched(rows.actions), batched(rows.behavior_log_probs), batched(mask),
        torch.from_numpy(rows.rewards).view(prompts.shape), torch.from_numpy(rows.lengths).view(prompts.shape),
        prompts,
    )
