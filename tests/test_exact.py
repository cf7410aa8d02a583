"""Specs of flashsim.exact: closed forms, finite differences, Monte Carlo agreement, evaluate()."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch.testing import assert_close

import toy_envs
from flashsim.exact import evaluate, exact_gradient, expected_return, prompt_returns, to_torch
from flashsim.policies import POLICY_KINDS, TabularPolicy, make_policy
from toy_envs.tool_gridworld import DOWN, LEFT, RIGHT, TOOL, UP

FINITE_DIFFERENCE_STEP = 1e-5  # central differences: truncation ~1e-10, float64 round-off ~1e-11
MONTE_CARLO_EPISODES = 20_000
MONTE_CARLO_STANDARD_ERRORS = 5.0  # seeded, so not flaky; 5 s.e. keeps a fair margin for a correct J


def seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def random_policy(tables, kind: str, seed: int = 0, scale: float = 1.0):
    policy = make_policy(kind, tables, generator=seeded(seed))
    policy.set_flat(scale * torch.randn(policy.num_params, generator=seeded(seed + 1), dtype=torch.float64))
    return policy


#: gymnasium's own slippery FrozenLake (4 x 4, K = 3 outcomes per step), exact through its ``P`` table.
FROZEN_LAKE = "FrozenLake-v1"
#: Sub-envs of the Monte Carlo check: gymnasium's FrozenLake steps in Python, one env at a time.
FROZEN_LAKE_EPISODES = 4_000


def default_tables(env_id: str):
    return toy_envs.exact_tables(gym.make(env_id))


def test_bandit_return_and_gradient_match_the_closed_form():
    tables = toy_envs.PromptBandit().tables()
    policy = random_policy(tables, "tabular")
    train = torch.tensor(tables.train_prompts)
    success = torch.tensor(tables.expected_reward)[train]
    probs = torch.softmax(policy.table.detach()[train], dim=-1)
    # J = mean_p sum_a pi(a|p) s[p, a];  dJ/dtheta[p, a] = pi(a|p) (s[p, a] - sum_b pi(b|p) s[p, b]) / P_train
    assert_close(expected_return(tables, policy), (probs * success).sum(-1).mean())
    expected = torch.zeros_like(policy.table)
    baseline = (probs * success).sum(-1, keepdim=True)
    expected[train] = probs * (success - baseline) / train.numel()
    assert_close(exact_gradient(tables, policy), expected.reshape(-1))


def test_reasoning_chain_statistics_match_a_hand_derived_example():
    tables = toy_envs.ReasoningChain(success_curve=[[0.2, 0.6, 0.9]], horizon=3, num_answers=1).tables()
    think = 0.3
    logits = torch.log(torch.tensor([think, 1 - think], dtype=torch.float64)).expand(3, 2)
    metrics = evaluate(tables, TabularPolicy(logits.clone()))
    q, a = think, 1 - think
    assert_close(metrics["env/success"], torch.tensor(a * 0.2 + q * a * 0.6 + q * q * a * 0.9, dtype=torch.float64))
    assert_close(metrics["env/expected_length"], torch.tensor(1 + q + q * q, dtype=torch.float64))
    assert_close(metrics["env/truncation_probability"], torch.tensor(q**3, dtype=torch.float64))
    assert_close(metrics["env/expected_tool_calls"], torch.tensor(0.0, dtype=torch.float64))


def test_a_tool_spamming_policy_calls_the_tool_every_step_and_is_truncated():
    tables = toy_envs.ToolGridworld().tables()
    logits = torch.zeros(tables.num_observations, tables.num_actions, dtype=torch.float64)
    logits[:, TOOL] = 100.0
    metrics = evaluate(tables, TabularPolicy(logits))
    for name, value in [
        ("success", 0.0),
        ("expected_length", 20.0),
        ("expected_tool_calls", 20.0),
        ("truncation_probability", 1.0),
    ]:
        assert_close(metrics[f"env/{name}"], torch.tensor(value, dtype=torch.float64))


@pytest.mark.parametrize("kind", POLICY_KINDS)
@pytest.mark.parametrize("env_id", (*toy_envs.ENV_IDS, FROZEN_LAKE))
def test_exact_gradient_matches_central_finite_differences(env_id, kind):
    tables = to_torch(default_tables(env_id))
    policy = random_policy(tables, kind, scale=0.5)
    gradient, theta = exact_gradient(tables, policy), policy.get_flat()

    def objective(parameters: torch.Tensor) -> float:
        policy.set_flat(parameters)
        return expected_return(tables, policy).item()

    # Directions with mass: random ones, and the gradient itself (a one-hot direction on a parameter
    # the objective barely depends on would pass any absolute tolerance).
    generator = seeded(2)
    directions = [torch.randn(theta.numel(), generator=generator, dtype=torch.float64) for _ in range(4)]
    directions.append(gradient / gradient.norm())
    for direction in directions:
        step = FINITE_DIFFERENCE_STEP * direction
        difference = (objective(theta + step) - objective(theta - step)) / (2 * FINITE_DIFFERENCE_STEP)
        expected = float(gradient @ direction)
        assert abs(expected) > 1e-3 * float(gradient.norm()), "the direction must have mass for a relative check"
        assert difference == pytest.approx(expected, rel=1e-6)
    policy.set_flat(theta)


def monte_carlo(
    env_id: str, policy, seed: int, episodes: int = MONTE_CARLO_EPISODES, **env_kwargs
) -> dict[str, np.ndarray]:
    """One episode in each of ``episodes`` vector sub-envs (the env's own code), acting with ``policy``."""
    envs = gym.make_vec(env_id, num_envs=episodes, **env_kwargs)
    observations, _ = envs.reset(seed=seed)
    N, generator = episodes, seeded(seed)
    running = np.ones(N, dtype=bool)
    totals = {
        name: np.zeros(N) for name in ("success", "expected_length", "expected_tool_calls", "truncation_probability")
    }
    while running.any():
        actions, _ = policy.sample(torch.as_tensor(observations), generator)
        observations, rewards, terminated, truncated, info = envs.step(actions.numpy())
        totals["success"] += np.where(running, rewards, 0.0)
        totals["expected_length"] += running
        totals["expected_tool_calls"] += np.where(running, info.get("tool_call", 0.0), 0.0)
        totals["truncation_probability"] += np.where(running, truncated, 0.0)
        running &= ~(terminated | truncated)
    return totals


@pytest.mark.parametrize(
    "env_id",
    # FrozenLake steps 4,000 gymnasium sub-envs in Python (~5 s); the test below checks the same tables fast.
    (*toy_envs.ENV_IDS, pytest.param(FROZEN_LAKE, marks=pytest.mark.slow)),
)
def test_exact_statistics_agree_with_monte_carlo_within_five_standard_errors(env_id):
    tables = default_tables(env_id)
    policy = random_policy(tables, "linear", scale=1.0)
    exact = evaluate(tables, policy)
    episodes = FROZEN_LAKE_EPISODES if env_id == FROZEN_LAKE else MONTE_CARLO_EPISODES
    for name, samples in monte_carlo(env_id, policy, seed=11, episodes=episodes).items():
        standard_error = samples.std() / np.sqrt(samples.size) + 1e-6  # floor: constant samples
        assert abs(samples.mean() - exact[f"env/{name}"].item()) <= MONTE_CARLO_STANDARD_ERRORS * standard_error, name


#: A noisy tool: a wrong candidate shown 30 % of the time, so the tool call has K = 3 outcomes.
NOISY_TOOL = {"tool_error_rate": 0.3}


def test_a_noisy_tool_keeps_exact_statistics_in_agreement_with_monte_carlo():
    tables = toy_envs.ToolGridworld(**NOISY_TOOL).tables()
    assert tables.num_outcomes == 3
    policy = random_policy(tables, "linear", scale=1.0)
    exact = evaluate(tables, policy)
    samples = monte_carlo("toy_envs/ToolGridworld-v0", policy, seed=11, **NOISY_TOOL)
    for name, values in samples.items():
        standard_error = values.std() / np.sqrt(values.size) + 1e-6
        assert abs(values.mean() - exact[f"env/{name}"].item()) <= MONTE_CARLO_STANDARD_ERRORS * standard_error, name


def test_a_noisy_tool_has_an_exact_gradient_that_matches_finite_differences():
    tables = to_torch(toy_envs.ToolGridworld(**NOISY_TOOL).tables())
    policy = random_policy(tables, "tabular", scale=0.5)
    gradient, theta = exact_gradient(tables, policy), policy.get_flat()

    def objective(parameters: torch.Tensor) -> float:
        policy.set_flat(parameters)
        return expected_return(tables, policy).item()

    for direction in (torch.randn(theta.numel(), generator=seeded(2), dtype=torch.float64), gradient / gradient.norm()):
        step = FINITE_DIFFERENCE_STEP * direction
        difference = (objective(theta + step) - objective(theta - step)) / (2 * FINITE_DIFFERENCE_STEP)
        assert difference == pytest.approx(float(gradient @ direction), rel=1e-6)


def test_a_tool_that_always_calls_then_follows_succeeds_with_one_minus_the_error_rate():
    # One prompt, goal certain at cell 0 (two steps left, two up from the centre 12), decoy at 24.
    kwargs = {"candidates": [[0, 24]], "goal_probs": [[1.0, 0.0]], "heldout_fraction": 0.0}
    for error in (0.0, 0.25):
        tables = toy_envs.ToolGridworld(tool_error_rate=error, **kwargs).tables()
        K, C = 2, 25
        logits = torch.full((tables.num_observations, tables.num_actions), -100.0, dtype=torch.float64)
        for g, path in ((0, (LEFT, UP)), (1, (RIGHT, DOWN))):
            target = (0, 24)[g]
            for cell in range(C):
                action = path[0] if cell % 5 != target % 5 else path[1]
                logits[g * C + cell, action] = 100.0
        logits[K * C:, TOOL] = 100.0  # unknown: call the tool
        metrics = evaluate(tables, TabularPolicy(logits))
        assert_close(metrics["env/success"], torch.tensor(1.0 - error, dtype=torch.float64))
        assert_close(metrics["env/expected_tool_calls"], torch.tensor(1.0, dtype=torch.float64))


def test_frozen_lake_tables_stepped_by_the_core_agree_with_the_exact_return():
    """The K = 3 outcome draw of ``TabularDynamics`` against backward induction (slippery ice)."""
    tables = default_tables(FROZEN_LAKE)
    policy = random_policy(tables, "tabular", scale=1.0)
    exact = evaluate(tables, policy)["env/success"].item()
    envs = toy_envs.TabularVectorEnv(toy_envs.TabularDynamics(tables), num_envs=MONTE_CARLO_EPISODES)
    observations, _ = envs.reset(seed=3)
    running, returns, generator = np.ones(MONTE_CARLO_EPISODES, bool), np.zeros(MONTE_CARLO_EPISODES), seeded(3)
    while running.any():
        actions, _ = policy.sample(torch.as_tensor(observations), generator)
        observations, rewards, terminated, truncated, _ = envs.step(actions.numpy())
        returns += np.where(running, rewards, 0.0)
        running &= ~(terminated | truncated)
    standard_error = returns.std() / np.sqrt(returns.size)
    assert abs(returns.mean() - exact) <= MONTE_CARLO_STANDARD_ERRORS * standard_error


def test_frozen_lake_slippery_tables_hold_three_equally_likely_outcomes():
    tables = default_tables(FROZEN_LAKE)
    assert (tables.num_states, tables.num_actions, tables.num_outcomes, tables.horizon) == (16, 4, 3, 100)
    assert_close(torch.tensor(tables.transition_probability[0]), torch.full((4, 3), 1 / 3, dtype=torch.float64))
    goal = 15
    assert tables.reward[14, 2].tolist() == [0.0, 1.0, 0.0]  # from 14, RIGHT slips DOWN, goes RIGHT, slips UP
    assert tables.next_state[14, 2].tolist() == [14, -1, 10] and goal not in tables.next_state


def test_gradient_ascent_on_the_gridworld_learns_to_use_the_tool():
    tables = to_torch(toy_envs.ToolGridworld().tables())
    policy = make_policy("tabular", tables)
    for _ in range(30):
        policy.set_flat(policy.get_flat() + 100.0 * exact_gradient(tables, policy))
    metrics = evaluate(tables, policy)
    best_without_tool = toy_envs.ToolGridworld().tables().initial_distribution.max(axis=1).mean()
    assert metrics["env/success"] > max(0.95, best_without_tool)  # 0.976 after 30 steps
    assert 0.9 < metrics["env/expected_tool_calls"] < 1.5


def test_prompt_selection_by_name_and_by_ids():
    tables = toy_envs.PromptBandit().tables()
    policy = random_policy(tables, "tabular")
    everything = prompt_returns(tables, policy, "all")
    assert_close(expected_return(tables, policy, "heldout"), everything[torch.tensor(tables.heldout_prompts)].mean())
    assert_close(expected_return(tables, policy, [3, 4]), everything[[3, 4]].mean())
    assert_close(evaluate(tables, policy, "all")["env/success_per_prompt"], everything.detach())


BAD_EXACT_ARGUMENTS = [
    pytest.param(
        lambda t: expected_return(t, TabularPolicy(torch.zeros(3, 2))),
        ValueError,
        "observations",
        id="policy-size-mismatch",
    ),
    pytest.param(
        lambda t: expected_return(t, make_policy("tabular", t), [999]), ValueError, "prompt ids", id="unknown-prompt"
    ),
    pytest.param(
        lambda t: expected_return(t, make_policy("tabular", t), "test"), ValueError, "heldout", id="unknown-prompt-set"
    ),
    pytest.param(
        lambda t: expected_return(t, make_policy("tabular", t), []), ValueError, "no prompt", id="empty-prompts"
    ),
    pytest.param(
        lambda t: expected_return({"reward": 1}, make_policy("tabular", t)), TypeError, "MDPTables", id="not-tables"
    ),
]


@pytest.mark.parametrize(("call", "error", "match"), BAD_EXACT_ARGUMENTS)
def test_bad_exact_arguments_raise_errors_that_say_how_to_fix_them(call, error, match):
    with pytest.raises(error, match=match):
        call(toy_envs.PromptBandit().tables())
