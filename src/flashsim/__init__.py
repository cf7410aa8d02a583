"""flashsim: simulate, verify and measure single-rollout asynchronous RL for language models.

Layers (each imports only from layers below it; see ``docs/design.md``):

1. :mod:`flashsim.losses` — pure PyTorch loss math (FlashREINFORCE, GRPO, ablations).
2. ``toy_envs`` — gymnasium environments with exact tables.
3. :mod:`flashsim.policies`, :mod:`flashsim.exact` — small policies, exact J(θ) and ∇J(θ).
4. :mod:`flashsim.sim` — the asynchronous simulator with injected policy lag.
5. :mod:`flashsim.variance`, :mod:`flashsim.experiments` — measurement against exact gradients, and the
   machinery of experiments (designs, runner, verdicts, pages).
6. :mod:`flashsim.studies` — the studies built on that machinery (the paper's claims, the follow-ups, C1 tuned).
7. :mod:`flashsim.cli`, plots, tutorials.

Foundation modules every layer may use: :mod:`flashsim.validation`, :mod:`flashsim.config`,
:mod:`flashsim.storage` (atomic writes, ``jsonable``, checkpoints) and :mod:`flashsim.outputs` (the run directory).
"""

from flashsim.moved import watch

watch(__path__)  # old module names (flashsim.io) fail with their new name

__version__ = "0.1.0"
