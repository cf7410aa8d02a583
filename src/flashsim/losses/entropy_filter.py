"""The negative-token entropy filter (verl's ``neg_topq``; not in the article), an ablation
(``negative_token_fraction``).

Only :func:`~flashsim.losses.flash_reinforce_loss` with ``negative_token_fraction < 1`` (the registry's
``entropy_filter`` row) calls it; the paper's path never does.
"""

from __future__ import annotations

import torch
from torch import Tensor


def negative_token_filter(entropies: Tensor, failures: Tensor, action_mask: Tensor, fraction: float) -> Tensor:
    """Tokens kept by the negative-token entropy filter (verl ``neg_topq``; the article does not describe it).

    A failed trajectory keeps only its ``k_i = ⌈q · T_i⌉`` highest-entropy policy tokens (equal
    entropies: the earlier position first); every other trajectory keeps all its policy tokens.
    ``q = 1`` keeps everything (the base method), ``q = 0`` drops every token of a failed trajectory.

    Shape:
        entropies ``[B, T]``, failures ``[B]`` bool, action_mask ``[B, T]`` bool → ``[B, T]`` bool.

    >>> h = torch.tensor([[0.1, 0.9, 0.5, 0.9], [0.1, 0.9, 0.5, 0.9]])
    >>> mask = torch.ones(2, 4, dtype=torch.bool)
    >>> negative_token_filter(h, torch.tensor([True, False]), mask, 0.25)  # k = 1: the earlier 0.9 wins
    tensor([[False,  True, False, False],
            [ True,  True,  True,  True]])
    """
    lengths = torch.count_nonzero(action_mask, dim=1)
    keep_count = torch.ceil(fraction * lengths.to(torch.float64))  # ⌈q · T_i⌉, as math.ceil(q * T_i)
    # rank_it: position of token t when row i's policy tokens are sorted by entropy, highest first
    # (stable: ties keep their order); padding sorts last.
    order = torch.sort(torch.where(action_mask, entropies.detach(), -torch.inf), dim=1, descending=True, stable=True)[1]
    positions = torch.arange(action_mask.shape[1], device=action_mask.device).expand_as(order)
    rank = torch.empty_like(order).scatter_(1, order, positions)
    return action_mask & ((rank < keep_count[:, None]) | ~failures[:, None])
