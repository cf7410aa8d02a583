"""Every results page, and the replication summary across them (``python -m scale.studies.pages`` writes all four).

Each results page (the quick toy page ``docs/results.md``, the full-budget toy page, the transformer page and the
follow-ups page) is written by :func:`~flashsim.experiments.report.write_report` from its claims' ``summary.json``
files. Those files, the figures, ``per_seed.csv``, the probe tables (``probes.md``) and the collapse tests'
``fisher.json`` are committed beside each page under ``results/<claim>/``, so every page can be written again
without its run: :func:`flashsim.studies.rerender` reads the committed stores and writes the page,
the generated summaries (:mod:`flashsim.experiments.summaries`) included, with the same numbers. Use it after
changing a discussion, the report's code or a design's prose; a new run writes its page with
``flashsim reproduce ... --report``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Page:
    """One results page: where it is, the family its Holm adjustment covers, how its run was made."""

    family: str
    path: str
    claims: tuple[str, ...]
    profile: str
    seeds: int | None
    command: str
    experiments: tuple[tuple[str, str], ...] = ()
    """The collapse tests' sections on the transformer page: (claim, the command that produced it)."""
    warmups: str = ""
    """The transformer run's warm-up cache, as its design recorded it (an absolute path on the page)."""


PAGES = (
    Page("quick", "docs/results.md", ("C1", "C2", "C3", "C4", "C5", "C6", "C7", "C8", "C9"), "quick", 10,
         "flashsim reproduce all --quick --seeds 10 --out runs/quick --report docs/results.md"),
    Page("full", "docs/full-budget/results.md", ("C1", "C2", "C3", "C4", "C5", "C6", "C7", "C8", "C9"), "full", 20,
         "flashsim reproduce all --seeds 20 --out runs/full --report docs/full-budget/results.md"),
    Page("transformer", "docs/transformer/results.md", ("C1", "C2", "C3", "C4", "C9"), "full", None,
         "python -m scale reproduce C1 C2 C3 C4 C9 --out runs/tclaims --report docs/transformer/results.md",
         (("C2collapse", "python -m scale reproduce C2collapse --out runs/c2collapse --report "
                         "docs/transformer/results.md"),
          ("C9collapse", "python -m scale reproduce C9collapse --out runs/c9collapse --report "
                         "docs/transformer/results.md")),
         "/work/runs/i30trans/tclaims/warmups"),
    Page("follow-ups", "docs/follow-ups/results.md", ("C1size", "C1mech"), "full", 20,
         "flashsim reproduce C1size C1mech --seeds 20 --out runs/followups --report docs/follow-ups/results.md"),
)
"""Every results page, in the order the replication summary lists them."""


def page_of(family: str) -> Page:
    """The :class:`Page` of ``family`` (``quick``, ``full``, ``transformer``, ``follow-ups``)."""
    for page in PAGES:
        if page.family == family:
            return page
    raise ValueError(f"family must be one of {', '.join(p.family for p in PAGES)}; got {family!r}")


def out_dir(command: str) -> str:
    """The ``--out`` folder of a page's command (where its run kept its cells and warm-ups)."""
    words = command.split()
    return words[words.index("--out") + 1]


def replication_text(docs: Path | str) -> str:
    """``docs/results.md``'s opening, from every page's committed stores under ``docs``
    (:func:`flashsim.experiments.summaries.replication_summary`)."""
    from flashsim.experiments.summaries import finalized_collapse, load_family, replication_summary

    docs, families = Path(docs), []
    for page in PAGES:
        stores = docs.parent / page.path.replace("results.md", "results")
        if not all((stores / claim / "summary.json").exists() for claim in page.claims):
            continue  # a page not run beside this one (a test's or a partial run's report)
        link = str(Path(page.path).relative_to("docs"))
        tests = {}
        for claim, _ in page.experiments:
            fisher = json.loads((stores / claim / "fisher.json").read_text())
            summary = json.loads((stores / claim / "summary.json").read_text())
            tests[claim] = (fisher, finalized_collapse(summary, fisher))
        families.append((page.family, link, load_family(stores, page.claims, page.family), tests))
    return replication_summary(families)
