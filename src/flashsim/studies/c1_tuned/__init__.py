"""C1 with each arm at its own best learning rate, committed before any run.

- :mod:`~flashsim.studies.c1_tuned.rule` — the protocol: arms, grids, the tuning rule and its loop
  (:func:`~flashsim.studies.c1_tuned.rule.tune`, shared with ``scale.studies.c1_tuned``), the verdict's seeds;
- :mod:`~flashsim.studies.c1_tuned.run` — the simulator's driver
  (``python -m flashsim.studies.c1_tuned.run --out runs/c1-tuned``), resumable cell by cell;
- :mod:`~flashsim.studies.c1_tuned.report` — the numbers of the page, read from the cells;
- :mod:`~flashsim.studies.c1_tuned.page` — the figure and ``docs/c1-tuned/results.md``
  (``python -m flashsim.studies.c1_tuned.page --out runs/c1-tuned --page docs/c1-tuned/results.md``).
"""
