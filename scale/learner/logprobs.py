"""Memory-efficient log-probs and entropies of sampled tokens, straight from the last hidden states.

The naive way — ``log_softmax(lm_head(h) / τ).gather(tokens)`` — materialises two ``[B, T, V]`` tensors
(logits and log-softmax; 2 GiB in float32 at B = 8, T = 1,024, V = 32k) and keeps them for backward.
Here the LM head is applied to ``chunk_size`` token rows at a time and each chunk is reduced at once to
one log-prob (``z_a − logsumexp z``) and one entropy (``−Σ p log p``); only the per-row logsumexp is
kept. Backward recomputes one chunk of logits at a time and applies the closed-form gradient
``∂ log p_a / ∂z = onehot(a) − softmax(z)`` (a custom autograd function, so nothing is recomputed twice
and no ``[N, V]`` gradient buffer is allocated whole). Peak extra memory is about two ``chunk_size × V``
buffers whatever B and T are; values and gradients are the naive computation's up to floating-point
rounding (checked in float64 by the tests). The price is one extra logits matmul in backward.

Low-precision (bf16/fp16) logits are promoted to float32 before the softmax; float64 stays float64.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from flashsim.validation import check_int, check_real


def _logits(hidden: Tensor, weight: Tensor, bias: Tensor | None, temperature: float) -> Tensor:
    """``F.linear(hidden, weight, bias) / temperature`` in float32 or wider (a fresh buffer, safe to modify)."""
    logits = F.linear(hidden, weight, bias)
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    return logits.div_(temperature) if temperature != 1.0 else logits


class _ChunkedLogProbs(torch.autograd.Function):
    """Log-probs with an analytic, chunked backward: ``∂ log p_a / ∂z = onehot(a) − softmax(z)``.

    Forward keeps only the per-row normaliser (logsumexp); backward recomputes one chunk of logits at a
    time, turns it into the softmax in place with the saved normaliser, and multiplies it into the
    gradients of the hidden states, the weight and the bias. No ``[N, V]`` tensor outlives its chunk.
    """

    @staticmethod
    def forward(ctx, hidden, weight, bias, tokens, temperature, chunk_size):
        dtype = torch.promote_types(hidden.dtype, torch.float32)
        log_probs = hidden.new_empty(tokens.shape, dtype=dtype)
        entropies, normalisers = torch.empty_like(log_probs), torch.empty_like(log_probs)
        for start in range(0, tokens.shape[0], chunk_size):
            stop = start + chunk_size
            shifted = _logits(hidden[start:stop], weight, bias, temperature)
            peak = shifted.amax(dim=-1, keepdim=True)
            shifted.sub_(peak)
            probabilities = torch.exp(shifted)
            total = probabilities.sum(dim=-1, keepdim=True)
            log_total = total.log()
            log_probs[start:stop] = (shifted.gather(-1, tokens[start:stop, None]) - log_total).squeeze(-1)
            normalisers[start:stop] = (peak + log_total).squeeze(-1)
            log_softmax = shifted.sub_(log_total)
            # H = −Σ p log p, with the product taken in place in the probability buffer.
            entropies[start:stop] = -probabilities.div_(total).mul_(log_softmax).sum(-1)
        ctx.save_for_backward(hidden, weight, bias, tokens, normalisers)
        ctx.temperature, ctx.chunk_size = temperature, chunk_size
        ctx.mark_non_differentiable(entropies)
        return log_probs, entropies

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_log_probs, grad_entropies):
        hidden, weight, bias, tokens, normalisers = ctx.saved_tensors
        needs_hidden, needs_weight, needs_bias = ctx.needs_input_grad[:3]
        grad_hidden = torch.empty_like(hidden) if needs_hidden else None
        accumulate = torch.promote_types(weight.dtype, torch.float32)
        grad_weight = torch.zeros_like(weight, dtype=accumulate) if needs_weight else None
        grad_bias = torch.zeros_like(bias, dtype=accumulate) if needs_bias else None
        for start in range(0, tokens.shape[0], ctx.chunk_size):
            stop = start + ctx.chunk_size
            g = grad_log_probs[start:stop].to(normalisers.dtype)
            logits = _logits(hidden[start:stop], weight, bias, ctx.temperature)
            # ∂L/∂z = g (onehot(a) − softmax(z)) / τ, built in the logits buffer.
            grad_logits = logits.sub_(normalisers[start:stop, None]).exp_().mul_(-g[:, None])
            grad_logits.scatter_add_(-1, tokens[start:stop, None], g[:, None])
            if ctx.temperature != 1.0:
                grad_logits.div_(ctx.temperature)
            if needs_hidden:
                grad_hidden[start:stop] = (grad_logits.to(weight.dtype) @ weight).to(hidden.dtype)
            if needs_weight:
                grad_weight.addmm_(grad_logits.T, hidden[start:stop].to(accumulate))
            if needs_bias:
                grad_bias += grad_logits.sum(0)
        grad_weight = grad_weight.to(weight.dtype) if needs_weight else None
        grad_bias = grad_bias.to(bias.dtype) if needs_bias else None
        return grad_hidden, grad_weight, grad_bias, None, None, None


def chunked_token_log_probs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    tokens: torch.Tensor,
    *,
    bias: torch.Tensor | None = None,
    temperature: float = 1.0,
    chunk_size: int = 512,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sampled-token log-probs (differentiable) and entropies (detached), ``chunk_size`` rows at a time.

    ``log_probs[n] = log softmax(W h_n / τ)[tokens[n]]`` and ``entropies[n] = H(softmax(W h_n / τ))``.

    Args:
        hidden: last hidden states of the positions that predict ``tokens``.
        weight: the LM head's weight (rows are vocabulary entries).
        tokens: the sampled token ids.
        bias: the LM head's bias, if it has one.
        temperature: τ > 0, the sampling temperature (the policy is the tempered distribution).
        chunk_size: rows per chunk; peak extra memory is about two ``chunk_size × V`` buffers.

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
    check_real("temperature", temperature, low=0.0, low_inclusive=False)
    check_int("chunk_size", chunk_size, low=1)
    leading = tokens.shape
    rows, flat_tokens = hidden.reshape(-1, hidden.shape[-1]), tokens.reshape(-1)
    log_probs, entropies = _ChunkedLogProbs.apply(rows, weight, bias, flat_tokens, float(temperature), chunk_size)
    return log_probs.reshape(leading), entropies.reshape(leading)


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
