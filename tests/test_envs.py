"""Specs of the toy envs: gymnasium contracts, determinism, vector == loop of singles, bad configs."""

from __future__ import annotations

import doctest
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import toy_envs
from toy_envs import core, prompt_bandit, reasoning_chain, tables, tool_gridworld
from toy_envs.tool_gridworld import DOWN, LEFT, RIGHT, TOOL, UP

NUM_STEPS = 60
NUM_ENVS = 6


def random_actions(num_actions: int, shape: tuple[int, ...], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, num_actions, size=shape)


def single_rollout(env: gym.Env, seed: int, actions: np.ndarray) -> list[tuple]:
    """Run ``actions`` through one env with NEXT_STEP autoreset done by hand, as a vector env would."""
    observation, info = env.reset(seed=seed)
    records, needs_reset = [("reset", observation, info["prompt"])], False
    for action in actions:
        if needs_reset:
            observation, info = env.reset()
            records.append((observation, 0.0, False, False, info["prompt"], 0, False, 0.0))
            needs_reset = False
            continue
        observation, reward, terminated, truncated, info = env.step(int(action))
        records.append(
            (
                observation,
                reward,
                terminated,
                truncated,
                info["prompt"],
                info["length"],
                info["tool_call"],
                info["duration"],
            )
        )
        needs_reset = terminated or truncated
    return records


def vector_rollout(envs: gym.vector.VectorEnv, seed: int, actions: np.ndarray) -> list[list[tuple]]:
    """The same records as :func:`single_rollout`, one list per sub-env."""
    observations, info = envs.reset(seed=seed)
    records = [[("reset", observations[i], info["prompt"][i])] for i in range(envs.num_envs)]
    for step_actions in actions:
        observations, rewards, terminated, truncated, info = envs.step(step_actions)
        for i in range(envs.num_envs):
            records[i].append(
                (
                    observations[i],
                    rewards[i],
                    terminated[i],
                    truncated[i],
                    info["prompt"][i],
                    info["length"][i],
                    info["tool_call"][i],
                    info["duration"][i],
                )
            )
    return records


@pytest.mark.parametrize("env_id", toy_envs.ENV_IDS)
def test_every_registered_env_passes_the_gymnasium_checker(env_id):
    env = gym.make(env_id)
    check_env(env.unwrapped, skip_render_check=True)
    assert isinstance(env.unwrapped.tables(), toy_envs.MDPTables)


@pytest.mark.parametrize("env_id", toy_envs.ENV_IDS)
def test_the_same_seed_gives_identical_single_env_rollouts(env_id):
    env = gym.make(env_id)
    actions = random_actions(env.action_space.n, (NUM_STEPS,), seed=1)
    first, second = single_rollout(env, 7, actions), single_rollout(env, 7, actions)
    assert first == second
    assert single_rollout(env, 8, actions) != first


@pytest.mark.parametrize("env_id", toy_envs.ENV_IDS)
def test_the_same_seed_gives_identical_vector_env_rollouts(env_id):
    envs = gym.make_vec(env_id, num_envs=NUM_ENVS)
    actions = random_actions(envs.single_action_space.n, (NUM_STEPS, NUM_ENVS), seed=1)
    assert vector_rollout(envs, 3, actions) == vector_rollout(envs, 3, actions)
    assert vector_rollout(envs, 4, actions) != vector_rollout(envs, 3, actions)


@pytest.mark.parametrize("env_id", toy_envs.ENV_IDS)
def test_the_vector_env_equals_a_loop_of_single_envs_seeded_seed_plus_index(env_id):
    envs = gym.make_vec(env_id, num_envs=NUM_ENVS)
    env = gym.make(env_id)
    actions = random_actions(envs.single_action_space.n, (NUM_STEPS, NUM_ENVS), seed=2)
    vector = vector_rollout(envs, 10, actions)
    for i in range(NUM_ENVS):
        single = single_rollout(env, 10 + i, actions[:, i])
        assert len(single) == len(vector[i])
        for expected, got in zip(single, vector[i]):
            assert expected == pytest.approx(got)


def test_make_vec_uses_the_native_vector_env_with_next_step_autoreset():
    envs = gym.make_vec("toy_envs/ToolGridworld-v0", num_envs=4)
    assert isinstance(envs, toy_envs.ToolGridworldVectorEnv)
    assert envs.metadata["autoreset_mode"] == gym.vector.AutoresetMode.NEXT_STEP


