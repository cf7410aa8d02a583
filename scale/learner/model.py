"""Models: the tiny Llama-style CPU model built from a config, or a pretrained one (``--model``).

Everything ``scale`` needs from a causal LM is the Hugging Face surface: ``model.base_model`` (the
decoder returning ``last_hidden_state``), ``model.get_output_embeddings()`` (the LM head, a ``Linear``
whose rows are the vocabulary), and incremental decoding with a KV cache (the transformers engine).
Models that post-process their logits (soft-capping, logit scaling) are refused, because the chunked
log-probs apply the LM head themselves and would silently disagree with the engine.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch

from flashsim.validation import check_divisible
from scale.rollouts.tokenizer import HFTokenizer, Tokenizer

_LOGIT_POSTPROCESSING = ("final_logit_softcapping", "logit_scale", "output_multiplier_scale")
_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")
"""A Hugging Face hub id, ``owner/name``: the form a model name that is not on disk must have."""


def build_tiny_model(
    tokenizer: Tokenizer,
    *,
    hidden_size: int = 128,
    num_layers: int = 2,
    num_heads: int = 4,
    intermediate_size: int = 256,
    max_positions: int = 64,
    seed: int = 0,
) -> torch.nn.Module:
    """A freshly initialised ``LlamaForCausalLM`` sized for CPU (no download).

    Initialisation runs under a forked global RNG seeded with ``seed``, so the caller's RNG state is
    untouched.
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    check_divisible("hidden_size", hidden_size, by="num_heads", divisor=num_heads)
    config = LlamaConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_id,
        bos_token_id=tokenizer.bos_id,
        eos_token_id=tokenizer.eos_id,
        attn_implementation="sdpa",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    return model


TINY_ALPHABET = "0123456789+-*=() .,?:<>/calout"
"""The characters :func:`save_tiny_pretrained`'s tokenizer knows: digits, arithmetic, the calculator's tags."""


def save_tiny_pretrained(directory: str | Path, *, alphabet: str = TINY_ALPHABET, seed: int = 0,
                         **sizes: int) -> Path:
    """Write a tiny model directory, as ``save_pretrained`` writes one, with no download: a character-level
    ``PreTrainedTokenizerFast`` (``<pad>``, ``<eos>``, ``<unk>`` and one token per character of ``alphabet``) and
    :func:`build_tiny_model` over it (``sizes``: its keyword sizes; default a 2-layer Llama, hidden size 64).

    For trying what takes a model path (``--model``, TRL's trainers) on a CPU. Returns ``directory``.
    """
    import tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(["<pad>", "<eos>", "<unk>", *sorted(set(alphabet))])}
    core = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = tokenizers.pre_tokenizers.Split("", "isolated")
    core.decoder = tokenizers.decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="<eos>",
                                        unk_token="<unk>")
    sizes = {"hidden_size": 64, "num_layers": 2, "num_heads": 2, "intermediate_size": 128, **sizes}
    model = build_tiny_model(HFTokenizer(tokenizer), seed=seed, **sizes)
    directory = Path(directory)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def check_model_source(path_or_id: str) -> None:
    """Refuse a model that cannot be a Hugging Face model directory or hub id, before anything loads.

    A name that exists on disk must be a directory holding ``config.json`` (what ``save_pretrained`` writes);
    a name that does not exist must have the form of a hub id (``owner/name``, letters, digits, ``-_.``), so
    that a mistyped path (``/data/my_model``, ``./my_model``, ``my_model``) is an error naming it rather than a
    hub request.
    """
    path = Path(path_or_id).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ValueError(f"model {path_or_id!r} is a file; expected a model directory (what save_pretrained "
                             "writes) or a hub id")
        if not (path / "config.json").is_file():
            raise ValueError(f"model directory {path_or_id!r} holds no config.json (expected what save_pretrained "
                             "writes: config.json, the weights, the tokenizer files)")
        return
    if not _HUB_ID.fullmatch(path_or_id):
        raise ValueError(f"model directory {path_or_id!r} does not exist")


def load_pretrained(path_or_id: str, *, dtype: str = "auto", device: str = "cpu") -> tuple[Any, HFTokenizer]:
    """A pretrained causal LM and its tokenizer (a local path, or a hub id the user asked for).

    What cannot load (no such directory, a tokenizer or weights that do not load) is a one-line ``ValueError``
    naming the model and the part that failed.
    """
    check_model_source(path_or_id)  # before importing transformers (seconds): a mistyped path is reported at once
    import transformers
    from packaging.version import Version
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:  # the tokenizer first: it is cheap, and its files are the ones a hand-made directory most often lacks
        hf_tokenizer = AutoTokenizer.from_pretrained(path_or_id)
    except Exception as error:  # transformers and tokenizers raise many types for a bad or missing file
        raise ValueError(f"model {path_or_id!r}: its tokenizer cannot load ({_first_line(error)})") from error
    try:
        tokenizer = HFTokenizer(hf_tokenizer)
    except ValueError as error:
        raise ValueError(f"model {path_or_id!r}: {error}") from error
    torch_dtype = "auto" if dtype == "auto" else getattr(torch, dtype)
    # transformers renamed ``torch_dtype`` to ``dtype`` in 4.56.
    key = "dtype" if Version(transformers.__version__) >= Version("4.56") else "torch_dtype"
    try:
        model = AutoModelForCausalLM.from_pretrained(path_or_id, **{key: torch_dtype})
    except Exception as error:
        raise ValueError(f"model {path_or_id!r}: cannot load a causal language model ({_first_line(error)})"
                         ) from error
    check_supported(model)
    return model.to(device), tokenizer


def _first_line(error: Exception) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}"


def check_supported(model: Any) -> None:
    """Refuse models whose logits are not ``lm_head(last_hidden_state)``."""
    for name in _LOGIT_POSTPROCESSING:
        value = getattr(model.config, name, None)
        if value not in (None, 1, 1.0):
            raise ValueError(
                f"model config has {name}={value}: scale's chunked log-probs apply the LM head directly "
                "and do not reproduce this logit post-processing"
            )
    head = model.get_output_embeddings()
    if not isinstance(head, torch.nn.Linear):
        raise ValueError(f"expected the output embedding to be torch.nn.Linear; got {type(head).__name__}")


def hidden_states(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Last hidden states of the decoder, without the LM head.

    Shape:
        input_ids, attention_mask: ``[B, L]``; returns ``[B, L, H]``.
    """
    position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
    # No KV cache: nothing reuses it, and a block recomputed by activation checkpointing would append twice.
    out = model.base_model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                           use_cache=False)
    return out.last_hidden_state
