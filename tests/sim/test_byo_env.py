"""Bring your own env: any Discrete gymnasium id trains; exact metrics where tables exist, else Monte Carlo."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from flashsim import exact
from flashsim.sim import AlgorithmConfig, Simulation, TrainConfig, train


def test_frozen_lake_trains_with_exact_success_from_its_p_table():
    config = TrainConfig(env="FrozenLake-v1", algorithm=AlgorithmConfig(batch_size=32, learning_rate=0.5),
                         updates=3, eval_every=1)
    result = train(config)
    first = result.rows[0]
    assert first["env/success_train_stderr"] == 0.0 and math.isnan(first["env/success_heldout"])
    uniform = Simulation(config)  # the starting policy is uniform, so row 0's success is its exact J
    assert first["env/success_train"] == pytest.approx(exact.expected_return(uniform.tables, uniform.policy).item())
    assert result.summary["optimal_success_train"] == pytest.approx(0.7442, abs=1e-3)
    assert result.summary["optimum_is_exact"] is False  # the policy does not see the steps left


def test_the_optimum_is_exact_for_one_step_envs_that_show_the_state_and_a_bound_elsewhere():
    from flashsim.sim import build_tables

    assert exact.optimum_is_exact(build_tables("bandit")) and exact.optimum_is_exact(build_tables("bandit_hard"))
    assert not exact.optimum_is_exact(build_tables("gridworld"))  # several states share an observation
    assert not exact.optimum_is_exact(build_tables("chain"))  # 16 steps: the policy does not see the step


def test_an_env_without_tables_reports_monte_carlo_success_with_its_standard_error():
    config = TrainConfig(env="Taxi-v4", algorithm=AlgorithmConfig(batch_size=8), updates=1)
    simulation = Simulation(config)
    assert simulation.tables is None
    metrics = simulation.step()
    assert metrics["env/success_train"] < 0 and metrics["env/success_train_stderr"] > 0
    again = Simulation(config).step()  # seeded by (seed, update): evaluation is reproducible
    assert again["env/success_train"] == metrics["env/success_train"]


def test_evaluating_without_tables_leaves_the_run_generator_alone():
    config = TrainConfig(env="Taxi-v4", algorithm=AlgorithmConfig(batch_size=8), updates=1)
    simulation = Simulation(config)
    before = simulation.rng.bit_generator.state
    simulation.evaluate()
    assert simulation.rng.bit_generator.state == before


@pytest.mark.parametrize("env", ["CartPole-v1", "MountainCarContinuous-v0"])
def test_a_non_discrete_env_is_refused_naming_the_space(env):
    with pytest.raises(ValueError, match="needs Discrete"):
        Simulation(TrainConfig(env=env))


@pytest.mark.slow
def test_the_cli_trains_frozen_lake_and_refuses_cartpole(tmp_path, capsys):
    """Through ``flashsim.cli.main`` in this process (the command's parsing, run and JSON; not its process start)."""
    from flashsim.cli import main

    command = ["train", "--no-progress", "--json", "--updates", "3", "--batch-size", "16"]
    assert main([*command, "--env", "FrozenLake-v1", "--out", str(tmp_path / "frozen")]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["env"] == "FrozenLake-v1" and np.isfinite(summary["success_train"])
    assert summary["optimum_is_exact"] is False
    code = main([*command, "--env", "CartPole-v1", "--out", str(tmp_path / "cart")])
    assert code == 2 and "observation space is Box" in capsys.readouterr().err
