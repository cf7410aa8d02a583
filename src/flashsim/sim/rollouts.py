"""Rollouts: B trajectories sampled together from an env's exact tables, padded to the horizon H.

All B trajectories of a batch are stepped in lockstep with numpy (one vectorised step per time
index, no per-trajectory Python), through the same :class:`toy_envs.MDPTables` that
``flashsim.exact`` integrates over, so simulated rollouts and exact objectives cannot disagree about
the dynamics. Every trajectory records, at sampling time: its observations and actions, the
behaviour log-probs ``log μ(a_t | o_t)`` of the snapshot that generated it (never recomputed), its
length, reward, tool calls, truncation and simulated duration.

Deliberately left out: per-step env ``info`` (the tables carry everything the simulator needs) and
the gymnasium env objects themselves (they are the reference the tables are tested against).

Glossary: B trajectories, H horizon, O observations, A actions, X hidden states, P prompts.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from flashsim.sim.config import TimingModel
from flashsim.sim.snapshots import Snapshot


@dataclass
class TrajectoryArrays:
    """Columns of B trajectories (one row each), padded to H token slots.

    Shape:
        observations, actions: ``[B, H] int64`` (0 on padding); behavior_log_probs: ``[B, H] float64``
        (0 on padding); lengths, tool_calls, prompts: ``[B] int64``; rewards, durations: ``[B] float64``;
        truncated: ``[B] bool``.
    """

    observations: np.ndarray
    actions: np.ndarray
    behavior_log_probs: np.ndarray
    lengths: np.ndarray
    rewards: np.ndarray
    tool_calls: np.ndarray
    truncated: np.ndarray
    prompts: np.ndarray
    durations: np.ndarray

    def __len__(self) -> int:
        return int(self.lengths.shape[0])

    def take(self, index: np.ndarray | slice) -> TrajectoryArrays:
        """The rows ``index`` (a copy for index arrays, a view for slices)."""
        return TrajectoryArrays(**{f.name: getattr(self, f.name)[index] for f in fields(self)})

    @classmethod
    def empty(cls, size: int, horizon: int) -> TrajectoryArrays:
        """Zero-filled columns for ``size`` trajectories."""
        token_int, token_float = np.zeros((size, horizon), np.int64), np.zeros((size, horizon))
        return cls(
            token_int, token_int.copy(), token_float, np.zeros(size, np.int64), np.zeros(size),
            np.zeros(size, np.int64), np.zeros(size, bool), np.zeros(size, np.int64), np.zeros(size),
        )

    def put(self, index: np.ndarray | slice, rows: TrajectoryArrays) -> None:
        """Write ``rows`` into the rows ``index`` in place."""
        for f in fields(self):
            getattr(self, f.name)[index] = getattr(rows, f.name)

    @classmethod
    def concatenate(cls, parts: list[TrajectoryArrays]) -> TrajectoryArrays:
        """Rows of ``parts`` one after another."""
        return cls(**{f.name: np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(cls)})


@dataclass
class Batch:
    """A learner batch: trajectories plus where they came from.

    Shape:
        ids, versions, group_ids: ``[B] int64`` (trajectory ids of the ledger, the snapshot version that
        sampled each, and the group (prompt draw) each belongs to; siblings are adjacent).
    """

    ids: np.ndarray
    versions: np.ndarray
    group_ids: np.ndarray
    trajectories: TrajectoryArrays

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    def take(self, index: np.ndarray | slice) -> Batch:
        """The rows ``index``."""
        return Batch(self.ids[index], self.versions[index], self.group_ids[index], self.trajectories.take(index))


class TableSampler:
    """Samples trajectories of one env from its :class:`toy_envs.MDPTables`, in batch.

    Args:
        tables: the env's exact tables.
        timing: the duration model of steps and tool calls.
        logprob_noise: std of Gaussian noise added to the *stored* behaviour log-probs (models the
            numerical gap between an inference engine and the learner; the actions are still drawn
            from the true snapshot). Noisy values are capped at 0 so they stay log-probabilities.
    """

    def __init__(self, tables, timing: TimingModel, logprob_noise: float = 0.0) -> None:
        self.tables = tables
        self.timing = timing
        self.logprob_noise = float(logprob_noise)
        start = np.cumsum(tables.initial_distribution, axis=1)
        start[:, -1] = 1.0
        self._start_cumulative = start
        self._tool_call = tables.tool_call > 0.5
        self.steps = 0  # env steps simulated by this sampler (for throughput reports)

    @property
    def horizon(self) -> int:
        """H, the number of token slots of every trajectory."""
        return int(self.tables.horizon)

    def sample(self, snapshot: Snapshot, prompts: np.ndarray, rng: np.random.Generator) -> TrajectoryArrays:
        """One trajectory per entry of ``prompts``, all acting with ``snapshot``.

        Shape:
            prompts: ``[B] int64``. Returns :class:`TrajectoryArrays` with B rows.
        """
        tables, H = self.tables, self.horizon
        prompts = np.asarray(prompts, dtype=np.int64)
        B = prompts.shape[0]
        out = TrajectoryArrays.empty(B, H)
        out.prompts[:] = prompts
        state = _inverse_cdf(self._start_cumulative[prompts], rng.random(B))
        uniforms = rng.random((2, B, H))  # action draws, reward coins
        alive = np.ones(B, dtype=bool)
        tool_steps = np.zeros((B, H), dtype=bool)
        for t in range(H):
            obs = tables.observation_of_state[state]
            action = _inverse_cdf(snapshot.cumulative[obs], uniforms[0, :, t])
            out.observations[:, t] = np.where(alive, obs, 0)
            out.actions[:, t] = np.where(alive, action, 0)
            out.behavior_log_probs[:, t] = np.where(alive, snapshot.log_probs[obs, action], 0.0)
            out.rewards += alive & (uniforms[1, :, t] < tables.reward[state, action])
            tool_steps[:, t] = alive & self._tool_call[state, action]
            out.lengths += alive
            successor = tables.next_state[state, action]
            alive &= successor >= 0
            if not alive.any():
                break
            state = np.where(alive, successor, 0)
        out.truncated[:] = alive
        self.steps += int(out.lengths.sum())
        out.tool_calls[:] = tool_steps.sum(axis=1)
        mask = np.arange(H) < out.lengths[:, None]
        out.durations[:] = self._durations(mask, tool_steps, rng)
        if self.logprob_noise > 0:
            noise = self.logprob_noise * rng.standard_normal((B, H))
            out.behavior_log_probs[:] = np.where(mask, np.minimum(out.behavior_log_probs + noise, 0.0), 0.0)
        return out

    def _durations(self, mask: np.ndarray, tool_steps: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Simulated seconds of each trajectory: lognormal step times plus lognormal tool latencies."""
        timing = self.timing
        normals = rng.standard_normal((2,) + mask.shape)
        steps = np.where(mask, timing.step_time * np.exp(timing.step_sigma * normals[0]), 0.0)
        tools = np.where(tool_steps, timing.tool_latency * np.exp(timing.tool_sigma * normals[1]), 0.0)
        return steps.sum(axis=1) + tools.sum(axis=1)


def _inverse_cdf(cumulative: np.ndarray, uniforms: np.ndarray) -> np.ndarray:
    """Index of the first column with ``cumulative ≥ u``, row by row (last column is exactly 1).

    Shape:
        cumulative: ``[B, K]``; uniforms: ``[B]`` in [0, 1). Returns ``[B] int64`` in [0, K).
    """
    return (cumulative < uniforms[:, None]).sum(axis=1).astype(np.int64)
