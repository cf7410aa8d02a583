"""The batch sampler: designs as in training, and rollouts (through the toy envs' core) as the exact tables say."""

import numpy as np
import pytest
import torch

import toy_envs
from flashsim.exact import evaluate, to_torch
from flashsim.sim.config import make_env
from flashsim.sim.rollouts import Sampler, Snapshot
from flashsim.variance.gradients import behavior_snapshot, log_prob_table
from flashsim.variance.sampling import batch_uniforms, draw_design, draw_uniforms, simulate
from tests.variance.conftest import random_tabular


def test_grouped_design_repeats_each_prompt_g_times_and_replicates_share_prompts(gridworld):
    tables = to_torch(gridworld)
    design = draw_design(
        tables, num_batches=6, budget=8, group_size=4, replicates=3, generator=torch.Generator().manual_seed(0)
    )
    assert design.prompts.shape == (6, 8) and design.prompts_per_batch == 2
    assert torch.equal(design.group_ids, torch.tensor([0, 0, 0, 0, 1, 1, 1, 1]))
    assert torch.equal(design.prompts[:, :4], design.prompts[:, :1].expand(6, 4))
    assert torch.equal(design.prompts[0], design.prompts[2]) and torch.equal(design.prompts[3], design.prompts[5])
    assert set(design.prompts.unique().tolist()) <= set(gridworld.train_prompts.tolist())


def test_prompts_are_uniform_with_replacement_over_the_train_prompts(bandit):
    tables = to_torch(bandit)
    design = draw_design(
        tables, num_batches=2000, budget=4, group_size=1, replicates=2, generator=torch.Generator().manual_seed(1)
    )
    counts = torch.bincount(design.prompts[::2].reshape(-1), minlength=3).to(torch.float64)
    assert counts.sum() == 4000
    assert torch.allclose(counts / 4000, torch.full((3,), 1 / 3, dtype=torch.float64), atol=0.03)
    repeats = [len(set(row.tolist())) < 4 for row in design.prompts[::2]]
    assert any(repeats)  # with replacement: a batch of 4 over 3 prompts always repeats one


def test_rollouts_match_the_exact_success_length_and_truncation_of_each_prompt(gridworld):
    policy = random_tabular(gridworld, seed=0, scale=0.5)
    prompts = torch.tensor(np.array(gridworld.train_prompts)).repeat_interleave(4000)[None, :]
    uniforms = draw_uniforms(prompts.numel(), gridworld.horizon, torch.Generator().manual_seed(2))
    rollouts = simulate(toy_envs.TabularDynamics(gridworld), behavior_snapshot(policy), prompts, uniforms)
    exact = evaluate(gridworld, policy)
    rewards = rollouts.rewards.view(-1, 4000).mean(dim=1)
    lengths = rollouts.lengths.to(torch.float64).view(-1, 4000).mean(dim=1)
    truncated = ((rollouts.lengths == gridworld.horizon).view(-1, 4000)).to(torch.float64).mean(dim=1)
    torch.testing.assert_close(rewards, exact["env/success_per_prompt"], atol=0.03, rtol=0)
    torch.testing.assert_close(lengths, exact["env/expected_length_per_prompt"], atol=0.3, rtol=0)
    # Reaching the goal on the very last step also has length H, so truncation is at most that fraction.
    assert bool((exact["env/truncation_probability_per_prompt"] <= truncated + 0.03).all())


def test_rollouts_store_behaviour_log_probs_and_mask_padding(gridworld):
    policy = random_tabular(gridworld, seed=1)
    prompts = torch.tensor(np.array(gridworld.train_prompts))[None, :].repeat(3, 1)
    uniforms = draw_uniforms(prompts.numel(), gridworld.horizon, torch.Generator().manual_seed(3))
    rollouts = simulate(toy_envs.TabularDynamics(gridworld), behavior_snapshot(policy), prompts, uniforms)
    mask = rollouts.action_mask
    assert torch.equal(mask.sum(dim=-1), rollouts.lengths) and rollouts.lengths.min() >= 1
    expected = log_prob_table(policy)[rollouts.observations, rollouts.actions]
    torch.testing.assert_close(rollouts.behavior_log_probs[mask], expected[mask])
    assert bool((rollouts.behavior_log_probs[~mask] == 0).all())


