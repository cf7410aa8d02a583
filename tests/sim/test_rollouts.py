"""Batched collection from gymnasium vector envs: a loop of single envs, exact expectations, log-probs, durations."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from flashsim import exact
from flashsim.policies import TabularPolicy
from flashsim.sim.config import ENVS, TimingModel, build_tables, make_env
from flashsim.sim.rollouts import Sampler, Snapshot, SnapshotStore

ENV_NAMES = ("bandit", "gridworld", "chain")


def random_policy(tables, seed: int) -> TabularPolicy:
    generator = torch.Generator().manual_seed(seed)
    shape = (tables.num_observations, tables.num_actions)
    return TabularPolicy(torch.randn(shape, generator=generator, dtype=torch.float64))


def loop_sample(env_id, options, snapshot, prompts, num_envs, seed):
    """One single gymnasium env at a time, with the collector's documented draws: seeds [N], then [H, B]."""
    rng = np.random.default_rng(seed)
    seeds = rng.integers(0, 2**63, size=num_envs)
    env = gym.make(env_id, **options)
    uniforms = rng.random((env.unwrapped.tables().horizon, len(prompts)))
    results = []
    for i, prompt in enumerate(prompts):
        obs, _ = env.reset(seed=int(seeds[i]), options={"prompt": int(prompt)})
        observations, actions, log_probs, reward, tools, duration = [], [], [], 0.0, 0, 0.0
        for t in range(uniforms.shape[0]):
            action = int(np.searchsorted(snapshot.cumulative[obs], uniforms[t, i], side="left"))
            observations.append(obs), actions.append(action), log_probs.append(snapshot.log_probs[obs, action])
            obs, r, terminated, truncated, info = env.step(action)
            reward, tools, duration = reward + r, tools + info["tool_call"], duration + info["duration"]
            if terminated or truncated:
                break
        results.append((observations, actions, log_probs, reward, tools, truncated and not terminated, duration))
    return results


@pytest.mark.parametrize("env", ENV_NAMES)
def test_collected_trajectories_equal_a_loop_of_single_gymnasium_envs(env):
    sim_env = make_env(env, 48)
    tables = sim_env.tables
    snapshot = Snapshot.of_policy(random_policy(tables, 1), 0)
    prompts = np.resize(tables.train_prompts, 40)
    batch = Sampler(sim_env).sample(snapshot, prompts, np.random.default_rng(7))
    preset = ENVS[env]
    for i, (observations, actions, log_probs, reward, tools, truncated, duration) in enumerate(
        loop_sample(preset.env_id, preset.options, snapshot, prompts, 48, 7)
    ):
        T = len(actions)
        assert batch.lengths[i] == T
        assert batch.observations[i, :T].tolist() == observations and batch.actions[i, :T].tolist() == actions
        assert batch.behavior_log_probs[i, :T].tolist() == log_probs
        assert (batch.behavior_log_probs[i, T:] == 0).all() and (batch.actions[i, T:] == 0).all()
        assert batch.rewards[i] == reward and batch.tool_calls[i] == tools and batch.truncated[i] == truncated
        assert batch.durations[i] == pytest.approx(duration, rel=1e-12)


@pytest.mark.parametrize("env", (*ENV_NAMES, "FrozenLake-v1"))
def test_sample_means_agree_with_the_exact_expectations(env):
    episodes = 1000 if env == "FrozenLake-v1" else 4000  # gymnasium's FrozenLake steps in Python
    sim_env = make_env(env, episodes)
    tables = sim_env.tables
    policy = random_policy(tables, 3)
    prompts = np.resize(tables.train_prompts, episodes)
    batch = Sampler(sim_env).sample(Snapshot.of_policy(policy, 0), prompts, np.random.default_rng(0))
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


