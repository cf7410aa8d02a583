"""Training works: both algorithms solve PromptBandit at lag 0, and the sequence gate reacts to lag."""

from __future__ import annotations

import numpy as np
import pytest

from flashsim.sim import AlgorithmConfig, FixedLag, Simulation, TrainConfig, build_tables, optimal_success

BUDGET_UPDATES = 100  # × B = 128 trajectories: a budget of 12,800 rollouts


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["flash_reinforce", "grpo"])
@pytest.mark.parametrize("seed", [0, 1])
def test_reaches_ninety_percent_of_the_optimal_success_on_prompt_bandit_at_lag_zero(algorithm, seed):
    config = TrainConfig(env="bandit", algorithm=AlgorithmConfig.for_loss(algorithm), lag=FixedLag(0), seed=seed,
                         eval_every=BUDGET_UPDATES)
    simulation = Simulation(config)
    rows = [simulation.step() for _ in range(BUDGET_UPDATES)]
    assert rows[-1]["data/rollouts_total"] == BUDGET_UPDATES * 128
    optimum = optimal_success(build_tables("bandit"))
    success = simulation.evaluate()["env/success_train"]
    assert success >= 0.9 * optimum, (success, optimum)


def test_sequence_gate_acceptance_falls_as_lag_grows_with_a_large_learning_rate():
    acceptance = []
    for lag in (0, 2, 8):
        config = TrainConfig(env="bandit", algorithm=AlgorithmConfig(batch_size=64, learning_rate=0.5),
                             lag=FixedLag(lag), eval_every=1000)
        simulation = Simulation(config)
        rows = [simulation.step() for _ in range(40)]
        acceptance.append(np.mean([row["trust/acceptance_rate"] for row in rows[10:]]))
    assert acceptance[0] == 1.0
    assert acceptance[0] > acceptance[1] + 0.1 > acceptance[2] + 0.2, acceptance


def test_rejected_trajectories_are_counted_by_the_ledger():
    config = TrainConfig(env="bandit", algorithm=AlgorithmConfig(batch_size=64, learning_rate=0.5),
                         lag=FixedLag(8), eval_every=1000)
    simulation = Simulation(config)
    rows = [simulation.step() for _ in range(30)]
    counts = simulation.source.check()
    expected_rejected = sum(round((1 - row["trust/acceptance_rate"]) * 64) for row in rows)
    assert counts["rejected"] == expected_rejected > 0
    assert counts["consumed"] + counts["rejected"] == counts["started"] == 30 * 64


@pytest.mark.parametrize("preset", ["token_gate", "no_gate", "token_mean", "positive_only", "minibatches", "ppo_clip",
                                    "tis", "rloo", "dr_grpo"])
def test_every_ablation_runs_and_keeps_the_accounting(preset):
    algorithm = (AlgorithmConfig.for_loss("flash_reinforce", minibatches=4) if preset == "minibatches"
                 else AlgorithmConfig.for_loss(preset))
    config = TrainConfig(env="chain", algorithm=algorithm, lag=FixedLag(2), eval_every=3)
    simulation = Simulation(config)
    rows = [simulation.step() for _ in range(6)]
    assert all(np.isfinite(row["loss/policy"]) for row in rows)
    counts = simulation.source.check()
    assert counts["consumed"] + counts["rejected"] + counts["taken"] == counts["started"]
