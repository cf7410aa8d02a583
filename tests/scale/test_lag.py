"""The measured policy lag of scale's loops against what their configuration allows."""

import json
import math
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("yaml")

from scale.run.config import load_config  # noqa: E402
from scale.run.trainer import Trainer  # noqa: E402
from tests.scale.tiny_run import TINY  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
# Evaluation and checkpoints out of the way of the lag: only the training loop runs.
RUN = TINY + ["eval.every=100", "log.checkpoint_every=100", "train.updates=6"]


def measured_lags(out: Path, *overrides: str) -> list[dict]:
    config = load_config(ROOT / "scale/configs/tiny_cpu.yaml", RUN + [f"log.out={out}", *overrides])
    Trainer(config).run()
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [row for row in rows if "lag/mean" in row]


@pytest.mark.slow
def test_the_synchronous_loop_trains_on_policy(tmp_path):
    rows = measured_lags(tmp_path, "loop.mode=sync")
    assert len(rows) == 6 and all(row["lag/max"] == 0 for row in rows)


@pytest.mark.slow
def test_the_asynchronous_lag_is_bounded_by_the_queue_and_the_calls_in_flight(tmp_path):
    # A trajectory waits behind at most the queue (Q) and the calls in flight (W workers × C per call)
    # before the learner takes it, B per update; its sampling call may also have started one update
    # before the weights it waited behind were published.
    B, Q, C, W = 8, 4, 4, 1
    bound = math.ceil((Q + W * C) / B) + 1
    rows = measured_lags(tmp_path, "loop.mode=async", f"loop.num_workers={W}")
    assert len(rows) == 6
    assert all(0 <= row["lag/min"] <= row["lag/mean"] <= row["lag/max"] <= bound for row in rows), rows
    assert max(row["lag/max"] for row in rows) >= 1  # the workers run ahead of the learner: stale data


@pytest.mark.slow
def test_an_injected_lag_makes_every_synchronous_update_train_on_weights_that_many_updates_old(tmp_path):
    # A reward by length always varies within a batch, so every update moves the policy.
    rows = measured_lags(tmp_path, "loop.mode=sync", "rollout.injected_lag=2", "train.learning_rate=3e-3",
                         "rollout.reward=tests.scale.test_rewards:length_reward")
    # The update that starts from version k samples with version max(k − 2, 0): lag min(k, 2).
    assert [(row["lag/min"], row["lag/max"]) for row in rows] == [(0, 0), (1, 1)] + [(2, 2)] * 4
    # The behaviour log-probs are the stale engine's, so the learner's ratios see the drift (on-policy the
    # sequence KL is float rounding, ~1e-10).
    assert rows[0]["trust/sequence_kl_mean"] < 1e-8
    assert all(row["trust/sequence_kl_mean"] > 1e-5 for row in rows[1:])


@pytest.mark.parametrize("value", [-1, 1.5, "two"], ids=["negative", "fraction", "word"])
def test_an_injected_lag_that_is_not_a_count_of_updates_is_refused(value):
    with pytest.raises((ValueError, TypeError), match="injected_lag"):
        load_config(ROOT / "scale/configs/tiny_cpu.yaml", [f"rollout.injected_lag={value}"])