def test_a_batch_simulated_alone_equals_its_rows_of_the_chunk(gridworld):
    policy = random_tabular(gridworld, seed=2)
    prompts = torch.tensor(np.array(gridworld.train_prompts))[None, :].repeat(4, 1)
    uniforms = draw_uniforms(prompts.numel(), gridworld.horizon, torch.Generator().manual_seed(4))
    chunk = simulate(toy_envs.TabularDynamics(gridworld), behavior_snapshot(policy), prompts, uniforms)
    own = batch_uniforms(uniforms, 2, prompts.shape[1])
    alone = simulate(toy_envs.TabularDynamics(gridworld), behavior_snapshot(policy), prompts[2:3], own)
    width = alone.observations.shape[-1]
    assert torch.equal(alone.rewards[0], chunk.rewards[2]) and torch.equal(alone.lengths[0], chunk.lengths[2])
    assert torch.equal(alone.actions[0], chunk.actions[2, :, :width])
    assert not chunk.action_mask[2, :, width:].any()


def test_the_sampler_steps_the_same_core_as_the_gymnasium_env(gridworld):
    """Trajectory n with key k equals the single env's episode drawn with that key and the same actions."""
    policy = random_tabular(gridworld, seed=5)
    prompts = torch.tensor(np.array(gridworld.train_prompts))[None, :]
    uniforms = draw_uniforms(prompts.numel(), gridworld.horizon, torch.Generator().manual_seed(6))
    rollouts = simulate(toy_envs.TabularDynamics(gridworld), behavior_snapshot(policy), prompts, uniforms)
    dynamics, keys = toy_envs.TabularDynamics(gridworld), uniforms[0].numpy().view(np.uint64)
    for n in range(prompts.shape[1]):
        _, state = dynamics.reset(keys[n : n + 1], prompts[0, n : n + 1].numpy())
        total = 0.0
        for t in range(int(rollouts.lengths[0, n])):
            action = rollouts.actions[0, n, t : t + 1].numpy()
            step = dynamics.step(state, action, np.array([t]), keys[n : n + 1])
            total, state = total + float(step.reward[0]), step.state
        assert total == float(rollouts.rewards[0, n]) and (step.terminated[0] or step.truncated[0])


def test_the_variance_sampler_and_the_simulator_roll_out_the_same_trajectories_from_the_same_draws():
    """One rollout loop: the simulator's sub-env keys and action uniforms, given to the variance sampler."""
    sim_env = make_env("gridworld", 24)
    tables = sim_env.tables
    policy = random_tabular(tables, seed=7)
    prompts = np.resize(tables.train_prompts, 20)
    rows = Sampler(sim_env).sample(Snapshot.of_policy(policy, 0), prompts, np.random.default_rng(8))
    rng = np.random.default_rng(8)  # the sampler's draws: a seed per sub-env, then the [H, n] uniforms
    seeds = rng.integers(0, 2**63, size=24)[:20]
    keys = toy_envs.core.episode_keys(toy_envs.core.seed_keys(seeds), np.zeros(20, np.int64))
    uniforms = (torch.from_numpy(keys.view(np.int64)), torch.from_numpy(rng.random((tables.horizon, 20))))
    rollouts = simulate(toy_envs.TabularDynamics(tables), behavior_snapshot(policy), torch.from_numpy(prompts)[None],
                        uniforms)
    T = rollouts.observations.shape[-1]
    assert T == rows.lengths.max() and (rows.lengths < tables.horizon).any()
    np.testing.assert_array_equal(rollouts.lengths[0].numpy(), rows.lengths)
    np.testing.assert_array_equal(rollouts.rewards[0].numpy(), rows.rewards)
    np.testing.assert_array_equal(rollouts.observations[0].numpy(), rows.observations[:, :T])
    np.testing.assert_array_equal(rollouts.actions[0].numpy(), rows.actions[:, :T])
    np.testing.assert_array_equal(rollouts.behavior_log_probs[0].numpy(), rows.behavior_log_probs[:, :T])


@pytest.mark.parametrize("seed", [0, 1])
def test_bernoulli_rewards_are_sampled_not_their_means(bandit, seed):
    policy = random_tabular(bandit, seed=seed)
    prompts = torch.zeros(1, 500, dtype=torch.int64)
    uniforms = draw_uniforms(500, 1, torch.Generator().manual_seed(seed))
    rollouts = simulate(toy_envs.TabularDynamics(bandit), behavior_snapshot(policy), prompts, uniforms)
    assert set(rollouts.rewards.unique().tolist()) == {0.0, 1.0}
