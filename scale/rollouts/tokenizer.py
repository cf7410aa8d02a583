"""A character-level tokenizer for the tiny CPU model, and a thin adapter for Hugging Face tokenizers.

Both expose the same small surface that the rest of ``scale`` uses (the :class:`Tokenizer` protocol):
``encode(text) -> list[int]``, ``decode(ids) -> str``, ``pad_id``, ``eos_id``, ``bos_id``,
``vocab_size``, and ``render_prompt(prompt)`` which turns a prompt (plain text or a list of chat
messages) into the text the model continues.

The character tokenizer has one token per character of a fixed alphabet plus a few multi-character
special tokens (``<pad>``, ``<bos>``, ``<eos>``, and the calculator markers ``<calc>``, ``</calc>``,
``<out>``, ``</out>``), matched greedily before single characters. Nothing is downloaded.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

DEFAULT_ALPHABET = "0123456789+-*=() .,?:"
"""Characters of the synthetic arithmetic task (digits, operators, punctuation)."""

SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>", "<calc>", "</calc>", "<out>", "</out>")
"""Multi-character tokens; ids 0, 1, 2, ... in this order."""


@runtime_checkable
class Tokenizer(Protocol):
    """What ``scale`` needs from a tokenizer."""

    pad_id: int
    eos_id: int
    bos_id: int | None
    vocab_size: int

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...

    def render_prompt(self, prompt: str | Sequence[dict[str, str]]) -> str: ...

    def encode_prompt(self, prompt: str | Sequence[dict[str, str]]) -> list[int]: ...


def _messages_to_text(messages: Sequence[dict[str, str]]) -> str:
    """Plain rendering of chat messages for tokenizers without a chat template: the contents, joined."""
    if not all(isinstance(m, dict) and "content" in m for m in messages):
        raise ValueError(f"chat messages must be dicts with a 'content' key; got {list(messages)[:2]!r}")
    return "\n".join(str(m["content"]) for m in messages)


class CharTokenizer:
    """One token per character of ``alphabet``, plus :data:`SPECIAL_TOKENS`.

    Args:
        alphabet: the characters the tokenizer accepts (each once).

    >>> tok = CharTokenizer()
    >>> ids = tok.encode("12+7=<calc>")
    >>> tok.decode(ids)
    '12+7=<calc>'
    >>> len(ids)
    6
    """

    def __init__(self, alphabet: str = DEFAULT_ALPHABET) -> None:
        if len(set(alphabet)) != len(alphabet) or not alphabet:
            raise ValueError(f"alphabet must be non-empty with distinct characters; got {alphabet!r}")
        if "<" in alphabet:
            raise ValueError("alphabet must not contain '<' (it starts the special tokens)")
        self.alphabet = alphabet
        self.tokens: tuple[str, ...] = SPECIAL_TOKENS + tuple(alphabet)
        self._ids = {t: i for i, t in enumerate(self.tokens)}
        self.pad_id = self._ids["<pad>"]
        self.bos_id: int | None = self._ids["<bos>"]
        self.eos_id = self._ids["<eos>"]
        self.vocab_size = len(self.tokens)

    def token_id(self, token: str) -> int:
        """Id of one token (a character of the alphabet or a special token)."""
        if token not in self._ids:
            raise ValueError(f"unknown token {token!r}; known: {self.tokens}")
        return self._ids[token]

    def encode(self, text: str) -> list[int]:
        """Greedy left-to-right encoding: special tokens first, then single characters."""
        ids, i = [], 0
        while i < len(text):
            if text[i] == "<":
                special = next((s for s in SPECIAL_TOKENS if text.startswith(s, i)), None)
                if special is None:
                    raise ValueError(f"unknown special token at position {i} of {text!r}")
                ids.append(self._ids[special])
                i += len(special)
                continue
            if text[i] not in self._ids:
                raise ValueError(
                    f"character {text[i]!r} (position {i} of {text!r}) is not in the alphabet {self.alphabet!r}"
                )
            ids.append(self._ids[text[i]])
            i += 1
        return ids

    def decode(self, ids: Sequence[int], skip_special: bool = False) -> str:
        """Text of ``ids``; with ``skip_special`` the pad/bos/eos tokens are dropped."""
        drop = {self.pad_id, self.bos_id, self.eos_id} if skip_special else set()
        return "".join(self.tokens[i] for i in ids if i not in drop)

    def render_prompt(self, prompt: str | Sequence[dict[str, str]]) -> str:
        """The prompt text (chat messages are joined by newlines, which must then be in the alphabet)."""
        return prompt if isinstance(prompt, str) else _messages_to_text(prompt)

    def encode_prompt(self, prompt: str | Sequence[dict[str, str]]) -> list[int]:
        """``<bos>`` followed by the rendered prompt's tokens."""
        return [self.bos_id] + self.encode(self.render_prompt(prompt))

    def save(self, directory: str | Path) -> None:
        """Write ``char_tokenizer.json`` into ``directory``."""
        path = Path(directory) / "char_tokenizer.json"
        path.write_text(json.dumps({"type": "char", "alphabet": self.alphabet}))

    @classmethod
    def load(cls, directory: str | Path) -> CharTokenizer:
        """Read a tokenizer written by :meth:`save`."""
        data = json.loads((Path(directory) / "char_tokenizer.json").read_text())
        return cls(alphabet=data["alphabet"])


class HFTokenizer:
    """Adapter from a Hugging Face tokenizer to :class:`Tokenizer` (used with ``--model``).

    Chat-message prompts go through the tokenizer's chat template when it has one.
    """

    def __init__(self, hf_tokenizer: Any) -> None:
        self.hf = hf_tokenizer
        if hf_tokenizer.eos_token_id is None:
            raise ValueError("the Hugging Face tokenizer has no eos_token_id; set one before training")
        self.eos_id = int(hf_tokenizer.eos_token_id)
        pad = hf_tokenizer.pad_token_id
        self.pad_id = int(pad) if pad is not None else self.eos_id
        self.bos_id = hf_tokenizer.bos_token_id
        self.vocab_size = len(hf_tokenizer)

    def encode(self, text: str) -> list[int]:
        return list(self.hf.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int], skip_special: bool = False) -> str:
        return self.hf.decode(list(ids), skip_special_tokens=skip_special)

    def render_prompt(self, prompt: str | Sequence[dict[str, str]]) -> str:
        if isinstance(prompt, str):
            return prompt
        if getattr(self.hf, "chat_template", None):
            return self.hf.apply_chat_template(list(prompt), tokenize=False, add_generation_prompt=True)
        return _messages_to_text(prompt)

    def encode_prompt(self, prompt: str | Sequence[dict[str, str]]) -> list[int]:
        """Token ids of the rendered prompt; the tokenizer's own special tokens (BOS) are added unless a
        chat template already wrote them."""
        templated = not isinstance(prompt, str) and bool(getattr(self.hf, "chat_template", None))
        return list(self.hf.encode(self.render_prompt(prompt), add_special_tokens=not templated))
