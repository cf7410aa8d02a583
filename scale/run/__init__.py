"""The run wing: a configuration becomes a training run (imports both other wings; nothing imports it).

- :mod:`~scale.run.config`, :mod:`~scale.run.cli` — the config sections and ``python -m scale``;
- :mod:`~scale.run.build` — every part of a run, built from the config (model, data, engines, learner,
  rollout source);
- :mod:`~scale.run.warmup` — the supervised warm-up before RL;
- :mod:`~scale.run.trainer` — the run itself: warm-up, updates, evaluation, in flashsim's run directory
  (:class:`flashsim.io.RunDirectory`: metrics, checkpoint, ``summary.json``, resume).
"""
