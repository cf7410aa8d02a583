"""The run wing: a configuration becomes a training run (imports the rollouts and the learner).

- :mod:`~scale.run.config` — the config sections (every flag of ``python -m scale train`` is generated from them);
- :mod:`~scale.run.build` — every part of a run, built from the config (model, data, engines, learner,
  rollout source);
- :mod:`~scale.run.warmup` — the supervised warm-up before RL;
- :mod:`~scale.run.trainer` — the run itself: warm-up, updates, evaluation, in flashsim's run directory
  (:class:`flashsim.outputs.RunDirectory`: metrics, checkpoint, ``summary.json``, resume).

The transformer studies that run it are :mod:`scale.studies`; ``python -m scale`` is :mod:`scale.cli`.
"""

from flashsim.moved import watch

watch(__path__)  # the studies' and the command's old module names fail with their new name
