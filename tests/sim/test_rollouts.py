"""Batched rollouts from the env tables: a plain loop, the exact expectations, stored log-probs, durations."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from flashsim import exact
from flashsim.policies import TabularPolicy
from flashsim.sim.config import TimingModel
from flashsim.sim.envs import build_tables
from flashsim.sim.rollouts import TableSampler
from flashsim.sim.snapshots import Snapshot, SnapshotStore

ENV_NAMES = ("bandit", "gridworld", "chain")


def random_policy(tables, seed: int) -> TabularPolicy:
    generator = torch.Generator().manual_seed(seed)
    shape = (tables.num_observations, tables.num_actions)
    return TabularPolicy(torch.randn(shape, generator=generator, dtype=torch.float64))


def loop_sample(tables, snapshot, prompts, seed):
    """One trajectory at a time, with the sampler's documented draws: start uniforms [B], then [2, B, H]."""
    rng = np.random.default_rng(seed)
    B, H = len(prompts), tables.horizon
    start_u = rng.random(B)
    uniforms = rng.random((2, B, H))
    results = []
    for i, prompt in enumerate(prompts):
        state = int(np.searchsorted(np.cumsum(tables.initial_distribution[prompt]), start_u[i], side="left"))
        observations, actions, log_probs, reward, tools, ended = [], [], [], 0.0, 0, False
        for t in range(H):
            obs = int(tables.observation_of_state[state])
            action = int(np.searchsorted(snapshot.cumulative[obs], uniforms[0, i, t], side="left"))
            observations.append(obs), actions.append(action), log_probs.append(snapshot.log_probs[obs, action])
            reward += float(uniforms[1, i, t] < tables.reward[state, action])
            tools += int(tables.tool_call[state, action] > 0.5)
            state = int(tables.next_state[state, action])
            if state < 0:
                ended = True
                break
        results.append((observations, actions, log_probs, reward, tools, not ended))
    return results


@pytest.mark.parametrize("env", ENV_NAMES)
def test_batched_sampling_equals_a_plain_loop_over_trajectories(env):
    tables = build_tables(env)
    snapshot = Snapshot.of_policy(random_policy(tables, 1), 0)
    prompts = np.resize(tables.train_prompts, 40)
    sampler = TableSampler(tables, TimingModel())
    batch = sampler.sample(snapshot, prompts, np.random.default_rng(7))
    for i, (observations, actions, log_probs, reward, tools, truncated) in enumerate(
        loop_sample(tables, snapshot, prompts, 7)
    ):
        T = len(actions)
        assert batch.lengths[i] == T
        assert batch.observations[i, :T].tolist() == observations and batch.actions[i, :T].tolist() == actions
        assert batch.behavior_log_probs[i, :T].tolist() == log_probs
        assert (batch.behavior_log_probs[i, T:] == 0).all() and (batch.actions[i, T:] == 0).all()
        assert batch.rewards[i] == reward and batch.tool_calls[i] == tools and batch.truncated[i] == truncated


@pytest.mark.parametrize("env", ENV_NAMES)
def test_sample_means_agree_with_the_exact_expectations(env):
    tables = build_tables(env)
    policy = random_policy(tables, 3)
    per_prompt = 4000 // tables.train_prompts.size + 1
    prompts = np.repeat(tables.train_prompts, per_prompt)
    batch = TableSampler(tables, TimingModel()).sample(Snapshot.of_policy(policy, 0), prompts, np.random.default_rng(0))
    expected = exact.evaluate(tables, policy, "train")
    for sampled, key in (
        (batch.rewards, "env/success"),
        (batch.lengths, "env/expected_length"),
        (batch.tool_calls, "env/expected_tool_calls"),
        (batch.truncated, "env/truncation_probability"),
    ):
        sampled = np.asarray(sampled, dtype=np.float64)
        standard_error = sampled.std() / np.sqrt(sampled.size) + 1e-6  # floor: rare events never sampled
        assert abs(sampled.mean() - expected[key].item()) < 5 * standard_error, key


def test_durations_are_steps_times_step_time_without_jitter_or_tools():
    tables = build_tables("chain")
    sampler = TableSampler(tables, TimingModel(step_time=2.5, step_sigma=0.0, tool_latency=0.0))
    batch = sampler.sample(Snapshot.of_policy(random_policy(tables, 0), 0), np.resize(tables.train_prompts, 64),
                           np.random.default_rng(0))
    np.testing.assert_allclose(batch.durations, 2.5 * batch.lengths)


def test_tool_calls_add_lognormal_latency_to_the_duration():
    tables = build_tables("gridworld")
    sampler = TableSampler(tables, TimingModel(step_time=1.0, tool_latency=5.0, tool_sigma=1.0))
    batch = sampler.sample(Snapshot.of_policy(random_policy(tables, 0), 0), np.resize(tables.train_prompts, 512),
                           np.random.default_rng(0))
    with_tools = batch.tool_calls > 0
    assert with_tools.any() and (~with_tools).any()
    np.testing.assert_allclose(batch.durations[~with_tools], batch.lengths[~with_tools])
    assert (batch.durations[with_tools] > batch.lengths[with_tools]).all()


def test_logprob_noise_perturbs_only_the_stored_policy_tokens_and_keeps_them_log_probabilities():
    tables = build_tables("chain")
    snapshot = Snapshot.of_policy(random_policy(tables, 0), 0)
    prompts = np.resize(tables.train_prompts, 64)
    clean = TableSampler(tables, TimingModel()).sample(snapshot, prompts, np.random.default_rng(5))
    noisy = TableSampler(tables, TimingModel(), logprob_noise=0.1).sample(snapshot, prompts, np.random.default_rng(5))
    mask = np.arange(tables.horizon) < clean.lengths[:, None]
    np.testing.assert_array_equal(noisy.actions, clean.actions)
    assert (noisy.behavior_log_probs[~mask] == 0).all() and (noisy.behavior_log_probs <= 0).all()
    assert np.abs(noisy.behavior_log_probs - clean.behavior_log_probs)[mask].mean() > 0.01


def test_snapshot_store_keeps_the_last_versions_and_maps_negative_versions_to_the_first():
    tables = build_tables("bandit_tiny")
    store = SnapshotStore(keep=3)
    for version in range(5):
        store.publish(Snapshot.of_policy(random_policy(tables, version), version))
    assert store.oldest == 2 and store.latest.version == 4
    with pytest.raises(KeyError, match="keep"):
        store.get(1)
    with pytest.raises(ValueError, match="in order"):
        store.publish(Snapshot.of_policy(random_policy(tables, 9), 9))
    first = SnapshotStore(keep=2)
    first.publish(Snapshot.of_policy(random_policy(tables, 0), 0))
    assert first.get(-3).version == 0


def test_snapshot_log_probs_are_the_policys_own_log_softmax_bit_for_bit():
    tables = build_tables("gridworld")
    policy = random_policy(tables, 2)
    snapshot = Snapshot.of_policy(policy, 0)
    expected = torch.log_softmax(policy.all_logits(), dim=-1).detach().numpy()
    np.testing.assert_array_equal(snapshot.log_probs, expected)
    assert (snapshot.cumulative[:, -1] == 1.0).all() and not snapshot.log_probs.flags.writeable
