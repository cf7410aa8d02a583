"""When a transformer run has collapsed, or abandoned the tool: the two indicators, fixed before the runs.

Both are read on a run's held-out evaluations (update 0 first) by :func:`scale.studies.cells.cell_result` and counted
by the collapse tests' analysis (:mod:`scale.studies.collapse`): a run has collapsed (``collapse``) when its accuracy
fell :data:`COLLAPSE_DROP` below its running peak and stayed there for its last :data:`COLLAPSE_EVALS`
evaluations; it has abandoned the tool (``tool_collapse``) when its tool calls stayed below
:data:`TOOL_COLLAPSE_CALLS` as long.
"""

from __future__ import annotations

from typing import Any

import numpy as np

COLLAPSE_DROP = 0.05
COLLAPSE_EVALS = 2
"""A run has collapsed when its held-out accuracy is ≥ COLLAPSE_DROP below its running peak at each of its last
COLLAPSE_EVALS evaluations (the definition fixed before the C2 collapse run)."""


def collapsed(accuracy: Any) -> float:
    """:data:`COLLAPSE_DROP`/:data:`COLLAPSE_EVALS`'s collapse indicator of an accuracy curve (update 0 first).

    >>> collapsed([0.1, 0.12, 0.05, 0.06]), collapsed([0.1, 0.12, 0.05, 0.11]), collapsed([0.1, 0.2, 0.1])
    (1.0, 0.0, 0.0)
    """
    y = np.asarray(accuracy, dtype=np.float64)
    return _held_to_the_end(np.maximum.accumulate(y) - y >= COLLAPSE_DROP - 1e-12)


TOOL_COLLAPSE_CALLS = 0.05
"""A run has abandoned the tool when its held-out tool calls per trajectory are below this at each of its last
COLLAPSE_EVALS evaluations: the article's 0.00 calls, with room for evaluation noise (25 calls in 500 held-out
trajectories; fixed before the C9collapse run)."""


def tool_collapsed(tool_calls: Any) -> float:
    """1.0 if the held-out tool calls (update 0 first) are below :data:`TOOL_COLLAPSE_CALLS` at each of the last
    :data:`COLLAPSE_EVALS` evaluations, else 0.0.

    >>> tool_collapsed([0.25, 0.6, 0.04, 0.0]), tool_collapsed([0.25, 0.0, 0.3, 0.01]), tool_collapsed([0.0, 0.0])
    (1.0, 0.0, 0.0)
    """
    return _held_to_the_end(np.asarray(tool_calls, dtype=np.float64) < TOOL_COLLAPSE_CALLS)


def _held_to_the_end(condition: np.ndarray) -> float:
    """1.0 if ``condition`` (one flag per evaluation, update 0 first) holds at each of the last :data:`COLLAPSE_EVALS`
    evaluations of a run longer than that, else 0.0: the "and stayed there to the end" of both collapse measures."""
    return float(condition.size > COLLAPSE_EVALS and condition[-COLLAPSE_EVALS:].all())
