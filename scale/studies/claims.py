"""The paper's claims on a real transformer: pre-registered designs over ``scale``'s config, run by flashsim's
claims machinery.

The design type, the registry, the cell store (one atomic JSON file per finished cell, resumed after SIGKILL with
no cell lost or run twice), the parallel runner and the verdict rule (at the ceiling / supported / not supported /
negligible / inconclusive, against a pre-registered smallest effect) are :mod:`flashsim.experiments`'s; this
module holds the designs, each a row of :data:`TRANSFORMER_DESIGNS` (a :class:`flashsim.experiments.Registry`,
like the simulator's):

- the task: the tiny CPU preset (a 2-layer character Llama, two-digit multiplication with a calculator,
  warm-up then RL) with a calculator that answers 30 % of the expressions wrong
  (``rollout.tool_error_rate``), so tool calls also occur in failed trajectories (``docs/transformer-pilot.md``);
- pairing: every arm of a seed starts from the same warm-up (``warmup.cache`` in the output folder), so
  arms differ only after update 0;
- the designs (:func:`build_transformer_design`) at three budgets: ``smoke`` (seconds, for tests), ``quick`` and
  ``full``:
  C1 (budget), C2 (gates under ``rollout.injected_lag``), C3 (aggregation, under a tighter token budget so that
  truncation happens), C4 (signed vs positive-only) and C9 (tool collapse, on C1's two first arms), and the
  follow-ups C2collapse and C9collapse (run by name, analysed by :mod:`scale.studies.collapse`).

The other jobs live beside it: a cell's run and measures in :mod:`scale.studies.cells`, the collapse indicators in
:mod:`scale.studies.collapse_rules`, the page's opening and each claim's figure in :mod:`scale.studies.claim_report`.

Run as ``python -m scale reproduce all --quick --out runs/tclaims``; the committed 10-seed run (seeds 10–19) is
``docs/transformer/results.md`` (``python -m scale reproduce all --out runs/tclaims --report
docs/transformer/results.md``: 18 min on 2 idle cores, 63 min on 2 cores shared with two other sweeps).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from flashsim.experiments import Arm, ClaimDesign, Comparison, KnobValue, Registered, Registry
from flashsim.losses import LOSSES
from scale.run.config import Config, load_config, resolve_config_path

TRANSFORMER_PILOT_SEEDS = (0, 1, 2, 200, 201, 202)
"""The seeds pilots ran on (``docs/transformer-pilot.md``: the claims' task on 0–2, the C9collapse task on 200–202,
reserved); no verdict is decided on them."""
CLAIM_SEEDS_FROM = 10
"""The first verdict seed of :data:`TRANSFORMER_CLAIMS` (seeds 10–19 at the full budget): disjoint from
:data:`TRANSFORMER_PILOT_SEEDS` and from every experiment's own seeds."""
TRANSFORMER_PROFILES = ("smoke", "quick", "full")
CALCULATOR_ERROR_RATE = 0.3
"""Share of expressions the calculator answers wrong (the pilot's task)."""
C2_LAG = 1
"""C2's injected lag L (``rollout.injected_lag``), chosen by the pilot in ``docs/transformer-pilot.md``: at the
preset's learning rate the sequence gate then admits about 85 % of the trajectories (drift ≈ 0.8 δ); at L = 2
it admitted about half, at L = 4 a third."""
C3_MAX_NEW_TOKENS = 17
"""C3's token budget (the other claims keep the preset's 24): 18 % of the held-out trajectories are truncated
after the warm-up (none at 24) with the same accuracy, so a length bias has room to show
(``docs/transformer-pilot.md``; at 16 the warm-up's accuracy fell from 0.13 to 0.015)."""

_BUDGETS = {  # profile → (seeds, updates, evaluate every, warm-up steps, held-out prompts)
    "smoke": (2, 3, 3, 20, 16),
    "quick": (2, 30, 10, 300, 200),
    "full": (10, 60, 10, 300, 500),
}


def base_config(profile: str, warmups: Path | str) -> Config:
    """The task at ``profile``'s budget; warm-ups shared through ``warmups``."""
    _, updates, every, steps, tests = _BUDGETS[profile]
    return load_config(resolve_config_path("tiny_cpu"), [
        f"rollout.tool_error_rate={CALCULATOR_ERROR_RATE}", "loop.mode=sync", "log.progress=false",
        f"train.updates={updates}", f"eval.every={every}", f"warmup.steps={steps}", f"data.num_test={tests}",
        f"warmup.cache={Path(warmups).resolve()}", "log.checkpoint_every=1000000"])


