"""Fixtures of the gradient-variance tests (torch runs on one thread: see ``tests/conftest.py``)."""

import numpy as np
import pytest
import torch

import toy_envs
from flashsim.policies import LinearPolicy, TabularPolicy


@pytest.fixture
def bandit():
    """A 3-prompt × 3-answer bandit with distinct success probabilities, all prompts for training."""
    success = [[0.9, 0.2, 0.5], [0.3, 0.7, 0.1], [0.6, 0.4, 0.8]]
    return toy_envs.PromptBandit(success_probs=success, heldout_fraction=0.0).tables()


@pytest.fixture
def bandit_policy(bandit):
    logits = torch.tensor([[0.5, -0.3, 0.1], [-0.2, 0.4, 0.0], [0.3, 0.0, -0.6]], dtype=torch.float64)
    return TabularPolicy(logits)


@pytest.fixture
def gridworld():
    return toy_envs.ToolGridworld().tables()


def random_tabular(tables, seed: int, scale: float = 0.7) -> TabularPolicy:
    generator = torch.Generator().manual_seed(seed)
    shape = (tables.num_observations, tables.num_actions)
    return TabularPolicy(scale * torch.randn(shape, generator=generator, dtype=torch.float64))


def random_linear(tables, seed: int, scale: float = 0.5) -> LinearPolicy:
    policy = LinearPolicy(torch.tensor(np.array(tables.observation_features)), tables.num_actions)
    generator = torch.Generator().manual_seed(seed)
    policy.set_flat(scale * torch.randn(policy.num_params, generator=generator, dtype=torch.float64))
    return policy


def perturbed(policy, seed: int, scale: float):
    """A copy of ``policy`` with Gaussian noise of std ``scale`` on every parameter (a stale behaviour policy)."""
    generator = torch.Generator().manual_seed(seed)
    copy = policy.snapshot()
    noise = torch.randn(policy.num_params, generator=generator, dtype=torch.float64)
    copy.set_flat(policy.get_flat() + scale * noise)
    return copy
