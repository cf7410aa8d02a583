"""Memory-efficient log-probs and entropies of sampled tokens, straight from the last hidden states.

The naive way — ``log_softmax(lm_head(h) / τ).gather(tokens)`` — materialises two ``[B, T, V]`` tensors
(logits and log-softmax; 2 GiB in float32 at B = 8, T = 1,024, V = 32k) and keeps them for backward.
Here the LM head is applied to ``chunk_size`` token rows at a time, each chunk reduces its logits to
one log-prob (``z_a − logsumexp z``) and one entropy (``logsumexp z − Σ softmax(z) z``) at once, and
each chunk is activation-checkpointed, so backward recomputes that chunk's logits instead of storing
them. Peak extra memory is about ``chunk_size × V`` floats, whatever B and T are; the result is the
naive computation's (same formula, same reduction order within a row).

Low-precision (bf16/fp16) logits are promoted to float32 before the softmax; float64 stays float64.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


def _chunk_log_probs_and_entropy(
    hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, tokens: torch.Tensor, temperature: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-prob of ``tokens`` and entropy under ``softmax(F.linear(hidden, weight, bias) / temperature)``.

    Shape:
        hidden ``[N, H]``, weight ``[V, H]``, bias ``[V]`` or None, tokens ``[N]`` long; returns ``[N]``, ``[N]``.
    """
    logits = F.linear(hidden, weight, bias)
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32)) / temperature
    normaliser = torch.logsumexp(logits, dim=-1)
    log_probs = logits.gather(-1, tokens[:, None]).squeeze(-1) - normaliser
    with torch.no_grad():
        probabilities = torch.softmax(logits, dim=-1)
        entropy = normaliser - (probabilities * logits).sum(-1)
    return log_probs, entropy


def chunked_token_log_probs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    tokens: torch.Tensor,
    *,
    bias: torch.Tensor | None = None,
    temperature: float = 1.0,
    chunk_size: int = 1024,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sampled-token log-probs (differentiable) and entropies (detached), ``chunk_size`` rows at a time.

    ``log_probs[n] = log softmax(W h_n / τ)[tokens[n]]`` and ``entropies[n] = H(softmax(W h_n / τ))``.

    Args:
        hidden: last hidden states of the positions that predict ``tokens``.
        weight: the LM head's weight (rows are vocabulary entries).
        tokens: the sampled token ids.
        bias: the LM head's bias, if it has one.
        temperature: τ > 0, the sampling temperature (the policy is the tempered distribution).
        chunk_size: rows per chunk; peak extra memory is about ``chunk_size × V`` floats.

    Returns:
        ``(log_probs, entropies)``, both of ``hidden``'s leading shape.

    Shape:
        hidden ``[..., H]``, weight ``[V, H]``, tokens ``[...]`` long; returns ``[...]``, ``[...]``.

    >>> g = torch.Generator().manual_seed(0)
    >>> h, w = torch.randn(5, 4, generator=g, dtype=torch.float64), torch.randn(7, 4, generator=g, dtype=torch.float64)
    >>> a = torch.tensor([0, 1, 2, 3, 6])
    >>> lp, ent = chunked_token_log_probs(h, w, a, chunk_size=2)
    >>> torch.allclose(lp, torch.log_softmax(h @ w.T, -1).gather(-1, a[:, None]).squeeze(-1))
    True
    """
    if hidden.shape[:-1] != tokens.shape:
        raise ValueError(f"hidden {tuple(hidden.shape)} must be tokens {tuple(tokens.shape)} plus a hidden axis")
    if weight.ndim != 2 or weight.shape[1] != hidden.shape[-1]:
        raise ValueError(f"weight must be [V, {hidden.shape[-1]}]; got {tuple(weight.shape)}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0; got {temperature}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be ≥ 1; got {chunk_size}")
    leading = tokens.shape
    rows, flat_tokens = hidden.reshape(-1, hidden.shape[-1]), tokens.reshape(-1)
    needs_graph = torch.is_grad_enabled() and (rows.requires_grad or weight.requires_grad)
    log_probs, entropies = [], []
    for start in range(0, rows.shape[0], chunk_size):
        args = (rows[start : start + chunk_size], weight, bias, flat_tokens[start : start + chunk_size], temperature)
        if needs_graph:
            lp, ent = checkpoint(_chunk_log_probs_and_entropy, *args, use_reentrant=False)
        else:
            lp, ent = _chunk_log_probs_and_entropy(*args)
        log_probs.append(lp)
        entropies.append(ent.detach())
    dtype = torch.promote_types(hidden.dtype, torch.float32)
    if not log_probs:
        empty = hidden.new_zeros(leading, dtype=dtype)
        return empty, empty.detach()
    return torch.cat(log_probs).reshape(leading), torch.cat(entropies).reshape(leading)


def naive_token_log_probs(
    logits: torch.Tensor, tokens: torch.Tensor, *, temperature: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference: the full log-softmax over ``logits``, then gather (memory ``2 × [..., V]``).

    Shape:
        logits ``[..., V]``, tokens ``[...]``; returns ``[...]``, ``[...]``.
    """
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32)) / temperature
    log_softmax = torch.log_softmax(logits, dim=-1)
    entropy = -(log_softmax.exp() * log_softmax).sum(-1)
    return log_softmax.gather(-1, tokens[..., None]).squeeze(-1), entropy.detach()
