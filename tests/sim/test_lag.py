"""Injected lag: fixed lag L is observed exactly, random lag stays in its range, lag 0 is exactly on-policy."""

from __future__ import annotations

import numpy as np
import pytest

from flashsim.sim import AlgorithmConfig, FixedLag, RandomLag, Simulation, TrainConfig, draw_lags

SMALL = AlgorithmConfig(batch_size=16)


def run(lag, updates, algorithm=SMALL, env="bandit_tiny", **options):
    simulation = Simulation(TrainConfig(env=env, algorithm=algorithm, lag=lag, eval_every=1000, **options))
    rows = [simulation.step() for _ in range(updates)]
    simulation.source.check()
    return rows


@pytest.mark.parametrize("lag", [0, 1, 3, 8])
def test_fixed_lag_is_observed_exactly_after_the_warm_up(lag):
    rows = run(FixedLag(lag), lag + 6)
    for k, row in enumerate(rows):
        assert row["lag/max"] == row["lag/mean"] == min(k, lag), k


def test_fixed_lag_holds_for_grouped_batches_and_multi_step_envs():
    rows = run(FixedLag(2), 6, AlgorithmConfig("grpo", batch_size=16, group_size=4), env="gridworld")
    assert [row["lag/max"] for row in rows] == [0, 1, 2, 2, 2, 2]
    assert all(row["lag/mean"] == row["lag/max"] for row in rows)


def test_minibatch_j_of_a_batch_is_j_updates_staler():
    rows = run(FixedLag(0), 8, AlgorithmConfig(batch_size=16, minibatches=4))
    assert [row["lag/max"] for row in rows] == [0, 1, 2, 3, 0, 1, 2, 3]


def test_lag_zero_is_exactly_on_policy_ratio_one_and_kl_zero():
    rows = run(FixedLag(0), 5, env="chain")
    for row in rows:
        assert row["trust/sequence_kl"] == 0.0 and row["trust/ratio_max"] == 1.0
        assert row["trust/acceptance_rate"] == 1.0


@pytest.mark.parametrize("distribution", ["uniform", "geometric", "poisson"])
def test_random_lags_stay_within_zero_and_max_lag(distribution):
    lags = draw_lags(RandomLag(max_lag=5, distribution=distribution, mean=2.0), 20_000, np.random.default_rng(0))
    assert lags.min() == 0 and lags.max() == 5


def test_random_lag_means_match_their_distributions():
    rng = np.random.default_rng(1)
    assert abs(draw_lags(RandomLag(max_lag=8), 40_000, rng).mean() - 4.0) < 0.05
    capped_far_away = RandomLag(max_lag=100, distribution="geometric", mean=2.0)
    assert abs(draw_lags(capped_far_away, 40_000, rng).mean() - 2.0) < 0.05
    assert abs(draw_lags(RandomLag(max_lag=100, distribution="poisson", mean=3.0), 40_000, rng).mean() - 3.0) < 0.05


def test_random_lag_is_observed_per_trajectory_within_range_after_warm_up():
    rows = run(RandomLag(max_lag=4), 30)
    later = rows[4:]
    assert all(0 <= row["lag/mean"] <= row["lag/max"] <= 4 for row in later)
    assert 1.5 < np.mean([row["lag/mean"] for row in later]) < 2.5


def test_same_seed_gives_identical_runs_and_another_seed_differs():
    first, second = run(RandomLag(3), 12, seed=4), run(RandomLag(3), 12, seed=4)
    assert first == second
    assert run(RandomLag(3), 12, seed=5) != first
