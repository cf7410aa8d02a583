"""The vectorised path equals the per-batch autograd loop, batch by batch, for every registered loss.

The rollouts are stale (behaviour = a perturbed copy of the learner) and of variable length
(ToolGridworld), so the gates reject, the clips clip and the aggregations differ: every term of
every loss is exercised.
"""

import pytest
import torch

import toy_envs
from flashsim.exact import to_torch
from flashsim.losses import LOSSES, get_loss
from flashsim.variance import measure_gradient
from flashsim.variance.gradients import behavior_snapshot, fast_update_directions
from flashsim.variance.problem import Problem
from flashsim.variance.reference import reference_update_directions
from flashsim.variance.sampling import draw_design, draw_uniforms
from tests.variance.conftest import perturbed, random_linear, random_tabular


def same_batches(tables, policy, behavior, name, *, grouped, budget=8, num_batches=6, seed=0):
    """Per-batch directions and stats from both paths on identical prompts and uniforms."""
    torch_tables = to_torch(tables)
    generator = torch.Generator().manual_seed(seed)
    group_size = 4 if grouped else 1
    design = draw_design(
        torch_tables, num_batches=num_batches, budget=budget, group_size=group_size, replicates=2,
        generator=generator,
    )
    gate = {"delta": 3e-3} if "delta" in get_loss(name).resolved() else {}  # GRPO's clip has no δ
    options = {**gate, "max_tokens": tables.horizon}
    group_ids = design.group_ids if grouped else None
    dynamics = toy_envs.TabularDynamics(tables)
    problem = Problem(dynamics, policy, behavior_snapshot(behavior), get_loss(name), group_ids, options)
    uniforms = draw_uniforms(design.prompts.numel(), tables.horizon, generator)
    fast = fast_update_directions(problem, design.prompts, uniforms)
    reference = reference_update_directions(problem, design.prompts, uniforms)
    return fast, reference


@pytest.mark.parametrize("staleness", [0.15, 0.5], ids=["slightly_stale", "very_stale"])
@pytest.mark.parametrize("name", sorted(n for n, spec in LOSSES.items() if not spec.needs_entropies()))
def test_fast_path_equals_the_reference_loop_for_every_loss_on_stale_rollouts(gridworld, name, staleness):
    policy = random_tabular(gridworld, seed=0)
    behavior = perturbed(policy, seed=1, scale=staleness)
    grouped = LOSSES[name].needs_groups or name == "rloo"
    (fast, fast_stats), (reference, reference_stats) = same_batches(
        gridworld, policy, behavior, name, grouped=grouped
    )
    if staleness < 0.2:  # very stale rollouts may all be rejected (e.g. positive_only's few successes)
        assert fast.abs().max() > 0
    torch.testing.assert_close(fast, reference, rtol=1e-10, atol=1e-14)
    for key, values in reference_stats.items():
        torch.testing.assert_close(fast_stats[key].to(torch.float64), values.to(torch.float64), msg=key)


def test_stale_rollouts_exercise_the_gates_clips_and_masks(gridworld):
    policy = random_tabular(gridworld, seed=0)

    def mean_stat(name, grouped, staleness, key):
        behavior = perturbed(policy, seed=1, scale=staleness)
        (_, stats), _ = same_batches(gridworld, policy, behavior, name, grouped=grouped)
        return float(stats[key].mean())

    assert 0 < mean_stat("flash_reinforce", False, 0.15, "acceptance_rate") < 1
    assert 0 < mean_stat("token_gate", False, 0.15, "token_acceptance_rate") < 1
    assert mean_stat("grpo", True, 0.5, "clipped_tokens") > 0
    assert mean_stat("tis", False, 0.5, "clipped_tokens") > 0
    assert mean_stat("ratio_mask", False, 0.5, "token_acceptance_rate") < 1


@pytest.mark.parametrize("name", ["flash_reinforce", "grpo", "rloo"])
def test_fast_path_equals_the_reference_loop_for_a_linear_policy(name):
    import toy_envs

    tables = toy_envs.ReasoningChain().tables()
    policy = random_linear(tables, seed=2)
    behavior = perturbed(policy, seed=3, scale=0.1)
    (fast, _), (reference, _) = same_batches(tables, policy, behavior, name, grouped=name != "flash_reinforce")
    torch.testing.assert_close(fast, reference, rtol=1e-10, atol=1e-14)


def test_the_two_methods_give_the_same_report(gridworld):
    policy = random_tabular(gridworld, seed=4)
    common = dict(estimator="grpo", budget=16, group_size=4, num_batches=8, seed=7, bootstrap=20)
    behavior = perturbed(policy, seed=5, scale=0.2)
    fast = measure_gradient(gridworld, policy, behavior_policy=behavior, method="fast", **common)
    reference = measure_gradient(gridworld, policy, behavior_policy=behavior, method="reference", **common)
    torch.testing.assert_close(fast.mean_gradient, reference.mean_gradient, rtol=1e-10, atol=1e-14)
    fast_fields, reference_fields = fast.to_dict(), reference.to_dict()
    assert fast_fields.keys() == reference_fields.keys()
    for key, value in fast_fields.items():
        if isinstance(value, float):
            assert reference_fields[key] == pytest.approx(value, rel=1e-9, abs=1e-14), key
        else:  # text and integer fields (estimator name, budget, ...) must match exactly
            assert reference_fields[key] == value, key


def test_same_seed_gives_identical_reports_and_another_seed_does_not(gridworld):
    policy = random_tabular(gridworld, seed=6)
    common = dict(estimator="flash_reinforce", budget=16, num_batches=8, bootstrap=10)
    first = measure_gradient(gridworld, policy, seed=11, **common).to_dict(include_vectors=True)
    again = measure_gradient(gridworld, policy, seed=11, **common).to_dict(include_vectors=True)
    other = measure_gradient(gridworld, policy, seed=12, **common).to_dict(include_vectors=True)
    assert first == again
    assert first["grad/mean_gradient"] != other["grad/mean_gradient"]


def test_measure_gradient_leaves_the_policy_untouched(gridworld):
    policy = random_tabular(gridworld, seed=8)
    before = policy.get_flat().clone()
    measure_gradient(gridworld, policy, estimator="flash_reinforce", budget=8, num_batches=4, seed=0, bootstrap=0)
    assert torch.equal(policy.get_flat(), before)
    assert all(p.grad is None for p in policy.parameters())