def test_a_pinned_prompt_is_used_by_single_and_vector_envs_including_heldout_ones():
    env = toy_envs.PromptBandit()
    heldout = int(env.tables().heldout_prompts[0])
    observation, info = env.reset(seed=0, options={"prompt": heldout})
    assert info["prompt"] == heldout == observation
    envs = toy_envs.PromptBanditVectorEnv(num_envs=3)
    _, info = envs.reset(seed=0, options={"prompt": np.array([heldout, 1, 2])})
    np.testing.assert_array_equal(info["prompt"], [heldout, 1, 2])
    _, info = envs.reset(options={"prompt": 5})
    np.testing.assert_array_equal(info["prompt"], [5, 5, 5])


def test_unpinned_prompts_are_drawn_only_from_the_train_prompts():
    envs = toy_envs.PromptBanditVectorEnv(num_envs=2000)
    _, info = envs.reset(seed=0)
    train = envs.tables().train_prompts
    assert np.isin(info["prompt"], train).all()
    assert np.unique(info["prompt"]).size == train.size


def test_reset_mask_resets_only_the_masked_envs():
    envs = toy_envs.ReasoningChainVectorEnv(num_envs=3)
    envs.reset(seed=0)
    envs.step(np.zeros(3, dtype=np.int64))  # think: length 1 everywhere
    _, info = envs.reset(options={"reset_mask": np.array([True, False, True]), "prompt": np.array([1, 9, 2])})
    np.testing.assert_array_equal(info["length"], [0, 1, 0])
    np.testing.assert_array_equal(info["prompt"][[0, 2]], [1, 2])


def test_an_ended_vector_env_ignores_its_next_action_and_resets():
    envs = toy_envs.PromptBanditVectorEnv(num_envs=2, **toy_envs.bandit_preset("tiny"))
    envs.reset(seed=0)
    _, _, terminated, _, _ = envs.step(np.array([0, 1]))
    assert terminated.all()
    observations, rewards, terminated, truncated, info = envs.step(np.array([0, 1]))
    np.testing.assert_array_equal(rewards, 0.0)
    assert not terminated.any() and not truncated.any()
    np.testing.assert_array_equal(info["length"], 0)
    np.testing.assert_array_equal(info["duration"], 0.0)


def test_gridworld_moves_bump_into_walls_and_the_tool_reveals_the_goal():
    env = toy_envs.ToolGridworld(candidates=[[0, 24]], goal_probs=[[0.0, 1.0]], heldout_fraction=0.0)
    observation, _ = env.reset(seed=0)
    C, K = 25, 2
    assert observation == (0 * (K + 1) + K) * C + 12  # prompt 0, goal unknown, centre cell
    for action, cell in [(UP, 7), (UP, 2), (UP, 2), (LEFT, 1), (RIGHT, 2), (DOWN, 7)]:
        observation, reward, terminated, _, info = env.step(action)
        assert (observation % C, reward, terminated, info["tool_call"]) == (cell, 0.0, False, False)
    observation, _, _, _, info = env.step(TOOL)
    assert observation // C == 1 and observation % C == 7  # revealed: candidate 1
    assert info["tool_call"] and info["tool_calls"] == 1 and info["duration"] > 1.0


def test_gridworld_reaching_the_goal_pays_one_and_a_wrong_candidate_ends_with_zero():
    kwargs = {"candidates": [[11, 13]], "heldout_fraction": 0.0}
    goal_right = toy_envs.ToolGridworld(goal_probs=[[0.0, 1.0]], **kwargs)
    goal_right.reset(seed=0)
    assert goal_right.step(RIGHT)[1:3] == (1.0, True)
    goal_left = toy_envs.ToolGridworld(goal_probs=[[1.0, 0.0]], **kwargs)
    goal_left.reset(seed=0)
    assert goal_left.step(RIGHT)[1:3] == (0.0, True)


def test_gridworld_tool_latency_is_lognormal_around_the_configured_median():
    envs = toy_envs.ToolGridworldVectorEnv(num_envs=20_000, tool_latency=5.0, tool_latency_sigma=1.0)
    envs.reset(seed=0)
    _, _, _, _, info = envs.step(np.full(20_000, TOOL))
    log_extra = np.log(info["duration"] - 1.0)
    assert abs(np.median(log_extra) - np.log(5.0)) < 0.03  # standard error of the median ~0.009
    assert abs(np.std(log_extra) - 1.0) < 0.03


def test_reasoning_chain_truncates_at_the_horizon_with_zero_reward():
    env = toy_envs.ReasoningChain(success_curve=[[1.0, 1.0, 1.0]], horizon=3, num_answers=1)
    env.reset(seed=0)
    results = [env.step(reasoning_chain.THINK) for _ in range(3)]
    assert [r[1] for r in results] == [0.0, 0.0, 0.0]
    assert [r[3] for r in results] == [False, False, True]
    assert results[-1][4]["length"] == 3 and results[-1][4]["truncated"]


