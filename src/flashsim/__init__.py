"""flashsim: simulate, verify and measure single-rollout asynchronous RL for language models.

Layers (each imports only from layers below it; see ``docs/design.md``):

1. :mod:`flashsim.losses` — pure PyTorch loss math (FlashREINFORCE, GRPO, ablations).
2. ``toy_envs`` — gymnasium environments with exact tables.
3. :mod:`flashsim.policies`, :mod:`flashsim.exact` — small policies, exact J(θ) and ∇J(θ).
4. :mod:`flashsim.sim` — the asynchronous simulator with injected policy lag.
5. :mod:`flashsim.variance`, :mod:`flashsim.experiments` — measurement against exact gradients.
6. :mod:`flashsim.cli`, plots, tutorials.
"""

__version__ = "0.1.0"
