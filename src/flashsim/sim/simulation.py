"""One simulated training run, one learner update at a time: rollouts, lag, loss, metrics, outputs.

:class:`Simulation` wires the parts together: a vector env (:func:`~flashsim.sim.config.make_env`), a policy
(:mod:`flashsim.policies`), a rollout source that decides the lag (:class:`~flashsim.sim.rollouts.LaggedSource`
for injected lag, :class:`~flashsim.sim.events.EventLoop` for emergent lag), the :class:`PolicyLearner`
and exact evaluation (:func:`flashsim.exact.evaluate`, or a seeded Monte Carlo estimate with its
standard error for envs without tables). Update k takes the source's next batch (or the next
minibatch of the current one), takes one optimizer step, and publishes θ_{k+1}. All randomness comes
from one ``numpy.random.Generator`` seeded by the config, so a run is a pure function of its
:class:`~flashsim.sim.config.TrainConfig`, and :meth:`Simulation.state_dict` captures everything
needed to continue it bit for bit.

The learner: an algorithm is a configuration of :mod:`flashsim.losses` — the loss comes from
:func:`flashsim.losses.get_loss` by name and no loss math lives here. For one collected batch it

1. builds the ``[B, T]`` tensors (T = the longest trajectory of the batch) and the boolean
   ``action_mask`` from the stored rows;
2. computes the advantages once over the **whole** collected batch with the registry entry's own
   estimator and the run's loss options (``LOSSES[name].compute_advantages``), so that minibatches and
   PPO epochs share one baseline (the "centre before splitting" contract of :mod:`flashsim.losses.loss`);
3. takes ``epochs × minibatches`` optimizer steps (``loss.backward()`` and a ``torch.optim``
   optimizer, like every PyTorch loop), minibatch j being rows ``[j·B/m, (j+1)·B/m)``
   (whole groups, since siblings are adjacent); each step recomputes log π_θ of the stored
   (observation, action) tokens with the *current* parameters and calls the loss with the stored
   behaviour log-probs.

For the negative-token entropy filter (``negative_token_fraction`` < 1, e.g. the ``entropy_filter``
loss) the batch also carries per-token entropies — of the learner's policy when the batch is prepared,
before its update (as verl and ``scale/`` take them from the training forward; with lag 0 this is the
behaviour policy) — and ``failures`` = reward ≤ 0 (the toy envs' rewards are 0/1).

Metrics (one dict per update, namespaced; see :data:`METRIC_KEYS`): the batch's ``env/reward``,
``env/length``, ``env/truncation``, ``env/tool_calls``; exact ``env/success_train`` and
``env/success_heldout`` every ``eval_every`` updates (NaN in between) with ``env/success_train_stderr``
(0 when exact); ``policy/entropy``;
``trust/acceptance_rate``, ``trust/sequence_kl`` and other loss diagnostics; the lag of the batch
``lag/mean``, ``lag/max`` (k − version of each trajectory); ``time/sim_clock``, ``time/learner_idle``,
``time/worker_idle``; and ``data/rollouts_total`` (trajectories completed by workers so far).

Deliberately left out: minibatch shuffling between epochs (a fixed order keeps runs reproducible
without a second random stream), gradient clipping, entropy bonuses and KL penalties (the losses
define what an algorithm is).

The run (:func:`train`, what ``flashsim train`` calls) advances a :class:`Simulation` to its update
budget. With an output directory it writes, through flashsim's one run shell
(:class:`flashsim.outputs.RunDirectory`), ``config.json``, metrics row by row, a checkpoint every
``checkpoint_every`` updates and at the end, ``summary.json``, and then ``curves.png``.
``resume=True`` continues from the directory's checkpoint and produces exactly the files an
uninterrupted run would have produced.

Glossary: B trajectories, T token slots, O observations, A actions, m minibatches, k learner update.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch import Tensor

from flashsim import exact
from flashsim.config import from_dict, to_dict
from flashsim.losses.registry import LOSSES
from flashsim.outputs import SUMMARY, ProgressBar, RunDirectory, plot_curves, read_metrics
from flashsim.policies import make_policy
from flashsim.sim.config import AlgorithmConfig, AsyncWorkers, FixedLag, RandomLag, TrainConfig, make_env, timing_of
from flashsim.sim.events import EventLoop, EventLoopState, TrajectoryStore
from flashsim.sim.rollouts import (
    Batch,
    LaggedSource,
    LaggedSourceState,
    Ledger,
    LedgerState,
    Sampler,
    SimClock,
    Snapshot,
    SnapshotStoreState,
    TrajectoryArrays,
)
from flashsim.storage import load_checkpoint

#: Collections of B episodes behind one Monte Carlo success estimate (envs without exact tables).
MONTE_CARLO_COLLECTIONS = 8

METRIC_KEYS = (
    "update", "env/reward", "env/success_train", "env/success_train_stderr", "env/success_heldout",
    "env/length", "env/truncation",
    "env/tool_calls", "policy/entropy", "trust/acceptance_rate", "trust/token_acceptance_rate",
    "trust/sequence_kl", "trust/clip_fraction", "trust/tis_capped_fraction", "trust/ess_fraction", "trust/ratio_max",
    "loss/policy",
    "lag/mean", "lag/max", "time/sim_clock", "time/learner_idle", "time/worker_idle",
    "data/rollouts_total", "data/crashed",
)
"""Every metric of an update, in column order."""


class SimulatedSource(Protocol):
    """What :class:`Simulation` asks of a rollout source of simulated trajectories
    (:class:`~flashsim.sim.rollouts.LaggedSource` for injected lag, :class:`~flashsim.sim.events.EventLoop` for
    emergent lag); a new lag model is a source with these members. ``publish`` is called once with θ_0, then
    once after each update; ``next_batch`` once before each update."""

    ledger: Ledger
    """Every trajectory the source started, in exactly one state (the learner settles a batch's ids in it)."""

    def publish(self, snapshot: Snapshot) -> None:
        """The learner published ``snapshot`` (θ_k, version k; θ_0 at the start); later trajectories may use it."""
        ...

    def next_batch(self) -> Batch:
        """The batch for the update from the newest published version: B trajectories (whole groups), each row
        with its id, the version that sampled it and its group; their ids TAKEN in the ledger."""
        ...

    def metrics(self) -> dict[str, float]:
        """The ``time/`` metrics of the simulated clock so far."""
        ...

    def check(self) -> dict[str, int]:
        """The ledger's invariant (raises :class:`~flashsim.sim.rollouts.AccountingError`); its counts."""
        ...

    def state_dict(self) -> Any:
        """A deep copy of the mutable state, of the classes in :data:`STATE_TYPES` (the generator apart)."""
        ...

    def load_state_dict(self, state: Any) -> None:
        """Restore :meth:`state_dict`'s state."""
        ...


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
        self.learner = PolicyLearner(self.policy, config.algorithm)
        self.exact_tables = exact.to_torch(self.tables) if self.tables is not None else None
        self.sampler = Sampler(self.env, self.timing.step_duration, config.logprob_noise)
        source = EventLoop if isinstance(config.lag, AsyncWorkers) else LaggedSource
        self.source: SimulatedSource = source(
            config.lag, config.algorithm, self.sampler, self.timing, self.env.train_prompts, self.rng
        )
        self.update = 0
        self._current: CollectedBatch | None = None  # the collected batch being used, and how far
        self.source.publish(Snapshot.of_policy(self.policy, 0))

    @property
    def ledger(self) -> Ledger:
        """The source's accounting ledger."""
        return self.source.ledger

    def step(self, evaluate: bool | None = None) -> dict[str, float]:
        """Run update k = :attr:`update` and return its metrics.

        Args:
            evaluate: compute the exact success metrics (default: every ``eval_every`` updates and at
                update 0).
        """
        if self._current is None:
            self._next_batch()
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

    def _next_batch(self) -> None:
        batch = self.source.next_batch()
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
    """The rollout source's state (``LaggedSourceState`` or ``EventLoopState``)."""
    current: CollectedBatch | None


# ----------------------------------------------------------------------------- the learner

#: ``AlgorithmConfig.optimizer`` name → ``torch.optim`` class.
OPTIMIZERS = {"adam": torch.optim.Adam, "sgd": torch.optim.SGD}

#: Stats of the loss reported per update, as (metric key, stats key).
_LOSS_METRICS = (
    ("loss/policy", "loss"),
    ("trust/acceptance_rate", "acceptance_rate"),
    ("trust/token_acceptance_rate", "token_acceptance_rate"),
    ("trust/clip_fraction", "clip_fraction"),
    ("trust/tis_capped_fraction", "tis_capped_fraction"),
    ("trust/ess_fraction", "ess_fraction"),
    ("trust/ratio_max", "ratio_max"),
)

#: The value of a stat a loss does not report because it lacks the mechanism: without a gate (GRPO) every
#: trajectory is used; without PPO's clip (FlashREINFORCE) or a TIS cap (GRPO) no token is clipped or capped.
_WITHOUT_MECHANISM = {"acceptance_rate": 1.0, "clip_fraction": 0.0, "tis_capped_fraction": 0.0}


@dataclass
class PreparedBatch:
    """Learner tensors of one collected batch.

    Shape:
        observations, actions: ``[B, T] int64``; behavior_log_probs: ``[B, T]`` (policy dtype);
        action_mask: ``[B, T] bool``; rewards, advantages: ``[B]`` (policy dtype); group_ids: ``[B] int64``.
    """

    observations: Tensor
    actions: Tensor
    behavior_log_probs: Tensor
    action_mask: Tensor
    rewards: Tensor
    advantages: Tensor
    group_ids: Tensor
    entropies: Tensor | None = None  # [B, T], only for the negative-token filter
    failures: Tensor | None = None  # [B] bool, only for the negative-token filter


class PolicyLearner:
    """Optimizer steps of one algorithm on a policy (see the module docstring).

    Args:
        policy: a :class:`flashsim.policies.Policy` (any module with ``all_logits() -> [O, A]``).
        algorithm: loss name and options, optimizer, epochs, minibatches.
    """

    def __init__(self, policy: torch.nn.Module, algorithm: AlgorithmConfig) -> None:
        self.policy, self.algorithm = policy, algorithm
        self.loss_fn = LOSSES[algorithm.loss]  # the name was checked by AlgorithmConfig
        self.options = dict(algorithm.loss_options)
        self.filters_tokens = self.loss_fn.needs_entropies(self.options)
        self.optimizer = OPTIMIZERS[algorithm.optimizer](policy.parameters(), lr=algorithm.learning_rate)
        self.dtype = next(policy.parameters()).dtype

    def prepare(self, batch: Batch) -> PreparedBatch:
        """Tensors of ``batch``, trimmed to its longest trajectory, with global advantages."""
        rows = batch.trajectories
        T = int(rows.lengths.max())
        mask = np.arange(T) < rows.lengths[:, None]
        rewards = torch.from_numpy(rows.rewards).to(self.dtype)
        group_ids = torch.from_numpy(batch.group_ids)
        observations = torch.from_numpy(rows.observations[:, :T])
        entropies = failures = None
        if self.filters_tokens:
            with torch.no_grad():
                entropies = self.policy.entropy(observations.reshape(-1)).view(observations.shape)
            failures = rewards <= 0
        return PreparedBatch(
            observations=observations,
            actions=torch.from_numpy(rows.actions[:, :T]),
            behavior_log_probs=torch.from_numpy(rows.behavior_log_probs[:, :T]).to(self.dtype),
            action_mask=torch.from_numpy(mask),
            rewards=rewards,
            advantages=self.loss_fn.compute_advantages(rewards, group_ids, self.options),
            group_ids=group_ids,
            entropies=entropies,
            failures=failures,
        )

    def slices(self, batch_size: int) -> list[slice]:
        """Rows of each optimizer step on one collected batch, in order (epochs × minibatches)."""
        m = self.algorithm.minibatches
        size = batch_size // m
        return [slice(j * size, (j + 1) * size) for _ in range(self.algorithm.epochs) for j in range(m)]

    def step(self, prepared: PreparedBatch, rows: slice) -> tuple[dict[str, float], np.ndarray]:
        """One optimizer step on ``rows`` of ``prepared``.

        Returns:
            ``(metrics, admitted)``: ``loss/``, ``trust/`` and ``policy/entropy`` metrics (entropy of
            the policy *before* the step, averaged over the batch's tokens), and the gate's verdict
            per trajectory ``[n] bool``.
        """
        mask = prepared.action_mask[rows]
        observations, actions = prepared.observations[rows], prepared.actions[rows]
        table = torch.log_softmax(self.policy.all_logits(), dim=-1)  # [O, A]
        log_probs = table[observations, actions]
        filtered = {} if prepared.entropies is None else {
            "entropies": prepared.entropies[rows], "failures": prepared.failures[rows]}
        loss, stats = self.loss_fn(
            log_probs, prepared.behavior_log_probs[rows], prepared.rewards[rows], mask,
            prepared.group_ids[rows], advantages=prepared.advantages[rows], validate=False, **filtered, **self.options,
        )
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        with torch.no_grad():
            detached = table.detach()
            entropy = -(detached.exp() * detached).sum(dim=-1)[observations]
            token_entropy = torch.where(mask, entropy, 0.0).sum() / mask.sum()
            sequence_kl = stats["sequence_kl"].mean()
            values = torch.stack([torch.as_tensor(stats.get(key, _WITHOUT_MECHANISM.get(key)), dtype=self.dtype)
                                  for _, key in _LOSS_METRICS] + [sequence_kl, token_entropy])
        names = [name for name, _ in _LOSS_METRICS] + ["trust/sequence_kl", "policy/entropy"]
        admitted = stats.get("admitted", torch.ones(mask.shape[0], dtype=torch.bool))  # no gate: all used
        return dict(zip(names, values.tolist())), admitted.numpy()

    def state_dict(self) -> LearnerState:
        """Policy and optimizer state (``torch``'s own ``state_dict`` formats)."""
        return LearnerState(self.policy.state_dict(), self.optimizer.state_dict())

    def load_state_dict(self, state: LearnerState) -> None:
        """Restore from :meth:`state_dict`."""
        self.policy.load_state_dict(state.policy)
        self.optimizer.load_state_dict(state.optimizer)


@dataclass
class LearnerState:
    """What a learner needs to continue: ``policy.state_dict()`` and ``optimizer.state_dict()``."""

    policy: dict
    optimizer: dict


# ----------------------------------------------------------------------------- the run: outputs, resume

CHECKPOINT, CONFIG, CURVES = "checkpoint.pt", "config.json", "curves.png"
STATE_TYPES = (
    SimulationState, LearnerState, CollectedBatch, Batch, PreparedBatch, TrajectoryArrays, EventLoopState,
    LaggedSourceState, LedgerState, Ledger, SnapshotStoreState, Snapshot, SimClock, TrajectoryStore,
)
"""Classes of the simulator's own state objects that its checkpoints may hold (see :mod:`flashsim.storage`);
the config is stored as plain data and read back strictly by :func:`flashsim.config.from_dict`."""


@dataclass
class TrainResult:
    """What a run returns: every metric row (including rows before a resume), the summary, the directory."""

    rows: list[dict[str, float]]
    summary: dict[str, object]
    out_dir: Path | None


def train(
    config: TrainConfig, out_dir: Path | str | None = None, *, resume: bool = False, progress: bool = False,
    plot: bool = True, logger: str | None = None,
) -> TrainResult:
    """Run ``config`` to ``config.updates`` learner updates.

    Args:
        config: the run.
        out_dir: where to write metrics, checkpoints, summary and plot (None: keep everything in memory).
        resume: continue from ``out_dir/checkpoint.pt`` (same config, ``updates`` may be larger).
        progress: show a tqdm progress bar on stderr.
        plot: write ``curves.png`` at the end.
        logger: ``"tensorboard"``: also write TensorBoard event files into ``out_dir`` (see
            :class:`flashsim.outputs.RunDirectory`); None: only the metrics files.

    Raises:
        FileExistsError: ``out_dir`` already holds a run and ``resume`` is False.
        FileNotFoundError: ``resume`` without a checkpoint in ``out_dir``.
    """
    simulation = Simulation(config)
    run = RunDirectory(out_dir, METRIC_KEYS, checkpoint=CHECKPOINT, types=STATE_TYPES, logger=logger)
    rows: list[dict[str, float]] = []
    if resume:
        run.resume(lambda state: simulation.load_state_dict(_checked(state, run.checkpoint)["simulation"]))
        rows = read_metrics(run.out)
    else:
        run.start()
        run.write_json(CONFIG, to_dict(simulation.config))
    started, started_cpu, first_update = time.perf_counter(), time.process_time(), simulation.update
    bar = ProgressBar(config.updates, initial=first_update, enabled=progress)
    with run:
        try:
            while simulation.update < config.updates:
                row = simulation.step()
                rows.append(row)
                run.write(row)
                if run.checkpoint_due(simulation.update, every=config.checkpoint_every, last=config.updates):
                    run.save({"simulation": replace(simulation.state_dict(), config=to_dict(simulation.config))})
                bar.advance(reward=f"{row['env/reward']:.3f}", lag=f"{row['lag/mean']:.1f}")
        finally:
            bar.close()
    elapsed, cpu = time.perf_counter() - started, time.process_time() - started_cpu
    summary = _summary(simulation, rows, simulation.update - first_update, elapsed, cpu)
    run.write_json(SUMMARY, summary)
    if run.writes and plot:
        title = f"{config.env} · {config.algorithm.loss} · {_lag_label(config)} · seed {config.seed}"
        plot_curves({config.algorithm.loss: rows}, run.out / CURVES, title=title, smooth=10,
                    heldout=config.policy != "tabular")
    return TrainResult(rows, summary, run.out)


def load_state(path: Path | str) -> dict[str, Any]:
    """A run's checkpoint: ``{"simulation": Simulation.state_dict(), "offsets": (csv, jsonl bytes), "event_lengths":
    {event file: bytes}}``.

    Loaded with ``torch.load(weights_only=True)`` (:func:`flashsim.storage.load_checkpoint`); the config is
    rebuilt from plain data by :func:`flashsim.config.from_dict`, so it is checked like a config file.
    """
    return _checked(load_checkpoint(path, types=STATE_TYPES), path)


def _checked(state: dict[str, Any], path: Path | str) -> dict[str, Any]:
    """``state`` with its simulator state checked and its config rebuilt strictly from plain data."""
    simulation = state.get("simulation")
    if not isinstance(simulation, SimulationState):
        raise ValueError(f"{path} does not hold a simulator state")
    state["simulation"] = replace(simulation, config=from_dict(TrainConfig, simulation.config, name="config"))
    return state


def _summary(
    simulation: Simulation, rows: list[dict], updates_run: int, elapsed: float, cpu: float
) -> dict[str, object]:
    """Final metrics, the final policy's exact success, accounting, and throughput of this invocation.

    Throughput covers the update loop only (not Python/torch start-up or the final plot); the
    ``_per_cpu_second`` rates divide by the process's CPU time instead of wall time, so they do not
    depend on how busy the machine is (the loop is single-threaded).
    """
    config, last, tables = simulation.config, rows[-1] if rows else {}, simulation.tables
    final_success = simulation.evaluate()  # of the final policy (rows evaluate on their own schedule)
    return {
        "env": config.env,
        "algorithm": config.algorithm.loss,
        "lag": _lag_label(config),
        "seed": config.seed,
        "updates": simulation.update,
        "rollouts": simulation.ledger.completed,
        "final": {key: last.get(key) for key in METRIC_KEYS},
        "success_train": final_success["env/success_train"],
        "success_heldout": final_success["env/success_heldout"],
        "optimal_success_train": exact.optimal_success(tables, "train") if tables is not None else None,
        "optimum_is_exact": exact.optimum_is_exact(tables) if tables is not None else None,
        "success_train_stderr": final_success["env/success_train_stderr"],
        "accounting": {**simulation.ledger.counts(), "stragglers": simulation.ledger.stragglers},
        "wall_seconds": elapsed,
        "cpu_seconds": cpu,
        "updates_per_second": updates_run / elapsed if elapsed > 0 else None,
        "env_steps_per_second": simulation.sampler.steps / elapsed if elapsed > 0 else None,
        "updates_per_cpu_second": updates_run / cpu if cpu > 0 else None,
        "env_steps_per_cpu_second": simulation.sampler.steps / cpu if cpu > 0 else None,
    }


def _lag_label(config: TrainConfig) -> str:
    lag = config.lag
    if isinstance(lag, FixedLag):
        return f"lag {lag.lag}"
    if isinstance(lag, RandomLag):
        return f"random lag ≤ {lag.max_lag} ({lag.distribution})"
    return f"{lag.num_workers} workers" + (" (sync)" if lag.synchronous else "")
