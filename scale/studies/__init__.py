"""The transformer studies: the paper's claims on the tiny transformer, each a design run by the training of
:mod:`scale.run` and judged by flashsim's machinery (:mod:`flashsim.experiments`).

- :mod:`~scale.studies.claims` — the transformer claims' designs, rows of
  :data:`~scale.studies.claims.TRANSFORMER_DESIGNS`;
- :mod:`~scale.studies.cells` — one cell: a resolved config → a training run → the cell's metrics;
- :mod:`~scale.studies.collapse_rules`, :mod:`~scale.studies.collapse` — what counts as a collapse, and the
  collapse tests of C2 and C9;
- :mod:`~scale.studies.claim_report`, :mod:`~scale.studies.pages` — the transformer page's figures and text, and
  ``python -m scale.studies.pages`` (every results page written again from its committed stores);
- :mod:`~scale.studies.c1_tuned` — C1 with each arm at its own best learning rate, on the transformer
  (``python -m scale.studies.c1_tuned``).

``python -m scale reproduce`` (:mod:`scale.cli`) runs them.
"""
