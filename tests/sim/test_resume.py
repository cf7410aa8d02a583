"""Checkpoint and resume: an interrupted run, resumed, equals the uninterrupted run bit for bit."""

from __future__ import annotations

import filecmp

import pytest
import torch

import flashsim.sim.simulation as simulation_module
from flashsim.sim import AlgorithmConfig, AsyncWorkers, FixedLag, RandomLag, TimingModel, TrainConfig, train
from flashsim.sim.simulation import CHECKPOINT
from flashsim.sim.simulation import load_state as load_checkpoint

CONFIGS = {
    "fixed-lag-minibatches": TrainConfig(env="chain", algorithm=AlgorithmConfig(batch_size=16, minibatches=2),
                                         lag=FixedLag(3), updates=11, checkpoint_every=4, eval_every=3),
    "random-lag-grpo": TrainConfig(env="bandit", algorithm=AlgorithmConfig("grpo", batch_size=16, group_size=4),
                                   lag=RandomLag(4), updates=11, checkpoint_every=4, eval_every=3, logprob_noise=0.01),
    "workers-crashes-stragglers": TrainConfig(
        env="gridworld", algorithm=AlgorithmConfig(batch_size=16), lag=AsyncWorkers(12, crash_prob=0.1),
        timing=TimingModel(tool_latency=5.0, straggler_prob=0.1), updates=11, checkpoint_every=4, eval_every=3,
    ),
}


class Interrupted(Exception):
    pass


def interrupt_after(monkeypatch, updates: int) -> None:
    """Make the runner's simulations raise once ``updates`` updates are done (a crash between checkpoints)."""

    class Crashing(simulation_module.Simulation):
        def step(self, evaluate=None):
            if self.update == updates:
                raise Interrupted
            return super().step(evaluate)

    monkeypatch.setattr(simulation_module, "Simulation", Crashing)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_interrupted_then_resumed_run_equals_the_uninterrupted_run_bit_for_bit(name, tmp_path, monkeypatch):
    config = CONFIGS[name]
    whole = train(config, tmp_path / "whole", plot=False)
    with monkeypatch.context() as patch:
        interrupt_after(patch, 6)  # checkpoint at 4; rows 4 and 5 were written and must be rewritten
        with pytest.raises(Interrupted):
            train(config, tmp_path / "resumed", plot=False)
    assert load_checkpoint(tmp_path / "resumed" / CHECKPOINT)["simulation"].update == 4
    resumed = train(config, tmp_path / "resumed", resume=True, plot=False)
    for file in ("metrics.csv", "metrics.jsonl"):
        assert filecmp.cmp(tmp_path / "whole" / file, tmp_path / "resumed" / file, shallow=False), file
    assert _equal_with_nan(resumed.rows, whole.rows)
    final_whole = load_checkpoint(tmp_path / "whole" / CHECKPOINT)["simulation"]
    final_resumed = load_checkpoint(tmp_path / "resumed" / CHECKPOINT)["simulation"]
    for key, tensor in final_whole.learner.policy.items():
        assert torch.equal(tensor, final_resumed.learner.policy[key])
    assert final_whole.rng == final_resumed.rng


def test_resume_extends_the_budget_like_one_longer_run(tmp_path):
    config = CONFIGS["fixed-lag-minibatches"]
    train(config.with_updates(5), tmp_path / "short", plot=False)
    extended = train(config, tmp_path / "short", resume=True, plot=False)
    whole = train(config, tmp_path / "whole", plot=False)
    assert filecmp.cmp(tmp_path / "short" / "metrics.csv", tmp_path / "whole" / "metrics.csv", shallow=False)
    assert len(extended.rows) == len(whole.rows) == config.updates


def test_a_fresh_run_refuses_to_overwrite_a_run_directory(tmp_path):
    config = CONFIGS["fixed-lag-minibatches"].with_updates(2)
    train(config, tmp_path, plot=False)
    with pytest.raises(FileExistsError, match="resume"):
        train(config, tmp_path, plot=False)


def test_resume_rejects_a_checkpoint_of_another_configuration(tmp_path):
    config = CONFIGS["fixed-lag-minibatches"].with_updates(2)
    train(config, tmp_path, plot=False)
    with pytest.raises(ValueError, match="another configuration"):
        train(TrainConfig(env="chain", updates=4), tmp_path, resume=True, plot=False)


def _equal_with_nan(first, second):
    import math

    def same(a, b):
        return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))

    return len(first) == len(second) and all(
        row.keys() == other.keys() and all(same(row[k], other[k]) for k in row) for row, other in zip(first, second)
    )


def test_resuming_from_a_tampered_checkpoint_refuses_it_without_running_it(tmp_path):
    from tests.test_io import _Evil

    train(CONFIGS["fixed-lag-minibatches"].with_updates(2), tmp_path / "run", plot=False)
    torch.save({"simulation": _Evil(tmp_path / "pwned")}, tmp_path / "run" / CHECKPOINT)
    with pytest.raises(ValueError, match="refusing to load"):
        train(CONFIGS["fixed-lag-minibatches"], tmp_path / "run", resume=True, plot=False)
    assert not (tmp_path / "pwned").exists()
