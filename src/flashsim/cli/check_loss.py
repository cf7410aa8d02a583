"""``flashsim check-loss MODULE:FUNCTION``: check a loss function against its algorithm's invariants.

Runs :func:`flashsim.testing.check_loss` (DESIGN.md's invariants, hypothesis-shrunk counterexamples)
and prints the report as a table. Exit status: 0 when every invariant holds, 1 when one fails, 2 on a
usage error (the function cannot be imported, an unknown option value).
"""

from __future__ import annotations

import argparse
import sys

from flashsim.losses import DEFAULT_DELTA
from flashsim.testing import ALGORITHMS, CONVENTIONS, INVARIANTS, check_loss
from flashsim.testing.conventions import load_function, parse_option
from flashsim.testing.declared import ESTIMATORS


def configure(parser: argparse.ArgumentParser) -> None:
    """The options of ``flashsim check-loss`` (:mod:`flashsim.cli` makes the parser)."""
    parser.add_argument("function", metavar="MODULE:FUNCTION",
                        help="the loss, e.g. my_trainer.losses:policy_loss, or a factory that returns it: "
                             "module:factory(key=value) or module:factory with --option")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="call MODULE:FUNCTION with this keyword (a Python literal or a word) and check what it "
                             "returns; repeatable, e.g. --option loss_type=bnpo")
    parser.add_argument("--algorithm", choices=ALGORITHMS, default=None,
                        help="the algorithm the loss implements [default: the loss's algorithm attribute, "
                             "else flash_reinforce]")
    parser.add_argument("--aggregation", default=None, metavar="MODE",
                        help="the aggregation the loss declares: sample_mean, token_mean, seq_mean_token_sum, "
                             "seq_mean_token_sum_norm, constant:N, or verl's / TRL's names (token-mean, "
                             "seq-mean-token-mean, ..., trl:grpo, trl:bnpo, trl:dapo) [default: the algorithm's]")
    parser.add_argument("--estimator", choices=ESTIMATORS, default=None,
                        help="the advantage estimator the loss declares [default: the algorithm's]")
    parser.add_argument("--equal-shards", action="store_true", default=None,
                        help="draw only equal-size microbatches (a loss that divides by its accumulation steps)")
    parser.add_argument("--contiguous-groups", action="store_true", default=None,
                        help="groups arrive as contiguous blocks of G rows (a loss that reshapes with view(-1, G))")
    parser.add_argument("--convention", choices=tuple(CONVENTIONS), default="flashsim",
                        help="how the loss is called (see flashsim.testing.conventions) [default: flashsim]")
    parser.add_argument("--delta", type=float, default=None,
                        help=f"the gate threshold δ the loss uses [default: {DEFAULT_DELTA:g}]")
    parser.add_argument("--clip-eps", type=float, default=None, help="GRPO's clip range ε [default: 0.2]")
    parser.add_argument("--std-eps", type=float, default=1e-6, help="GRPO's ε added to the group std [default: 1e-6]")
    parser.add_argument("--examples", type=int, default=60, help="hypothesis examples per invariant [default: 60]")
    parser.add_argument("--invariants", default=None, metavar="A,B,...",
                        help=f"run only these ({', '.join(i.name for i in INVARIANTS)}) [default: all]")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        options = dict(parse_option(text) for text in args.option)
        names = None if args.invariants is None else [n.strip() for n in args.invariants.split(",") if n.strip()]
        fn = load_function(args.function, options)
        report = check_loss(
            fn, algorithm=args.algorithm, convention=args.convention, delta=args.delta, clip_eps=args.clip_eps,
            std_eps=args.std_eps, max_examples=args.examples, invariants=names, aggregation=args.aggregation,
            estimator=args.estimator, equal_shards=args.equal_shards, contiguous_groups=args.contiguous_groups,
        )
    except (ImportError, ValueError, TypeError) as error:
        print(f"flashsim check-loss: error: {error}", file=sys.stderr)
        return 2
    print(report)
    return 0 if report.passed else 1
