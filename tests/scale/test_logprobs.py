"""Chunked sampled-token log-probs and entropies equal the naive full log-softmax (float64)."""

import pytest

pytest.importorskip("transformers")

import torch  # noqa: E402

from scale.learner.logprobs import chunked_token_log_probs, naive_token_log_probs  # noqa: E402


def _inputs(n=37, h=8, v=11, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, h, generator=g, dtype=dtype, requires_grad=True)
    weight = torch.randn(v, h, generator=g, dtype=dtype, requires_grad=True)
    bias = torch.randn(v, generator=g, dtype=dtype, requires_grad=True)
    tokens = torch.randint(0, v, (n,), generator=g)
    return hidden, weight, bias, tokens


@pytest.mark.parametrize("chunk_size", [1, 5, 37, 1000])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_chunked_values_and_gradients_equal_the_naive_computation(chunk_size, temperature):
    hidden, weight, bias, tokens = _inputs()
    lp, ent = chunked_token_log_probs(hidden, weight, tokens, bias=bias, temperature=temperature, chunk_size=chunk_size)
    g = torch.Generator().manual_seed(1)
    upstream = torch.randn(lp.shape, generator=g, dtype=lp.dtype)
    grads = torch.autograd.grad((lp * upstream).sum(), (hidden, weight, bias))

    naive_lp, naive_ent = naive_token_log_probs(hidden @ weight.T + bias, tokens, temperature=temperature)
    naive_grads = torch.autograd.grad((naive_lp * upstream).sum(), (hidden, weight, bias))
    torch.testing.assert_close(lp, naive_lp)
    torch.testing.assert_close(ent, naive_ent)
    for got, expected in zip(grads, naive_grads):
        torch.testing.assert_close(got, expected)


def test_entropy_is_detached_and_matches_the_closed_form():
    hidden, weight, _, tokens = _inputs()
    _, ent = chunked_token_log_probs(hidden, weight, tokens, chunk_size=4)
    p = torch.softmax(hidden @ weight.T, -1)
    assert not ent.requires_grad
    torch.testing.assert_close(ent, -(p * p.log()).sum(-1).detach())


def test_leading_shape_is_kept_and_bfloat16_is_promoted():
    hidden, weight, _, tokens = _inputs(n=12)
    lp, ent = chunked_token_log_probs(hidden.detach().reshape(3, 4, -1).bfloat16(), weight.detach().bfloat16(),
                                      tokens.reshape(3, 4), chunk_size=5)
    assert lp.shape == ent.shape == (3, 4)
    assert lp.dtype == torch.float32
    assert bool((lp <= 0).all())


def test_bfloat16_gradients_come_back_in_bfloat16_and_match_float32_closely():
    hidden, weight, _, tokens = _inputs(n=12, dtype=torch.float32)
    low = [t.detach().bfloat16().requires_grad_() for t in (hidden, weight)]
    lp, _ = chunked_token_log_probs(*low, tokens, chunk_size=5)
    lp.sum().backward()
    reference = [t.detach().bfloat16().float().requires_grad_() for t in (hidden, weight)]
    naive, _ = naive_token_log_probs(reference[0] @ reference[1].T, tokens)
    naive.sum().backward()
    for got, expected in zip(low, reference):
        assert got.grad.dtype == torch.bfloat16
        torch.testing.assert_close(got.grad.float(), expected.grad, rtol=0.05, atol=0.05)


def test_no_graph_is_built_under_no_grad():
    hidden, weight, _, tokens = _inputs()
    with torch.no_grad():
        lp, _ = chunked_token_log_probs(hidden, weight, tokens, chunk_size=4)
    assert not lp.requires_grad


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(tokens=torch.zeros(3, dtype=torch.long)), "hidden"),
        (dict(weight=torch.zeros(11, 5, dtype=torch.float64)), "weight"),
        (dict(temperature=0.0), "temperature"),
        (dict(chunk_size=0), "chunk_size"),
    ],
    ids=["token-shape", "weight-width", "zero-temperature", "zero-chunk"],
)
def test_invalid_inputs_raise_value_errors_naming_the_argument(change, message):
    hidden, weight, _, tokens = _inputs()
    args = dict(hidden=hidden, weight=weight, tokens=tokens, temperature=1.0, chunk_size=4) | change
    with pytest.raises(ValueError, match=message):
        chunked_token_log_probs(args.pop("hidden"), args.pop("weight"), args.pop("tokens"), **args)