def build_transformer_design(claim: str, profile: str, warmups: Path | str, seeds: int | None = None) -> ClaimDesign:
    """``claim``'s design at ``profile``'s budget (``seeds`` overrides the budget's count). ``claim`` is one of
    :data:`TRANSFORMER_CLAIMS` (seeds from :data:`CLAIM_SEEDS_FROM`) or a follow-up of :data:`TRANSFORMER_EXPERIMENTS`
    (their own fresh seeds: the C2 collapse test's 30 from 100 at the full budget, the budget's count from 100
    otherwise)."""
    follow_up = TRANSFORMER_DESIGNS.row(claim).follow_up  # a ValueError listing the names for an unknown one
    if profile not in TRANSFORMER_PROFILES:
        raise ValueError(f"profile must be one of {', '.join(TRANSFORMER_PROFILES)}; got {profile!r}")
    design = TRANSFORMER_DESIGNS.build(claim, base_config(profile, warmups))
    first = design.seeds[0] if follow_up else CLAIM_SEEDS_FROM
    default = len(design.seeds) if follow_up and profile == "full" else _BUDGETS[profile][0]
    count = default if seeds is None else seeds
    return dataclasses.replace(design, seeds=tuple(range(first, first + count)), profile=profile)


TASK = KnobValue("tool30", "calculator wrong on 30 %")
"""The task as the knob's one value (C2 and C3 add their own settings to it)."""


def _on_task(knob: KnobValue = TASK, **fields: Any) -> ClaimDesign:
    """A design on the one task (a single knob value, the headline); :func:`build_transformer_design` sets the seeds."""
    return ClaimDesign(knob_name="task", knob=(knob,), headline=knob.name, seeds=(0, 1), vary_instance=False,
                       **fields)


C1_GRPO_GROUP_SIZE = 4
"""GRPO's group size in C1 and C9: the paper compares 1 rollout per prompt with G = 4 (the registry's own
default, ``LOSSES["grpo"].group_size``, is 8)."""


def _loss_arm(loss: str, group_size: int | None = None) -> dict[str, Any]:
    """An arm's overrides for ``loss`` (a key of :data:`flashsim.losses.LOSSES`) with its group size written out:
    ``group_size``, or the registry's for that loss."""
    return {"train.loss": loss, "rollout.group_size": LOSSES[loss].group_size if group_size is None else group_size}


FLASH_ARM = _loss_arm("flash_reinforce")
"""The overrides of the FlashREINFORCE arm (the registry's ``flash_reinforce``)."""
GRPO_ARM = _loss_arm("grpo", group_size=C1_GRPO_GROUP_SIZE)
"""The overrides of the GRPO arm, G = :data:`C1_GRPO_GROUP_SIZE` (token-mean, the registry's ``grpo``)."""


def _c1(base: Config) -> ClaimDesign:
    batch = base.train.batch_size
    return _on_task(
        claim="C1", title="FlashREINFORCE (1 rollout per prompt) vs GRPO (G = 4) on a transformer",
        paper="Article, two separate results: on Qwen2.5-Math-1.5B FlashREINFORCE scored 38.0 with 256K rollouts and "
              "GRPO 36.3 with 512K (half the rollouts); on Qwen2.5-7B-Instruct with a Python tool GRPO reached 0.00 "
              "Python calls per trajectory and FlashREINFORCE 3.25",
        question="At equal rollouts, and with GRPO given twice the rollouts (twice the updates, or twice the "
                 "batch), which learns faster per rollout, and does GRPO stop calling the tool?",
        base=base,
        arms=(Arm("flash", "FlashREINFORCE", FLASH_ARM),
              Arm("grpo", "GRPO G = 4, same rollouts", GRPO_ARM),
              Arm("grpo_2x_updates", "GRPO G = 4, twice the updates",
                  {**GRPO_ARM, "train.updates": 2 * base.train.updates}),
              Arm("grpo_2x_batch", "GRPO G = 4, twice the batch",
                  {**GRPO_ARM, "train.batch_size": 2 * batch, "loop.queue_size": 2 * base.loop.queue_size})),
        comparisons=(Comparison("auc", "flash", "grpo", "greater", paper="38.0 at 256K vs 36.3 at 512K rollouts"),
                     Comparison("auc", "flash", "grpo_2x_updates", "greater"),
                     Comparison("auc", "flash", "grpo_2x_batch", "greater"),
                     Comparison("tool_calls", "flash", "grpo", "greater", paper="3.25 vs 0.00 calls")),
        metrics=("accuracy", "tool_calls_change", "length"))


