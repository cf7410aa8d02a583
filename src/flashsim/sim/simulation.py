"""One simulated training run, one learner update at a time: rollouts, lag, loss, metrics.

:class:`Simulation` wires the parts together: env tables (:mod:`flashsim.sim.envs`), a policy
(:mod:`flashsim.policies`), a rollout source that decides the lag (:class:`~flashsim.sim.lag.LaggedSource`
for injected lag, :class:`~flashsim.sim.engine.AsyncEngine` for emergent lag), the learner
(:mod:`flashsim.sim.learner`) and exact evaluation (:func:`flashsim.exact.evaluate`). Update k takes
the next collected batch (or the next minibatch of the current one), takes one optimizer step, and
publishes θ_{k+1}. All randomness comes from one ``numpy.random.Generator`` seeded by the config,
so a run is a pure function of its :class:`~flashsim.sim.config.TrainConfig`, and
:meth:`Simulation.state_dict` captures everything needed to continue it bit for bit.

Metrics (one dict per update, namespaced; see :data:`METRIC_KEYS`): the batch's ``env/reward``,
``env/length``, ``env/truncation``, ``env/tool_calls``; exact ``env/success_train`` and
``env/success_heldout`` every ``eval_every`` updates (NaN in between); ``policy/entropy``;
``trust/acceptance_rate``, ``trust/sequence_kl`` and other loss diagnostics; the lag of the batch
``lag/mean``, ``lag/max`` (k − version of each trajectory); ``time/sim_clock``, ``time/learner_idle``,
``time/worker_idle``; and ``data/rollouts_total`` (trajectories completed by workers so far).
"""

from __future__ import annotations

import copy
import math

import numpy as np
import torch

from flashsim import exact
from flashsim.policies import make_policy
from flashsim.sim.config import AsyncWorkers, TrainConfig
from flashsim.sim.engine import AsyncEngine
from flashsim.sim.envs import ENVS, build_tables
from flashsim.sim.lag import LaggedSource
from flashsim.sim.learner import Learner
from flashsim.sim.rollouts import Batch, TableSampler
from flashsim.sim.snapshots import Snapshot

METRIC_KEYS = (
    "update", "env/reward", "env/success_train", "env/success_heldout", "env/length", "env/truncation",
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
        self.tables = build_tables(config.env, config.env_options)
        self.timing = config.timing if config.timing is not None else ENVS[config.env].timing
        self.rng = np.random.default_rng(config.seed)
        generator = torch.Generator().manual_seed(config.seed)
        self.policy = make_policy(config.policy, self.tables, generator=generator)
        self.learner = Learner(self.policy, config.algorithm)
        self.exact_tables = exact.to_torch(self.tables)
        self.sampler = TableSampler(self.tables, self.timing, config.logprob_noise)
        source = AsyncEngine if isinstance(config.lag, AsyncWorkers) else LaggedSource
        self.source = source(
            config.lag, config.algorithm, self.sampler, self.timing, self.tables.train_prompts, self.rng
        )
        self.update = 0
        self._current: dict | None = None  # the collected batch being used, and how far
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
        rows = current["slices"][current["position"]]
        learner_metrics, admitted = self.learner.step(current["prepared"], rows)
        current["admitted"][rows] |= admitted
        current["position"] += 1
        k = self.update
        self.update += 1
        self.source.publish(Snapshot.of_policy(self.policy, self.update))
        if current["position"] == len(current["slices"]):
            self.ledger.settle(current["batch"].ids, current["admitted"])
            self._current = None
        metrics = {"update": k, **self._batch_metrics(current["batch"].take(rows), k), **learner_metrics}
        metrics.update(self.source.metrics())
        metrics["data/rollouts_total"] = self.ledger.completed
        metrics["data/crashed"] = self.ledger.crashed
        if evaluate is None:
            evaluate = k == 0 or (k + 1) % self.config.eval_every == 0
        skipped = {"env/success_train": math.nan, "env/success_heldout": math.nan}
        metrics.update(self.evaluate() if evaluate else skipped)
        return {key: metrics[key] for key in METRIC_KEYS}

    def evaluate(self) -> dict[str, float]:
        """Exact mean success of the current policy on the train and held-out prompts."""
        success = exact.evaluate(self.exact_tables, self.policy, "all")["env/success_per_prompt"].numpy()
        train, heldout = self.tables.train_prompts, self.tables.heldout_prompts
        return {
            "env/success_train": float(success[train].mean()),
            "env/success_heldout": float(success[heldout].mean()) if heldout.size else math.nan,
        }

    def _collect(self) -> None:
        batch = self.source.collect()
        self._current = {
            "batch": batch,
            "prepared": self.learner.prepare(batch),
            "slices": self.learner.slices(len(batch)),
            "position": 0,
            "admitted": np.zeros(len(batch), dtype=bool),
        }

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

    def state_dict(self) -> dict:
        """Everything needed to continue this run bit for bit (see :meth:`load_state_dict`)."""
        return copy.deepcopy({
            "config": self.config,
            "update": self.update,
            "rng": self.rng.bit_generator.state,
            "learner": self.learner.state_dict(),
            "source": self.source.state_dict(),
            "current": self._current,
        })

    def load_state_dict(self, state: dict) -> None:
        """Restore a run saved by :meth:`state_dict` (its config must equal this run's but for ``updates``)."""
        if state["config"].with_updates(self.config.updates) != self.config:
            raise ValueError(
                "the checkpoint belongs to another configuration:\n"
                f"  checkpoint: {state['config']}\n  this run:   {self.config}"
            )
        self.update = state["update"]
        self.rng.bit_generator.state = state["rng"]
        self.learner.load_state_dict(state["learner"])
        self.source.load_state_dict(state["source"])
        self._current = copy.deepcopy(state["current"])
