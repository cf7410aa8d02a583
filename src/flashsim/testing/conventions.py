"""Calling conventions: how :func:`~flashsim.testing.check_loss` calls a user's loss function.

A convention turns one :class:`~flashsim.testing.LossBatch` into the arguments of one calling style
and the function's return value back into a scalar loss, so that every invariant is written once
against :meth:`Convention.loss`. None of them imports the trainer it imitates.

``flashsim`` — flashsim's own public signature (:func:`flashsim.losses.flash_reinforce_loss`,
:func:`flashsim.losses.grpo_loss`)::

    fn(log_probs, behavior_log_probs, rewards, action_mask)                       # flash_reinforce
    fn(log_probs, old_log_probs, rewards, action_mask, group_ids)                 # grpo
    -> loss  or  (loss, stats)

The function computes its own advantages from ``rewards``, so the advantage invariants apply. For the
shard invariant it must accept the keywords ``advantages=`` (the global batch's, for its rows) and
the global denominators it needs (``num_sequences=`` for sample-mean, ``num_tokens=`` for token-mean,
``max_tokens=``); it gets those that its signature names (all of them if it takes ``**kwargs``).

``verl`` — a verl-style policy-loss function (``verl.trainer.ppo.core_algos`` registers these)::

    fn(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode) -> loss  or  (loss, ...)

with token-level ``advantages`` ``[B, T]`` (the trajectory's advantage on every slot, as verl's outcome
estimators broadcast it) that the harness computes with the algorithm's estimator, and
``loss_agg_mode`` ``"seq-mean-token-mean"`` (flash_reinforce) or ``"token-mean"`` (grpo). The
function is a local mean: for the shard invariant the harness rescales each shard's loss by its share
of the global denominator (its rows / B for the seq-mean modes, its tokens / Σ T_i for token-mean),
which is what a correct gradient-accumulation loop does.

``trl`` — a TRL-style per-token loss with a mask::

    fn(log_probs, old_log_probs, advantages, mask) -> per-token loss [B, T]

with per-trajectory ``advantages`` ``[B]`` computed by the harness; the harness aggregates the
per-token loss with the algorithm's mode (:func:`flashsim.losses.aggregate`, global denominators
for shards), so this convention tests the per-token term, not the aggregation.

Shape:
    log-probs ``[B, T]``, mask ``[B, T]`` bool, rewards and group ids ``[B]``.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass

from torch import Tensor

from flashsim.losses import LOSSES, aggregate, group_normalized
from flashsim.testing.strategies import LossBatch
from flashsim.validation import check_choice

ALGORITHMS = tuple(name for name, spec in LOSSES.items() if spec.loss.__name__ == f"{name}_loss" and not spec.options)
"""The registry rows that are a loss function itself (its own advantage, no fixed options): flash_reinforce, grpo."""
AGGREGATION = {name: LOSSES[name].resolved()["aggregation"] for name in ALGORITHMS}
"""The aggregation mode each algorithm prescribes (DESIGN.md)."""
VERL_MODES = {"sample_mean": "seq-mean-token-mean", "token_mean": "token-mean"}


@dataclass(frozen=True)
class Shard:
    """What a data-parallel rank or a microbatch knows of the global batch it is a part of.

    Shape:
        advantages: ``[b]`` (this shard's rows of the global batch's advantages).
    """

    advantages: Tensor
    num_sequences: int
    num_tokens: int
    max_tokens: int
    num_shards: int = 1


def algorithm_advantages(algorithm: str, rewards: Tensor, group_ids: Tensor, *, eps: float = 1e-6) -> Tensor:
    """The advantages ``algorithm`` prescribes: group-normalised with ``std + eps`` (grpo), else the estimator
    of its row of :data:`flashsim.losses.LOSSES` (flash_reinforce: batch-centred; the property suite runs
    the invariants on every row)."""
    if algorithm == "grpo":
        return group_normalized(rewards, group_ids, std_eps=eps)
    return LOSSES[algorithm].compute_advantages(rewards, group_ids)


def _scalar(name: str, value: object) -> Tensor:
    loss = value[0] if isinstance(value, (tuple, list)) else value
    if not (isinstance(loss, Tensor) and loss.dim() == 0):
        raise TypeError(f"the {name}-convention loss must return a scalar tensor (or a tuple starting with one), "
                        f"got {type(loss).__name__} {getattr(loss, 'shape', '')}")
    return loss


def accepted_keywords(fn: Callable, names: tuple[str, ...]) -> tuple[str, ...] | None:
    """Which of ``names`` ``fn`` accepts as keywords (all with ``**kwargs``); None if it cannot be inspected."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return names
    keywords = {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return tuple(name for name in names if name in keywords)


def explicit_keywords(fn: Callable) -> tuple[str, ...]:
    """The keyword parameters ``fn`` names (not those a ``**kwargs`` would swallow); () if it cannot be inspected."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return ()
    return tuple(p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))


@dataclass(frozen=True)
class Convention:
    """One calling style. ``loss`` returns the scalar to differentiate; ``computes_advantages`` says
    whether the function forms advantages from rewards itself (so the advantage invariants apply)."""

    name: str
    computes_advantages: bool
    call: Callable[..., Tensor]

    def loss(
        self, fn: Callable, algorithm: str, batch: LossBatch, log_probs: Tensor, *,
        behavior_log_probs: Tensor | None = None, rewards: Tensor | None = None, shard: Shard | None = None,
        eps: float = 1e-6,
    ) -> Tensor:
        """The scalar loss of ``fn`` on ``batch`` with ``log_probs`` (a tensor carrying the graph).

        ``behavior_log_probs`` and ``rewards`` replace the batch's (to hand in graph-carrying copies);
        ``shard`` marks the batch as one shard of a larger one.
        """
        behavior = batch.behavior_log_probs if behavior_log_probs is None else behavior_log_probs
        rewards = batch.rewards if rewards is None else rewards
        return self.call(fn, algorithm, batch, log_probs, behavior, rewards, shard, eps)


def _call_flashsim(fn, algorithm, batch, log_probs, behavior, rewards, shard, eps) -> Tensor:
    args = [log_probs, behavior, rewards, batch.action_mask]
    if algorithm != "flash_reinforce":  # grpo, and the registry rows (which take group_ids=None too)
        args.append(batch.group_ids)
    if shard is None:
        return _scalar("flashsim", fn(*args))
    offered = {"advantages": shard.advantages, "num_sequences": shard.num_sequences,
               "num_tokens": shard.num_tokens, "max_tokens": shard.max_tokens}
    accepted = accepted_keywords(fn, tuple(offered))
    if "num_shards" in explicit_keywords(fn):  # offered only by name: a **kwargs loss need not know it
        offered["num_shards"], accepted = shard.num_shards, (*(accepted or offered), "num_shards")
    needed = ("advantages", "num_sequences" if algorithm == "flash_reinforce" else "num_tokens")
    missing = [name for name in needed if accepted is not None and name not in accepted]
    if missing:
        raise ShardContractError(
            f"the loss takes no {' / '.join(n + '=' for n in missing)} keyword: a data-parallel rank or a "
            f"microbatch cannot hand it the global batch's advantages and denominators, so its shards "
            f"cannot add up to the full batch's loss; accept them as flash_reinforce_loss does"
        )
    return _scalar("flashsim", fn(*args, **{name: offered[name] for name in (accepted or offered)}))


def _call_verl(fn, algorithm, batch, log_probs, behavior, rewards, shard, eps) -> Tensor:
    mode = AGGREGATION[algorithm]
    per_trajectory = algorithm_advantages(algorithm, rewards, batch.group_ids, eps=eps) if shard is None \
        else shard.advantages
    advantages = per_trajectory[:, None].expand(batch.action_mask.shape).to(rewards.dtype)
    loss = _scalar("verl", fn(behavior, log_probs, advantages, batch.action_mask, VERL_MODES[mode]))
    if shard is None:
        return loss
    share = batch.num_tokens / shard.num_tokens if mode == "token_mean" else batch.batch_size / shard.num_sequences
    return loss * share


def _call_trl(fn, algorithm, batch, log_probs, behavior, rewards, shard, eps) -> Tensor:
    advantages = algorithm_advantages(algorithm, rewards, batch.group_ids, eps=eps) if shard is None \
        else shard.advantages
    per_token = fn(log_probs, behavior, advantages, batch.action_mask)
    if not (isinstance(per_token, Tensor) and per_token.shape == batch.action_mask.shape):
        raise TypeError(f"the trl-convention loss must return the per-token loss [B, T] = "
                        f"{tuple(batch.action_mask.shape)}, got {type(per_token).__name__} "
                        f"{tuple(getattr(per_token, 'shape', ()))}")
    counts = {} if shard is None else {"num_sequences": shard.num_sequences, "num_tokens": shard.num_tokens}
    return aggregate(per_token, batch.action_mask, AGGREGATION[algorithm], **counts)


class ShardContractError(TypeError):
    """The function cannot take part in a sharded (data-parallel / microbatched) update."""


CONVENTIONS: dict[str, Convention] = {
    "flashsim": Convention("flashsim", True, _call_flashsim),
    "verl": Convention("verl", False, _call_verl),
    "trl": Convention("trl", False, _call_trl),
}
"""Every calling convention by name (see the module docstring)."""


def get_convention(name: str) -> Convention:
    """The convention called ``name``; unknown names list the valid ones."""
    return CONVENTIONS[check_choice("convention", name, CONVENTIONS)]


def shard_of(algorithm: str, batch: LossBatch, rows: Tensor, *, eps: float = 1e-6) -> tuple[LossBatch, Shard]:
    """Rows ``rows`` of ``batch`` and the global quantities a rank holding them is given."""
    advantages = algorithm_advantages(algorithm, batch.rewards, batch.group_ids, eps=eps)
    shard = Shard(advantages[rows], batch.batch_size, batch.num_tokens, batch.width)
    return batch.select(rows), shard


def load_function(spec: str, options: dict[str, object] | None = None) -> Callable:
    """The callable named by ``"package.module:function"`` (imported; the working directory is importable).

    ``"package.module:factory(key=value, ...)"`` or ``options`` call the named attribute with those keywords
    (values are Python literals, read with :func:`ast.literal_eval`; a bare word is a string) and return what
    it returns, e.g. ``flashsim.testing.adapters.trl:policy_loss(loss_type="bnpo")``.

    This runs the module's code, as ``python -c "import module"`` would: pass only your own modules.
    """
    module_name, _, attribute = spec.partition(":")
    keywords = dict(options or {})
    if "(" in attribute:
        attribute, keywords = attribute[: attribute.index("(")], {**_call_keywords(spec), **keywords}
    if not module_name or not attribute:
        raise ValueError(f"expected MODULE:FUNCTION (e.g. my_trainer.losses:policy_loss), got {spec!r}")
    if "" not in sys.path:
        sys.path.insert(0, "")  # the console script does not put the working directory on the path
    module = importlib.import_module(module_name)
    fn = module
    for part in attribute.split("."):
        if not hasattr(fn, part):
            raise ValueError(f"{module_name} has no attribute {attribute!r}")
        fn = getattr(fn, part)
    if not callable(fn):
        raise TypeError(f"{spec} is a {type(fn).__name__}, not a function")
    if keywords or spec.rstrip().endswith(")"):
        fn = fn(**keywords)
        if not callable(fn):
            raise TypeError(f"{spec} returned a {type(fn).__name__}, not a loss function")
    return fn


def parse_option(text: str) -> tuple[str, object]:
    """``"key=value"`` → ``(key, value)``: the value a Python literal (``0.2``, ``False``, ``(0, 1)``) or a string."""
    key, equals, value = text.partition("=")
    if not equals or not key.strip().isidentifier():
        raise ValueError(f"option must be KEY=VALUE with KEY a Python name, got {text!r}")
    return key.strip(), _literal(value.strip())


def _literal(text: str) -> object:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _call_keywords(spec: str) -> dict[str, object]:
    """The keywords of ``module:factory(key=value, ...)``; literals only, nothing is evaluated."""
    call = spec.partition(":")[2]
    try:
        node = ast.parse(call, mode="eval").body
    except SyntaxError as error:
        raise ValueError(f"cannot read {call!r} as factory(key=value, ...): {error.msg}") from None
    if not isinstance(node, ast.Call) or node.args:
        raise ValueError(f"expected factory(key=value, ...) with keyword arguments only, got {call!r}")
    keywords = {}
    for keyword in node.keywords:
        try:
            keywords[keyword.arg] = ast.literal_eval(keyword.value)
        except ValueError:
            raise ValueError(f"the value of {keyword.arg}= in {call!r} must be a Python literal") from None
    return keywords


__all__ = ["ALGORITHMS", "CONVENTIONS", "Convention", "Shard", "ShardContractError", "algorithm_advantages",
           "get_convention", "load_function", "parse_option", "shard_of"]