C2_PAPER = ("Qwen2.5-Math: sequence-level admission stayed stable; a token-local version collapsed "
            "(AMC23 from a 51.9 peak to 26.3) with entropy rising sharply")
"""The article's result both C2 designs (the verdict run and the collapse test) set beside theirs."""

C2_ARMS = (Arm("sequence_gate", "sequence gate (FlashREINFORCE)", {"train.loss": "flash_reinforce"}),
           Arm("token_gate", "token-local gate", {"train.loss": "token_gate"}),
           Arm("no_gate", "no gate (IS ratios only)", {"train.loss": "no_gate"}))
"""The three gates both C2 designs compare, on the same seeds' warm-ups."""


def _c2(base: Config) -> ClaimDesign:
    return _on_task(
        KnobValue(f"tool30_lag{C2_LAG}", f"calculator wrong on 30 %, injected lag L = {C2_LAG}",
                  {"rollout.injected_lag": C2_LAG}, value=C2_LAG),
        claim="C2", title="Sequence gate vs token-local gate vs no gate under injected lag on a transformer",
        paper=C2_PAPER,
        question=f"The engines sample with the weights of L = {C2_LAG} updates ago (rollout.injected_lag), so "
                 "every trajectory is stale by L; the lag is read in drift (the measured mean sequence KL over δ) "
                 "and in the sequence gate's acceptance rate. Does the sequence gate learn more per rollout than the "
                 "token-local gate, and than no gate?",
        base=base,
        arms=C2_ARMS,
        comparisons=(Comparison("auc", "sequence_gate", "token_gate", "greater",
                                paper="stable vs collapse (AMC23 51.9 → 26.3)"),
                     Comparison("entropy_final", "sequence_gate", "token_gate", "less",
                                paper="token-local: entropy rose"),
                     Comparison("auc", "sequence_gate", "no_gate", "greater", source="none")),
        metrics=("accuracy", "drift", "acceptance_rate", "token_acceptance_rate", "lag_mean", "tool_calls"))


C2_COLLAPSE_SEEDS = tuple(range(100, 130))
"""Fresh seeds for the C2 collapse test: disjoint from the pilots' (0–2) and from the claims' (10–19)."""


def _c2_collapse(base: Config) -> ClaimDesign:
    """Pre-registered (commit 75fee84): does the token-local gate collapse more often than the sequence
    gate? Analysed by :mod:`scale.studies.collapse`."""
    knob = tuple(KnobValue(f"tool30_lag{lag}", f"calculator wrong on 30 %, injected lag L = {lag}",
                           {"rollout.injected_lag": lag}, value=lag) for lag in (1, 2))
    return ClaimDesign(
        claim="C2collapse", title="Collapse of the token-local gate vs the sequence gate under injected lag",
        paper=C2_PAPER,
        question="Collapse is defined before the run (`collapse`: held-out accuracy at least 0.05 below its running "
                 "peak at each of the last two evaluations). Primary: per lag (L = 1, 2), Fisher's exact test, "
                 "one-sided, that the token-local gate collapses in more of the 30 seeds than the sequence gate, "
                 "Holm over the two lags (computed from per_seed.csv with scipy.stats.fisher_exact); secondary: the "
                 "paired area comparison. Prediction: at L = 1 (88 % admitted) 0–4 collapses of 30 for the token-local "
                 "gate and none for the sequence gate — not significant; at L = 2 (about half admitted) more. Cost: 3 "
                 "arms × 2 lags × 30 seeds = 180 runs of 60 updates, about 50 min on 2 cores with --jobs 2.",
        base=base,
        arms=C2_ARMS,
        knob_name="injected lag", knob=knob, headline=knob[0].name, seeds=C2_COLLAPSE_SEEDS, vary_instance=False,
        comparisons=(Comparison("collapse", "sequence_gate", "token_gate", "less", source="article",
                                paper="stable vs collapse (AMC23 51.9 → 26.3)"),
                     Comparison("auc", "sequence_gate", "token_gate", "greater", source="none"),
                     Comparison("collapse", "sequence_gate", "no_gate", "less", source="none")),
        metrics=("accuracy", "drift", "acceptance_rate", "tool_calls"))


def c2_collapse_design(warmups: Path | str, profile: str = "full") -> ClaimDesign:
    """The pre-registered C2 collapse test at ``profile``'s budget, on its own seeds (not part of ``reproduce all``;
    ``python -m scale reproduce C2collapse``)."""
    return build_transformer_design("C2collapse", profile, warmups)


