"""``flashsim variance``: bias and variance of update directions against the exact gradient.

Measures every estimator × lag × budget × group size of the grid (see :mod:`flashsim.variance.sweep`)
at the point θ_N of a deterministic exact-ascent trajectory, with behaviour policies θ_{N−L}. Prints a
table and writes ``variance.csv``, ``config.json``, ``vs_lag.png``, ``vs_budget.png`` and
``variance_split.png`` to ``--out``. The help text of each option is the docstring of the
:class:`~flashsim.variance.sweep.SweepConfig` field it sets; ``--config FILE.yaml`` and ``--set KEY=VALUE``
are read as for ``flashsim train`` (:func:`flashsim.config.load`: defaults → YAML → ``--set`` → flags).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from pathlib import Path

import torch

from flashsim.cli import add_config_sources, add_loss_option_flags, loss_option_assignments
from flashsim.config import add_flags, directory_argument, flag_assignments, load, to_dict
from flashsim.losses import DEFAULT_DELTA
from flashsim.storage import atomic_write_text
from flashsim.variance.plots import plot_metrics, plot_split
from flashsim.variance.sweep import SweepConfig, measure_sweep

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


def configure(parser: argparse.ArgumentParser) -> None:
    """The options of ``flashsim variance`` (:mod:`flashsim.cli` makes the parser)."""
    paths = add_flags(
        parser, SweepConfig, flat=True,
        names={"budgets": "--budget", "group_sizes": "--group-size", "losses": "--loss"},
    )
    add_loss_option_flags(parser, "loss_options")  # --delta, --clip-eps, ...: one flag per table row
    add_config_sources(parser, "SweepConfig", "lags=0,4")
    parser.add_argument("--out", type=directory_argument, required=True, metavar="DIR",
                        help="directory for the CSV and plots")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 is fastest on a busy machine)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    parser.set_defaults(func=run, config_paths=paths)


def run(args: argparse.Namespace) -> int:
    torch.set_num_threads(args.threads)
    try:
        config = sweep_config(args)
        if args.out.exists() and not args.out.is_dir():
            raise ValueError(f"--out {str(args.out)!r} exists and is not a directory")
        started = time.perf_counter()
        rows = measure_sweep(config, progress=None if args.quiet else _progress)
    except (ImportError, ValueError, TypeError) as error:
        print(f"flashsim variance: error: {error}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)  # only now: a refused config leaves no directory behind
    elapsed = time.perf_counter() - started
    write_csv(rows, args.out / "variance.csv")
    atomic_write_text(args.out / "config.json", json.dumps({**to_dict(config), "seconds": elapsed}, indent=2) + "\n")
    title = (f"{config.env}, {config.policy} policy, M = {config.batches} batches, "
             f"δ = {config.loss_options.get('delta', DEFAULT_DELTA)}")
    plot_metrics(rows, args.out / "vs_lag.png", x="lag", title=title)
    plot_metrics(rows, args.out / "vs_budget.png", x="budget", title=title)
    plot_split(rows, args.out / "variance_split.png", title=title)
    print(format_table(rows))
    print(f"{len(rows)} measurements in {elapsed:.1f} s; CSV and plots in {args.out}")
    return 0


def sweep_config(args: argparse.Namespace) -> SweepConfig:
    """The sweep's config: defaults, then ``--config``, ``--set`` and the flags (``--delta`` sets
    ``loss_options.delta``), as :func:`flashsim.config.load` applies them."""
    flags = flag_assignments(args, args.config_paths) + loss_option_assignments(args)
    return load(SweepConfig, args.config, args.set, flags)


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
