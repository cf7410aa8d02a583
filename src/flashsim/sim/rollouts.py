"""Rollouts: B trajectories collected together from a gymnasium vector env, padded to the horizon H.

All B trajectories of a batch are stepped in lockstep through the env's vector env (one vectorised
step per time index, no per-trajectory Python). Every trajectory records, at sampling time: its
observations and actions, the behaviour log-probs ``log μ(a_t | o_t)`` of the snapshot that
generated it (never recomputed), its length, return, tool calls, truncation and simulated duration
(from ``info["duration"]``).

Deliberately left out: observations other than integers (``Discrete`` spaces only) and any
``info`` key beyond ``tool_call`` and ``duration``.

Glossary: B trajectories, H horizon, O observations, A actions, X hidden states, P prompts.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

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


class Collector:
    """Collects trajectories from a gymnasium vector env (:class:`~flashsim.sim.envs.SimEnv`), in batch.

    Each collection reseeds the vector env's sub-envs with seeds drawn from the run's generator and
    pins their prompts (toy envs), then steps all of them in lockstep until every episode has ended;
    the policy's actions are drawn by inverse CDF from the snapshot's table. The env's dynamics are
    the env's own (for the toy envs: :class:`toy_envs.TabularDynamics`, through their native vector
    env), so what the simulator trains on is exactly what ``gymnasium.make`` gives a user.

    Args:
        env: the vector env and what is known about it.
        step_duration: seconds per step of envs that do not report ``info["duration"]``.
        logprob_noise: std of Gaussian noise added to the *stored* behaviour log-probs (models the
            numerical gap between an inference engine and the learner; the actions are still drawn
            from the true snapshot). Noisy values are capped at 0 so they stay log-probabilities.
    """

    def __init__(self, env, step_duration: float = 1.0, logprob_noise: float = 0.0) -> None:
        self.env = env
        self.step_duration = float(step_duration)
        self.logprob_noise = float(logprob_noise)
        self.steps = 0  # env steps simulated (for throughput reports)

    @property
    def horizon(self) -> int:
        """H, the number of token slots of every trajectory."""
        return self.env.horizon

    def sample(self, snapshot: Snapshot, prompts: np.ndarray, rng: np.random.Generator) -> TrajectoryArrays:
        """One trajectory per entry of ``prompts`` (at most ``num_envs``), all acting with ``snapshot``."""
        prompts = np.asarray(prompts, dtype=np.int64)
        return self.sample_mixed([snapshot], np.zeros(prompts.shape[0], np.int64), prompts, rng)

    def sample_mixed(
        self, snapshots: list[Snapshot], which: np.ndarray, prompts: np.ndarray, rng: np.random.Generator
    ) -> TrajectoryArrays:
        """Trajectory i acts with ``snapshots[which[i]]`` and answers ``prompts[i]``.

        Shape:
            which, prompts: ``[n] int64`` with n ≤ ``num_envs``. Returns :class:`TrajectoryArrays` with n rows.
        """
        H, N, n = self.horizon, self.env.num_envs, prompts.shape[0]
        if n > N:
            raise ValueError(f"at most {N} trajectories per collection (num_envs), got {n}")
        log_probs = np.stack([snapshot.log_probs for snapshot in snapshots])  # [V, O, A]
        cumulative = np.stack([snapshot.cumulative for snapshot in snapshots])
        out = TrajectoryArrays.empty(n, H)
        out.prompts[:] = prompts if self.env.pins_prompts else 0
        seeds = rng.integers(0, 2**63, size=N)
        options = {"prompt": np.resize(prompts, N)} if self.env.pins_prompts else None
        observations, _ = self.env.vector_env.reset(seed=seeds.tolist(), options=options)
        uniforms = rng.random((H, n))
        alive = np.ones(n, dtype=bool)
        pad = np.zeros(N - n, np.int64)
        for t in range(H):
            obs = np.asarray(observations[:n], dtype=np.int64)
            action = _inverse_cdf(cumulative[which, obs], uniforms[t])
            out.observations[:, t] = np.where(alive, obs, 0)
            out.actions[:, t] = np.where(alive, action, 0)
            out.behavior_log_probs[:, t] = np.where(alive, log_probs[which, obs, action], 0.0)
            observations, reward, terminated, truncated, info = self.env.vector_env.step(np.concatenate([action, pad]))
            out.rewards += np.where(alive, reward[:n], 0.0)
            if "tool_call" in info:
                out.tool_calls += alive & info["tool_call"][:n]
            duration = info["duration"][:n] if "duration" in info else self.step_duration
            out.durations += np.where(alive, duration, 0.0)
            out.lengths += alive
            out.truncated |= alive & truncated[:n] & ~terminated[:n]
            alive &= ~(terminated[:n] | truncated[:n])
            if not alive.any():
                break
        self.steps += int(out.lengths.sum())
        if self.logprob_noise > 0:
            mask = np.arange(H) < out.lengths[:, None]
            noise = self.logprob_noise * rng.standard_normal((n, H))
            out.behavior_log_probs[:] = np.where(mask, np.minimum(out.behavior_log_probs + noise, 0.0), 0.0)
        return out


def _inverse_cdf(cumulative: np.ndarray, uniforms: np.ndarray) -> np.ndarray:
    """Index of the first column with ``cumulative ≥ u``, row by row (last column is exactly 1).

    Shape:
        cumulative: ``[B, K]``; uniforms: ``[B]`` in [0, 1). Returns ``[B] int64`` in [0, K).
    """
    return (cumulative < uniforms[:, None]).sum(axis=1).astype(np.int64)
