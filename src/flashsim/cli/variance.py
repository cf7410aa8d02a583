"""``flashsim variance``: bias and variance of update directions against the exact gradient.

Measures every estimator × lag × budget × group size of the grid (see :mod:`flashsim.variance.sweep`)
at the point θ_N of a deterministic exact-ascent trajectory, with behaviour policies θ_{N−L}. Prints a
table and writes ``variance.csv``, ``config.json``, ``vs_lag.png``, ``vs_budget.png`` and
``variance_split.png`` to ``--out``. The help text of each option is the docstring of the
:class:`~flashsim.variance.sweep.SweepConfig` field it sets.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from dataclasses import asdict, fields
from pathlib import Path

import torch

from flashsim.sim.config import field_help
from flashsim.testing import ALGORITHMS, CONVENTIONS
from flashsim.testing.conventions import load_function
from flashsim.variance.plots import plot_metrics, plot_split
from flashsim.variance.sweep import SweepConfig, run_sweep

TABLE_COLUMNS = (
    ("config/lag", "L", "{:>3}"),
    ("config/label", "estimator", "{:<16}"),
    ("config/group_size", "G", "{:>2}"),
    ("config/budget", "B", "{:>4}"),
    ("grad/variance", "variance", "{:>10.3e}"),
    ("grad/between_prompt", "between", "{:>10.3e}"),
    ("grad/within_prompt", "within", "{:>10.3e}"),
    ("grad/bias_norm_debiased", "bias", "{:>9.3e}"),
    ("grad/cosine", "cosine", "{:>7.3f}"),
    ("grad/cosine_of_mean", "cos(Eĝ)", "{:>7.4f}"),
    ("grad/snr", "SNR", "{:>8.3f}"),
    ("grad/relative_scaled_mse", "rel.sMSE", "{:>8.3f}"),
    ("trust/acceptance_rate", "accept", "{:>6.3f}"),
    ("trust/ess_fraction", "ESS/T", "{:>6.3f}"),
)


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(",") if part)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _names(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "variance", help="measure bias and variance of update directions against exact gradients",
        description=__doc__.split("\n\n")[0],
    )
    helps, defaults = field_help(SweepConfig), SweepConfig()
    options = (
        ("--env", "env", str), ("--policy", "policy", str), ("--estimators", "estimators", _names),
        ("--budget", "budgets", _ints), ("--group-size", "group_sizes", _ints), ("--lags", "lags", _ints),
        ("--batches", "batches", int), ("--steps", "steps", int), ("--step-size", "step_size", float),
        ("--delta", "delta", float), ("--seed", "seed", int), ("--bootstrap", "bootstrap", int),
        ("--replicates", "replicates", int),
    )
    for flag, name, kind in options:
        default = getattr(defaults, name)
        is_list = isinstance(default, tuple)
        shown = ",".join(map(str, default)) if is_list else default
        parser.add_argument(
            flag, dest=name, type=kind, default=default, metavar="A,B,..." if is_list else None,
            help=f"{helps[name]} [default: {shown}]",
        )
    parser.add_argument("--loss", action="append", default=[], metavar="MODULE:FUNCTION",
                        help="a loss function of yours to measure next to the estimators (repeatable)")
    parser.add_argument("--loss-algorithm", choices=ALGORITHMS, default="flash_reinforce",
                        help="the algorithm --loss implements (grpo: grouped batches) [default: flash_reinforce]")
    parser.add_argument("--loss-convention", choices=tuple(CONVENTIONS), default="flashsim",
                        help="how --loss is called (see flashsim check-loss) [default: flashsim]")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR", help="directory for the CSV and plots")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 is fastest on a busy machine)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    torch.set_num_threads(args.threads)
    try:
        config = SweepConfig(**{f.name: getattr(args, f.name) for f in fields(SweepConfig)})
        user_losses = {spec: (load_function(spec), args.loss_algorithm, args.loss_convention) for spec in args.loss}
        args.out.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        rows = run_sweep(config, progress=None if args.quiet else _progress, user_losses=user_losses)
    except (ImportError, ValueError, TypeError) as error:
        print(f"flashsim variance: error: {error}", file=sys.stderr)
        return 2
    elapsed = time.perf_counter() - started
    write_csv(rows, args.out / "variance.csv")
    losses = {"loss": args.loss, "loss_algorithm": args.loss_algorithm, "loss_convention": args.loss_convention}
    (args.out / "config.json").write_text(json.dumps({**asdict(config), **losses, "seconds": elapsed}, indent=2) + "\n")
    title = f"{config.env}, {config.policy} policy, M = {config.batches} batches, δ = {config.delta}"
    plot_metrics(rows, args.out / "vs_lag.png", x="lag", title=title)
    plot_metrics(rows, args.out / "vs_budget.png", x="budget", title=title)
    plot_split(rows, args.out / "variance_split.png", title=title)
    print(format_table(rows))
    print(f"{len(rows)} measurements in {elapsed:.1f} s; CSV and plots in {args.out}")
    return 0


def _progress(done: int, total: int, row: dict) -> None:
    print(f"[{done}/{total}] L={row['config/lag']} {row['config/label']} G={row['config/group_size']} "
          f"B={row['config/budget']}: variance {row['grad/variance']:.3e}, cosine {row['grad/cosine']:.3f}",
          file=sys.stderr, flush=True)


def format_table(rows: list[dict]) -> str:
    """A fixed-width table of the main columns (:data:`TABLE_COLUMNS`)."""
    header = " ".join(
        f"{title:>{len(fmt.format(rows[0][key]))}}" if rows else title for key, title, fmt in TABLE_COLUMNS
    )
    lines = [header]
    for row in rows:
        lines.append(" ".join(fmt.format(row[key]) for key, _, fmt in TABLE_COLUMNS))
    return "\n".join(lines)


def write_csv(rows: list[dict], path: Path) -> None:
    """All columns of all rows (the union of keys, in first-seen order)."""
    columns: dict[str, None] = {}
    for row in rows:
        columns.update(dict.fromkeys(row))
    with path.open("w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=list(columns))
        writer.writeheader()
        writer.writerows(rows)
