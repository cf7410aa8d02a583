"""The simulator's Adam and SGD take the same steps as torch.optim's."""

from __future__ import annotations

import pytest
import torch

from flashsim.sim.optim import SGD, Adam


@pytest.mark.parametrize(("ours", "reference"), [(Adam, torch.optim.Adam), (SGD, torch.optim.SGD)], ids=["adam", "sgd"])
def test_steps_match_torch_optim_for_random_gradients(ours, reference):
    generator = torch.Generator().manual_seed(0)
    start = torch.randn(5, 3, dtype=torch.float64, generator=generator)
    mine, theirs = torch.nn.Parameter(start.clone()), torch.nn.Parameter(start.clone())
    optimizer, expected = ours([mine], lr=0.05), reference([theirs], lr=0.05)
    for _ in range(20):
        gradient = torch.randn(5, 3, dtype=torch.float64, generator=generator)
        optimizer.step([gradient])
        theirs.grad = gradient.clone()
        expected.step()
        torch.testing.assert_close(mine, theirs, rtol=1e-12, atol=1e-14)


def test_adam_state_round_trip_continues_identically():
    parameter = torch.nn.Parameter(torch.zeros(4, dtype=torch.float64))
    optimizer = Adam([parameter], lr=0.1)
    optimizer.step([torch.ones(4, dtype=torch.float64)])
    saved, weights = optimizer.state_dict(), parameter.detach().clone()
    optimizer.step([torch.arange(4.0, dtype=torch.float64)])
    after = parameter.detach().clone()
    with torch.no_grad():
        parameter.copy_(weights)
    optimizer.load_state_dict(saved)
    optimizer.step([torch.arange(4.0, dtype=torch.float64)])
    assert torch.equal(parameter.detach(), after)
