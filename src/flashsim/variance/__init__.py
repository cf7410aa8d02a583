"""``flashsim.variance``: bias and variance of update directions against exact gradients.

Is one rollout per prompt "noisy"? At a parameter point θ, with behaviour parameters θ' (policy lag
L), :func:`measure_gradient` draws M batches at a fixed rollout budget B exactly as the trainer does
(FlashREINFORCE: B prompts × 1; GRPO: B/G prompts × G), computes each update direction ĝ = −∇_θ L
with the registry's loss unchanged, and compares it with the exact ∇J(θ) of ``flashsim.exact``:
bias, variance (split into between- and within-prompt parts), MSE, cosine, SNR, scale-free MSE,
with cluster-bootstrap intervals. See ``docs/variance.md`` for the method and the measured tables.

Modules: :mod:`~flashsim.variance.sampling` (batches from tables), :mod:`~flashsim.variance.gradients`
(the vectorised path), :mod:`~flashsim.variance.reference` (the per-batch autograd loop),
:mod:`~flashsim.variance.statistics`, :mod:`~flashsim.variance.report`, :mod:`~flashsim.variance.lag`
(behaviour policies L steps back), :mod:`~flashsim.variance.sweep` and :mod:`~flashsim.variance.plots`.
"""

from flashsim.variance.measure import METHODS, measure_gradient, resolve_tables
from flashsim.variance.report import GradientReport

__all__ = ["METHODS", "GradientReport", "measure_gradient", "resolve_tables"]
