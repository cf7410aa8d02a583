"""The learner's state digest (:mod:`scale.learner.digest`): equal states agree bitwise, any difference in the
weights, the optimizer state, the schedule or the version is a mismatch."""

import copy

import torch

from scale.learner.digest import canonical_name, state_digest


def _state(steps: int = 2, seed: int = 0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2)).double()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: min(1.0, (k + 1) / 4))
    for k in range(steps):
        optimizer.zero_grad()
        model(torch.full((2, 3), float(k + 1), dtype=torch.float64)).square().sum().backward()
        optimizer.step()
        scheduler.step()
    return model, optimizer, scheduler


def test_a_state_and_its_round_trip_through_state_dicts_have_one_digest():
    model, optimizer, scheduler = _state()
    digest = state_digest(model, optimizer, scheduler, 2)
    assert len(digest) == 64 and digest == state_digest(model, optimizer, scheduler, 2)
    twin, twin_optimizer, twin_scheduler = _state(steps=0, seed=1)
    twin.load_state_dict(model.state_dict())
    twin_optimizer.load_state_dict(optimizer.state_dict())
    twin_scheduler.load_state_dict(scheduler.state_dict())
    assert state_digest(twin, twin_optimizer, twin_scheduler, 2) == digest


def test_any_difference_in_weights_optimizer_state_schedule_or_version_changes_the_digest():
    model, optimizer, scheduler = _state()
    digest = state_digest(model, optimizer, scheduler, 2)
    assert state_digest(model, optimizer, scheduler, 3) != digest  # the version
    assert state_digest(*_state(steps=3)[:3], 2) != digest  # one more step
    nudged = copy.deepcopy(model)
    with torch.no_grad():
        weight = nudged[0].weight
        weight[1, 2] = torch.nextafter(weight[1, 2], torch.tensor(1.0, dtype=torch.float64))  # one ulp
    assert state_digest(nudged, optimizer, scheduler, 2) != digest
    swapped = copy.deepcopy(model)
    with torch.no_grad():
        swapped[0].weight[[0, 1]] = swapped[0].weight[[1, 0]]  # the same rows in another order
    assert state_digest(swapped, optimizer, scheduler, 2) != digest
    # An optimizer state that does not belong to the weights: the moments of one step fewer.
    _, older_optimizer, _ = _state(steps=1)
    mixed = torch.optim.AdamW(model.parameters(), lr=1e-2)
    mixed.load_state_dict(older_optimizer.state_dict())
    assert state_digest(model, mixed, scheduler, 2) != digest
    later = copy.deepcopy(scheduler.state_dict())
    later["last_epoch"] += 1
    scheduler.load_state_dict(later)
    assert state_digest(model, optimizer, scheduler, 2) != digest


def test_wrapper_parts_are_left_out_of_parameter_names():
    assert canonical_name("model.layers.0._checkpoint_wrapped_module.mlp.up_proj.weight") == \
        "model.layers.0.mlp.up_proj.weight"
