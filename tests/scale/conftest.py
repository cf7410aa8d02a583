"""Shared fixtures for the scale tests: real tiny transformers models built from a config (no download).

The whole folder is skipped when the ``scale`` extra (transformers, pyyaml) is not installed.
"""

import contextlib
import importlib.util

import pytest

if importlib.util.find_spec("transformers") is None or importlib.util.find_spec("yaml") is None:
    collect_ignore_glob = ["test_*.py"]


@pytest.fixture(scope="session")
def ray_cluster():
    """One local Ray cluster shared by the Ray tests of a session (``test_ray_rollouts``, ``test_engine_restarts``
    in this process, ``test_fleet_failure``'s runs by its address): each start took ~14 s on 2 busy cores, and those
    tests are about engine actors, not about starting a cluster (``test_ray_local_cluster`` and the chaos soak start
    their own). :class:`RayRollouts` joins it (Ray is initialised) and leaves it running at ``close``. Ray is
    imported when a test asks for it, not at collection. Started as a run starts its own, with the same retries of
    a node that timed out in Ray's fixed 30 s registration (seen here at load 8 beside the soak's ``ray start``).
    Its temp dir and token are the session's (``tests/conftest.py``, ``pytest_configure``)."""
    ray = pytest.importorskip("ray")
    from scale.rollouts.ray_sources import _start_ray

    _start_ray(ray, "local")
    yield ray
    ray.shutdown()


@contextlib.contextmanager
def single_thread():
    """Run torch on one thread inside the block (much faster on a busy 2-core machine), then restore."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


@pytest.fixture(scope="session")
def tokenizer():
    from scale.rollouts.tokenizer import CharTokenizer

    return CharTokenizer()


@pytest.fixture(scope="session")
def float64_model(tokenizer):
    """A randomly initialised tiny Llama in float64 (for exact comparisons)."""
    from scale.learner.model import build_tiny_model

    return build_tiny_model(tokenizer, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64, seed=0).double()


@pytest.fixture(scope="session")
def tool_model(tokenizer):
    """A tiny Llama warmed up (100 steps, ~5 s) on demonstrations that always call the calculator."""
    import numpy as np

    from scale.learner.model import build_tiny_model
    from scale.rollouts.prompts import arithmetic_task
    from scale.run.warmup import warmup

    model = build_tiny_model(tokenizer, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64, seed=0)
    train, _ = arithmetic_task(seed=0, num_train=500, num_test=0, max_operand=30, operations="*", tool_fraction=1.0)
    with single_thread():
        warmup(model, tokenizer, train, steps=100, batch_size=32, lr=1e-2, rng=np.random.default_rng(0))
    return model
