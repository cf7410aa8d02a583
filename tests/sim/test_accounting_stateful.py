"""Stateful property test of the event loop's accounting under crashes, stragglers and any learner pace.

Hypothesis drives one event loop through random interleavings of learner updates (with random gate
verdicts), injected worker crashes and injected stragglers, over random event-loop configurations
(workers, group size, synchronous or not, backpressure, random crash and straggler rates). After
every step: no trajectory is lost or used twice — each started trajectory is consumed, rejected,
crashed, in flight or queued, exactly once, and the event loop's own structures agree with the ledger.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from flashsim.policies import make_policy
from flashsim.sim.config import AlgorithmConfig, AsyncWorkers, TimingModel, make_env
from flashsim.sim.events import EventLoop
from flashsim.sim.rollouts import CONSUMED, CRASHED, REJECTED, Sampler, Snapshot


class EngineAccounting(RuleBasedStateMachine):
    """Model: the sets of ids the learner took (with the verdict) and the ids the test crashed."""

    @initialize(
        env=st.sampled_from(["bandit_tiny", "chain"]),
        workers=st.integers(1, 8),
        group_size=st.sampled_from([1, 2, 4]),
        groups=st.integers(1, 3),
        synchronous=st.booleans(),
        extra_queue=st.none() | st.integers(0, 6),
        crash_prob=st.sampled_from([0.0, 0.2]),
        straggler_prob=st.sampled_from([0.0, 0.2]),
        seed=st.integers(0, 2**16),
    )
    def start(self, env, workers, group_size, groups, synchronous, extra_queue, crash_prob, straggler_prob, seed):
        batch_size = group_size * groups
        timing = TimingModel(tool_latency=2.0, step_duration_sigma=0.5, straggler_prob=straggler_prob,
                             straggler_factor=8.0)
        sim_env = make_env(env, batch_size, timing=timing)
        tables = sim_env.tables
        config = AsyncWorkers(
            num_workers=workers, synchronous=synchronous, crash_prob=crash_prob, restart_time=1.5,
            max_queued=None if extra_queue is None else batch_size + extra_queue,
        )
        self.loop = EventLoop(
            config, AlgorithmConfig(batch_size=batch_size, group_size=group_size), Sampler(sim_env),
            timing, tables.train_prompts, np.random.default_rng(seed),
        )
        self.policy = make_policy("tabular", tables)
        self.loop.publish(Snapshot.of_policy(self.policy, 0))
        self.version, self.batch_size, self.group_size = 0, batch_size, group_size
        self.consumed, self.rejected, self.crashed_by_test = set(), set(), set()

    @rule(verdicts=st.lists(st.booleans(), min_size=12, max_size=12))
    def learner_update(self, verdicts):
        batch = self.loop.next_batch()
        ids = batch.ids.tolist()
        assert len(ids) == len(set(ids)) == self.batch_size
        assert not set(ids) & (self.consumed | self.rejected | self.crashed_by_test), "a trajectory was used twice"
        groups = batch.group_ids.reshape(-1, self.group_size)
        assert (groups == groups[:, :1]).all(), "a group was split"
        assert (batch.versions <= self.version).all()
        admitted = np.array(verdicts[: self.batch_size])
        self.loop.ledger.settle(batch.ids, admitted)
        self.consumed |= {i for i, a in zip(ids, admitted) if a}
        self.rejected |= {i for i, a in zip(ids, admitted) if not a}
        self.version += 1
        self.loop.publish(Snapshot.of_policy(self.policy, self.version))

    @precondition(lambda self: (self.loop.worker_trajectory >= 0).any())
    @rule(worker=st.integers(0, 7))
    def crash_a_worker(self, worker):
        busy = np.flatnonzero(self.loop.worker_trajectory >= 0)
        chosen = int(busy[worker % busy.size])
        victim = int(self.loop.worker_trajectory[chosen])
        assert self.loop.crash_worker(chosen)
        self.crashed_by_test.add(victim)

    @precondition(lambda self: (self.loop.worker_trajectory >= 0).any())
    @rule(worker=st.integers(0, 7), factor=st.floats(1.0, 30.0))
    def make_a_straggler(self, worker, factor):
        busy = np.flatnonzero(self.loop.worker_trajectory >= 0)
        assert self.loop.delay_worker(int(busy[worker % busy.size]), factor)

    @invariant()
    def every_trajectory_is_in_exactly_one_place(self):
        counts = self.loop.check()
        assert counts["taken"] == 0
        assert counts["started"] == (
            counts["consumed"] + counts["rejected"] + counts["crashed"] + counts["in_flight"] + counts["queued"]
        )
        ledger = self.loop.ledger
        assert set(ledger.ids_in(CONSUMED).tolist()) == self.consumed
        assert set(ledger.ids_in(REJECTED).tolist()) == self.rejected
        assert self.crashed_by_test <= set(ledger.ids_in(CRASHED).tolist())
        assert ledger.crashed == counts["crashed"] and ledger.completed == (
            counts["consumed"] + counts["rejected"] + counts["queued"]
        )


EngineAccounting.TestCase.settings = settings(
    max_examples=25, stateful_step_count=30, deadline=None, derandomize=True, database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestEngineAccounting = EngineAccounting.TestCase
