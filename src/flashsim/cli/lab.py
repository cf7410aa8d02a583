"""``flashsim lab``: compute the documentation lab page's grid (learning curves and update quality) and its data.

Every setting of the grid — env × algorithm × δ × policy lag × batch design, see
:class:`~flashsim.lab.grid.LabConfig`, whose field docstrings are this command's help — gets one
simulated run per seed and one exact update-quality measurement. Finished cells are kept in
``--out``/cells, so running the command again resumes an interrupted run. The page's data is written to
``--out``/data.js and, with ``--data``, to that path too (the committed one is ``docs/lab/data.js``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from flashsim.cli import add_config_sources
from flashsim.config import add_flags, directory_argument, flag_assignments, load
from flashsim.lab.compute import lab_data, run_lab, write_data
from flashsim.lab.grid import LabConfig, settings

DATA = "data.js"


def configure(parser: argparse.ArgumentParser) -> None:
    """The options of ``flashsim lab`` (:mod:`flashsim.cli` makes the parser)."""
    paths = add_flags(parser, LabConfig, flat=True)
    add_config_sources(parser, "LabConfig", "lags=0,8")
    parser.add_argument("--out", type=directory_argument, required=True, metavar="DIR",
                        help="directory of the finished cells (resumed if it holds some) and data.js")
    parser.add_argument("--data", type=Path, default=None, metavar="FILE.js",
                        help="also write the page's data script here (the page reads docs/lab/data.js)")
    parser.add_argument("--jobs", type=int, default=None,
                        help="worker processes (default: the CPU count, at most 4; 1 runs in this process)")
    parser.add_argument("--quiet", action="store_true", help="no progress line on stderr")
    parser.set_defaults(func=run, config_paths=paths)


def run(args: argparse.Namespace) -> int:
    try:
        config = load(LabConfig, args.config, args.set, flag_assignments(args, args.config_paths))
        jobs = args.jobs if args.jobs is not None else max(1, min(os.cpu_count() or 1, 4))
        if args.out.exists() and not args.out.is_dir():
            raise ValueError(f"--out {str(args.out)!r} exists and is not a directory")
        started = time.perf_counter()
        ran = run_lab(config, args.out, jobs=jobs, progress=None if args.quiet else _progress)
        data = lab_data(config, args.out)
    except (ValueError, TypeError) as error:
        print(f"flashsim lab: error: {error}", file=sys.stderr)
        return 2
    for path in (args.out / DATA, *([args.data] if args.data is not None else [])):
        write_data(data, path)
    elapsed = time.perf_counter() - started
    print(f"{len(settings(config))} settings, {ran} cells computed now in {elapsed:.1f} s; data in "
          f"{args.out / DATA}" + (f" and {args.data}" if args.data is not None else ""))
    return 0


def _progress(done: int, total: int) -> None:
    print(f"\r[{done}/{total}] cells", end="" if done < total else "\n", file=sys.stderr, flush=True)
