"""The simulator's table of experiments: one row per claim or follow-up (``flashsim reproduce NAME``).

Adding a claim is one builder (a function of the profile, in a file of its own under :mod:`flashsim.studies` or
beside the others in :mod:`~flashsim.studies.claims`) and one row in :data:`DESIGNS`'s table below, or, from code
outside flashsim, the same row through :meth:`~flashsim.experiments.registry.Registry.register`:

>>> from flashsim.experiments.design import Arm, ClaimDesign, Comparison, KnobValue
>>> from flashsim.experiments.profiles import base, pick, profile_seeds
>>> def my_claim(profile: str) -> ClaimDesign:
...     return ClaimDesign(
...         claim="Cmine", title="token-mean vs sample-mean on the bandit", paper="", question="",
...         base=base(env="bandit", updates=pick(profile, 2, 50, 100)),
...         arms=(Arm("sample_mean", "sample-mean", {"algorithm.loss": "flash_reinforce"}),
...               Arm("token_mean", "token-mean", {"algorithm.loss": "token_mean"})),
...         knob_name="env", knob=(KnobValue("bandit", "bandit"),),
...         comparisons=(Comparison("auc", "sample_mean", "token_mean", source="none"),),
...         headline="bandit", seeds=profile_seeds(profile), profile=profile)
>>> row = DESIGNS.register("Cmine", my_claim)
>>> build_design("Cmine", "smoke").seeds, "Cmine" in CLAIMS
((0, 1), True)
>>> DESIGNS.unregister("Cmine")
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from flashsim.experiments.design import ClaimDesign
from flashsim.experiments.pages import Page
from flashsim.experiments.registry import Registered, Registry
from flashsim.experiments.report import (
    FOLLOW_UP_ABOUT,
    FOLLOW_UP_TITLE,
    SIMULATION_ABOUT,
    SIMULATION_TITLE,
    write_report,
)
from flashsim.studies.claims import (
    c1_budget,
    c2_gates,
    c3_aggregation,
    c4_signed,
    c5_fresh,
    c6_breadth,
    c7_async,
    c8_stability,
    c9_tool_collapse,
)
from flashsim.studies.follow_ups import c1_mechanism, c1_size, c1_size_pilot

DESIGNS = Registry([
    Registered("C1", c1_budget),
    Registered("C2", c2_gates),
    Registered("C3", c3_aggregation),
    Registered("C4", c4_signed),
    Registered("C5", c5_fresh),
    Registered("C6", c6_breadth),
    Registered("C7", c7_async),
    Registered("C8", c8_stability),
    Registered("C9", c9_tool_collapse),
    Registered("C1size_pilot", c1_size_pilot, follow_up=True),
    Registered("C1size", c1_size, follow_up=True),
    Registered("C1mech", c1_mechanism, follow_up=True),
])
"""The simulator's experiments (``flashsim reproduce NAME``): the paper's claims C1–C9, then the follow-ups."""
CLAIMS: Mapping[str, Callable[[str], ClaimDesign]] = DESIGNS.builders(follow_up=False)
"""Claim id → builder (``builder(profile)``) of the claims ``flashsim reproduce all`` runs (a live view of
:data:`DESIGNS`)."""
EXPERIMENTS: Mapping[str, Callable[[str], ClaimDesign]] = DESIGNS.builders(follow_up=True)
"""Follow-up name → builder: runnable as ``flashsim reproduce NAME``, not part of ``all`` (a live view)."""


def build_design(claim: str, profile: str = "quick", seeds: int | None = None) -> ClaimDesign:
    """The design of ``claim`` at ``profile``, with ``seeds`` seeds from the design's first (default: the design's
    own, the profile's number for a claim).

    >>> design = build_design("C4", "smoke")
    >>> [arm.name for arm in design.arms], design.headline, len(design.cells())
    (['signed', 'positive_only', 'signed_token_sum', 'positive_only_token_sum'], 'gridworld', 8)
    """
    design = DESIGNS.build(claim, profile)
    return design if seeds is None else design.with_seed_count(seeds)


def rerender(page: Page, root: Path | str = ".") -> Path:
    """Write a simulator page under ``root`` again from the stores committed beside it (no cell is run); the
    transformer page is :mod:`scale`'s (``python -m scale.studies.pages`` re-renders it with the others)."""
    if page.family == "transformer":
        raise ValueError("page: the transformer page is rendered by scale: python -m scale.studies.pages transformer")
    path = Path(root) / page.path
    texts = {"title": FOLLOW_UP_TITLE, "about": FOLLOW_UP_ABOUT} if page.family == "follow-ups" else {
        "title": SIMULATION_TITLE, "about": SIMULATION_ABOUT}
    designs = [build_design(claim, page.profile, page.seeds) for claim in page.claims]
    return write_report(designs, path.parent / "results", path, command=page.command, family=page.family, **texts)


__all__ = ["CLAIMS", "DESIGNS", "EXPERIMENTS", "build_design", "rerender"]