C9_COLLAPSE_SEEDS = tuple(range(300, 310))
"""Fresh seeds for the C9 collapse test: disjoint from the pilots' (0–2, 200–202), the claims' (10–19) and the C2
collapse test's (100–129)."""
C9_COLLAPSE_ERROR_RATE = 0.5
C9_COLLAPSE_TASK = KnobValue("tool50", "calculator wrong on 50 %",
                             {"rollout.tool_error_rate": C9_COLLAPSE_ERROR_RATE}, value=C9_COLLAPSE_ERROR_RATE)
"""The task of the C9 collapse test: two-digit multiplication with a calculator wrong on half the expressions,
chosen by the recorded pilot's rule in ``docs/transformer-pilot.md`` (of three candidates none met "the tool helps
by ≥ 0.1 and the model alone is at ≥ 0.2"; this one had the smallest gap, 0.24, between the accuracy of the
warmed-up model's trajectories with and without a call)."""


def _c9_collapse(base: Config) -> ClaimDesign:
    """Pre-registered (the design's commit is named on the page): does GRPO abandon a tool that pays
    less? Analysed by :mod:`scale.studies.collapse`."""
    return ClaimDesign(
        claim="C9collapse", title="Tool collapse with a calculator wrong on half the expressions: GRPO vs "
                                  "FlashREINFORCE",
        paper=C9_PAPER,
        question="On a task chosen by a recorded pilot (`docs/transformer-pilot.md`, seeds 200–201) to give the "
                 "tool less of an edge than the claims' task (the calculator wrong on 50 % of the expressions; after "
                 "the warm-up the trajectories that call it are right 0.24–0.28 of the time and those that do not "
                 "0.01–0.03), does GRPO (G = 4, same 64 rollouts per update) stop calling the tool while "
                 "FlashREINFORCE keeps it? Primary: held-out tool calls per trajectory after 60 updates, "
                 "FlashREINFORCE − GRPO, paired over the 10 fresh seeds 300–309, with the page's rule (smallest "
                 "effect 0.1 calls). Secondary: `tool_collapse` (held-out calls below 0.05 at each of the last two "
                 "evaluations, the article's 0.00 with room for evaluation noise), Fisher's exact test, one-sided, "
                 "that GRPO abandons the tool in more seeds than FlashREINFORCE. Exploratory: the area under the "
                 "accuracy curve; tabulated: the accuracy with and without a call, after the warm-up and at the end. "
                 "Prediction: the article's is that GRPO abandons the tool (0.00 vs 3.25 calls); ours, from the "
                 "pilot (both arms rose from 0.26–0.27 to 0.96–1.00 calls in both pilot seeds), is that neither arm "
                 "abandons it in any seed and the primary comes out negligible — the tool still pays about 0.25 "
                 "against 0.02, so this test can show a collapse only if GRPO's group baseline alone drives one. "
                 "Cost: 2 arms × 10 seeds = 20 runs of 60 updates and 10 warm-ups; in the pilot a warm-up with "
                 "its first run took 124–133 s and a further run 59–65 s on the busy machine, so about 15–20 min "
                 "with --jobs 2.",
        base=base,
        arms=C9_ARMS,
        knob_name="task", knob=(C9_COLLAPSE_TASK,), headline=C9_COLLAPSE_TASK.name, seeds=C9_COLLAPSE_SEEDS,
        vary_instance=False,
        comparisons=(Comparison("tool_calls", "flash", "grpo", "greater", paper="3.25 vs 0.00 calls"),
                     Comparison("auc", "flash", "grpo", "greater", source="none")),
        metrics=("tool_collapse", "tool_calls_change", "accuracy", "accuracy_tool", "accuracy_no_tool",
                 "accuracy_tool_start", "accuracy_no_tool_start", "length"))


def c9_collapse_design(warmups: Path | str, profile: str = "full") -> ClaimDesign:
    """The pre-registered C9 collapse test at ``profile``'s budget, on its own seeds (not part of ``reproduce all``;
    ``python -m scale reproduce C9collapse``)."""
    return build_transformer_design("C9collapse", profile, warmups)


