"""``flashsim.sim``: the asynchronous simulator — policy snapshots, lag, rollout workers, training.

Layer 4 of flashsim. Algorithms are configurations of :mod:`flashsim.losses` (through its registry);
environments are gymnasium vector envs (the toy envs' native ones, or any Discrete gymnasium id),
with exact tables where the env offers them; policies and exact evaluation come from
:mod:`flashsim.policies` and :mod:`flashsim.exact`.

Modules, one job each:
- :mod:`~flashsim.sim.config` — frozen configs (lag models, timing, algorithm, run), env presets and
  ``make_env`` (a vector env and its tables, if any);
- :mod:`~flashsim.sim.rollouts` — rollout sources (``publish``, ``next_batch``): snapshots θ_k, the
  tabular rollout loop, the accounting ledger, injected lag (fixed, random);
- :mod:`~flashsim.sim.events` — the discrete-event loop of N workers (emergent lag, crashes), the
  same kind of source;
- :mod:`~flashsim.sim.simulation` — one run, update by update, with metrics; the learner (optimizer
  steps through the loss registry); :func:`train`, the run with outputs, checkpoints, resume, progress
  (the run directory and ``curves.png``: :mod:`flashsim.outputs`).

Example:
    >>> from flashsim.sim import AlgorithmConfig, FixedLag, TrainConfig, train
    >>> config = TrainConfig(env="bandit_tiny", algorithm=AlgorithmConfig(batch_size=16), lag=FixedLag(2),
    ...                      updates=5)
    >>> result = train(config)
    >>> [row["lag/max"] for row in result.rows]
    [0.0, 1.0, 2.0, 2.0, 2.0]

Glossary: B trajectories per batch, G group size, L lag, k learner update, N workers, δ gate threshold.
"""

from flashsim.exact import optimal_success
from flashsim.sim.config import (
    ENVS,
    AlgorithmConfig,
    AsyncWorkers,
    FixedLag,
    RandomLag,
    SimEnv,
    TimingModel,
    TrainConfig,
    build_tables,
    make_env,
    parse_lag,
)
from flashsim.sim.events import EventLoop
from flashsim.sim.rollouts import AccountingError, LaggedSource, Ledger, Sampler, Snapshot, draw_lags, roll_out
from flashsim.sim.simulation import METRIC_KEYS, PolicyLearner, SimulatedSource, Simulation, TrainResult, train

AsyncEngine = EventLoop
"""The former name of :class:`EventLoop` ("engine" now means only ``scale``'s samplers)."""

__all__ = [
    "AccountingError", "AlgorithmConfig", "AsyncWorkers", "ENVS", "EventLoop", "FixedLag",
    "LaggedSource", "Ledger", "METRIC_KEYS", "PolicyLearner", "RandomLag", "Sampler", "SimEnv", "SimulatedSource",
    "Simulation", "Snapshot", "TimingModel", "TrainConfig", "TrainResult", "build_tables", "draw_lags", "make_env",
    "optimal_success", "parse_lag", "roll_out", "train",
]
