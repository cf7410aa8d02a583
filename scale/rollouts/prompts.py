"""Prompt data: the bundled synthetic arithmetic task, loaders for the user's own files, a resumable stream.

A :class:`PromptExample` is one verifiable prompt: ``prompt`` (text, or a list of chat messages),
``answer`` (the reference the reward function checks against), an ``id``, and for the synthetic task a
``solution`` (the demonstration used by the supervised warm-up).

The synthetic task ("12+7=" → "19") is generated from a seed; train and test prompts are disjoint. A
chosen share of its demonstrations use the calculator: ``<calc>12+7</calc>``, then the tool's
``<out>19</out>``, then the answer ``19``; the others state ``19`` directly.

User files (``.jsonl``, ``.json`` lines, ``.parquet``) may use either form:
``{"prompt": ..., "answer": ...}`` (aliases: ``question``/``problem`` and ``solution``/
``ground_truth``; GSM8K's ``"... #### 42"`` answers are fine, the reward extracts the final number),
or chat ``{"messages": [{"role": "user", "content": ...}, ...], "answer": ...}`` where the answer
defaults to the last assistant message.
"""

from __future__ import annotations

import dataclasses
import json
import operator
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from flashsim.validation import check_int, check_probability

PROMPT_KEYS = ("prompt", "question", "problem")
ANSWER_KEYS = ("answer", "solution", "ground_truth")
_APPLY = {"+": operator.add, "-": operator.sub, "*": operator.mul}


@dataclass(frozen=True)
class PromptExample:
    """One verifiable prompt. ``solution`` is the demonstration completion (synthetic task only)."""

    prompt: str | tuple[dict[str, str], ...]
    answer: str
    id: str
    solution: str | None = None


