"""Configs of the simulator: the ``--lag`` syntax, validation messages, presets, help text, strict loading."""

from __future__ import annotations

import pickle

import pytest

from flashsim.config import assign, field_docs, from_dict, load, to_dict
from flashsim.losses import LOSSES
from flashsim.sim.config import (
    AlgorithmConfig,
    AsyncWorkers,
    FixedLag,
    RandomLag,
    TimingModel,
    TrainConfig,
    parse_lag,
)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("0", FixedLag(0)),
        ("8", FixedLag(8)),
        ("random:4", RandomLag(max_lag=4)),
        ("random:6:geometric", RandomLag(max_lag=6, distribution="geometric")),
        ("random:6:poisson:1.5", RandomLag(max_lag=6, distribution="poisson", mean=1.5)),
        ("workers:16", AsyncWorkers(num_workers=16)),
        ("workers:16:sync", AsyncWorkers(num_workers=16, synchronous=True)),
    ],
    ids=["zero", "fixed", "random", "geometric", "poisson", "workers", "sync-workers"],
)
def test_parse_lag_reads_every_documented_form(spec, expected):
    assert parse_lag(spec) == expected


@pytest.mark.parametrize(
    "spec",
    ["-1", "abc", "random", "random:x", "random:4:cauchy", "workers", "workers:0", "workers:4:async", "fixed:2"],
    ids=["negative", "word", "random-without-max", "random-bad-max", "unknown-distribution", "workers-without-n",
         "zero-workers", "bad-workers-mode", "unknown-kind"],
)
def test_parse_lag_rejects_malformed_specs_with_the_syntax(spec):
    with pytest.raises(ValueError, match="lag"):
        parse_lag(spec)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: AlgorithmConfig(batch_size=10, group_size=4), "multiple of group_size"),
        (lambda: AlgorithmConfig(batch_size=16, group_size=4, minibatches=8), "whole groups"),
        (lambda: AlgorithmConfig(learning_rate=0.0), "learning_rate"),
        (lambda: AlgorithmConfig(optimizer="lion"), "optimizer"),
        (lambda: TimingModel(step_duration=-1.0), "step_duration"),
        (lambda: TimingModel(straggler_factor=0.5), "straggler_factor"),
        (lambda: AsyncWorkers(crash_prob=1.5), "crash_prob"),
        (lambda: TrainConfig(updates=0), "updates"),
        (lambda: TrainConfig(policy="transformer"), "policy"),
        (lambda: TrainConfig(lag=AsyncWorkers(max_queued=4)), "max_queued"),
    ],
    ids=["batch-not-groups", "minibatch-splits-group", "zero-lr", "unknown-optimizer", "negative-time",
         "straggler-speedup", "crash-prob-above-one", "no-updates", "unknown-policy", "queue-below-batch"],
)
def test_invalid_configs_raise_naming_the_field(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def test_integer_fields_reject_floats_and_bools_with_type_error():
    with pytest.raises(TypeError, match="batch_size"):
        AlgorithmConfig(batch_size=12.0)
    with pytest.raises(TypeError, match="lag"):
        FixedLag(True)


def test_the_algorithm_of_a_loss_takes_its_group_size_from_the_loss_table():
    for name, spec in LOSSES.items():
        assert AlgorithmConfig.for_loss(name) == AlgorithmConfig(name, group_size=spec.group_size)
    assert {name for name, spec in LOSSES.items() if spec.group_size > 1} == {"grpo", "rloo", "dr_grpo"}
    assert all(LOSSES[name].group_size > 1 for name in LOSSES if LOSSES[name].needs_groups)
    assert AlgorithmConfig.for_loss("flash_reinforce", minibatches=4).minibatches == 4
    with pytest.raises(ValueError, match="loss must be one of .*flash_reinforce"):
        AlgorithmConfig.for_loss("minibatches")


def test_field_docstrings_are_the_help_text_of_every_field():
    for cls in (TrainConfig, AlgorithmConfig, TimingModel, AsyncWorkers, RandomLag, FixedLag):
        help_text = field_docs(cls)
        assert set(help_text) == set(cls.__dataclass_fields__), cls.__name__
        assert all(text.endswith((".", ")")) for text in help_text.values()), cls.__name__


def test_configs_pickle_and_compare_equal_after_a_round_trip():
    config = TrainConfig(algorithm=AlgorithmConfig(loss_options={"delta": 0.01}), lag=RandomLag(3))
    assert pickle.loads(pickle.dumps(config)) == config
    assert config.with_updates(7).updates == 7 and config.with_updates(7).lag == config.lag


def test_a_config_survives_plain_data_and_back_unchanged():
    config = TrainConfig(algorithm=AlgorithmConfig(loss_options={"delta": 0.01}), lag=AsyncWorkers(8, crash_prob=0.1),
                         timing=TimingModel(update_time=2.0))
    assert from_dict(TrainConfig, to_dict(config)) == config


def test_set_assignments_are_typed_by_the_field_they_set():
    config = load(TrainConfig, assignments=["lag=workers:8", "lag.crash_prob=0.25", "algorithm.batch_size=16",
                                            "algorithm.loss_options.delta=0.01", "timing.tool_latency_sigma=0.5"])
    assert config.lag == AsyncWorkers(8, crash_prob=0.25) and config.algorithm.batch_size == 16
    assert config.algorithm.loss_options == {"delta": 0.01} and config.timing.tool_latency_sigma == 0.5


def test_set_refines_a_lag_given_in_text_form_in_the_file(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("lag: workers:8\n")
    assert load(TrainConfig, path, ["lag.crash_prob=0.2"]).lag == AsyncWorkers(8, crash_prob=0.2)
    with pytest.raises(ValueError, match=r"lag\.crash_prob"):
        load(TrainConfig, assignments=["lag.crash_prob=0.2"])  # the default lag is a FixedLag


def test_a_yaml_file_loads_strictly_into_the_dataclasses(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("updates: 12\nlag: random:4\nalgorithm:\n  loss: grpo\n  group_size: 4\n  batch_size: 16\n")
    config = load(TrainConfig, path, ["seed=3"])
    assert (config.updates, config.seed, config.lag, config.algorithm.group_size) == (12, 3, RandomLag(4), 4)


@pytest.mark.parametrize(
    ("data", "error", "key"),
    [
        ({"algorithm": {"bogus": 1}}, ValueError, "algorithm.bogus"),
        ({"updatez": 3}, ValueError, "updatez"),
        ({"updates": 2.5}, TypeError, "updates"),
        ({"updates": "10"}, TypeError, "updates"),
        ({"algorithm": {"batch_size": True}}, TypeError, "algorithm.batch_size"),
        ({"algorithm": {"learning_rate": "fast"}}, TypeError, "algorithm.learning_rate"),
        ({"algorithm": {"batch_size": 0}}, ValueError, "algorithm.batch_size"),
        ({"lag": {"type": "AsyncWorkers", "crash_prob": 1.5}}, ValueError, "lag.crash_prob"),
        ({"lag": {"type": "Teleport"}}, ValueError, "lag.type"),
        ({"timing": {"straggler_factor": 0.5}}, ValueError, "timing.straggler_factor"),
        ({"algorithm": 3}, TypeError, "algorithm"),
    ],
    ids=["unknown-section-key", "unknown-key", "float-for-int", "string-for-int", "bool-for-int", "word-for-float",
         "out-of-range", "union-section-range", "unknown-union-type", "nested-optional-range", "scalar-for-section"],
)
def test_strict_loading_errors_name_the_key(data, error, key):
    with pytest.raises(error, match=key.replace(".", r"\.")):
        from_dict(TrainConfig, data)


@pytest.mark.parametrize(
    ("path", "text", "error"),
    [("updates", "ten", TypeError), ("algorithm.nope", "1", ValueError), ("lag", "sometimes", ValueError),
     ("algorithm", "3", TypeError)],
    ids=["not-an-int", "unknown-key", "bad-lag-spec", "a-section"],
)
def test_bad_set_assignments_name_the_key(path, text, error):
    with pytest.raises(error, match=path.split(".")[-1]):
        assign(TrainConfig, {}, path, text)