def test_reasoning_chain_answer_succeeds_with_the_curve_probability_after_t_thinks():
    curve = [[0.0, 0.5, 1.0]]
    env = toy_envs.ReasoningChain(success_curve=curve, horizon=3, num_answers=2, correct_answers=[1])
    env.reset(seed=0)
    env.step(reasoning_chain.THINK)
    env.step(reasoning_chain.THINK)
    assert env.step(1 + 1)[1:3] == (1.0, True)  # correct answer after 2 thinks: s = 1
    env.reset()
    assert env.step(1 + 0)[1:3] == (0.0, True)  # wrong answer never succeeds
    assert env.tables().expected_reward[1].tolist() == [0.0, 0.0, 0.5]


def test_default_bandit_construction_is_the_default_preset():
    default, preset = (
        toy_envs.PromptBandit().tables(),
        toy_envs.PromptBandit(**toy_envs.bandit_preset("default")).tables(),
    )
    for name in ("reward", "observation_features", "train_prompts", "heldout_prompts"):
        np.testing.assert_array_equal(getattr(default, name), getattr(preset, name))


def test_generated_bandit_features_predict_the_good_answer_linearly():
    t = toy_envs.PromptBandit().tables()
    good = t.expected_reward.argmax(axis=1)
    # least squares from features to one-hot good answers recovers most argmaxes (linear separability)
    targets = np.eye(t.num_actions)[good]
    weights, *_ = np.linalg.lstsq(t.observation_features, targets, rcond=None)
    assert np.mean((t.observation_features @ weights).argmax(axis=1) == good) > 0.7


def test_tables_are_read_only():
    t = toy_envs.ToolGridworld().tables()
    with pytest.raises(ValueError):
        t.reward[0, 0] = 1.0


def _tiny_table_kwargs(**overrides):
    kwargs = dict(
        horizon=1,
        num_prompts=1,
        num_states=1,
        num_observations=1,
        num_actions=2,
        observation_of_state=[0],
        initial_distribution=[[1.0]],
        next_state=[[-1, -1]],
        reward=[[0.5, 0.5]],
        tool_call=[[0.0, 0.0]],
        train_prompts=[0],
        heldout_prompts=[],
        observation_features=[[1.0]],
    )
    return kwargs | overrides


