"""Bad arguments raise clear errors that name the argument."""

import pytest
import torch

import toy_envs
from flashsim.policies import TabularPolicy
from flashsim.variance import measure_gradient
from flashsim.variance.lag import lagged_policies
from tests.variance.conftest import random_tabular


def call(tables, policy, **overrides):
    arguments = dict(estimator="flash_reinforce", budget=8, num_batches=4, seed=0, bootstrap=0)
    arguments.update(overrides)
    return measure_gradient(tables, policy, **arguments)


CASES = [
    ("budget_not_divisible_by_group_size", dict(estimator="grpo", budget=10, group_size=4), ValueError, "divisible"),
    ("grouped_rloo_budget_not_divisible", dict(estimator="rloo", grouped=True, budget=6), ValueError, "group_size"),
    ("unknown_estimator", dict(estimator="reinforce++"), ValueError, "flash_reinforce"),
    ("num_batches_not_multiple_of_replicates", dict(num_batches=5), ValueError, "replicates"),
    ("single_replicate", dict(replicates=1), ValueError, "replicates"),
    ("too_few_batches", dict(num_batches=2), ValueError, "num_batches"),
    ("zero_budget", dict(budget=0), ValueError, "budget"),
    ("float_budget", dict(budget=8.0), TypeError, "budget"),
    ("negative_seed", dict(seed=-1), ValueError, "seed"),
    ("bad_confidence", dict(confidence=1.5), ValueError, "confidence"),
    ("bad_method", dict(method="slow"), ValueError, "method"),
    ("keep_directions_not_a_bool", dict(keep_directions=1), TypeError, "keep_directions"),
    ("reserved_loss_option", dict(advantages=torch.zeros(8)), ValueError, "advantages"),
    ("bad_loss_option_value", dict(delta=-1.0), ValueError, "delta"),
]


@pytest.mark.parametrize(("overrides", "error", "match"), [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_bad_arguments_raise_clear_errors(bandit, bandit_policy, overrides, error, match):
    with pytest.raises(error, match=match):
        call(bandit, bandit_policy, **overrides)


def test_policy_and_env_shape_mismatch_is_an_error(bandit):
    wrong = TabularPolicy(torch.zeros(5, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match="observations"):
        call(bandit, wrong)


def test_behavior_policy_shape_mismatch_is_an_error(bandit, bandit_policy):
    wrong = TabularPolicy(torch.zeros(3, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match="behavior_policy"):
        call(bandit, bandit_policy, behavior_policy=wrong)


def test_a_non_policy_is_a_type_error(bandit):
    with pytest.raises(TypeError, match="policy"):
        call(bandit, torch.zeros(3, 3))


def test_an_env_without_tables_is_a_type_error(bandit_policy):
    with pytest.raises(TypeError, match="env"):
        call(object(), bandit_policy)


def test_a_gymnasium_env_is_accepted():
    import gymnasium as gym

    env = gym.make("toy_envs/ReasoningChain-v0")
    policy = random_tabular(env.unwrapped.tables(), seed=0)
    report = call(env, policy)
    assert report.mean_length >= 1


def test_lags_beyond_the_trajectory_are_an_error(bandit, bandit_policy):
    with pytest.raises(ValueError, match="lags"):
        lagged_policies(bandit, bandit_policy, steps=4, lags=[0, 8], step_size=0.2)


def test_tiny_bandit_preset_runs():
    tables = toy_envs.PromptBandit(**toy_envs.bandit_preset("tiny")).tables()
    policy = random_tabular(tables, seed=0)
    assert call(tables, policy).variance > 0