def test_durations_are_steps_times_step_duration_without_jitter_or_tools():
    sim_env = make_env("chain", 64, timing=TimingModel(step_duration=2.5, step_duration_sigma=0.0, tool_latency=0.0))
    tables = sim_env.tables
    batch = Sampler(sim_env).sample(Snapshot.of_policy(random_policy(tables, 0), 0),
                                      np.resize(tables.train_prompts, 64), np.random.default_rng(0))
    np.testing.assert_allclose(batch.durations, 2.5 * batch.lengths)


def test_tool_calls_add_lognormal_latency_to_the_duration():
    sim_env = make_env("gridworld", 512)
    tables = sim_env.tables
    batch = Sampler(sim_env).sample(Snapshot.of_policy(random_policy(tables, 0), 0),
                                      np.resize(tables.train_prompts, 512), np.random.default_rng(0))
    with_tools = batch.tool_calls > 0
    assert with_tools.any() and (~with_tools).any()
    np.testing.assert_allclose(batch.durations[~with_tools], batch.lengths[~with_tools])
    assert (batch.durations[with_tools] > batch.lengths[with_tools]).all()


def test_the_gridworld_preset_timing_is_read_from_the_env_latency():
    timing = ENVS["gridworld"].timing
    assert (timing.step_duration, timing.tool_latency, timing.tool_latency_sigma) == (1.0, 5.0, 1.0)


def test_logprob_noise_perturbs_only_the_stored_policy_tokens_and_keeps_them_log_probabilities():
    sim_env = make_env("chain", 64)
    tables = sim_env.tables
    snapshot = Snapshot.of_policy(random_policy(tables, 0), 0)
    prompts = np.resize(tables.train_prompts, 64)
    clean = Sampler(sim_env).sample(snapshot, prompts, np.random.default_rng(5))
    noisy = Sampler(sim_env, logprob_noise=0.1).sample(snapshot, prompts, np.random.default_rng(5))
    mask = np.arange(tables.horizon) < clean.lengths[:, None]
    np.testing.assert_array_equal(noisy.actions, clean.actions)
    assert (noisy.behavior_log_probs[~mask] == 0).all() and (noisy.behavior_log_probs <= 0).all()
    assert np.abs(noisy.behavior_log_probs - clean.behavior_log_probs)[mask].mean() > 0.01


def test_a_continuous_env_is_refused_with_the_missing_space_named():
    with pytest.raises(ValueError, match=r"CartPole-v1 cannot run.*observation space is Box.*needs Discrete"):
        make_env("CartPole-v1", 4)


def test_an_unknown_env_lists_the_presets():
    with pytest.raises(ValueError, match="presets bandit"):
        make_env("NoSuchEnv-v0", 4)


def test_an_env_without_tables_collects_its_own_returns():
    sim_env = make_env("Taxi-v4", 8)  # a P table with rewards outside [0, 1]: no exact tables
    assert sim_env.tables is None and sim_env.horizon == 200 and not sim_env.pins_prompts
    policy = TabularPolicy(torch.zeros(sim_env.num_observations, sim_env.num_actions, dtype=torch.float64))
    batch = Sampler(sim_env).sample(Snapshot.of_policy(policy, 0), np.zeros(8, np.int64), np.random.default_rng(0))
    assert (batch.lengths >= 1).all() and (batch.rewards < 0).any()
    assert (batch.durations == batch.lengths).all()  # no info["duration"]: step_duration 1 per step


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
    with pytest.raises(ValueError, match="keep must be an int >= 1"):
        SnapshotStore(keep=0)
    with pytest.raises(TypeError, match="keep must be an int"):
        SnapshotStore(keep=2.0)


def test_snapshot_log_probs_are_the_policys_own_log_softmax_bit_for_bit():
    tables = build_tables("gridworld")
    policy = random_policy(tables, 2)
    snapshot = Snapshot.of_policy(policy, 0)
    expected = torch.log_softmax(policy.all_logits(), dim=-1).detach().numpy()
    np.testing.assert_array_equal(snapshot.log_probs, expected)
    assert (snapshot.cumulative[:, -1] == 1.0).all() and not snapshot.log_probs.flags.writeable
