"""What plugs into the simulator plugs in as declared: a toy env is its file and one row of ``toy_envs.TOY_ENVS``;
a rollout source has every member of :class:`flashsim.sim.SimulatedSource`, with its signature."""

from __future__ import annotations

import inspect
import json
import textwrap

import gymnasium as gym
import pytest

import toy_envs
from flashsim.cli import main
from flashsim.sim import ENVS, AlgorithmConfig, AsyncWorkers, SimulatedSource, Simulation, TrainConfig, build_tables

COIN_ENV_FILE = '''
"""A throwaway toy env: one prompt, two answers; answer 1 pays with probability ``heads``."""

from dataclasses import dataclass

import numpy as np

from toy_envs.core import ToyEnv, ToyVectorEnv
from toy_envs.tables import MDPTables


@dataclass(frozen=True)
class CoinConfig:
    heads: float = 0.75
    step_duration: float = 2.0


def coin_tables(config: CoinConfig) -> MDPTables:
    return MDPTables(
        horizon=1, num_prompts=1, num_states=1, num_observations=1, num_actions=2,
        observation_of_state=np.zeros(1, np.int64), initial_distribution=np.ones((1, 1)),
        next_state=np.full((1, 2), -1), reward=np.array([[0.0, config.heads]]), tool_call=np.zeros((1, 2)),
        train_prompts=np.zeros(1, np.int64), heldout_prompts=np.zeros(0, np.int64),
        observation_features=np.ones((1, 1)),
    )


class Coin(ToyEnv):
    config_class = CoinConfig
    tables_of = staticmethod(coin_tables)


class CoinVectorEnv(ToyVectorEnv):
    env_class = Coin
'''

COIN_ID = "throwaway/Coin-v0"


@pytest.fixture
def coin_row(tmp_path, monkeypatch):
    """The throwaway env's file in a temporary folder on ``sys.path``, and its row added to the table."""
    (tmp_path / "throwaway_coin.py").write_text(textwrap.dedent(COIN_ENV_FILE))
    monkeypatch.syspath_prepend(str(tmp_path))
    row = toy_envs.EnvRow(COIN_ID, "throwaway_coin:Coin", {"coin": {}, "coin_fair": {"heads": 0.5}})
    monkeypatch.setattr(toy_envs, "TOY_ENVS", (*toy_envs.TOY_ENVS, row))
    yield row
    gym.registry.pop(COIN_ID, None)


def train_json(tmp_path, capsys, env: str) -> tuple[int, dict | str]:
    code = main(["train", "--env", env, "--updates", "3", "--batch-size", "8", "--lag", "workers:2",
                 "--out", str(tmp_path / env), "--no-progress", "--json"])
    out, err = capsys.readouterr()
    return code, json.loads(out) if code == 0 else err


@pytest.mark.slow  # a training run with its curves (~4 s)
def test_a_toy_env_added_as_one_file_and_one_row_trains_through_flashsim_train(coin_row, tmp_path, capsys):
    code, summary = train_json(tmp_path, capsys, "coin_fair")
    assert code == 0, summary
    assert summary["env"] == "coin_fair" and summary["optimal_success_train"] == 0.5  # the row's options reached it
    assert summary["accounting"]["started"] >= 24 and summary["final"]["time/sim_clock"] > 0
    assert gym.spec(COIN_ID).vector_entry_point == "throwaway_coin:CoinVectorEnv"


def test_each_preset_of_a_row_is_an_env_name_with_its_options(coin_row):
    assert build_tables("coin").expected_reward.tolist() == [[0.0, 0.75]]
    assert build_tables("coin_fair").expected_reward.tolist() == [[0.0, 0.5]]
    assert list(ENVS)[-2:] == ["coin", "coin_fair"]


def test_without_its_row_the_throwaway_env_is_unknown(tmp_path, capsys):
    code, error = train_json(tmp_path, capsys, "coin")
    assert code == 2 and "env must be one of the presets bandit, bandit_tiny" in error


def test_the_env_shell_takes_the_configured_latency_unless_one_is_given(coin_row):
    coin_row.register()  # what importing toy_envs does for the rows written in the table
    env = gym.make(COIN_ID)
    assert env.unwrapped._dynamics.latency == toy_envs.Latency(step_duration=2.0)
    env = gym.make(COIN_ID, latency=toy_envs.Latency(step_duration=3.0, tool_latency=1.0))
    assert env.unwrapped._dynamics.latency.step_duration == 3.0


def members(protocol: type) -> dict[str, object]:
    """The methods a Protocol declares, and its attributes (as ``None``)."""
    methods = {name: value for name, value in vars(protocol).items()
               if callable(value) and not name.startswith("_")}
    return {**methods, **dict.fromkeys(protocol.__annotations__)}


def assert_implements(source: object, protocol: type) -> None:
    for name, declared in members(protocol).items():
        assert hasattr(source, name), f"{type(source).__name__} has no {name}"
        if declared is not None:
            implemented = inspect.signature(getattr(type(source), name))
            assert list(implemented.parameters) == list(inspect.signature(declared).parameters), name


@pytest.mark.parametrize("lag", [None, AsyncWorkers(num_workers=2)], ids=["lagged_source", "event_loop"])
def test_each_simulator_source_has_every_member_of_the_rollout_source_protocol(lag):
    config = TrainConfig(env="bandit_tiny", algorithm=AlgorithmConfig(batch_size=4), seed=0,
                         **({"lag": lag} if lag is not None else {}))
    assert_implements(Simulation(config).source, SimulatedSource)


def test_the_protocol_check_fails_for_a_source_missing_a_member():
    class NoLedger:
        def publish(self, snapshot): ...
        def next_batch(self): ...
        def metrics(self): ...
        def check(self): ...
        def state_dict(self): ...
        def load_state_dict(self, state): ...

    class WrongSignature(NoLedger):
        ledger = None

        def next_batch(self, num_trajectories): ...

    with pytest.raises(AssertionError, match="no ledger"):
        assert_implements(NoLedger(), SimulatedSource)
    with pytest.raises(AssertionError, match="next_batch"):
        assert_implements(WrongSignature(), SimulatedSource)
