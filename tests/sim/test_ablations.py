"""Each ablation preset changes what the simulator's learner does, in the way its name says."""

from __future__ import annotations

import numpy as np
import pytest

from flashsim.losses import LOSSES
from flashsim.sim import AlgorithmConfig, FixedLag, Simulation, TrainConfig

MINIBATCHES = AlgorithmConfig.for_loss("flash_reinforce", minibatches=4)
"""``--algo flash_reinforce --minibatches 4``: one collected batch, m = 4 sequential steps on quarters."""
PRESETS = {**{name: AlgorithmConfig.for_loss(name) for name in LOSSES}, "minibatches": MINIBATCHES}


def stale_run(algorithm: AlgorithmConfig, updates: int = 12, lag: int = 8) -> list[dict]:
    """A large learning rate and lag 8 on ReasoningChain: the behaviour policy drifts past δ."""
    config = TrainConfig(env="chain", algorithm=algorithm, lag=FixedLag(lag), eval_every=1000, seed=3)
    simulation = Simulation(config)
    return [simulation.step() for _ in range(updates)][4:]  # after the lag has built up


def with_large_step(preset: str) -> AlgorithmConfig:
    return AlgorithmConfig(**{**vars(PRESETS[preset]), "learning_rate": 0.5})


def test_the_sequence_gate_rejects_whole_trajectories_under_drift():
    rows = stale_run(with_large_step("flash_reinforce"))
    assert np.mean([row["trust/acceptance_rate"] for row in rows]) < 0.9


def test_the_token_gate_drops_tokens_but_never_whole_trajectories():
    rows = stale_run(with_large_step("token_gate"))
    assert all(row["trust/acceptance_rate"] == 1.0 for row in rows)
    assert np.mean([row["trust/token_acceptance_rate"] for row in rows]) < 0.95


def test_no_gate_uses_every_token_under_drift():
    rows = stale_run(with_large_step("no_gate"))
    assert all(row["trust/acceptance_rate"] == 1.0 and row["trust/token_acceptance_rate"] == 1.0 for row in rows)


@pytest.mark.parametrize(("preset", "metric", "other"), [
    ("ppo_clip", "trust/clip_fraction", "trust/tis_capped_fraction"),
    ("tis", "trust/tis_capped_fraction", "trust/clip_fraction"),
])
def test_clipping_corrections_clip_some_tokens_under_drift_and_report_it_under_their_own_name(preset, metric, other):
    rows = stale_run(with_large_step(preset))
    assert np.mean([row[metric] for row in rows]) > 0 and all(row[other] == 0.0 for row in rows)


def test_minibatches_take_m_optimizer_steps_per_collected_batch():
    algorithm = MINIBATCHES
    m = algorithm.minibatches * algorithm.epochs
    config = TrainConfig(env="bandit", algorithm=algorithm, lag=FixedLag(0), eval_every=1000)
    simulation = Simulation(config)
    optimizer = simulation.learner.optimizer
    calls = []
    step = optimizer.step
    optimizer.step = lambda *args, **kwargs: calls.append(1) or step(*args, **kwargs)
    rollouts = [simulation.step()["data/rollouts_total"] for _ in range(2 * m)]
    assert m > 1 and len(calls) == 2 * m  # one optimizer step per update
    assert rollouts == [algorithm.batch_size] * m + [2 * algorithm.batch_size] * m  # a new batch every m steps


@pytest.mark.parametrize("preset", sorted(set(PRESETS) - {"flash_reinforce"}))
def test_every_preset_trains_differently_from_flash_reinforce_under_drift(preset):
    """Same seed, same start: a preset that reached the learner unchanged would end at the same parameters.

    Under lag and a large step (so that the corrections, not only the advantages, have work to do).
    """

    def parameters_after_training(name: str) -> np.ndarray:
        config = TrainConfig(env="chain", algorithm=with_large_step(name), lag=FixedLag(4), eval_every=1000, seed=5)
        simulation = Simulation(config)
        for _ in range(8):
            simulation.step()
        return simulation.policy.get_flat().detach().numpy()

    assert not np.allclose(parameters_after_training(preset), parameters_after_training("flash_reinforce"),
                           rtol=0, atol=1e-9)
