"""Fixtures shared by the whole suite.

Torch runs on one intra-op thread in every test (restored afterwards). The tensors in these tests are
tiny or memory-bound; with two threads on a busy 2-core machine every small op pays a thread hand-off
and runs got up to 20 times slower (see docs/performance.md). The ``flashsim`` CLI makes the same
choice (``--threads 1``). The session-scoped twin covers the module- and session-scoped fixtures too (built
before any function-scoped fixture): the own-model fixture's warm-up took 149 s on two threads and 11 s on one
(load ≈ 15, docs/performance.md "Test suite").
"""

import pytest
import torch


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