def _operand_pairs(rng: np.random.Generator, count: int, max_operand: int, operations: str) -> list:
    """``count`` distinct (a, op, b) triples with 0 ≤ a, b ≤ max_operand (fewer if the space is small)."""
    space = (max_operand + 1) ** 2 * len(operations)
    if count > space:
        raise ValueError(f"asked for {count} distinct problems but only {space} exist; raise max_operand")
    flat = rng.choice(space, size=count, replace=False)
    per_op = (max_operand + 1) ** 2
    return [(int(f % per_op // (max_operand + 1)), operations[f // per_op], int(f % (max_operand + 1))) for f in flat]


def arithmetic_task(
    *,
    seed: int,
    num_train: int,
    num_test: int,
    max_operand: int = 99,
    operations: str = "+",
    tool_fraction: float = 0.0,
) -> tuple[list[PromptExample], list[PromptExample]]:
    """The synthetic task: ``"a+b="`` → the integer result; disjoint train and test prompts.

    Args:
        seed: seeds the problem draw (same seed → same split).
        num_train, num_test: number of distinct problems in each split.
        max_operand: operands are drawn uniformly from 0..max_operand.
        operations: characters among ``+-*``.
        tool_fraction: share of solutions that call the calculator (``<calc>a*b</calc><out>c</out>c``);
            the others state the number directly. Which ones is drawn from ``seed`` too.

    >>> train, test = arithmetic_task(seed=0, num_train=3, num_test=2, max_operand=9)
    >>> train[0].prompt, train[0].answer, train[0].solution
    ('6+1=', '7', '7')
    """
    check_probability("tool_fraction", tool_fraction)
    if not operations or set(operations) - set(_APPLY):
        raise ValueError(f"operations must be a non-empty string over '+-*'; got {operations!r}")
    check_int("num_train", num_train, low=1)
    check_int("num_test", num_test, low=0)
    rng = np.random.default_rng(seed)
    triples = _operand_pairs(rng, num_train + num_test, max_operand, operations)
    uses_tool = rng.random(len(triples)) < tool_fraction
    examples = []
    for index, (a, op, b) in enumerate(triples):
        expression = f"{a}{op}{b}"
        answer = str(_APPLY[op](a, b))
        solution = f"<calc>{expression}</calc><out>{answer}</out>{answer}" if uses_tool[index] else answer
        examples.append(PromptExample(prompt=f"{expression}=", answer=answer, id=f"arith-{seed}-{index}",
                                      solution=solution))
    return examples[:num_train], examples[num_train:]


def _example_from_record(record: Any, where: str, id_default: str) -> PromptExample:
    """Turn one JSON/parquet record (prompt/answer or chat-messages form) into a :class:`PromptExample`;
    ``where`` (``FILE:LINE`` or ``FILE record N``) starts every error message."""
    if not isinstance(record, dict):
        raise ValueError(f"{where}: expected a JSON object with a prompt and an answer; got {type(record).__name__}")
    answer = next((record[k] for k in ANSWER_KEYS if record.get(k) is not None), None)
    if "messages" in record and record["messages"] is not None:
        messages = _messages(record["messages"], where)
        if answer is None and messages and messages[-1].get("role") == "assistant":
            answer = messages[-1]["content"]
        while messages and messages[-1].get("role") == "assistant":
            messages.pop()
        if not messages:
            raise ValueError(f"{where}: 'messages' holds no user turn")
        prompt: Any = tuple(messages)
    else:
        prompt = next((record[k] for k in PROMPT_KEYS if record.get(k) is not None), None)
        if prompt is None:
            raise ValueError(f"{where}: expected one of {PROMPT_KEYS} or 'messages'; got keys {sorted(record)}")
        if isinstance(prompt, list):
            prompt = tuple(_messages(prompt, where))
        elif not isinstance(prompt, str):
            raise ValueError(f"{where}: the prompt must be text or a list of chat messages; "
                             f"got {type(prompt).__name__}")
    if answer is None:
        raise ValueError(f"{where}: expected one of {ANSWER_KEYS}; got keys {sorted(record)}")
    if not isinstance(answer, (str, int, float)) or isinstance(answer, bool):
        raise ValueError(f"{where}: the answer must be text or a number; got {type(answer).__name__}")
    return PromptExample(prompt=prompt, answer=str(answer), id=str(record.get("id", id_default)))


def _messages(messages: Any, where: str) -> list[dict[str, str]]:
    """Chat messages as a list of dicts with a ``role`` and a text ``content``."""
    if not isinstance(messages, list) or not all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in messages):
        raise ValueError(f"{where}: chat messages must be a list of {{\"role\": ..., \"content\": ...}} objects "
                         f"with text values; got {str(messages)[:80]}")
    return [dict(m) for m in messages]


def _records(path: Path) -> list[tuple[str, Any]]:
    """The file's records, each with where it is (``FILE:LINE`` for JSON lines, ``FILE record N`` otherwise)."""
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            rows = pq.read_table(path).to_pylist()
        except Exception as error:  # pyarrow raises its own error types for a damaged file
            raise ValueError(f"{path}: not a readable parquet file ({type(error).__name__}: {error})") from error
        return [(f"{path} record {i}", row) for i, row in enumerate(rows)]
    if suffix not in (".jsonl", ".json"):
        raise ValueError(f"a prompt file must end in .jsonl, .json or .parquet; got {str(path)!r}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start})") from error
    if text.lstrip().startswith("["):
        try:
            records = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}:{error.lineno}: not valid JSON ({error.msg})") from error
        return [(f"{path} record {i}", record) for i, record in enumerate(records)]
    records = []
    for line_number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                records.append((f"{path}:{line_number}", json.loads(line)))
            except json.JSONDecodeError as error:
                raise ValueError(f"{path}:{line_number}: not valid JSON ({error.msg})") from error
    return records


def load_prompts(path: str | Path) -> list[PromptExample]:
    """Read prompts from ``.jsonl`` / ``.json`` (one object per line, or a list) or ``.parquet``.

    A missing file, invalid JSON or a record without a prompt or an answer is a ``ValueError`` naming the file
    and the line (``FILE:LINE``; ``FILE record N`` in a JSON list or parquet file).
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"prompt file {str(path)!r} does not exist" if not path.exists()
                         else f"prompt file {str(path)!r} is not a file")
    records = _records(path)
    if not records:
        raise ValueError(f"prompt file {str(path)!r} holds no records")
    return [_example_from_record(record, where, f"{path.name}:{i}") for i, (where, record) in enumerate(records)]


def load_demonstrations(path: str | Path) -> list[PromptExample]:
    """Your own demonstrations for the supervised warm-up (``python -m scale warmup``): a prompt file whose
    answers are the completions to learn (``{"prompt": ..., "answer": ...}`` or chat ``messages`` ending in
    the assistant's answer), read as :func:`load_prompts` reads it."""
    return [dataclasses.replace(e, solution=e.answer) for e in load_prompts(path)]


class PromptStream:
    """Thread-safe, resumable stream of prompts: a fresh seeded permutation each epoch.

    The position ``(epoch, index)`` is the whole state, so resuming needs only :meth:`state_dict`.

    >>> stream = PromptStream([PromptExample("1+1=", "2", "a"), PromptExample("2+2=", "4", "b")], seed=0)
    >>> [e.id for e in stream.take(3)]
    ['a', 'b', 'a']
    """

    def __init__(self, examples: Sequence[PromptExample], seed: int) -> None:
        if not examples:
            raise ValueError("PromptStream needs at least one example")
        self.examples = list(examples)
        self.seed = seed
        self.epoch, self.index = 0, 0
        self._lock = threading.Lock()
        self._order = self._permutation(0)

    def _permutation(self, epoch: int) -> np.ndarray:
        return np.random.default_rng([self.seed, epoch]).permutation(len(self.examples))

    def take(self, count: int) -> list[PromptExample]:
        """The next ``count`` prompts (crossing epoch boundaries as needed)."""
        with self._lock:
            out = []
            for _ in range(count):
                if self.index == len(self.examples):
                    self.epoch, self.index = self.epoch + 1, 0
                    self._order = self._permutation(self.epoch)
                out.append(self.examples[self._order[self.index]])
                self.index += 1
            return out

    def state_dict(self) -> dict[str, int]:
        with self._lock:
            return {"epoch": self.epoch, "index": self.index, "seed": self.seed}

    def load_state_dict(self, state: dict[str, int]) -> None:
        with self._lock:
            if state["seed"] != self.seed:
                raise ValueError(f"checkpoint stream seed {state['seed']} differs from configured {self.seed}")
            self.epoch, self.index = int(state["epoch"]), int(state["index"])
            self._order = self._permutation(self.epoch)
