"""Multi-turn tool trajectories: the model calls a calculator, the environment answers, generation goes on.

A turn ends when the model writes ``</calc>``. The environment evaluates the expression between the
last ``<calc>`` and ``</calc>``, appends ``<out>RESULT</out>`` (tokens the policy did not choose:
``action_mask`` False, log-prob 0) and asks the engine to continue from the whole context. Any engine
works, since each turn is one ordinary :meth:`RolloutEngine.generate` call on the extended prompt. The
token budget ``max_new_tokens`` covers the whole completion, tool outputs included.

Left out on purpose: tools other than the calculator (a tool is just ``str -> str``; pass your own
``tool`` to :func:`generate_with_tools`), and parallel tool calls within one turn.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import operator
from collections.abc import Callable, Sequence

from flashsim.validation import check_int, check_probability
from scale.rollouts.tokenizer import Tokenizer
from scale.rollouts.trajectory import RolloutEngine, SamplingParams, Trajectory

CALL_OPEN, CALL_CLOSE = "<calc>", "</calc>"
OUTPUT_OPEN, OUTPUT_CLOSE = "<out>", "</out>"
MAX_RESULT_DIGITS = 12
"""Larger results are reported as an error: they would not fit the tiny model's context anyway."""
CALC_ERROR = "?"
"""The calculator's answer to an expression it cannot evaluate (one character of the tiny alphabet)."""

_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}


def _evaluate(node: ast.AST) -> int:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_evaluate(node.operand)
    raise ValueError("unsupported expression")


def calculator(expression: str) -> str:
    """Integer arithmetic over ``+ - *`` and parentheses; :data:`CALC_ERROR` for anything else.

    >>> calculator("12*7"), calculator("(1+2)*-3"), calculator("2**99"), calculator("x")
    ('84', '-9', '?', '?')
    """
    try:
        value = _evaluate(ast.parse(expression.strip(), mode="eval").body)
    except (SyntaxError, ValueError, RecursionError):
        return CALC_ERROR
    return str(value) if len(str(abs(value))) <= MAX_RESULT_DIGITS else CALC_ERROR


@dataclasses.dataclass(frozen=True)
class UnreliableCalculator:
    """A calculator that answers a fixed share ``error_rate`` of expressions wrong (off by 1 to 9).

    Which expressions, and by how much, is a hash of ``(seed, expression)``: the same expression always
    gets the same answer, so runs are reproducible and resume exactly, and a policy can only learn how
    far to trust the tool, not which calls to repeat. With such a tool, tool calls also occur in failed
    trajectories (the model copied a wrong result), which is what a positive-only update cannot see.
    Plain data, so it pickles to worker processes and Ray actors.

    >>> tool = UnreliableCalculator(1.0, seed=3)
    >>> tool("12*7") != "84", tool("12*7") == tool("12*7"), UnreliableCalculator(0.0)("12*7")
    (True, True, '84')
    """

    error_rate: float
    seed: int = 0

    def __post_init__(self) -> None:
        check_probability("error_rate", self.error_rate)
        check_int("seed", self.seed)

    def __call__(self, expression: str) -> str:
        answer = calculator(expression)
        digest = hashlib.sha256(f"{self.seed}:{expression.strip()}".encode()).digest()
        if answer == CALC_ERROR or int.from_bytes(digest[:8], "big") / 2**64 >= self.error_rate:
            return answer
        offset = 1 + digest[8] % 9
        return str(int(answer) + (offset if digest[9] % 2 else -offset))


def tool_call(text: str) -> str | None:
    """The expression of the last complete ``<calc>...</calc>`` at the end of ``text``, else ``None``."""
    if not text.endswith(CALL_CLOSE):
        return None
    start = text.rfind(CALL_OPEN)
    return None if start < 0 else text[start + len(CALL_OPEN) : -len(CALL_CLOSE)]


def _extend(merged: Trajectory, turn: Trajectory) -> None:
    merged.token_ids += turn.token_ids
    merged.action_mask += turn.action_mask
    merged.log_probs += turn.log_probs
    merged.finish_reason = turn.finish_reason
    merged.version = min(merged.version, turn.version)
    merged.metadata.setdefault("turn_versions", []).append(turn.version)


def generate_with_tools(
    engine: RolloutEngine,
    tokenizer: Tokenizer,
    prompts: Sequence[Sequence[int]],
    sampling: SamplingParams,
    *,
    max_turns: int = 4,
    tool: Callable[[str], str] = calculator,
) -> list[Trajectory]:
    """Sample multi-turn trajectories in which the model may call ``tool`` up to ``max_turns - 1`` times.

    Each round sends every unfinished trajectory's full context (prompt + completion so far) to the
    engine as one batch; trajectories that end with ``</calc>`` get the tool's output appended.
    """
    check_int("max_turns", max_turns, low=1)
    turn_sampling = dataclasses.replace(sampling, stop=tuple(sampling.stop) + (CALL_CLOSE,))
    merged = [Trajectory(list(p), [], [], [], "length", version=2**62) for p in prompts]
    active = list(range(len(prompts)))
    for turn in range(max_turns):
        budget = {i: sampling.max_new_tokens - len(merged[i].token_ids) for i in active}
        active = [i for i in active if budget[i] > 0]
        if not active:
            break
        # One engine call per distinct remaining budget keeps every call's max_new_tokens exact.
        for remaining in sorted(set(budget[i] for i in active)):
            group = [i for i in active if budget[i] == remaining]
            contexts = [merged[i].prompt_ids + merged[i].token_ids for i in group]
            step_sampling = dataclasses.replace(turn_sampling, max_new_tokens=remaining)
            for i, result in zip(group, engine.generate(contexts, step_sampling)):
                _extend(merged[i], result)
        active = [i for i in active if _append_tool_output(merged[i], tokenizer, tool, sampling, turn, max_turns)]
    return merged


def _append_tool_output(
    trajectory: Trajectory, tokenizer: Tokenizer, tool: Callable[[str], str], sampling: SamplingParams,
    turn: int, max_turns: int,
) -> bool:
    """Append the tool's answer if the turn ended on a call; True if the trajectory should continue.

    A call that cannot be followed by another turn (no turns or token budget left) ends the trajectory
    with finish reason ``"length"``: it was cut off, not finished.
    """
    if trajectory.finish_reason != "stop":
        return False
    expression = tool_call(tokenizer.decode(trajectory.token_ids))
    if expression is None:  # one of the caller's own stop strings
        return False
    room = sampling.max_new_tokens - len(trajectory.token_ids)
    if turn == max_turns - 1 or room <= 0:
        trajectory.finish_reason = "length"
        return False
    output = tokenizer.encode(f"{OUTPUT_OPEN}{tool(expression)}{OUTPUT_CLOSE}")[:room]
    trajectory.token_ids += output
    trajectory.action_mask += [False] * len(output)
    trajectory.log_probs += [0.0] * len(output)
    trajectory.num_tool_calls += 1
    if len(output) == room:
        trajectory.finish_reason = "length"
        return False
    return True
