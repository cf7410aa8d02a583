"""``flashsim conformance``: run check-loss on every installed framework's GRPO and FlashREINFORCE losses.

Writes the conformance page (default ``docs/conformance.md``): flashsim's registry rows, then every
variant of TRL, verl and OpenRLHF that is installed (the others are listed as not run), each judged by
its declared aggregation and estimator, every failure with its counterexample, cause and meaning.
``--row KEY [--invariant NAME] [--dtype float32]`` reruns one row (or one cell of it) in seconds, with the
row's own seed, and prints each result with its class, cause and minimal counterexample, and a failing
framework cell as Python that raises its AssertionError when pasted (the framework's own calls and the check's
comparison, :mod:`flashsim.testing.paste`): the command the page prints under every failure. Exit status: 0
when the page is written or the cell holds (or holds as documented), 1 when the rerun cell fails, 2 on a usage
error.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import pathlib
import sys
import warnings

from flashsim.testing.adapters import FRAMEWORKS


def configure(parser: argparse.ArgumentParser) -> None:
    """The options of ``flashsim conformance`` (:mod:`flashsim.cli` makes the parser)."""
    parser.add_argument("--out", default="docs/conformance.md", help="the page to write [default: docs/conformance.md]")
    parser.add_argument("--examples", type=int, default=40, help="hypothesis examples per invariant [default: 40]")
    parser.add_argument("--frameworks", default=",".join(FRAMEWORKS), metavar="A,B,...",
                        help=f"which adapters to run ({', '.join(FRAMEWORKS)}) [default: all]")
    parser.add_argument("--row", metavar="KEY", help="rerun one row (its key, e.g. verl:geo_mean, as the page "
                        "prints it) and print its results instead of writing the page")
    parser.add_argument("--invariant", metavar="NAME", help="with --row: rerun that invariant only")
    parser.add_argument("--dtype", choices=("float64", "float32"), default="float64",
                        help="with --row: the dtype of the drawn inputs [default: float64]")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from flashsim.testing.conformance import render, run_rows, uncaused

    frameworks = [name.strip() for name in args.frameworks.split(",") if name.strip()]
    unknown = [name for name in frameworks if name not in FRAMEWORKS]
    if unknown or not frameworks:
        print(f"flashsim conformance: error: --frameworks must name some of {', '.join(FRAMEWORKS)}, got "
              f"{args.frameworks!r}", file=sys.stderr)
        return 2
    if not (isinstance(args.examples, int) and args.examples >= 1):
        print(f"flashsim conformance: error: --examples must be ≥ 1, got {args.examples}", file=sys.stderr)
        return 2
    if args.row is not None or args.invariant is not None:
        return _rerun(args, frameworks)
    out = pathlib.Path(args.out)
    if not out.parent.is_dir():
        print(f"flashsim conformance: error: --out: no directory {out.parent}", file=sys.stderr)
        return 2
    rows = run_rows(frameworks, max_examples=args.examples, progress=lambda line: print(line, flush=True))
    command = "flashsim conformance" + ("" if args.examples == 40 else f" --examples {args.examples}")
    out.write_text(render(rows, max_examples=args.examples, command=command))
    missing = uncaused(rows)
    print(f"wrote {out} ({len(rows)} rows)")
    for line in missing:
        print(f"warning: no cause recorded for {line}", file=sys.stderr)
    return 0


@contextlib.contextmanager
def quiet():
    """Python warnings off, and whatever the frameworks write to stdout or stderr while they run (DeepSpeed binds its
    log handler to the stdout of the moment it is imported) dropped."""
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        yield


def _rerun(args: argparse.Namespace, frameworks: list[str]) -> int:
    """``--row KEY [--invariant NAME]``: one row or one cell, printed."""
    import torch

    from flashsim.testing.conformance import find_row, show_cell
    from flashsim.testing.invariants import INVARIANTS

    names = [invariant.name for invariant in INVARIANTS]
    if args.row is None:
        print("flashsim conformance: error: --invariant needs --row", file=sys.stderr)
        return 2
    if args.invariant is not None and args.invariant not in names:
        print(f"flashsim conformance: error: --invariant must be one of {', '.join(names)}, got {args.invariant!r}",
              file=sys.stderr)
        return 2
    try:
        loss = find_row(args.row, frameworks)
    except ValueError as error:
        print(f"flashsim conformance: error: {error}", file=sys.stderr)
        return 2
    dtype = {"float64": torch.float64, "float32": torch.float32}[args.dtype]
    with quiet():  # the frameworks' import-time warnings and log lines are not the cell's result
        text, failed = show_cell(loss, args.invariant, max_examples=args.examples, dtype=dtype)
    print(text)
    return 1 if failed else 0
