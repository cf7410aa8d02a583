"""The event loop: lag emerges from timing; groups, backpressure, synchronous mode, crashes, stragglers."""

from __future__ import annotations

import numpy as np
import pytest

from flashsim.policies import make_policy
from flashsim.sim import AlgorithmConfig, AsyncWorkers, Simulation, TimingModel, TrainConfig
from flashsim.sim.config import make_env
from flashsim.sim.events import EventLoop
from flashsim.sim.rollouts import CONSUMED, CRASHED, REJECTED, Sampler, Snapshot


def lags(env, workers, updates=50, warm_up=20, timing=None, batch_size=32, **worker_options):
    config = TrainConfig(
        env=env, algorithm=AlgorithmConfig(batch_size=batch_size), lag=AsyncWorkers(workers, **worker_options),
        timing=timing, eval_every=10_000,
    )
    simulation = Simulation(config)
    rows = [simulation.step() for _ in range(updates)]
    simulation.source.check()
    later = rows[warm_up:]
    return np.mean([r["lag/mean"] for r in later]), np.mean([r["lag/max"] for r in later]), rows


def make_loop(config, batch_size=8, group_size=1, timing=None, env="bandit_tiny", seed=0):
    timing = timing or TimingModel(tool_latency=4.0)  # the default before TimingModel took Latency's fields
    sim_env = make_env(env, batch_size, timing=timing)
    tables = sim_env.tables
    loop = EventLoop(
        config, AlgorithmConfig(batch_size=batch_size, group_size=group_size), Sampler(sim_env), timing,
        tables.train_prompts, np.random.default_rng(seed),
    )
    policy = make_policy("tabular", tables)
    loop.publish(Snapshot.of_policy(policy, 0))
    return loop, policy


def cycle(loop, policy, version):
    """One learner update: take a batch, settle it, publish the next version."""
    batch = loop.next_batch()
    loop.ledger.settle(batch.ids, np.ones(len(batch), bool))
    loop.publish(Snapshot.of_policy(policy, version))
    return batch


def test_emergent_lag_grows_with_the_number_of_workers():
    means = [lags("bandit", workers)[0] for workers in (8, 64, 256)]
    assert means[0] < 1.0 < means[1] < means[2], means


def test_emergent_lag_grows_with_the_duration_tail():
    light = lags("gridworld", 64, timing=TimingModel(tool_latency=5.0, tool_latency_sigma=0.0))[1]
    heavy = lags("gridworld", 64, timing=TimingModel(tool_latency=5.0, tool_latency_sigma=2.0))[1]
    assert heavy > light + 3, (light, heavy)


def test_synchronous_workers_are_on_policy_and_idle_at_the_barrier():
    timing = TimingModel(tool_latency=5.0, tool_latency_sigma=1.5)
    _, sync_max, sync_rows = lags("gridworld", 32, updates=12, warm_up=0, timing=timing, synchronous=True)
    _, _, async_rows = lags("gridworld", 32, updates=12, warm_up=0, timing=timing)
    assert sync_max == 0
    assert sync_rows[-1]["time/worker_idle"] > async_rows[-1]["time/worker_idle"] + 0.2
    assert sync_rows[-1]["time/sim_clock"] > async_rows[-1]["time/sim_clock"]


def test_grouped_batches_hold_whole_groups_of_one_prompt_each():
    loop, policy = make_loop(AsyncWorkers(num_workers=5), batch_size=12, group_size=4)
    for version in range(1, 6):
        batch = cycle(loop, policy, version)
        groups = batch.group_ids.reshape(3, 4)
        prompts = batch.trajectories.prompts.reshape(3, 4)
        assert (groups == groups[:, :1]).all() and (prompts == prompts[:, :1]).all()
        assert len(set(groups[:, 0].tolist())) == 3
    loop.check()


def test_backpressure_never_lets_more_than_max_queued_wait():
    loop, policy = make_loop(AsyncWorkers(num_workers=40, max_queued=10), batch_size=8)
    taken = 0
    for version in range(1, 10):
        taken += len(cycle(loop, policy, version))
        # A worker starts only while fewer than max_queued wait; trajectories already running may still land.
        assert loop.ledger.started - taken <= 10 + loop.config.num_workers
        assert loop.check()["queued"] == loop.ready_count


