"""Simulator tests run torch on one thread (restored afterwards).

The simulator's tensors are tiny ([B, T] with B ≤ 128 and T ≤ 20); with two intra-op threads on a
busy 2-core machine every small op pays thread hand-off, and runs get up to 20 times slower. The
``flashsim`` CLI makes the same choice (``--threads 1``).
"""

import pytest
import torch


@pytest.fixture(autouse=True)
def one_torch_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
