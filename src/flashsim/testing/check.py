"""``check_loss``: run every invariant that applies to an algorithm against anyone's loss function.

For each :data:`~flashsim.testing.invariants.INVARIANTS` entry that applies to the algorithm and the
convention, hypothesis draws batches (float64, unequal lengths, any padding layout, policy lag) until
the loss breaks the invariant or ``max_examples`` examples pass; a failure is shrunk to a minimal
counterexample (fewest trajectories and tokens, simplest values), which the report prints. The search
is derandomised: the same function gives the same report, in any process (:func:`_draws_from_the_seed_alone`).

hypothesis is a development dependency (``pip install 'flashsim[dev]'``), imported when
:func:`check_loss` runs.
"""

from __future__ import annotations

import contextlib
import zlib
from collections.abc import Callable, Iterator, Sequence

import torch

from flashsim.losses import DEFAULT_DELTA, check_loss_options
from flashsim.testing.conventions import ALGORITHMS, ShardContractError, get_convention
from flashsim.testing.declared import DEFAULTS, declared
from flashsim.testing.invariants import INVARIANTS, Case, Context, Invariant
from flashsim.testing.report import InvariantResult, LossReport, describe
from flashsim.validation import check_choice, check_int


def check_loss(
    fn: Callable,
    *,
    algorithm: str | None = None,
    convention: str = "flashsim",
    delta: float | None = None,
    clip_eps: float | None = None,
    std_eps: float = 1e-6,
    max_examples: int = 60,
    invariants: Sequence[str] | None = None,
    aggregation: str | None = None,
    estimator: str | None = None,
    equal_shards: bool | None = None,
    contiguous_groups: bool | None = None,
    seed: int | None = None,
    dtype: torch.dtype = torch.float64,
) -> LossReport:
    """Check ``fn`` against the invariants of ``algorithm`` (DESIGN.md) and report each one.

    Args:
        fn: the loss function, called as ``convention`` says (:mod:`flashsim.testing.conventions`).
        algorithm: ``"flash_reinforce"`` (batch-centred advantages, sequence gate, sample-mean) or
            ``"grpo"`` (group-normalised advantages, PPO clip, token-mean); default: ``fn``'s ``algorithm``
            attribute (adapters carry one), else ``"flash_reinforce"``.
        convention: ``"flashsim"``, ``"verl"`` or ``"trl"``.
        delta: the gate threshold δ that ``fn`` implements (flash_reinforce; default: ``fn.delta``, else
            ``DEFAULT_DELTA``).
        clip_eps: the symmetric clip range ε that ``fn`` implements (grpo; default: ``fn.clip_eps``, else 0.2).
        std_eps: the ε added to the group std that ``fn`` implements (grpo, flashsim convention).
        max_examples: hypothesis examples per invariant (more finds rarer bugs, takes longer).
        invariants: names to run (default: all that apply).
        aggregation: the aggregation ``fn`` declares (:mod:`flashsim.testing.declared`: ``sample_mean``,
            ``token_mean``, ``seq_mean_token_sum``, ``constant:N``, verl's and TRL's names); default: ``fn``'s
            ``aggregation`` attribute, else the algorithm's.
        estimator: the advantage estimator ``fn`` declares (``batch_mean``, ``group_mean``, ``group_mean_std``,
            ``rloo``, ``none``); default: ``fn``'s ``estimator`` attribute, else the algorithm's. A function with
            a ``std_eps`` attribute declares its ε with it.
        equal_shards: draw only equal-size microbatches for ``shards`` (default: ``fn``'s ``equal_shards``
            attribute, else False: any sizes).
        contiguous_groups: groups arrive as contiguous blocks of G rows (default: ``fn``'s
            ``contiguous_groups`` attribute, else False: group ids in any order).
        seed: the seed of every invariant's search (hypothesis and torch's global generator, restored after);
            default None: derandomised from the check's code. Either way the same call gives the same report,
            whatever ran before it in the process.
        dtype: the dtype of the drawn batches: float64, or float32 (the dtype the frameworks' pipelines feed;
            tolerances are floored at a few float32 ulps). ``precision`` always compares bf16 with float64.

    Returns:
        a :class:`~flashsim.testing.LossReport`; ``report.passed`` is False when any invariant fails,
        ``print(report)`` shows the table and each failure's minimal counterexample.

    >>> from flashsim.losses import flash_reinforce_loss
    >>> check_loss(flash_reinforce_loss, max_examples=5).passed
    True
    """
    context = build_context(fn, algorithm=algorithm, convention=convention, delta=delta, clip_eps=clip_eps,
                            std_eps=std_eps, aggregation=aggregation, estimator=estimator, equal_shards=equal_shards,
                            contiguous_groups=contiguous_groups, dtype=dtype)
    max_examples = check_int("max_examples", max_examples, low=1)
    for name in invariants or ():
        check_choice("invariants", name, (invariant.name for invariant in INVARIANTS))
    if seed is not None:
        seed = check_int("seed", seed, low=0)
    results = tuple(
        _run(invariant, context, max_examples, seed)
        for invariant in INVARIANTS
        if invariants is None or invariant.name in invariants
    )
    return LossReport(_name(fn), context.algorithm, convention, results, str(context.declared))


