"""Specs of flashsim.policies: softmax log-probabilities, seeded sampling, flat parameters, snapshots."""

from __future__ import annotations

import math
import time

import pytest
import torch
from torch.testing import assert_close

import toy_envs
from flashsim.policies import POLICY_KINDS, LinearPolicy, MLPPolicy, TabularPolicy, make_policy


def seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def random_policy(kind: str, dtype: torch.dtype = torch.float64) -> torch.nn.Module:
    """A policy of ``kind`` on the default ToolGridworld with random (non-uniform) parameters."""
    tables = toy_envs.ToolGridworld().tables()
    policy = make_policy(kind, tables, dtype=dtype, generator=seeded(0))
    policy.set_flat(torch.randn(policy.num_params, generator=seeded(1), dtype=dtype))
    return policy


@pytest.mark.parametrize("kind", POLICY_KINDS)
def test_log_prob_is_the_log_softmax_of_the_logits(kind):
    policy = random_policy(kind)
    obs = torch.tensor([0, 5, 799, 5])
    actions = torch.tensor([4, 0, 2, 1])
    expected = torch.log_softmax(policy.all_logits()[obs], dim=-1)[torch.arange(4), actions]
    assert_close(policy.log_prob(obs, actions), expected)
    assert_close(policy.logits(obs), policy.all_logits()[obs])


@pytest.mark.parametrize("kind", POLICY_KINDS)
def test_sampling_follows_the_policy_probabilities(kind):
    policy = random_policy(kind)
    obs = torch.full((200_000,), 37)
    actions, log_probs = policy.sample(obs, seeded(2))
    probs = torch.softmax(policy.all_logits()[37], dim=-1)
    frequencies = torch.bincount(actions, minlength=5).double() / obs.numel()
    # 5 standard errors of a frequency with n = 2e5 is at most 5 * 0.5 / sqrt(2e5) ~ 0.0056
    assert_close(frequencies, probs, atol=0.0056, rtol=0)
    assert_close(log_probs, policy.log_prob(obs, actions))


def test_the_same_generator_seed_gives_the_same_samples():
    policy = random_policy("tabular")
    obs = torch.randint(0, 800, (1000,), generator=seeded(3))
    first, second = policy.sample(obs, seeded(4)), policy.sample(obs, seeded(4))
    assert torch.equal(first[0], second[0])
    assert not torch.equal(first[0], policy.sample(obs, seeded(5))[0])


def test_sampling_a_hundred_thousand_observations_is_fast():
    policy = random_policy("linear", dtype=torch.float32)
    obs = torch.randint(0, 800, (100_000,), generator=seeded(6))
    policy.sample(obs, seeded(7))
    start = time.perf_counter()
    actions, log_probs = policy.sample(obs, seeded(7))
    assert time.perf_counter() - start < 0.5  # ~10 ms on 2 CPU cores
    assert actions.shape == log_probs.shape == (100_000,)


@pytest.mark.parametrize("kind", POLICY_KINDS)
def test_get_flat_and_set_flat_round_trip(kind):
    policy = random_policy(kind)
    vector = torch.randn(policy.num_params, generator=seeded(8), dtype=torch.float64)
    policy.set_flat(vector)
    assert torch.equal(policy.get_flat(), vector)
    assert policy.get_flat().shape == (sum(p.numel() for p in policy.parameters()),)


def test_a_snapshot_is_detached_and_does_not_follow_later_updates():
    policy = random_policy("mlp")
    snapshot = policy.snapshot()
    before = snapshot.get_flat().clone()
    policy.set_flat(policy.get_flat() + 1.0)
    assert torch.equal(snapshot.get_flat(), before)
    assert not any(p.requires_grad for p in snapshot.parameters())
    assert snapshot.log_prob(torch.tensor([0]), torch.tensor([0])).grad_fn is None


def test_entropy_of_a_uniform_policy_is_log_num_actions():
    policy = TabularPolicy(torch.zeros(4, 3, dtype=torch.float64))
    assert_close(policy.entropy(torch.arange(4)), torch.full((4,), math.log(3.0), dtype=torch.float64))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kind", POLICY_KINDS)
def test_policies_work_in_the_dtype_of_their_parameters(kind, dtype):
    policy = random_policy(kind, dtype=dtype)
    obs = torch.tensor([1, 2])
    assert policy.logits(obs).dtype == dtype
    assert policy.sample(obs, seeded(9))[1].dtype == dtype
    assert policy.get_flat().dtype == dtype


def test_linear_and_mlp_policies_start_uniform():
    features = torch.randn(6, 3, generator=seeded(10), dtype=torch.float64)
    for policy in (LinearPolicy(features, 4), MLPPolicy(features, 4, generator=seeded(11))):
        assert_close(policy.all_logits(), torch.zeros(6, 4, dtype=torch.float64))


def test_log_prob_is_differentiable_with_respect_to_the_parameters():
    policy = random_policy("linear")
    policy.log_prob(torch.tensor([3]), torch.tensor([1])).sum().backward()
    assert policy.weight.grad is not None and policy.weight.grad.abs().sum() > 0


BAD_POLICY_ARGUMENTS = [
    pytest.param(lambda: TabularPolicy(torch.zeros(3)), ValueError, "num_observations", id="tabular-1d-logits"),
    pytest.param(lambda: TabularPolicy(torch.zeros(3, 2, dtype=torch.long)), ValueError, "floating", id="tabular-int"),
    pytest.param(lambda: LinearPolicy(torch.zeros(3), 2), ValueError, "features", id="linear-1d-features"),
    pytest.param(lambda: LinearPolicy(torch.zeros(3, 2), 0), ValueError, "num_actions", id="linear-no-actions"),
    pytest.param(
        lambda: MLPPolicy(torch.zeros(3, 2), 2, generator=None), TypeError, "generator", id="mlp-no-generator"
    ),
    pytest.param(
        lambda: MLPPolicy(torch.zeros(3, 2), 2, generator=seeded(0), hidden_sizes=(0,)),
        ValueError,
        "hidden_sizes",
        id="mlp-empty-layer",
    ),
    pytest.param(
        lambda: make_policy("transformer", toy_envs.PromptBandit().tables()),
        ValueError,
        "valid kinds",
        id="unknown-kind",
    ),
    pytest.param(
        lambda: make_policy("mlp", toy_envs.PromptBandit().tables()),
        ValueError,
        "generator",
        id="mlp-kind-no-generator",
    ),
    pytest.param(
        lambda: TabularPolicy(torch.zeros(3, 2)).set_flat(torch.zeros(5)), ValueError, "num_params", id="set-flat-size"
    ),
    pytest.param(
        lambda: TabularPolicy(torch.zeros(3, 2)).log_prob(torch.tensor([0.0]), torch.tensor([0])),
        TypeError,
        "obs",
        id="float-observations",
    ),
]


@pytest.mark.parametrize(("call", "error", "match"), BAD_POLICY_ARGUMENTS)
def test_bad_policy_arguments_raise_errors_that_name_the_argument(call, error, match):
    with pytest.raises(error, match=match):
        call()
