"""The ``flashsim`` command: a thin dispatcher over one module per subcommand.

Each subcommand lives in ``flashsim/cli/<module>.py`` and exposes ``configure(parser)``, which adds its
options to the parser made here and sets ``func`` (called with the parsed namespace, returning an exit
code); the first paragraph of the module's docstring is its ``--help`` description. Only the chosen
subcommand's module is imported and its options built: ``flashsim train`` does not pay for the parsers
(and imports) of the others, which ``flashsim --help`` lists by name and the one-line help of
:data:`SUBCOMMANDS`.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from flashsim import __version__

SUBCOMMANDS = {
    "demo": "FlashREINFORCE vs GRPO on PromptBandit at lag 0 and lag 8: a table and a plot",
    "train": "run one simulated training run (FlashREINFORCE, GRPO or an ablation) with policy lag",
    "variance": "measure bias and variance of update directions against exact gradients",
    "lab": "compute the documentation's lab page: learning curves and update quality over lag, δ and batch design",
    "reproduce": "run the paper's claims (C1-C9) as experiments: figures, tables, verdicts",
    "check-loss": "check a loss function against FlashREINFORCE's or GRPO's invariants",
    "conformance": "check-loss on the installed TRL, verl and OpenRLHF losses; writes docs/conformance.md",
}
"""Subcommand → its one-line help; its module is ``flashsim.cli.<name with - as _>``."""


def add_config_sources(parser: argparse.ArgumentParser, config: str, example: str, after: str = "") -> None:
    """``--config FILE.yaml`` and ``--set KEY=VALUE`` (repeatable) for a command whose settings are the dataclass
    named ``config``; :func:`flashsim.config.load` applies them in the order defaults → YAML → ``--set`` → flags.
    ``example`` is a ``KEY=VALUE`` for the help, ``after`` what the command applies before the YAML (``--algo``)."""
    first = f"after {after}, " if after else ""
    parser.add_argument("--config", default=None, metavar="FILE.yaml",
                        help=f"a YAML file of {config} keys (applied {first}before --set and the flags)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help=f"set any {config} key (repeatable), e.g. --set {example}")


def add_loss_option_flags(parser: argparse.ArgumentParser, key: str) -> None:
    """One flag per row of the loss-option tables of :mod:`flashsim.losses.options` (``--delta`` is δ,
    ``--clip-eps``, ...), each setting ``<key>.<name>``: read from the tables when the parser is made, so a loss
    option has one spelling on every command and one check, its table's (a row added to a table is a flag)."""
    from flashsim.losses import options

    tables = (("flash_reinforce_loss", options.FLASH_REINFORCE_OPTIONS), ("grpo_loss", options.GRPO_OPTIONS))
    for name in {**options.FLASH_REINFORCE_OPTIONS, **options.GRPO_OPTIONS}:
        losses = " and ".join(loss for loss, table in tables if name in table)
        parser.add_argument("--" + name.replace("_", "-"), dest=f"loss_option_{name}", default=None, metavar="VALUE",
                            help=f"option {name} of {losses} (sets {key}.{name}; checked by the loss's option table)")
    parser.set_defaults(loss_options_key=key)


def loss_option_assignments(args: argparse.Namespace) -> list[tuple[str, str, bool]]:
    """The ``(key, value, from_text)`` assignments of the flags :func:`add_loss_option_flags` made, for
    :func:`flashsim.config.load`."""
    prefix = "loss_option_"
    return [(f"{args.loss_options_key}.{name[len(prefix):]}", value, True) for name, value in vars(args).items()
            if name.startswith(prefix) and value is not None]


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``flashsim`` parser, with the options of ``command`` only (the others are listed, not built)."""
    parser = argparse.ArgumentParser(
        prog="flashsim",
        description="Simulate and measure FlashREINFORCE vs GRPO with injected policy lag.",
    )
    parser.add_argument("--version", action="version", version=f"flashsim {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, help_text in SUBCOMMANDS.items():
        subparser = subparsers.add_parser(name, help=help_text)
        if name == command:
            module = importlib.import_module(f"flashsim.cli.{name.replace('-', '_')}")
            subparser.description = module.__doc__.split("\n\n")[0]
            module.configure(subparser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv[0] if argv and argv[0] in SUBCOMMANDS else None)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