def build_context(fn: Callable, *, algorithm: str | None = None, convention: str = "flashsim",
                  delta: float | None = None, clip_eps: float | None = None, std_eps: float = 1e-6,
                  aggregation: str | None = None, estimator: str | None = None, equal_shards: bool | None = None,
                  contiguous_groups: bool | None = None, dtype: torch.dtype = torch.float64) -> Context:
    """What the invariants of :func:`check_loss` are checked against (its arguments of the same names, validated):
    the loss, its convention, algorithm, hyperparameters and declaration."""
    algorithm = getattr(fn, "algorithm", "flash_reinforce") if algorithm is None else algorithm
    delta = getattr(fn, "delta", DEFAULT_DELTA) if delta is None else delta
    clip_eps = getattr(fn, "clip_eps", 0.2) if clip_eps is None else clip_eps
    check_choice("algorithm", algorithm, ALGORITHMS)
    if callable(getattr(fn, "require_framework", None)):
        fn.require_framework()  # an adapter whose framework is absent: ImportError now, not a failing row
    style = get_convention(convention)
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    delta = check_loss_options("flash_reinforce", {"delta": delta}, "options")["delta"]
    grpo = check_loss_options("grpo", {"clip_eps": clip_eps, "std_eps": std_eps}, "options")
    clip_eps, std_eps = grpo["clip_eps"], grpo["std_eps"]
    if style.name != "flashsim" and (aggregation, estimator) != (None, None) and \
            (aggregation, estimator) != DEFAULTS[algorithm]:
        raise ValueError(f"aggregation and estimator can be declared in the flashsim convention only; the "
                         f"{style.name} convention fixes them to the algorithm's ({', '.join(DEFAULTS[algorithm])})")
    promise = declared(algorithm, fn, aggregation, estimator, std_eps)
    flags = {name: bool(getattr(fn, name, False) if value is None else value)
             for name, value in (("equal_shards", equal_shards), ("contiguous_groups", contiguous_groups))}
    if dtype not in (torch.float64, torch.float32):
        raise ValueError(f"dtype must be torch.float64 or torch.float32, got {dtype!r}")
    return Context(fn, style, algorithm, delta, clip_eps, promise.std_eps, promise, **flags,
                   local_shards=bool(getattr(fn, "local_shards", False)), dtype=dtype)


def _run(invariant: Invariant, context: Context, max_examples: int, seed: int | None) -> InvariantResult:
    """:func:`_search`, seeded; a documented departure that holds as documented reads ``documented``; a failure
    of an invariant with a frequency measure says how often it happens."""
    if seed is not None:  # one seed per invariant: a cell run alone draws what it draws in the full report
        seed = zlib.crc32(f"{seed}:{invariant.name}".encode())
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0 if seed is None else seed)
        result = _search(invariant, context, max_examples, seed)
        documented = getattr(context.fn, "documented", {}).get(invariant.name)
        if documented and result.status == "holds":
            return _result(invariant, "documented", result.examples, documented)
        if result.failed and invariant.frequency is not None:
            how_often = invariant.frequency(context)
            return _result(invariant, "FAILS", result.examples, f"{result.message}\n{how_often}",
                           result.counterexample, result.drawn, result.draws)
    return result


