"""Re-render every results page from its committed stores: ``python -m scale.studies.pages [FAMILY ...]``.

The simulator's three pages are :func:`flashsim.studies.rerender`'s; the transformer page (its five claims, then
the collapse tests' sections) is written here the way ``python -m scale reproduce ... --report`` writes it, from the
``summary.json``, ``per_seed.csv``, figures and ``fisher.json`` committed beside it. No cell is run.
"""

from __future__ import annotations

import sys
from pathlib import Path

from flashsim.experiments import PAGES, Page, out_dir, page_of, write_report
from flashsim.studies import rerender
from flashsim.studies.c1_tuned.page import rerender_tuned_page
from scale.studies.claim_report import REPORT_ABOUT, REPORT_TITLE
from scale.studies.claims import build_transformer_design
from scale.studies.collapse import write_collapse_section


def rerender_transformer(page: Page, root: Path | str = ".") -> Path:
    """Write the transformer page under ``root`` again from its committed stores."""
    path = Path(root) / page.path
    stores = path.parent / "results"
    warmups = page.warmups or Path(out_dir(page.command)) / "warmups"
    designs = [build_transformer_design(claim, page.profile, warmups, page.seeds) for claim in page.claims]
    write_report(designs, stores, path, command=page.command, title=REPORT_TITLE, about=REPORT_ABOUT,
                 family=page.family)
    for claim, command in page.experiments:
        design = build_transformer_design(claim, page.profile, Path(out_dir(command)) / "warmups")
        write_collapse_section(design, stores, path, command)
    return path


def main(argv: list[str] | None = None) -> int:
    """Re-render the named pages (``quick``, ``full``, ``transformer``, ``follow-ups``, ``c1-tuned``; default: all)."""
    names = (sys.argv[1:] if argv is None else argv) or [*(page.family for page in PAGES), "c1-tuned"]
    try:
        if "c1-tuned" in names:  # C1 tuned's page, from its committed stores (its own format, not a Page)
            print(f"re-rendered {rerender_tuned_page()}")
        for page in [page_of(name) for name in names if name != "c1-tuned"]:
            path = rerender_transformer(page) if page.family == "transformer" else rerender(page)
            print(f"re-rendered {path}")
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
