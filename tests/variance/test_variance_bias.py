"""Exact gradients and the expected update directions of the estimators, on-policy, on a bandit.

On the bandit every trajectory has one token (T_i = 1), so the aggregation modes agree and the
expectations are the textbook ones: batch-centred advantages shrink ∇J by (1 − 1/B) (the batch mean
includes the sample itself), group-mean baselines by (1 − 1/G), leave-one-out baselines not at all.
Each check is a chi-square-style test: ‖mean ĝ − target‖² against its Monte Carlo variance
tr Cov(mean ĝ) = (between + within / r) / D.
"""

import math

import pytest
import torch

from flashsim.exact import exact_gradient
from flashsim.variance import measure_gradient


def closed_form_bandit_gradient(success: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """∂/∂θ[p, b] of J = (1/P) Σ_p Σ_a π(a|p) s[p, a]: (1/P) π(b|p) (s[p, b] − Σ_a π(a|p) s[p, a])."""
    probs = torch.softmax(logits, dim=-1)
    value = (probs * success).sum(dim=-1, keepdim=True)
    return (probs * (success - value) / success.shape[0]).reshape(-1)


def noise_ratio(report, target: torch.Tensor) -> float:
    """‖mean ĝ − target‖² divided by its expected size under 'E ĝ = target' (≈ 1 when it holds)."""
    draws = report.num_batches // report.replicates
    variance_of_mean = (report.between_prompt + report.within_prompt / report.replicates) / draws
    return float(((report.mean_gradient - target) ** 2).sum()) / variance_of_mean


def test_exact_gradient_of_a_softmax_bandit_matches_the_closed_form(bandit, bandit_policy):
    success = torch.tensor(bandit.expected_reward, dtype=torch.float64)
    expected = closed_form_bandit_gradient(success, bandit_policy.table.detach())
    torch.testing.assert_close(exact_gradient(bandit, bandit_policy), expected, rtol=1e-12, atol=1e-15)


def test_exact_gradient_ignores_heldout_prompts():
    import toy_envs
    from flashsim.policies import make_policy

    tables = toy_envs.PromptBandit(num_prompts=8, heldout_fraction=0.25, seed=3).tables()
    gradient = exact_gradient(tables, make_policy("tabular", tables)).view(8, -1)
    assert gradient[torch.tensor(tables.heldout_prompts)].abs().max() == 0
    assert gradient[torch.tensor(tables.train_prompts)].abs().max() > 0


@pytest.mark.parametrize("budget", [4, 16])
def test_on_policy_flash_reinforce_is_shrunk_by_one_minus_one_over_b(bandit, bandit_policy, budget):
    report = measure_gradient(
        bandit, bandit_policy, estimator="flash_reinforce", budget=budget, num_batches=6000, seed=1, bootstrap=0
    )
    true = report.true_gradient
    assert noise_ratio(report, (1 - 1 / budget) * true) < 4
    # The shrinkage is resolved: the unshrunk gradient is rejected by the same test.
    assert noise_ratio(report, true) > 4 * noise_ratio(report, (1 - 1 / budget) * true)
    assert report.acceptance_rate == 1.0 and report.ess_fraction == pytest.approx(1.0)


@pytest.mark.parametrize("grouped", [False, True], ids=["batch_leave_one_out", "group_leave_one_out"])
def test_rloo_is_unbiased(bandit, bandit_policy, grouped):
    report = measure_gradient(
        bandit, bandit_policy, estimator="rloo", budget=8, num_batches=6000, seed=2, grouped=grouped,
        group_size=4, bootstrap=0,
    )
    assert report.group_size == (4 if grouped else 1)
    assert noise_ratio(report, report.true_gradient) < 4


@pytest.mark.parametrize("group_size", [2, 4])
def test_group_mean_baseline_is_shrunk_by_one_minus_one_over_g(bandit, bandit_policy, group_size):
    # Dr. GRPO: A = R − mean_group R, no std scaling; on-policy its ratio is 1 and the clip is inactive.
    report = measure_gradient(
        bandit, bandit_policy, estimator="dr_grpo", budget=16, group_size=group_size, num_batches=6000,
        seed=3, bootstrap=0,
    )
    true = report.true_gradient
    assert noise_ratio(report, (1 - 1 / group_size) * true) < 4
    assert noise_ratio(report, true) > 4 * noise_ratio(report, (1 - 1 / group_size) * true)


def test_positive_only_is_unbiased_but_noisier_than_rloo(bandit, bandit_policy):
    common = dict(budget=8, num_batches=4000, seed=4, bootstrap=0)
    positive = measure_gradient(bandit, bandit_policy, estimator="positive_only", **common)
    rloo = measure_gradient(bandit, bandit_policy, estimator="rloo", **common)
    assert noise_ratio(positive, positive.true_gradient) < 4
    assert positive.variance > rloo.variance


def test_report_statistics_agree_with_their_definitions(bandit, bandit_policy):
    report = measure_gradient(bandit, bandit_policy, estimator="grpo", budget=8, group_size=2, num_batches=400, seed=5)
    true = report.true_gradient
    assert report.true_gradient_norm == pytest.approx(float(true.norm()))
    assert report.bias_norm == pytest.approx(float((report.mean_gradient - true).norm()))
    assert report.variance == pytest.approx(report.between_prompt + report.within_prompt, rel=1e-12)
    assert report.snr == pytest.approx(float((report.mean_gradient**2).sum()) / report.variance)
    assert 0 <= report.relative_scaled_mse <= 1
    assert report.scaled_mse <= report.mse + 1e-15  # c* minimises, and c = 1 gives the plain MSE
    assert math.isfinite(report.cosine) and -1 <= report.cosine <= 1
    for name, (low, high) in report.intervals.items():
        assert low <= high, name