def _search(invariant: Invariant, context: Context, max_examples: int, seed: int | None) -> InvariantResult:
    """Search for a counterexample with hypothesis; shrink it; say what happened."""
    if context.algorithm not in invariant.algorithms:
        return _result(invariant, "n/a", message=f"not an invariant of {context.algorithm}")
    if invariant.needs_own_advantages and not context.convention.computes_advantages:
        return _result(invariant, "n/a", message=f"the {context.convention.name} convention gets its advantages")
    reason = invariant.not_applicable(context) or getattr(context.fn, "own_rules", {}).get(invariant.name)
    if reason:
        return _result(invariant, "n/a", message=reason)
    import hypothesis
    from hypothesis import HealthCheck, Phase, Verbosity, given, settings
    from hypothesis import strategies as st

    seen = {"examples": 0, "failure": None}

    @settings(
        max_examples=max_examples, derandomize=seed is None, database=None, deadline=None, report_multiple_bugs=False,
        suppress_health_check=list(HealthCheck), verbosity=Verbosity.quiet,
        phases=(Phase.explicit, Phase.generate, Phase.shrink),
    )
    @given(st.data())
    def search(data) -> None:
        case = Case(data)
        seen["examples"] += 1
        try:
            invariant.check(context, case)
        except Exception as error:  # a user's loss may raise anything: that is a failure too
            seen["failure"] = (error, describe(case.drawn), dict(case.drawn))  # the last failure is the shrunk one
            raise

    if seed is not None:
        search = hypothesis.seed(seed)(search)
    try:
        with _draws_from_the_seed_alone():
            search()
    except Exception as error:  # hypothesis re-raises the shrunk failure (or its own error)
        failure, text, drawn = seen["failure"] or (error, "", None)
        draws = _draws_of(text)
        if isinstance(failure, ShardContractError):
            return _result(invariant, "unsupported", seen["examples"], str(failure))
        message = str(failure) if isinstance(failure, AssertionError) else f"{type(failure).__name__}: {failure}"
        return _result(invariant, "FAILS", seen["examples"], message.strip(), text, drawn, draws)
    return _result(invariant, "holds", seen["examples"])


@contextlib.contextmanager
def _draws_from_the_seed_alone() -> Iterator[None]:
    """Hold hypothesis's pool of local constants empty while a search runs.

    Hypothesis (6.170 in the lock) draws about one value in twenty from constants it mines from the source of every
    *local* module the process has imported (``providers._get_local_constants``: not site-packages, not the standard
    library, not test files). The same seed then drew other examples depending on what the process had imported and
    on how flashsim was installed: editable, its own modules are local and feed the pool; from a wheel they are in
    site-packages and do not. With the pool empty a search's examples depend on its seed (or, derandomised, on the
    searched code) alone: what a wheel install gets, in any process. Hypothesis's built-in constants (0, the
    infinities, NaN, the floats' edges) still come up. There is no public setting for this, hence the patch, undone
    on exit; a hypothesis without the pool needs none."""
    try:
        from hypothesis.internal.conjecture import providers

        mine, cache, empty = providers._get_local_constants, providers.CONSTANTS_CACHE, providers.Constants()
    except (ImportError, AttributeError):
        yield
        return
    cache.cache.clear()  # the allowed constants of each choice type, cached with the pool's
    providers._get_local_constants = lambda: empty
    try:
        yield
    finally:
        providers._get_local_constants = mine
        cache.cache.clear()


def _draws_of(text: str) -> dict | None:
    """The raw draws of the shrunk failure (:attr:`Case.draws`, for a replay), taken from the last example run: the
    shrunk failure, which hypothesis runs last (None if the last example is not the one described by ``text``).
    Read after the search, so that the searched function's source, which seeds a derandomised search, stays as it
    was."""
    latest = Case.latest
    return dict(latest.draws) if latest is not None and text and describe(latest.drawn) == text else None


def _result(invariant: Invariant, status: str, examples: int = 0, message: str = "", counterexample: str = "",
            drawn: dict | None = None, draws: dict | None = None):
    return InvariantResult(invariant.name, invariant.design, invariant.statement, status, examples, message,
                           counterexample, drawn, draws)


def _name(fn: Callable) -> str:
    if isinstance(getattr(fn, "report_name", None), str):
        return fn.report_name
    module, name = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    return f"{module}:{name}" if module and name else repr(fn)
