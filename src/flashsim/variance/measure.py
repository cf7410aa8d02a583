"""``measure_gradient``: one estimator's update directions on M batches, against the exact gradient.

The procedure (formulas in :mod:`flashsim.variance.statistics`, sampling in
:mod:`flashsim.variance.sampling`, the fast path in :mod:`flashsim.variance.gradients`):

1. draw D = M / r prompt draws, uniformly with replacement from the train prompts (``budget`` prompts,
   or ``budget // G`` prompts × G siblings when grouped); answer each with r rollout sets from the
   behaviour policy μ, storing log μ;
2. for each batch compute ĝ = −∇_θ L at the parameters of ``policy``, with L the registry loss named
   ``estimator``, unchanged — or a user's loss function, called through a calling convention of
   :mod:`flashsim.testing.conventions` (one autograd pass per batch: the fast path needs a registry entry);
3. compare with the exact ∇J(θ) (``flashsim.exact.exact_gradient`` over the train prompts).

Deliberately left out: optimiser state (ĝ is the raw update direction, before Adam or clipping) and
minibatching (one batch, one gradient, as in FlashREINFORCE).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

import toy_envs
from flashsim.exact import exact_gradient, to_torch
from flashsim.losses import check_loss_options, get_loss
from flashsim.policies import Policy
from flashsim.testing import ALGORITHMS, LossBatch, get_convention
from flashsim.validation import check_choice, check_divisible, check_instance, check_int, check_real
from flashsim.variance.gradients import behavior_snapshot, fast_update_directions
from flashsim.variance.problem import PER_BATCH_STATS, Problem
from flashsim.variance.reference import reference_update_directions
from flashsim.variance.report import GradientReport
from flashsim.variance.sampling import BatchDesign, draw_design, iterate_chunks
from flashsim.variance.statistics import gradient_statistics

METHODS = {"fast": fast_update_directions, "reference": reference_update_directions}
"""How the per-batch directions are computed: vectorised (``fast``) or one autograd pass per batch."""

#: Loss options that the measurement itself controls.
_RESERVED_OPTIONS = ("advantages", "validate", "group_ids", "num_sequences", "num_tokens")


def resolve_tables(env: Any) -> Any:
    """The ``toy_envs.MDPTables`` of a gymnasium env (:func:`toy_envs.exact_tables`) or the tables themselves."""
    if isinstance(env, toy_envs.MDPTables):
        return env
    tables = toy_envs.exact_tables(env) if hasattr(env, "unwrapped") else None
    if tables is not None:
        return tables
    raise TypeError(
        f"env must be a gymnasium env with exact tables (env.unwrapped.tables() or a P table) or a "
        "toy_envs.MDPTables, "
        f"got {type(env).__name__}"
    )


def _check_policy(name: str, policy: object, tables: Any) -> Policy:
    check_instance(name, policy, Policy)
    if (policy.num_observations, policy.num_actions) != (tables.num_observations, tables.num_actions):
        raise ValueError(
            f"{name} is over {policy.num_observations} observations x {policy.num_actions} actions but the env "
            f"has {tables.num_observations} x {tables.num_actions}; build it from this env's tables"
        )
    return policy


def _check_design(budget: int, num_batches: int, group_size: int, grouped: bool, replicates: int) -> int:
    """Validate the batch design; return G (1 for single-rollout batches)."""
    check_int("budget", budget, low=1)
    check_int("group_size", group_size, low=1)
    check_int("replicates", replicates, low=2)
    check_int("num_batches", num_batches, low=2 * replicates)
    check_divisible("num_batches", num_batches, by="replicates", divisor=replicates)
    if not grouped:
        return 1
    # A grouped estimator samples budget // group_size prompts x group_size rollouts each.
    check_divisible("budget", budget, by="group_size", divisor=group_size)
    return group_size


def _check_run(seed: int, bootstrap: int, confidence: float, method: str) -> None:
    check_int("seed", seed, low=0)
    check_int("bootstrap", bootstrap, low=0)
    check_real("confidence", confidence, low=0.0, high=1.0, low_inclusive=False, high_inclusive=False)
    check_choice("method", method, METHODS)


def update_directions(
    problem: Problem, design: BatchDesign, method: Callable, generator: torch.Generator
) -> tuple[torch.Tensor, dict[str, torch.Tensor], float]:
    """ĝ of every batch of the design, chunk by chunk, with the per-batch stats and the clipped-token total.

    Shape:
        returns ``([M, num_params] float64, {name: [M]}, clipped tokens)``.
    """
    directions = torch.empty(design.num_batches, problem.policy.num_params, dtype=torch.float64)
    stats = {name: torch.empty(design.num_batches, dtype=torch.float64) for name in PER_BATCH_STATS}
    clipped_tokens = 0.0
    for start, prompts, uniforms in iterate_chunks(design, problem.dynamics.tables.horizon, generator):
        chunk_directions, chunk_stats = method(problem, prompts, uniforms)
        stop = start + chunk_directions.shape[0]
        directions[start:stop] = chunk_directions
        for name, values in stats.items():
            values[start:stop] = chunk_stats[name].to(torch.float64)
        clipped_tokens += float(chunk_stats["clipped_tokens"])
    return directions, stats, clipped_tokens


def _loss_options(name: str, horizon: int, loss_options: dict) -> dict:
    reserved = sorted(set(loss_options) & set(_RESERVED_OPTIONS))
    if reserved:
        raise ValueError(f"loss options {reserved} are set by measure_gradient itself; remove them")
    loss_options = check_loss_options(name, loss_options)
    # T_max of seq_mean_token_sum_norm (Dr. GRPO) is the generation budget H, not the padded width.
    return {"max_tokens": horizon, **loss_options}


def user_loss(fn: Callable, *, algorithm: str = "flash_reinforce", convention: str = "flashsim") -> Callable:
    """A user's loss ``fn`` behind the registry signature ``(log_probs, behavior, rewards, mask, group_ids)``.

    ``fn`` is called as ``convention`` says; the trust-region stats it may not report are NaN.
    """
    check_choice("algorithm", algorithm, ALGORITHMS)
    style = get_convention(convention)

    def loss_fn(log_probs, behavior_log_probs, rewards, action_mask, group_ids=None, **unused):
        group_ids = torch.zeros(rewards.shape[0], dtype=torch.long) if group_ids is None else group_ids
        batch = LossBatch(log_probs.detach(), behavior_log_probs, rewards, action_mask, group_ids)
        loss = style.loss(fn, algorithm, batch, log_probs)
        unknown = torch.tensor(float("nan"), dtype=torch.float64)
        return loss, dict.fromkeys(("acceptance_rate", "token_acceptance_rate", "ess", "ess_fraction"), unknown) | {
            "clip_fraction": unknown}

    loss_fn.algorithm = algorithm  # type: ignore[attr-defined]
    return loss_fn


def _estimator_name(estimator: str | Callable) -> str:
    if isinstance(estimator, str):
        return estimator
    return f"{getattr(estimator, '__module__', '')}:{getattr(estimator, '__qualname__', repr(estimator))}"


def measure_gradient(
    env: Any,
    policy: Policy,
    *,
    estimator: str | Callable,
    budget: int,
    num_batches: int,
    seed: int,
    group_size: int = 4,
    behavior_policy: Policy | None = None,
    grouped: bool | None = None,
    replicates: int = 2,
    bootstrap: int = 200,
    confidence: float = 0.95,
    method: str = "fast",
    algorithm: str = "flash_reinforce",
    convention: str = "flashsim",
    keep_directions: bool = False,
    **loss_options: Any,
) -> GradientReport:
    """Measure bias, variance, MSE, cosine and SNR of ``estimator``'s update direction at ``policy``.

    Args:
        env: a toy_envs gymnasium env (``env.unwrapped.tables()`` is used) or its ``MDPTables``.
        policy: the learner π_θ; ĝ is taken at its parameters (they are not changed).
        estimator: a name of :data:`flashsim.losses.LOSSES` (flash_reinforce, grpo, rloo, dr_grpo, ...),
            or a user's loss function (measured with ``method="reference"``; see :func:`user_loss`).
        budget: B, rollouts per batch (the matched rollout budget).
        num_batches: M, batches measured; a multiple of ``replicates``.
        seed: seeds every draw (prompts, rollouts, bootstrap); same seed, same report.
        group_size: G, rollouts per prompt when grouped (``budget`` must be divisible by it).
        behavior_policy: μ, the policy that sampled the rollouts (default ``policy``: on-policy).
        grouped: sample ``budget // G`` prompts × G siblings with group ids; default: exactly when the
            estimator needs groups (GRPO, Dr. GRPO). ``grouped=True`` gives e.g. RLOO within groups.
        replicates: r rollout sets per prompt draw (>= 2), for the between/within-prompt split.
        bootstrap: number of cluster-bootstrap resamples for the intervals (0: none).
        confidence: level of the bootstrap intervals.
        method: ``"fast"`` (vectorised) or ``"reference"`` (one autograd pass per batch).
        algorithm, convention: for a user's loss function, the algorithm it implements (grpo samples
            grouped batches) and how it is called (:mod:`flashsim.testing.conventions`).
        keep_directions: keep every batch's ĝ in ``report.directions`` (``[M, num_params]``; M times the
            memory of one gradient), e.g. for :func:`flashsim.variance.plots.plot_directions`.
        **loss_options: the registry loss's options, checked and passed unchanged (``delta``, ``clip_eps``,
            ``tis_cap`` ...; an option not given keeps the loss's default, e.g. δ = ``DEFAULT_DELTA``).

    Returns:
        a :class:`GradientReport`.

    Example:
        >>> import toy_envs
        >>> from flashsim.policies import make_policy
        >>> tables = toy_envs.PromptBandit(**toy_envs.bandit_preset("tiny")).tables()
        >>> report = measure_gradient(tables, make_policy("tabular", tables), estimator="rloo",
        ...                           budget=8, num_batches=400, seed=0, bootstrap=0)
        >>> report.cosine > 0, abs(report.variance - report.between_prompt - report.within_prompt) < 1e-12
        (True, True)
    """
    tables = resolve_tables(env)
    _check_policy("policy", policy, tables)
    behavior = policy if behavior_policy is None else _check_policy("behavior_policy", behavior_policy, tables)
    _check_run(seed, bootstrap, confidence, method)
    check_instance("keep_directions", keep_directions, bool)
    if callable(estimator):
        if loss_options:
            raise ValueError(f"loss options {sorted(loss_options)} apply to registry losses only, not to a function")
        loss_fn, options, method = user_loss(estimator, algorithm=algorithm, convention=convention), {}, "reference"
        needs_groups = algorithm == "grpo"
    else:
        loss_fn = get_loss(estimator)
        options, needs_groups = _loss_options(estimator, tables.horizon, loss_options), loss_fn.needs_groups
    grouped = needs_groups if grouped is None else bool(grouped)
    group_size = _check_design(budget, num_batches, group_size, grouped, replicates)

    policy = policy.snapshot().requires_grad_(True)  # a private copy: the caller's policy is never touched
    torch_tables = to_torch(tables)
    generator = torch.Generator().manual_seed(seed)
    design = draw_design(
        torch_tables, num_batches=num_batches, budget=budget, group_size=group_size, replicates=replicates,
        generator=generator,
    )
    group_ids = design.group_ids if grouped else None
    dynamics = toy_envs.TabularDynamics(tables)
    problem = Problem(dynamics, policy, behavior_snapshot(behavior), loss_fn, group_ids, options)
    directions, stats, clipped_tokens = update_directions(problem, design, METHODS[method], generator)
    true_gradient = exact_gradient(tables, policy).detach().to(torch.float64)
    point, intervals, mean = gradient_statistics(
        directions, true_gradient, replicates=replicates, resamples=bootstrap, confidence=confidence,
        generator=generator,
    )
    return GradientReport(
        estimator=_estimator_name(estimator), budget=budget, group_size=group_size, num_batches=num_batches,
        replicates=replicates, true_gradient=true_gradient, mean_gradient=mean,
        true_gradient_norm=float(torch.linalg.vector_norm(true_gradient)),
        confidence=confidence, intervals=intervals,
        clip_fraction=clipped_tokens / float(stats.pop("num_tokens").sum()),
        directions=directions if keep_directions else None,
        **point, **{name: float(values.mean()) for name, values in stats.items()},
    )
