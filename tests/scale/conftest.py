"""Shared fixtures for the scale tests: real tiny transformers models built from a config (no download).

The whole folder is skipped when the ``scale`` extra (transformers, pyyaml) is not installed.
"""

import contextlib
import importlib.util
import os
import secrets
import shutil
import tempfile

import pytest

if importlib.util.find_spec("transformers") is None or importlib.util.find_spec("yaml") is None:
    collect_ignore_glob = ["test_*.py"]


@pytest.fixture(scope="session", autouse=True)
def hermetic_ray():
    """Ray's temp dir is this session's own (``$RAY_TMPDIR``, inherited by the runs the tests start), and
    ``$RAY_ADDRESS`` is unset: no test joins or reads the record of a cluster that another session, a helper
    or an old ``ray start`` left on the machine. Short (under /tmp): Ray's socket paths must stay < 108 bytes.
    Token authentication uses a token of the session's own (``$RAY_AUTH_TOKEN``), not ``~/.ray/auth_token``,
    which the first Ray start on a fresh machine writes: a cluster started before that file existed had no token,
    and a run joining it after had one (benchmarks/chaos_soak.py, ``ray_environment``)."""
    keys = ("RAY_TMPDIR", "RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
    saved = {key: os.environ.get(key) for key in keys}
    folder = tempfile.mkdtemp(prefix="ray-", dir="/tmp" if os.path.isdir("/tmp") else None)
    os.environ.update(RAY_TMPDIR=folder, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32))
    os.environ.pop("RAY_ADDRESS", None)
    os.environ.pop("RAY_AUTH_TOKEN_PATH", None)
    yield folder
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def ray_cluster(hermetic_ray):
    """One local Ray cluster shared by the Ray tests of a session (``test_ray_rollouts``, ``test_engine_restarts``
    in this process, ``test_fleet_failure``'s runs by its address): each start took ~14 s on 2 busy cores, and those
    tests are about engine actors, not about starting a cluster (``test_ray_local_cluster`` and the chaos soak start
    their own). :class:`RayRollouts` joins it (Ray is initialised) and leaves it running at ``close``. Ray is
    imported when a test asks for it, not at collection. Started as a run starts its own, with the same retries of
    a node that timed out in Ray's fixed 30 s registration (seen here at load 8 beside the soak's ``ray start``)."""
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
