"""``flashsim.testing``: hypothesis strategies for loss inputs, and a harness that checks anyone's loss.

- :mod:`~flashsim.testing.strategies` — the public strategies and batch helpers that flashsim's own
  property tests draw from (:func:`loss_batches`, :class:`LossBatch`, :func:`evaluate_loss` ...);
- :func:`check_loss` — DESIGN.md's loss invariants run against a user's loss function, each failure
  shrunk to a minimal counterexample (:mod:`~flashsim.testing.check`,
  :mod:`~flashsim.testing.invariants`, :mod:`~flashsim.testing.report`);
- :mod:`~flashsim.testing.conventions` — adapters for the calling styles of flashsim, verl and TRL.

See ``docs/verify.md``; ``flashsim check-loss module:function`` runs the harness from the shell.
"""

from flashsim.testing.check import check_loss
from flashsim.testing.conventions import ALGORITHMS, CONVENTIONS, Convention, get_convention
from flashsim.testing.invariants import INVARIANTS, Invariant, InvariantViolation
from flashsim.testing.report import InvariantResult, LossReport
from flashsim.testing.strategies import (
    FLOAT_DTYPES,
    LAYOUTS,
    LOSS_FUNCTIONS,
    PADDING_JUNK,
    LossBatch,
    aggregations,
    evaluate_loss,
    evaluate_sharded_loss,
    filter_inputs,
    global_advantages,
    loss_batches,
    loss_names,
    random_loss_batch,
    shard_sizes,
)

__all__ = [
    "ALGORITHMS", "CONVENTIONS", "Convention", "FLOAT_DTYPES", "INVARIANTS", "Invariant", "InvariantResult",
    "InvariantViolation", "LAYOUTS", "LOSS_FUNCTIONS", "LossBatch", "LossReport", "PADDING_JUNK", "aggregations",
    "check_loss", "evaluate_loss", "evaluate_sharded_loss", "filter_inputs", "get_convention", "global_advantages",
    "loss_batches", "loss_names", "random_loss_batch", "shard_sizes",
]
