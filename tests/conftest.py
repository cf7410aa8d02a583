"""Fixtures shared by the whole suite.

Torch runs on one intra-op thread in every test (restored afterwards). The tensors in these tests are
tiny or memory-bound; with two threads on a busy 2-core machine every small op pays a thread hand-off
and runs got up to 20 times slower (see docs/performance.md). The ``flashsim`` CLI makes the same
choice (``--threads 1``). The session-scoped twin covers the module- and session-scoped fixtures too (built
before any function-scoped fixture): the own-model fixture's warm-up took 149 s on two threads and 11 s on one
(load ≈ 15, docs/performance.md "Test suite").
"""

import os
import secrets
import shutil
import tempfile

import pytest
import torch

from scale.testing import RAY_KEYS, hermetic_ray_environment


def pytest_configure(config):
    """Ray is hermetic in every test process (:mod:`scale.testing`): a temp dir of this process's own (inherited
    by the runs the tests start), no ``$RAY_ADDRESS``, and a token of its own. Set here, before collection, because
    Ray reads these settings once, when it is imported, and in CI other tests import it first (TRL imports vLLM and
    Ray whenever they are installed): set later, the driver ran without a token against a cluster that wanted one.
    Short (under /tmp): Ray's socket paths must stay < 108 bytes."""
    config.stash_ray_env = {key: os.environ.get(key) for key in RAY_KEYS}
    folder = tempfile.mkdtemp(prefix="ray-", dir="/tmp" if os.path.isdir("/tmp") else None)
    env = hermetic_ray_environment(folder, secrets.token_hex(32))
    for key in RAY_KEYS:
        if key in env:
            os.environ[key] = env[key]
        else:
            os.environ.pop(key, None)


def pytest_unconfigure(config):
    folder = os.environ.get("RAY_TMPDIR")
    for key, value in getattr(config, "stash_ray_env", {}).items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    if folder:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def one_torch_thread_for_shared_fixtures():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def one_torch_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


LONGEST_FIRST = (
    "tests/scale/test_chaos_soak.py",
    "tests/scale/test_gpu_smoke.py",
    "tests/scale/test_fleet_failure.py",
    "tests/scale/test_transformer_claims.py",
    "tests/scale/test_bench_vs_trl.py",
    "tests/scale/test_vllm_torchrun.py",
    "tests/test_tutorials.py",
    "tests/scale/test_ray_rollouts.py",
    "tests/scale/test_fsdp_run.py",
    "tests/experiments/test_cli_reproduce.py",
    "tests/scale/test_vllm_engine.py",
    "tests/integrations/test_trl_two_processes.py",
    "tests/test_docs_blocks.py",
    "tests/scale/test_own_model.py",
    "tests/scale/test_own_data.py",
    "tests/scale/test_data_parallel.py",
)
"""Modules whose tests took the longest (docs/performance.md, "Test suite": the idle 2-core run of issue 43 and,
for the CI-only ones, CI's durations), longest first. Only the order of the xdist schedule depends on it: a module
missing here still runs."""


def _worksteal_slices(count: int, workers: int) -> list[int]:
    """The sizes of the first batches pytest-xdist's ``worksteal`` scheduler hands to ``workers`` workers."""
    sizes = []
    for remaining in range(workers, 0, -1):
        sizes.append((count - sum(sizes)) // remaining)
    return sizes


def pytest_collection_modifyitems(config, items):
    """Under xdist, start each worker on its share of the slow modules, the longest first.

    ``worksteal`` gives worker k the k-th contiguous slice of the collection; an idle worker then steals from the
    end of a busy one's queue, but never the test running. With the modules in file order a worker could pick
    up a 100 s test last while the other sat idle. Here each slice begins with whole modules that hold a slow test
    (dealt round-robin, :data:`LONGEST_FIRST` first, so a module's fixtures are built once) and ends with fast
    tests, which are what gets stolen at the end. Without xdist (``-n 0``) the order is left alone.
    """
    workers = getattr(config, "workerinput", {}).get("workercount", 1)
    if workers < 2:
        return
    modules: dict[str, list] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::")[0], []).append(item)
    slow = [name for name, group in modules.items() if any(item.get_closest_marker("slow") for item in group)]
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    slow.sort(key=lambda name: rank.get(name, len(rank)))  # stable: the other slow modules in file order
    # The modules on the session's Ray cluster (tests/scale/conftest.py::ray_cluster) are dealt as one, so that one
    # worker starts a cluster for them all: a second cluster cost ~20 CPU-s (its start and its daemons), on a
    # machine whose two cores the suite keeps busy (docs/performance.md, "Issue 43, third pass").
    on_cluster = [name for name in slow if any("ray_cluster" in item.fixturenames for item in modules[name])]
    units = []  # lists of modules, each dealt whole; the cluster's modules at the place of the first of them
    for name in slow:
        if name not in on_cluster:
            units.append([name])
        elif name == on_cluster[0]:
            units.append(on_cluster)
    dealt: list[list] = [[] for _ in range(workers)]
    for i, unit in enumerate(units):
        dealt[i % workers].extend(item for name in unit for item in modules[name])
    slow_names = set(slow)
    fast = [item for name, group in modules.items() if name not in slow_names for item in group]
    ordered = []
    for own, size in zip(dealt, _worksteal_slices(len(items), workers)):
        fill = max(0, size - len(own))
        ordered.extend(own + fast[:fill])
        fast = fast[fill:]
    ordered.extend(fast)
    assert len(ordered) == len(items)
    items[:] = ordered
