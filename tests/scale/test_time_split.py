"""Where an update's time goes (``time/generate_s``, ``time/learn_s``, ``time/eval_s``, ``time/plot_s``), when
``curves.png`` is drawn, and the 95 % interval of the evaluation accuracy."""

import json
import math
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("yaml")

from scipy import stats  # noqa: E402

from scale.rollouts.collect import accuracy_interval  # noqa: E402
from scale.run.config import load_config  # noqa: E402
from scale.run.trainer import Trainer  # noqa: E402
from tests.scale.tiny_run import TINY  # noqa: E402

PRESET = Path(__file__).resolve().parents[2] / "scale" / "configs" / "tiny_cpu.yaml"
Z = 1.959963984540054  # the normal 0.975 quantile


@pytest.mark.parametrize("successes, n, low, high", [
    (0, 10, 0.0, Z**2 / (10 + Z**2)),  # p̂ = 0: centre = half = (z²/2n) / (1 + z²/n)
    (10, 10, 10 / (10 + Z**2), 1.0),
    (50, 100, 0.5 - Z / (1 + Z**2 / 100) * math.sqrt(0.25 / 100 + Z**2 / 40_000),
     0.5 + Z / (1 + Z**2 / 100) * math.sqrt(0.25 / 100 + Z**2 / 40_000)),
], ids=["none", "all", "half"])
def test_the_accuracy_interval_is_wilsons_score_interval(successes, n, low, high):
    assert accuracy_interval(successes, n) == pytest.approx((low, high), abs=1e-12)


def test_the_accuracy_interval_covers_the_true_rate_about_95_percent_of_the_time():
    # Exact coverage (a sum over the binomial distribution, no sampling) at the evaluation's size.
    n = 200
    for p in (0.1, 0.3, 0.5):
        covered = sum(stats.binom.pmf(k, n, p) for k in range(n + 1)
                      if accuracy_interval(k, n)[0] <= p <= accuracy_interval(k, n)[1])
        assert 0.93 <= covered <= 0.97, (p, covered)


@pytest.mark.parametrize("bad", [(1, 0), (-1, 10), (11, 10)], ids=["no-draws", "negative", "above-n"])
def test_the_accuracy_interval_is_nan_without_draws_or_outside_zero_one(bad):
    assert all(math.isnan(x) for x in accuracy_interval(*bad))


def _run(tmp_path, *sets):
    config = load_config(PRESET, [*TINY, "train.updates=4", "log.checkpoint_every=0",
                                                         f"log.out={tmp_path}", *sets])
    Trainer(config).run()
    return [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_every_update_reports_generation_and_learner_seconds_and_evaluations_their_own(tmp_path, mode):
    rows = _run(tmp_path, f"loop.mode={mode}", "log.curves_every_s=0")
    updates = rows[1:]
    assert all(r["time/learn_s"] > 0 for r in updates)
    if mode == "sync":  # the learner generates each batch itself: it waits exactly that long
        assert all(r["time/generate_s"] > 0 and r["time/wait_s"] == r["time/generate_s"] for r in updates)
    else:  # the worker's seconds since the previous batch, overlapping the learner
        assert sum(r["time/generate_s"] for r in updates) > 0
    evaluated = [r["update"] for r in rows if "eval/accuracy" in r]
    assert evaluated == [0, 2, 4] and [r["update"] for r in rows if "time/eval_s" in r] == evaluated
    assert [r["update"] for r in rows if "time/plot_s" in r] == evaluated  # curves_every_s = 0: every evaluation
    for r in rows:
        if "eval/accuracy" in r:
            assert r["eval/accuracy_low"] <= r["eval/accuracy"] <= r["eval/accuracy_high"]
            assert r["eval/accuracy_greedy_low"] <= r["eval/accuracy_greedy"] <= r["eval/accuracy_greedy_high"]


@pytest.mark.slow
def test_curves_are_drawn_only_at_the_end_within_the_rate_limit_and_never_when_off(tmp_path):
    rows = _run(tmp_path / "limited", "loop.mode=sync", "log.curves_every_s=3600")
    assert [r["update"] for r in rows if "time/plot_s" in r] == [4]
    assert (tmp_path / "limited" / "curves.png").stat().st_size > 0
    rows = _run(tmp_path / "off", "loop.mode=sync", "log.curves=false")
    assert not any("time/plot_s" in r for r in rows) and not (tmp_path / "off" / "curves.png").exists()