def test_crashed_trajectories_are_dropped_counted_and_their_tasks_reissued():
    loop, policy = make_loop(AsyncWorkers(num_workers=6, crash_prob=0.3, restart_time=2.0), group_size=4)
    taken = []
    for version in range(1, 25):
        batch = cycle(loop, policy, version)
        taken.extend(batch.ids.tolist())
        assert len(set(batch.group_ids.tolist())) == 2  # groups stay whole despite crashes
        loop.check()
    counts = loop.ledger.counts()
    assert counts["crashed"] > 20 and loop.ledger.crashed == counts["crashed"]
    assert len(taken) == len(set(taken)) == counts["consumed"]
    assert not np.isin(loop.ledger.ids_in(CRASHED), taken).any()
    assert counts["started"] == counts["consumed"] + counts["crashed"] + counts["in_flight"] + counts["queued"]


def test_injected_crash_and_straggler_are_accounted_for():
    loop, policy = make_loop(AsyncWorkers(num_workers=4), batch_size=4)
    victim = int(loop.worker_trajectory[0])
    assert loop.crash_worker(0) and loop.ledger.status(victim) == CRASHED
    assert loop.delay_worker(1, 50.0)
    slow = int(loop.worker_trajectory[1])
    batch = cycle(loop, policy, 1)
    assert slow not in batch.ids and victim not in batch.ids
    for version in range(2, 40):
        cycle(loop, policy, version)
        if loop.ledger.status(slow) != 2 and loop.ledger.status(slow) != 1:
            break
    assert loop.ledger.status(slow) == CONSUMED
    assert loop.ledger.stragglers == 1
    loop.check()


def test_rejected_trajectories_are_counted_apart_from_consumed_ones():
    loop, policy = make_loop(AsyncWorkers(num_workers=4), batch_size=4)
    batch = loop.next_batch()
    loop.ledger.settle(batch.ids, np.array([True, False, True, False]))
    assert loop.ledger.status(batch.ids).tolist() == [CONSUMED, REJECTED, CONSUMED, REJECTED]
    with pytest.raises(RuntimeError, match="taken"):
        loop.ledger.settle(batch.ids[:1], np.array([True]))


def test_event_loop_runs_are_deterministic_per_seed():
    config = TrainConfig(env="gridworld", algorithm=AlgorithmConfig(batch_size=16),
                         lag=AsyncWorkers(12, crash_prob=0.05), timing=TimingModel(straggler_prob=0.05), seed=3)
    first = [Simulation(config).step() for _ in range(1)]
    a, b = Simulation(config), Simulation(config)
    assert [a.step() for _ in range(15)] == [b.step() for _ in range(15)]
    assert first[0] == Simulation(config).step()


def test_checkpoints_name_every_state_class_as_they_did_before_the_modules_were_renamed():
    # A checkpoint stores module.Class for each state object; a class that moves keeps its old name
    # (checkpoint_name), so checkpoints written before the move still load and runs write the same bytes.
    from flashsim.sim.simulation import STATE_TYPES
    from flashsim.storage import _name

    assert sorted(_name(cls) for cls in STATE_TYPES) == sorted([
        "flashsim.sim.simulation.SimulationState", "flashsim.sim.simulation.LearnerState",
        "flashsim.sim.simulation.CollectedBatch", "flashsim.sim.rollouts.Batch",
        "flashsim.sim.simulation.PreparedBatch", "flashsim.sim.rollouts.TrajectoryArrays",
        "flashsim.sim.engine.EngineState", "flashsim.sim.rollouts.LaggedSourceState",
        "flashsim.sim.rollouts.LedgerState", "flashsim.sim.rollouts.Ledger",
        "flashsim.sim.rollouts.SnapshotStoreState", "flashsim.sim.rollouts.Snapshot",
        "flashsim.sim.rollouts.SimClock", "flashsim.sim.engine.TrajectoryStore",
    ])
