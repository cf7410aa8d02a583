"""A user's loss function measured by ``measure_gradient`` and ``flashsim variance --loss``.

A trainer-style loss that is correct must give the registry loss's measurement exactly (the same
batches, the same ĝ up to rounding), at a policy lag where the gate and the clip are active.
"""

import csv
import functools
import json

import pytest
import torch

import toy_envs
from flashsim.cli import main
from flashsim.policies import make_policy
from flashsim.variance import measure_gradient
from flashsim.variance.lag import lagged_policies
from tests.testing import mutants


@functools.cache
def lagged(step_size: float = 0.2):
    """The tiny bandit, θ_4 and θ_3 of exact ascent. Step 0.2: the gate admits 46 % of trajectories at
    lag 1; step 0.3: GRPO clips 12 % of tokens (so neither is trivially all-or-nothing)."""
    tables = toy_envs.PromptBandit(**toy_envs.bandit_preset("tiny")).tables()
    learner, behaviors = lagged_policies(tables, make_policy("tabular", tables), steps=4, lags=[1], step_size=step_size)
    return tables, learner, behaviors[1]


@pytest.mark.parametrize(
    ("registry", "fn", "algorithm", "convention", "step_size"),
    [("flash_reinforce", mutants.flash_reinforce, "flash_reinforce", "flashsim", 0.2),
     ("grpo", mutants.verl_grpo_policy_loss, "grpo", "verl", 0.3),
     ("flash_reinforce", mutants.trl_flash_per_token, "flash_reinforce", "trl", 0.2)],
    ids=["flashsim", "verl", "trl"],
)
def test_a_correct_user_loss_measures_exactly_as_the_registry_loss(registry, fn, algorithm, convention, step_size):
    tables, learner, behavior = lagged(step_size)
    common = dict(budget=8, num_batches=40, seed=3, bootstrap=0, behavior_policy=behavior)
    expected = measure_gradient(tables, learner, estimator=registry, **common)
    assert 0 < expected.acceptance_rate < 1 or 0 < expected.clip_fraction < 1  # the trust region acts
    got = measure_gradient(tables, learner, estimator=fn, algorithm=algorithm, convention=convention, **common)
    torch.testing.assert_close(got.mean_gradient, expected.mean_gradient, rtol=1e-10, atol=1e-13)
    assert got.variance == pytest.approx(expected.variance, rel=1e-10)
    assert got.estimator.endswith(fn.__name__) and got.group_size == expected.group_size


def test_a_mutant_measures_differently():
    tables, learner, behavior = lagged()
    common = dict(budget=8, num_batches=40, seed=3, bootstrap=0, behavior_policy=behavior)
    correct = measure_gradient(tables, learner, estimator=mutants.flash_reinforce, **common)
    buggy = measure_gradient(tables, learner, estimator=mutants.leave_one_out, **common)
    assert buggy.variance > correct.variance  # B/(B−1)-scaled advantages: more variance


def test_registry_loss_options_with_a_function_raise():
    tables, learner, _ = lagged()
    with pytest.raises(ValueError, match="registry losses only"):
        measure_gradient(tables, learner, estimator=mutants.flash_reinforce, budget=8, num_batches=4, seed=0,
                         clip_eps=0.3)


def test_flashsim_variance_measures_a_loss_given_as_module_function(tmp_path, capsys):
    code = main(["variance", "--env", "bandit_tiny", "--estimators", "flash_reinforce", "--lags", "0,1",
                 "--budget", "8", "--batches", "20", "--steps", "2", "--bootstrap", "0", "--quiet",
                 "--loss", "tests.testing.mutants:flash_reinforce", "--out", str(tmp_path)])
    assert code == 0, capsys.readouterr().err
    rows = list(csv.DictReader((tmp_path / "variance.csv").open()))
    mine = {r["config/lag"]: r for r in rows if r["config/label"] == "tests.testing.mutants:flash_reinforce"}
    registry = {r["config/lag"]: r for r in rows if r["config/label"] == "flash_reinforce"}
    assert set(mine) == {"0", "1"}
    for lag in mine:
        assert float(mine[lag]["grad/variance"]) == pytest.approx(float(registry[lag]["grad/variance"]), rel=1e-9)
    recorded = json.loads((tmp_path / "config.json").read_text())  # SweepConfig fields, like every flag
    assert recorded["losses"] == ["tests.testing.mutants:flash_reinforce"]
    assert (recorded["loss_algorithm"], recorded["loss_convention"]) == ("flash_reinforce", "flashsim")


def test_flashsim_variance_names_an_unknown_loss_convention(tmp_path, capsys):
    code = main(["variance", "--env", "bandit_tiny", "--loss", "tests.testing.mutants:flash_reinforce",
                 "--loss-convention", "pytorch", "--out", str(tmp_path)])
    message = "loss_convention must be one of 'flashsim', 'verl', 'trl'; got 'pytorch'"
    assert code == 2 and message in capsys.readouterr().err


def test_flashsim_variance_reports_an_unimportable_loss(tmp_path, capsys):
    code = main(["variance", "--env", "bandit_tiny", "--lags", "0", "--batches", "4", "--steps", "1",
                 "--loss", "no_such_module:fn", "--out", str(tmp_path)])
    assert code == 2 and "no_such_module" in capsys.readouterr().err
