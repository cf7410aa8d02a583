"""The negative-token entropy filter in the simulator: the learner hands the loss entropies and failures."""

import math

import torch
from torch.testing import assert_close

from flashsim.losses import LOSSES
from flashsim.sim import AlgorithmConfig, Simulation, TrainConfig


def run(loss: str, **options) -> list[dict]:
    config = TrainConfig(env="gridworld", algorithm=AlgorithmConfig(loss, loss_options=options), updates=8, seed=3)
    simulation = Simulation(config)
    return [simulation.step() for _ in range(8)]


def test_the_entropy_filter_drops_tokens_of_failed_trajectories_in_the_simulator():
    rows = run("entropy_filter")
    assert all(row["trust/token_acceptance_rate"] < 1 for row in rows)
    assert "entropy_filter" in LOSSES


def test_the_learner_passes_the_policy_entropy_of_each_token_and_reward_le_zero_as_failure():
    simulation = Simulation(TrainConfig(env="gridworld", algorithm=AlgorithmConfig("entropy_filter"), seed=0))
    loss_fn, seen = simulation.learner.loss_fn, {}

    def spy(log_probs, behavior_log_probs, rewards, action_mask, group_ids, **options):
        seen.update(options, rewards=rewards, shape=log_probs.shape)
        return loss_fn(log_probs, behavior_log_probs, rewards, action_mask, group_ids, **options)

    spy.compute_advantages = loss_fn.compute_advantages
    simulation.learner.loss_fn = spy
    simulation.step()
    # Every policy starts uniform, so the first update's entropies are log A on every token.
    num_actions = simulation.tables.num_actions
    assert seen["entropies"].shape == seen["shape"]
    assert_close(seen["entropies"], torch.full(seen["shape"], math.log(num_actions), dtype=seen["entropies"].dtype))
    assert torch.equal(seen["failures"], seen["rewards"] <= 0) and bool(seen["failures"].any())


def test_with_q_of_one_the_entropy_filter_run_is_the_flash_reinforce_run():
    assert str(run("entropy_filter", negative_token_fraction=1.0)) == str(run("flash_reinforce"))
