"""Small softmax policies over integer observations (the toy envs' ``Discrete`` observations).

Every policy maps observation indices to action logits; the three kinds differ only in how:
:class:`TabularPolicy` holds a logit table ``[O, A]``, :class:`LinearPolicy` computes
``features[o] @ weight + bias`` and :class:`MLPPolicy` a small tanh network of ``features[o]``. All
work in the dtype of their parameters (float64 for exact checks, float32 is fine for simulation);
the module never touches global random state — sampling takes a ``torch.Generator``.

Glossary: N observations in a batch, O observations, A actions, d feature size.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from flashsim.validation import check_int

#: Smallest uniform for Gumbel-max sampling: keeps ``-log(-log(u))`` finite when ``torch.rand`` returns 0.
_GUMBEL_TINY = 1e-20


class Policy(nn.Module):
    """Base class: a softmax policy over ``num_observations`` observation indices.

    Subclasses implement :meth:`logits`; everything else (log-probabilities, sampling, entropy, flat
    parameters, snapshots) is shared.
    """

    num_observations: int
    num_actions: int

    def logits(self, obs: torch.Tensor) -> torch.Tensor:
        """Action logits of a batch of observations. Shape: ``obs [N] long -> [N, A]``."""
        raise NotImplementedError

    def all_logits(self) -> torch.Tensor:
        """Logits of every observation, differentiable. Shape: ``[O, A]``."""
        device = next(self.parameters()).device
        return self.logits(torch.arange(self.num_observations, device=device))

    def log_prob(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """``log pi(actions | obs)``, differentiable. Shape: ``obs, actions [N] long -> [N]``."""
        log_probs = torch.log_softmax(self.logits(obs), dim=-1)
        return log_probs.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)

    def entropy(self, obs: torch.Tensor) -> torch.Tensor:
        """Entropy of ``pi(. | obs)`` in nats, differentiable. Shape: ``obs [N] long -> [N]``."""
        log_probs = torch.log_softmax(self.logits(obs), dim=-1)
        return -(log_probs.exp() * log_probs).sum(-1)

    @torch.no_grad()
    def sample(self, obs: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """Sample actions by Gumbel-max with ``generator``; return them and their log-probabilities.

        Shape:
            obs: ``[N] long``; returns ``(actions [N] long, log_probs [N])``.
        """
        log_probs = torch.log_softmax(self.logits(obs), dim=-1)
        uniforms = torch.rand(log_probs.shape, generator=generator, dtype=log_probs.dtype, device=log_probs.device)
        gumbel = -torch.log(-torch.log(uniforms.clamp_min(_GUMBEL_TINY)))
        actions = torch.argmax(log_probs + gumbel, dim=-1)
        return actions, log_probs.gather(-1, actions.unsqueeze(-1)).squeeze(-1)

    @property
    def num_params(self) -> int:
        """Number of scalar parameters (the length of :meth:`get_flat`)."""
        return sum(parameter.numel() for parameter in self.parameters())

    def get_flat(self) -> torch.Tensor:
        """All parameters as one detached vector, in ``self.parameters()`` order. Shape: ``[num_params]``."""
        return torch.cat([parameter.detach().reshape(-1) for parameter in self.parameters()])

    @torch.no_grad()
    def set_flat(self, vector: torch.Tensor) -> None:
        """Overwrite all parameters from a vector in :meth:`get_flat` layout. Shape: ``[num_params]``."""
        if not isinstance(vector, torch.Tensor) or vector.shape != (self.num_params,):
            shape = tuple(vector.shape) if isinstance(vector, torch.Tensor) else type(vector).__name__
            raise ValueError(f"vector must be a tensor of shape ({self.num_params},) (num_params), got {shape}.")
        offset = 0
        for parameter in self.parameters():
            parameter.copy_(vector[offset : offset + parameter.numel()].view_as(parameter))
            offset += parameter.numel()

    def snapshot(self) -> Policy:
        """A detached deep copy (e.g. the behaviour policy of a rollout); later updates do not reach it."""
        clone = copy.deepcopy(self)
        clone.requires_grad_(False)
        return clone

    def _check_obs(self, obs: torch.Tensor) -> None:
        if obs.dtype not in (torch.int64, torch.int32):
            raise TypeError(f"obs must be an integer (long) tensor of observation indices, got {obs.dtype}.")


def _as_features(features: object, dtype: torch.dtype | None) -> torch.Tensor:
    tensor = torch.as_tensor(features)
    if tensor.ndim != 2 or tensor.shape[0] < 1 or tensor.shape[1] < 1:
        raise ValueError(f"features must have shape [O, d] (one row per observation), got {list(tensor.shape)}.")
    return tensor.to(dtype if dtype is not None else (tensor.dtype if tensor.is_floating_point() else torch.float64))


def _check_num_actions(num_actions: int) -> int:
    return check_int("num_actions", num_actions, low=1)


class TabularPolicy(Policy):
    """One free logit per (observation, action): ``pi(a | o) = softmax(logits[o])[a]``.

    Args:
        logits: initial logit table; its dtype and device are the policy's.

    Shape:
        logits: ``[O, A]`` floating.

    Example:
        >>> policy = TabularPolicy(torch.zeros(3, 2, dtype=torch.float64))
        >>> policy.log_prob(torch.tensor([0, 2]), torch.tensor([1, 0])).exp().tolist()
        [0.5, 0.5]
    """

    def __init__(self, logits: torch.Tensor):
        super().__init__()
        if not isinstance(logits, torch.Tensor) or logits.ndim != 2 or not logits.is_floating_point():
            raise ValueError("logits must be a floating tensor of shape [num_observations, num_actions].")
        self.table = nn.Parameter(logits.detach().clone())
        self.num_observations, self.num_actions = logits.shape

    def logits(self, obs: torch.Tensor) -> torch.Tensor:
        self._check_obs(obs)
        return self.table[obs]

    def all_logits(self) -> torch.Tensor:
        return self.table


class LinearPolicy(Policy):
    """Logits linear in fixed per-observation features: ``features[o] @ weight + bias``.

    Starts uniform (zero weights). With the toy envs' prompt features it generalises to held-out prompts.

    Args:
        features: ``[O, d]`` features (e.g. ``tables.observation_features``), stored as a buffer.
        num_actions: A.
        bias: add a per-action bias.
        dtype: parameter dtype (default: the features' floating dtype, float64 for numpy input).

    Example:
        >>> policy = LinearPolicy(torch.eye(2, dtype=torch.float64), num_actions=3)
        >>> policy.num_params, policy.all_logits().shape
        (9, torch.Size([2, 3]))
    """

    def __init__(self, features: object, num_actions: int, *, bias: bool = True, dtype: torch.dtype | None = None):
        super().__init__()
        features = _as_features(features, dtype)
        self.register_buffer("features", features)
        self.num_observations, self.num_actions = features.shape[0], _check_num_actions(num_actions)
        self.weight = nn.Parameter(torch.zeros(features.shape[1], num_actions, dtype=features.dtype))
        self.bias = nn.Parameter(torch.zeros(num_actions, dtype=features.dtype)) if bias else None

    def logits(self, obs: torch.Tensor) -> torch.Tensor:
        self._check_obs(obs)
        logits = self.features[obs] @ self.weight
        return logits if self.bias is None else logits + self.bias

    def all_logits(self) -> torch.Tensor:
        logits = self.features @ self.weight
        return logits if self.bias is None else logits + self.bias


class MLPPolicy(Policy):
    """A tanh MLP of the per-observation features; the output layer starts at zero (uniform policy).

    Args:
        features: ``[O, d]`` features, stored as a buffer.
        num_actions: A.
        generator: initialises the hidden layers (PyTorch's default Linear initialisation scheme).
        hidden_sizes: widths of the hidden layers.
        dtype: parameter dtype (default: the features' floating dtype, float64 for numpy input).
    """

    def __init__(
        self,
        features: object,
        num_actions: int,
        *,
        generator: torch.Generator,
        hidden_sizes: Sequence[int] = (32,),
        dtype: torch.dtype | None = None,
    ):
        super().__init__()
        features = _as_features(features, dtype)
        if not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator (seeded by the caller), got {type(generator)}.")
        for index, size in enumerate(hidden_sizes):
            check_int(f"hidden_sizes[{index}]", size, low=1)
        self.register_buffer("features", features)
        self.num_observations, self.num_actions = features.shape[0], _check_num_actions(num_actions)
        sizes = [features.shape[1], *hidden_sizes, num_actions]
        layers = [nn.Linear(a, b, dtype=features.dtype) for a, b in zip(sizes[:-1], sizes[1:])]
        with torch.no_grad():
            for layer in layers[:-1]:
                bound = layer.in_features**-0.5
                layer.weight.copy_(
                    torch.rand(layer.weight.shape, generator=generator, dtype=features.dtype) * 2 * bound - bound
                )
                layer.bias.copy_(
                    torch.rand(layer.bias.shape, generator=generator, dtype=features.dtype) * 2 * bound - bound
                )
            layers[-1].weight.zero_()
            layers[-1].bias.zero_()
        self.layers = nn.ModuleList(layers)

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers[:-1]:
            x = torch.tanh(layer(x))
        return self.layers[-1](x)

    def logits(self, obs: torch.Tensor) -> torch.Tensor:
        self._check_obs(obs)
        return self._forward(self.features[obs])

    def all_logits(self) -> torch.Tensor:
        return self._forward(self.features)


def _features_of(tables: object) -> torch.Tensor:
    features = tables.observation_features
    if isinstance(features, torch.Tensor):
        return features.detach().clone()
    return torch.tensor(np.array(features))  # copy: MDPTables arrays are read-only


POLICY_KINDS = ("tabular", "linear", "mlp")
"""Names accepted by :func:`make_policy`."""


def make_policy(
    kind: str,
    tables: object,
    *,
    dtype: torch.dtype = torch.float64,
    generator: torch.Generator | None = None,
    hidden_sizes: Sequence[int] = (32,),
) -> Policy:
    """A uniform-start policy of ``kind`` for a toy env's ``MDPTables`` (or ``flashsim.exact.TorchTables``).

    ``"tabular"`` ignores the features, ``"linear"`` and ``"mlp"`` use ``tables.observation_features``;
    ``"mlp"`` needs ``generator``.

    Example:
        >>> import toy_envs
        >>> tables = toy_envs.PromptBandit(**toy_envs.bandit_preset("tiny")).tables()
        >>> make_policy("tabular", tables).all_logits().shape
        torch.Size([2, 2])
    """
    O, A = tables.num_observations, tables.num_actions
    if kind == "tabular":
        return TabularPolicy(torch.zeros(O, A, dtype=dtype))
    if kind == "linear":
        return LinearPolicy(_features_of(tables), A, dtype=dtype)
    if kind == "mlp":
        if generator is None:
            raise ValueError('make_policy("mlp", ...) needs generator=torch.Generator().manual_seed(seed).')
        features = _features_of(tables)
        return MLPPolicy(features, A, generator=generator, hidden_sizes=hidden_sizes, dtype=dtype)
    raise ValueError(f"Unknown policy kind {kind!r}; valid kinds are {list(POLICY_KINDS)}.")
