"""One simulated training run, one learner update at a time: rollouts, lag, loss, metrics.

:class:`Simulation` wires the parts together: a vector env (:func:`~flashsim.sim.config.make_env`), a policy
(:mod:`flashsim.policies`), a rollout source that decides the lag (:class:`~flashsim.sim.lag.LaggedSource`
for injected lag, :class:`~flashsim.sim.engine.AsyncEngine` for emergent lag), the learner
(:mod:`flashsim.sim.learner`) and exact evaluation (:func:`flashsim.exact.evaluate`, or a seeded
Monte Carlo estimate with its standard error for envs without tables). Update k takes
the next collected batch (or the next minibatch of the current one), takes one optimizer step, and
publishes θ_{k+1}. All randomness comes from one ``numpy.random.Generator`` seeded by the config,
so a run is a pure function of its :class:`~flashsim.sim.config.TrainConfig`, and
:meth:`Simulation.state_dict` captures everything needed to continue it bit for bit.

Metrics (one dict per update, namespaced; see :data:`METRIC_KEYS`): the batch's ``env/reward``,
``env/length``, ``env/truncation``, ``env/tool_calls``; exact ``env/success_train`` and
``env/success_heldout`` every ``eval_every`` updates (NaN in between) with ``env/success_train_stderr``
(0 when exact); ``policy/entropy``;
``trust/acceptance_rate``, ``trust/sequence_kl`` and other loss diagnostics; the lag of the batch
``lag/mean``, ``lag/max`` (k − version of each trajectory); ``time/sim_clock``, ``time/learner_idle``,
``time/worker_idle``; and ``data/rollouts_total`` (trajectories completed by workers so far).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from flashsim import exact
from flashsim.policies import make_policy
from flashsim.sim.config import AsyncWorkers, TrainConfig, make_env, timing_of
from flashsim.sim.engine import AsyncEngine
from flashsim.sim.lag import LaggedSource
from flashsim.sim.learner import Learner, LearnerState, PreparedBatch
from flashsim.sim.rollouts import Batch, Collector
from flashsim.sim.snapshots import Snapshot

#: Collections of B episodes behind one Monte Carlo success estimate (envs without exact tables).
MONTE_CARLO_COLLECTIONS = 8

METRIC_KEYS = (
    "update", "env/reward", "env/success_train", "env/success_train_stderr", "env/success_heldout",
    "env/length", "env/truncation",
    "env/tool_calls", "policy/entropy", "trust/acceptance_rate", "trust/token_acceptance_rate",
    "trust/sequence_kl", "trust/clip_fraction", "trust/ess_fraction", "trust/ratio_max", "loss/value",
    "lag/mean", "lag/max", "time/sim_clock", "time/learner_idle", "time/worker_idle",
    "data/rollouts_total", "data/crashed",
)
"""Every metric of an update, in column order."""


class Simulation:
    """A training run of ``config``, advanced with :meth:`step` (see the module docstring).

    >>> from flashsim.sim.config import TrainConfig, AlgorithmConfig
    >>> sim = Simulation(TrainConfig(env="bandit_tiny", algorithm=AlgorithmConfig(batch_size=8), seed=0))
    >>> metrics = sim.step()
    >>> metrics["update"], metrics["lag/max"], sim.update
    (0, 0.0, 1)
    """

    def __init__(self, config: TrainConfig) -> None:
        self.config = config
        self.env = make_env(config.env, config.algorithm.batch_size, config.env_options, config.timing)
        self.tables = self.env.tables
        self.timing = config.timing if config.timing is not None else timing_of(self.env.vector_env)
        self.rng = np.random.default_rng(config.seed)
        generator = torch.Generator().manual_seed(config.seed)
        self.policy = make_policy(config.policy, self.env, generator=generator)
        self.learner = Learner(self.policy, config.algorithm)
        self.exact_tables = exact.to_torch(self.tables) if self.tables is not None else None
        self.sampler = Collector(self.env, self.timing.step_duration, config.logprob_noise)
        source = AsyncEngine if isinstance(config.lag, AsyncWorkers) else LaggedSource
        self.source = source(
            config.lag, config.algorithm, self.sampler, self.timing, self.env.train_prompts, self.rng
        )
        self.update = 0
        self._current: CollectedBatch | None = None  # the collected batch being used, and how far
        self.source.publish(Snapshot.of_policy(self.policy, 0))

    @property
    def ledger(self):
        """The source's accounting ledger."""
        return self.source.ledger

    def step(self, evaluate: bool | None = None) -> dict[str, float]:
        """Run update k = :attr:`update` and return its metrics.

        Args:
            evaluate: compute the exact success metrics (default: every ``eval_every`` updates and at
                update 0).
        """
        if self._current is None:
            self._collect()
        current = self._current
        rows = current.slices[current.position]
        learner_metrics, admitted = self.learner.step(current.prepared, rows)
        current.admitted[rows] |= admitted
        current.position += 1
        k = self.update
        self.update += 1
        self.source.publish(Snapshot.of_policy(self.policy, self.update))
        if current.position == len(current.slices):
            self.ledger.settle(current.batch.ids, current.admitted)
            self._current = None
        metrics = {"update": k, **self._batch_metrics(current.batch.take(rows), k), **learner_metrics}
        metrics.update(self.source.metrics())
        metrics["data/rollouts_total"] = self.ledger.completed
        metrics["data/crashed"] = self.ledger.crashed
        if evaluate is None:
            evaluate = k == 0 or (k + 1) % self.config.eval_every == 0
        skipped = {"env/success_train": math.nan, "env/success_train_stderr": math.nan, "env/success_heldout": math.nan}
        metrics.update(self.evaluate() if evaluate else skipped)
        return {key: metrics[key] for key in METRIC_KEYS}

    def evaluate(self) -> dict[str, float]:
        """Mean success of the current policy on the train and held-out prompts.

        Exact (:func:`flashsim.exact.evaluate`) when the env has tables; otherwise the mean return of
        ``MONTE_CARLO_COLLECTIONS × B`` episodes drawn with a generator seeded by (seed, update), so
        evaluating never disturbs the run's own random stream, with its standard error.
        """
        if self.exact_tables is None:
            return self._monte_carlo_success()
        success = exact.evaluate(self.exact_tables, self.policy, "all")["env/success_per_prompt"].numpy()
        train, heldout = self.tables.train_prompts, self.tables.heldout_prompts
        return {
            "env/success_train": float(success[train].mean()),
            "env/success_train_stderr": 0.0,
            "env/success_heldout": float(success[heldout].mean()) if heldout.size else math.nan,
        }

    def _monte_carlo_success(self) -> dict[str, float]:
        rng = np.random.default_rng([self.config.seed, self.update])
        snapshot, steps = Snapshot.of_policy(self.policy, self.update), self.sampler.steps
        prompts = np.zeros(self.env.num_envs, np.int64)
        returns = np.concatenate(
            [self.sampler.sample(snapshot, prompts, rng).rewards for _ in range(MONTE_CARLO_COLLECTIONS)]
        )
        self.sampler.steps = steps  # evaluation episodes are not training throughput
        return {
            "env/success_train": float(returns.mean()),
            "env/success_train_stderr": float(returns.std(ddof=1) / math.sqrt(returns.size)),
            "env/success_heldout": math.nan,
        }

    def _collect(self) -> None:
        batch = self.source.collect()
        self._current = CollectedBatch(
            batch=batch,
            prepared=self.learner.prepare(batch),
            slices=self.learner.slices(len(batch)),
            position=0,
            admitted=np.zeros(len(batch), dtype=bool),
        )

    @staticmethod
    def _batch_metrics(batch: Batch, k: int) -> dict[str, float]:
        rows = batch.trajectories
        lags = k - batch.versions
        return {
            "env/reward": float(rows.rewards.mean()),
            "env/length": float(rows.lengths.mean()),
            "env/truncation": float(rows.truncated.mean()),
            "env/tool_calls": float(rows.tool_calls.mean()),
            "lag/mean": float(lags.mean()),
            "lag/max": float(lags.max()),
        }

    def state_dict(self) -> SimulationState:
        """Everything needed to continue this run bit for bit (see :meth:`load_state_dict`)."""
        return copy.deepcopy(SimulationState(
            config=self.config,
            update=self.update,
            rng=self.rng.bit_generator.state,
            learner=self.learner.state_dict(),
            source=self.source.state_dict(),
            current=self._current,
        ))

    def load_state_dict(self, state: SimulationState) -> None:
        """Restore a run saved by :meth:`state_dict` (its config must equal this run's but for ``updates``)."""
        if state.config.with_updates(self.config.updates) != self.config:
            raise ValueError(
                "the checkpoint belongs to another configuration:\n"
                f"  checkpoint: {state.config}\n  this run:   {self.config}"
            )
        self.update = state.update
        self.rng.bit_generator.state = state.rng
        self.learner.load_state_dict(state.learner)
        self.source.load_state_dict(state.source)
        self._current = copy.deepcopy(state.current)


@dataclass
class CollectedBatch:
    """The collected batch the learner is working through: its tensors, its steps, the gate's verdicts."""

    batch: Batch
    prepared: PreparedBatch
    slices: list[slice]
    """Rows of each optimizer step on this batch (epochs × minibatches)."""
    position: int
    """Index of the next step in ``slices``."""
    admitted: np.ndarray
    """``[B] bool``: admitted by the gate in at least one step so far."""


@dataclass
class SimulationState:
    """A run's complete state: config, update counter, generator, learner, rollout source, open batch."""

    config: TrainConfig
    update: int
    rng: dict[str, Any]
    """``numpy.random.Generator.bit_generator.state`` (plain data)."""
    learner: LearnerState
    source: Any
    """The rollout source's state (``LaggedSourceState`` or ``EngineState``)."""
    current: CollectedBatch | None