BAD_CONFIGURATIONS = [
    pytest.param(toy_envs.PromptBandit, {"success_probs": [[1.2, 0.1]]}, "probabilities in", id="bandit-prob-above-1"),
    pytest.param(toy_envs.PromptBandit, {"success_probs": [[-0.1, 0.1]]}, "probabilities in", id="bandit-prob-below-0"),
    pytest.param(toy_envs.PromptBandit, {"success_probs": [0.2, 0.1]}, "shape", id="bandit-probs-1d"),
    pytest.param(toy_envs.PromptBandit, {"heldout_fraction": 1.0}, "heldout_fraction", id="bandit-all-heldout"),
    pytest.param(toy_envs.PromptBandit, {"num_answers": 1}, "num_answers", id="bandit-one-answer"),
    pytest.param(toy_envs.PromptBandit, {"difficulty": 0.0}, "difficulty", id="bandit-difficulty-0"),
    pytest.param(
        toy_envs.PromptBandit, {"prompt_features": np.ones((3, 2))}, "prompt_features", id="bandit-feature-rows"
    ),
    pytest.param(toy_envs.ToolGridworld, {"horizon": 0}, "horizon", id="grid-horizon-0"),
    pytest.param(
        toy_envs.ToolGridworld, {"candidates": [[12, 0]]}, "other than the start", id="grid-candidate-at-start"
    ),
    pytest.param(toy_envs.ToolGridworld, {"candidates": [[30, 0]]}, r"in \[0, 25\)", id="grid-candidate-off-grid"),
    pytest.param(
        toy_envs.ToolGridworld, {"candidates": [[0, 24]], "horizon": 3}, "horizon", id="grid-goal-unreachable"
    ),
    pytest.param(
        toy_envs.ToolGridworld, {"candidates": [[0, 24]], "goal_probs": [[0.5, 0.6]]}, "sum to 1", id="grid-goal-probs"
    ),
    pytest.param(toy_envs.ToolGridworld, {"num_candidates": 20}, "num_candidates", id="grid-too-many-candidates"),
    pytest.param(toy_envs.ToolGridworld, {"tool_latency": -1.0}, "tool_latency", id="grid-negative-latency"),
    pytest.param(toy_envs.ToolGridworld, {"start": 25}, "start", id="grid-start-off-grid"),
    pytest.param(toy_envs.ReasoningChain, {"horizon": 0}, "horizon", id="chain-horizon-0"),
    pytest.param(toy_envs.ReasoningChain, {"success_curve": [[0.5, 0.6]]}, "shape", id="chain-curve-shape"),
    pytest.param(
        toy_envs.ReasoningChain, {"success_curve": [[1.5] * 16]}, "probabilities in", id="chain-curve-above-1"
    ),
    pytest.param(toy_envs.ReasoningChain, {"correct_answers": [0]}, "success_curve", id="chain-answers-without-curve"),
    pytest.param(toy_envs.ReasoningChain, {"thinking_scale": 0.0}, "thinking_scale", id="chain-thinking-scale-0"),
    pytest.param(
        lambda **kw: toy_envs.MDPTables(**_tiny_table_kwargs(**kw)),
        {"initial_distribution": [[0.5]]},
        "sum to 1",
        id="tables-start-row-sum",
    ),
    pytest.param(
        lambda **kw: toy_envs.MDPTables(**_tiny_table_kwargs(**kw)),
        {"next_state": [[-1, 3]]},
        "next_state",
        id="tables-next-state-range",
    ),
    pytest.param(
        lambda **kw: toy_envs.MDPTables(**_tiny_table_kwargs(**kw)),
        {"reward": [[0.5]]},
        "shape",
        id="tables-reward-shape",
    ),
    pytest.param(
        lambda **kw: toy_envs.MDPTables(**_tiny_table_kwargs(**kw)),
        {"horizon": 0},
        "horizon",
        id="tables-horizon-0",
    ),
    pytest.param(
        lambda **kw: toy_envs.MDPTables(**_tiny_table_kwargs(**kw)),
        {"train_prompts": []},
        "at least one",
        id="tables-no-train-prompt",
    ),
    pytest.param(toy_envs.PromptBanditVectorEnv, {"num_envs": 0}, "num_envs", id="vector-no-envs"),
]


@pytest.mark.parametrize(("factory", "kwargs", "match"), BAD_CONFIGURATIONS)
def test_bad_configurations_raise_value_errors_that_say_how_to_fix_them(factory, kwargs, match):
    with pytest.raises(ValueError, match=match):
        factory(**kwargs)


BAD_RESETS = [
    pytest.param(
        lambda: toy_envs.PromptBandit(), {"options": {"prompt": 999}}, r"\[0, 64\)", id="single-unknown-prompt"
    ),
    pytest.param(lambda: toy_envs.PromptBandit(), {"options": {"prompt": 1.5}}, "integer", id="single-float-prompt"),
    pytest.param(
        lambda: toy_envs.PromptBandit(), {"options": {"goal": 1}}, "valid options", id="single-unknown-option"
    ),
    pytest.param(
        lambda: toy_envs.PromptBanditVectorEnv(num_envs=2),
        {"options": {"prompt": np.array([0, -1])}},
        r"\[0, 64\)",
        id="vector-unknown-prompt",
    ),
    pytest.param(
        lambda: toy_envs.PromptBanditVectorEnv(num_envs=2),
        {"options": {"prompt": np.array([0, 1, 2])}},
        "shape",
        id="vector-prompt-shape",
    ),
    pytest.param(
        lambda: toy_envs.PromptBanditVectorEnv(num_envs=2), {"seed": [1, 2, 3]}, "seed", id="vector-seed-list"
    ),
]


@pytest.mark.parametrize(("make_env", "kwargs", "match"), BAD_RESETS)
def test_bad_reset_arguments_raise_value_errors(make_env, kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_env().reset(**kwargs)


def test_toy_envs_imports_no_torch_and_of_flashsim_only_its_argument_validator():
    code = "import sys, toy_envs; print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'flashsim')))"
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    # flashsim.validation re-exports the checks of flashsim.losses.checks; the losses' package imports its
    # standard-library vocabulary (options) and loads its torch modules only on first use; flashsim's __init__ registers
    # the moved-module finder (flashsim.moved, standard library only).
    assert output.strip() == ("['flashsim', 'flashsim.losses', 'flashsim.losses.checks', 'flashsim.losses.options', "
                              "'flashsim.moved', 'flashsim.validation']")


@pytest.mark.parametrize("module", [toy_envs, core, tables, prompt_bandit, reasoning_chain, tool_gridworld])
def test_toy_envs_docstring_examples_run(module):
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