def _c3(base: Config) -> ClaimDesign:
    tokens = {"rollout.max_new_tokens": C3_MAX_NEW_TOKENS}
    return _on_task(
        KnobValue(f"tool30_tokens{C3_MAX_NEW_TOKENS}", f"calculator wrong on 30 %, {C3_MAX_NEW_TOKENS}-token budget",
                  tokens, value=C3_MAX_NEW_TOKENS),
        claim="C3", title="Sample-mean vs token-mean aggregation on a transformer",
        paper="token-mean's length bias: 3,947 vs 2,518 tokens (sample-mean 36 % shorter), truncation 45.3 % vs 17.2 %",
        question=f"Under a {C3_MAX_NEW_TOKENS}-token budget (18 % of the held-out trajectories truncated after "
                 "the warm-up), does token-mean make answers longer and truncate more often?",
        base=base,
        arms=(Arm("sample_mean", "sample-mean", {"train.loss": "flash_reinforce"}),
              Arm("token_mean", "token-mean", {"train.loss": "token_mean"})),
        comparisons=(Comparison("length", "sample_mean", "token_mean", "less",
                                paper="2,518 vs 3,947 tokens (36 % shorter)", size=3947 / 2518),
                     Comparison("truncation", "sample_mean", "token_mean", "less", paper="17.2 % vs 45.3 %"),
                     Comparison("auc", "sample_mean", "token_mean", "greater", source="none")),
        metrics=("accuracy", "tool_calls"))


def _c4(base: Config) -> ClaimDesign:
    token_sum = {"train.loss_options.aggregation": "seq_mean_token_sum"}
    return _on_task(
        claim="C4", title="Signed vs positive-only feedback, each under sample-mean and token-sum, on a transformer",
        paper="positive-only collapsed to 9.8 and stopped calling the tool",
        question="Does positive-only lose accuracy and tool calls, and is per-trajectory length averaging the "
                 "mechanism (as on the toys)?",
        base=base,
        arms=(Arm("signed", "signed, sample-mean", FLASH_ARM),
              Arm("positive_only", "positive-only, sample-mean", {"train.loss": "positive_only"}),
              Arm("signed_token_sum", "signed, token sum", {"train.loss": "flash_reinforce", **token_sum}),
              Arm("positive_only_token_sum", "positive-only, token sum", {"train.loss": "positive_only", **token_sum})),
        comparisons=(Comparison("auc", "signed", "positive_only", "greater", paper="36.2 vs 9.8"),
                     Comparison("tool_calls", "signed", "positive_only", "greater", paper="calls kept vs 0"),
                     Comparison("auc", "positive_only_token_sum", "positive_only", "greater", source="none")),
        metrics=("accuracy", "length"))


C9_PAPER = "GRPO abandoned the tool (0.00 Python calls per trajectory vs 3.25 for FlashREINFORCE)"
"""The article's result both C9 designs (the verdict run and the collapse test) set beside theirs."""
C9_ARMS = (Arm("flash", "FlashREINFORCE", FLASH_ARM), Arm("grpo", "GRPO G = 4, same rollouts", GRPO_ARM))
"""The two arms both C9 designs compare: C1's first two."""


def _c9(base: Config) -> ClaimDesign:
    return _on_task(
        claim="C9", title="Tool collapse on a transformer: tool calls over training, GRPO vs FlashREINFORCE",
        paper=C9_PAPER,
        question="With a calculator that is wrong on 30 % of expressions (tool calls also in failures), does GRPO "
                 "(G = 4, same rollouts) stop calling the tool while FlashREINFORCE keeps it? The runs are C1's "
                 "first two arms.",
        base=base,
        arms=C9_ARMS,
        comparisons=(Comparison("tool_calls", "flash", "grpo", "greater", paper="3.25 vs 0.00 calls"),),
        metrics=("tool_calls_change", "accuracy", "length"))


TRANSFORMER_DESIGNS = Registry([
    Registered("C1", _c1),
    Registered("C2", _c2),
    Registered("C3", _c3),
    Registered("C4", _c4),
    Registered("C9", _c9),
    Registered("C2collapse", _c2_collapse, follow_up=True),
    Registered("C9collapse", _c9_collapse, follow_up=True),
])
"""The transformer's experiments (``python -m scale reproduce NAME``): name → ``builder(base_config)``."""
TRANSFORMER_CLAIMS = TRANSFORMER_DESIGNS.names(follow_up=False)
"""The claims ``python -m scale reproduce all`` runs."""
TRANSFORMER_EXPERIMENTS = TRANSFORMER_DESIGNS.names(follow_up=True)
"""Pre-registered follow-ups run by name (``python -m scale reproduce C2collapse``), not part of ``all``; each has a
section of its own on the transformer page (:mod:`scale.studies.collapse`)."""
