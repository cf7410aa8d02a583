"""Every batch's ĝ kept by ``keep_directions`` and drawn around ∇J with exact angles."""

import pytest
import torch

from flashsim.variance import measure_gradient
from flashsim.variance.plots import direction_coordinates, plot_directions


def measure(bandit, policy, estimator, **options):
    return measure_gradient(bandit, policy, estimator=estimator, budget=6, num_batches=40, seed=0, bootstrap=0,
                            group_size=3, **options)


def test_kept_directions_are_the_batches_whose_mean_the_report_states(bandit, bandit_policy):
    report = measure(bandit, bandit_policy, "flash_reinforce", keep_directions=True)
    assert report.directions.shape == (40, bandit_policy.num_params)
    torch.testing.assert_close(report.directions.mean(dim=0), report.mean_gradient, rtol=1e-12, atol=1e-14)
    assert measure(bandit, bandit_policy, "flash_reinforce").directions is None


@pytest.mark.parametrize("estimator", ["flash_reinforce", "grpo"])
def test_each_point_keeps_its_batch_angle_to_the_exact_gradient_and_the_mean_lands_on_it(
    bandit, bandit_policy, estimator
):
    report = measure(bandit, bandit_policy, estimator, keep_directions=True)
    along, across = direction_coordinates(report)
    true = report.true_gradient
    lengths = torch.linalg.vector_norm(report.directions, dim=1)
    moved = lengths > 0  # a batch whose every advantage is 0 (GRPO: equal rewards in each group) has ĝ = 0
    point_cosines = torch.where(moved, along / torch.hypot(along, across), 0.0)
    torch.testing.assert_close(point_cosines[moved], (report.directions @ true / (lengths * true.norm()))[moved],
                               rtol=1e-10, atol=1e-12)
    assert abs(float(along.mean()) - 1.0) < 1e-10  # the scale puts E ĝ at 1 along ∇J
    assert abs(float(point_cosines.mean()) - report.cosine) < 1e-10  # the report counts a zero ĝ as cosine 0


def test_a_report_without_directions_names_the_flag_and_the_figure_is_written(bandit, bandit_policy, tmp_path):
    with pytest.raises(ValueError, match="keep_directions=True"):
        direction_coordinates(measure(bandit, bandit_policy, "flash_reinforce"))
    reports = {name: measure(bandit, bandit_policy, name, keep_directions=True) for name in ("flash_reinforce", "grpo")}
    path = plot_directions(reports, tmp_path / "directions.png", count=10)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
