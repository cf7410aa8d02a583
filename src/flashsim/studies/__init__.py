"""``flashsim.studies``: the studies, each in its own module, built on the machinery of :mod:`flashsim.experiments`.

- :mod:`~flashsim.studies.claims` — the paper's claims C1–C9 as designs, one builder each;
- :mod:`~flashsim.studies.follow_ups` — the pre-registered follow-ups (C1 at the claimed size, C1's mechanism);
- :mod:`~flashsim.studies.c1_tuned` — C1 with each arm at its own best learning rate (the tuning rule and its
  loop, which ``scale.studies.c1_tuned`` runs on the transformer too; the driver, the summary and the page);
- :mod:`~flashsim.studies.registry` — the table of the simulator's experiments, :data:`DESIGNS`: one row per
  claim or follow-up (adding a study is one builder and one row), and :func:`rerender`, a page written again from
  its committed stores.

Studies import the machinery; the machinery never imports a study (``tests/test_import_contract.py``).
``flashsim reproduce`` runs the rows of :data:`DESIGNS`.
"""

from __future__ import annotations

from flashsim.studies.registry import CLAIMS, DESIGNS, EXPERIMENTS, build_design, rerender

__all__ = ["CLAIMS", "DESIGNS", "EXPERIMENTS", "build_design", "rerender"]
