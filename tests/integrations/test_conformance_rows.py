"""The integrations' rows of the conformance page: each passes every invariant it declares, and a mutant fails."""

import pytest

from flashsim.testing import check_loss
from flashsim.testing.adapters import variants

pytestmark = pytest.mark.slow


def _row(framework: str):
    pytest.importorskip(framework)
    return next(row for row in variants(framework) if "flashsim.integrations" in row.variant)


@pytest.mark.parametrize("framework", ["trl", "verl"])
def test_the_integration_row_passes_every_invariant(framework):
    report = check_loss(_row(framework), max_examples=5)
    assert report.passed, str(report)
    assert report.declared == "aggregation sample_mean, estimator batch_mean"


def test_the_trl_row_fails_where_the_trainer_forgets_the_accumulation_steps(monkeypatch):
    row = _row("trl")
    from flashsim.integrations import trl as integration

    loss = integration.flash_reinforce_loss
    monkeypatch.setattr(integration, "flash_reinforce_loss",
                        lambda *a, num_sequences, **k: loss(*a, num_sequences=None, **k))
    report = check_loss(row, max_examples=5, invariants=["shards"])
    assert not report.passed and [failure.name for failure in report.failures] == ["shards"]
