"""The ``flashsim`` command: a thin dispatcher over one module per subcommand.

Each subcommand lives in ``flashsim/cli/<name>.py`` and exposes ``add_parser(subparsers)``, which
registers its parser and sets ``func`` (called with the parsed namespace, returning an exit code).
Adding a subcommand means adding its module name to ``SUBCOMMANDS``; nothing else here changes.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from flashsim import __version__

SUBCOMMANDS = ("demo", "train", "variance", "reproduce", "check_loss")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="flashsim",
        description="Simulate and measure FlashREINFORCE vs GRPO with injected policy lag.",
    )
    parser.add_argument("--version", action="version", version=f"flashsim {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        importlib.import_module(f"flashsim.cli.{name}").add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
