"""``flashsim reproduce``: the paper's claims C1–C9 as experiments with seeds, intervals and verdicts.

Runs every cell (claim × arm × knob value × seed) of the chosen claims in parallel processes into
``--out`` (resumable: run the same command again after an interruption and only the missing cells
run; for C1–C4 also gradient probes at the headline setting), then writes per claim ``summary.json``,
``table.md``, ``means.csv`` and two figures, prints the verdicts, and with ``--report`` writes the
results page (``docs/results.md``). Designs and the verdict rule: :mod:`flashsim.experiments`.
"""

from __future__ import annotations

import argparse
import resource
import shlex
import sys
import time
from pathlib import Path

import torch

from flashsim.config import directory_argument
from flashsim.experiments import run_sweep, write_outputs, write_report
from flashsim.experiments.probes import probe_design
from flashsim.experiments.report import FOLLOW_UP_ABOUT, FOLLOW_UP_TITLE
from flashsim.experiments.run_cell import probe_cell
from flashsim.studies import DESIGNS, build_design


def configure(parser: argparse.ArgumentParser) -> None:
    """The options of ``flashsim reproduce`` (:mod:`flashsim.cli` makes the parser)."""
    claims, follow_ups = DESIGNS.names(follow_up=False), DESIGNS.names(follow_up=True)
    parser.add_argument("claims", nargs="+", choices=[*claims, *follow_ups, "all"], metavar="CLAIM",
                        help=f"claims to run: {', '.join(claims)} or all (the claims), or a follow-up experiment: "
                             f"{', '.join(follow_ups)}")
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--quick", action="store_const", dest="profile", const="quick",
                        help="the quick budget (10 seeds; all claims in ~15 min on 2 busy cores)")
    budget.add_argument("--smoke", action="store_const", dest="profile", const="smoke",
                        help="seconds per claim, 2 seeds (a check that everything runs, not a result)")
    parser.set_defaults(profile="full")
    parser.add_argument("--seeds", type=int, default=None,
                        help="seeds per cell (default: 20 full from seed 1100, 10 quick from 10, 2 smoke from 0)")
    parser.add_argument("--out", type=directory_argument, required=True,
                        help="output directory (an existing one is resumed)")
    parser.add_argument("--jobs", type=int, default=None, help="worker processes (default: all cores)")
    parser.add_argument("--report", type=Path, default=None,
                        help="also write the results page here (e.g. docs/results.md; assets go to results/ beside it)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    torch.set_num_threads(1)  # tiny tensors: one thread per process is fastest
    names = list(DESIGNS.names(follow_up=False)) if "all" in args.claims else list(dict.fromkeys(args.claims))
    try:
        designs = [build_design(name, args.profile, args.seeds) for name in names]
        cells = sum(len(design.cells()) for design in designs)  # builds (and so checks) every cell's config
    except (ValueError, TypeError) as error:
        print(f"flashsim reproduce: error: {error}", file=sys.stderr)
        return 2
    print(f"{', '.join(names)}: {cells} cells ({args.profile}, {len(designs[0].seeds)} seeds) into {args.out}")
    started = time.perf_counter()
    try:
        ran = run_sweep(designs, args.out, jobs=args.jobs, progress=not args.no_progress)
    except ValueError as error:  # --out holds cells of another design
        print(f"flashsim reproduce: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # --out cannot be made or written (a name too long, a file in the way): config fuzz
        print(f"flashsim reproduce: error: --out {str(args.out)!r}: {error.strerror or error}", file=sys.stderr)
        return 2
    probed = [probe_design(design) for design in designs if design.probed]
    if probed:  # C1-C4: the gradient beside the training outcome, at the headline setting
        ran += run_sweep(probed, args.out, jobs=args.jobs, progress=not args.no_progress, run=probe_cell)
        cells += sum(len(design.cells()) for design in probed)
    elapsed = time.perf_counter() - started
    cpu = sum(getattr(resource.getrusage(who), field) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
              for field in ("ru_utime", "ru_stime"))
    print(f"ran {ran} cells ({cells - ran} already done) in {elapsed:.0f} s wall, {cpu:.0f} s CPU")
    for design in designs:
        summary = write_outputs(design, args.out)
        primary = summary["primary"]
        print(f"{design.claim}: {primary['comparison']} at {design.knob_value(design.headline).label}: "
              f"{primary['verdict']}  ({args.out / design.claim / 'table.md'})")
    if args.report is not None:
        follow_ups = all(DESIGNS[name].follow_up for name in names)  # their own page, title and opening
        page = {"title": FOLLOW_UP_TITLE, "about": FOLLOW_UP_ABOUT, "family": "follow-ups"} if follow_ups else {
            "family": args.profile}
        path = write_report(designs, args.out, args.report, command=_command(args, names, designs), **page)
        print(f"report written to {path}")
    return 0


def _command(args: argparse.Namespace, names: list[str], designs) -> str:
    """The command line that reproduces this run (recorded in the report)."""
    claims = "all" if "all" in args.claims else " ".join(names)
    profile = {"quick": " --quick", "smoke": " --smoke", "full": ""}[args.profile]
    return (f"flashsim reproduce {claims}{profile} --seeds {len(designs[0].seeds)} --out {shlex.quote(str(args.out))}"
            f" --report {shlex.quote(str(args.report))}")
