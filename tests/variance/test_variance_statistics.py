"""Statistics of update directions: the law-of-total-variance split, bootstrap intervals, definitions."""

import pytest
import torch

import toy_envs
from flashsim.policies import TabularPolicy
from flashsim.variance import measure_gradient
from flashsim.variance.statistics import gradient_statistics


def nested_directions(draws, replicates, dim, between_sd, within_sd, seed):
    """ĝ_ij = μ + a_i + e_ij with a_i ~ N(0, between_sd² I), e_ij ~ N(0, within_sd² I)."""
    generator = torch.Generator().manual_seed(seed)
    mean = torch.linspace(-1, 1, dim, dtype=torch.float64)
    prompt_effect = between_sd * torch.randn(draws, 1, dim, generator=generator, dtype=torch.float64)
    noise = within_sd * torch.randn(draws, replicates, dim, generator=generator, dtype=torch.float64)
    return (mean + prompt_effect + noise).reshape(draws * replicates, dim), mean


@pytest.mark.parametrize("replicates", [2, 4])
def test_between_and_within_recover_known_variance_components(replicates):
    directions, mean = nested_directions(4000, replicates, 6, between_sd=0.5, within_sd=1.0, seed=replicates)
    point, _, _ = gradient_statistics(
        directions, mean, replicates=replicates, resamples=0, confidence=0.95, generator=torch.Generator()
    )
    assert point["between_prompt"] == pytest.approx(6 * 0.25, rel=0.1)
    assert point["within_prompt"] == pytest.approx(6 * 1.0, rel=0.05)
    assert point["variance"] == point["between_prompt"] + point["within_prompt"]
    assert point["bias_norm_debiased"] < point["bias_norm"]


def test_bootstrap_intervals_cover_the_true_components():
    directions, mean = nested_directions(1000, 2, 4, between_sd=1.0, within_sd=1.0, seed=5)
    point, intervals, _ = gradient_statistics(
        directions, mean, replicates=2, resamples=300, confidence=0.95, generator=torch.Generator().manual_seed(0)
    )
    for name, truth in (("between_prompt", 4.0), ("within_prompt", 4.0), ("variance", 8.0)):
        low, high = intervals[name]
        assert low <= point[name] <= high
        assert low <= truth <= high, (name, low, high)


def test_hand_computed_statistics_of_four_directions():
    directions = torch.tensor([[1.0, 0.0], [3.0, 0.0], [0.0, 2.0], [0.0, 0.0]], dtype=torch.float64)
    true = torch.tensor([1.0, 1.0], dtype=torch.float64)
    point, _, mean = gradient_statistics(
        directions, true, replicates=2, resamples=0, confidence=0.95, generator=torch.Generator()
    )
    torch.testing.assert_close(mean, torch.tensor([1.0, 0.5], dtype=torch.float64))
    # within: draw 0 means (2, 0): 1 + 1; draw 1 means (0, 1): 1 + 1 → 4 / (2 · 1) = 2
    assert point["within_prompt"] == pytest.approx(2.0)
    # between draws: ‖(2, 0) − (1, .5)‖² + ‖(0, 1) − (1, .5)‖² = 1.25 + 1.25 → 2.5 / 1, minus within / r = 1
    assert point["between_prompt"] == pytest.approx(1.5)
    assert point["mse"] == pytest.approx((1 + 5 + 2 + 2) / 4)
    assert point["cosine"] == pytest.approx((2**-0.5 + 2**-0.5 + 2**-0.5 + 0) / 4)
    assert point["scale"] == pytest.approx((1 + 3 + 2 + 0) / (1 + 9 + 4 + 0))
    assert point["cosine_of_mean"] == pytest.approx(1.5 / (1.25**0.5 * 2**0.5))
    assert point["relative_scaled_mse"] == pytest.approx(1 - (6 / 4) ** 2 / ((14 / 4) * 2))


def test_decomposition_adds_up_and_between_prompt_vanishes_with_a_single_prompt(bandit_policy):
    one_prompt = toy_envs.PromptBandit(success_probs=[[0.9, 0.2, 0.5]], heldout_fraction=0.0).tables()
    policy = TabularPolicy(bandit_policy.table.detach()[:1].clone())
    report = measure_gradient(one_prompt, policy, estimator="flash_reinforce", budget=8, num_batches=4000, seed=0)
    assert report.variance == pytest.approx(report.between_prompt + report.within_prompt, rel=1e-12)
    low, high = report.intervals["between_prompt"]
    assert low <= 0 <= high
    assert abs(report.between_prompt) < 0.05 * report.within_prompt


def test_between_prompt_variance_is_substantial_when_prompts_differ(bandit, bandit_policy):
    report = measure_gradient(bandit, bandit_policy, estimator="grpo", budget=8, group_size=8, num_batches=2000, seed=1)
    low, _ = report.intervals["between_prompt"]
    assert low > 0
    assert report.variance == pytest.approx(report.between_prompt + report.within_prompt, rel=1e-12)
