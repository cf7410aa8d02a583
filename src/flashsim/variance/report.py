"""``GradientReport``: what :func:`flashsim.variance.measure_gradient` measured, as plain values."""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import Tensor


@dataclass(frozen=True, eq=False)
class GradientReport:
    """Bias, variance and agreement of one estimator's update direction ĝ = −∇L with the exact ∇J.

    Formulas: :mod:`flashsim.variance.statistics`. Vectors are in the layout of ``policy.get_flat()``.

    Shape:
        true_gradient, mean_gradient: ``[num_params]`` float64; everything else is a Python scalar.
    """

    estimator: str
    """Registry name of the loss."""
    budget: int
    """B, rollouts per batch."""
    group_size: int
    """G, rollouts per prompt (1 for single-rollout batches)."""
    num_batches: int
    """M, batches measured."""
    replicates: int
    """r, rollout sets per prompt draw (the nested design of the between/within split)."""
    true_gradient: Tensor
    """Exact ∇J(θ) over the train prompts."""
    mean_gradient: Tensor
    """Mean of ĝ over the M batches (estimates E ĝ)."""
    variance: float
    """tr Cov(ĝ) = between_prompt + within_prompt."""
    between_prompt: float
    """tr Cov(E[ĝ | prompts]): variance from which prompts the batch drew (unbiased; may be < 0 if tiny)."""
    within_prompt: float
    """E tr Cov(ĝ | prompts): variance from the rollouts (actions and reward coins) given the prompts."""
    bias_norm: float
    """‖mean ĝ − ∇J‖ (includes Monte Carlo noise of the mean; see bias_norm_debiased)."""
    bias_norm_debiased: float
    """sqrt(max(0, ‖mean ĝ − ∇J‖² − tr Cov(mean ĝ))): the bias with the noise of the mean removed."""
    mse: float
    """mean ‖ĝ − ∇J‖²."""
    cosine: float
    """mean cos(ĝ, ∇J) (a zero ĝ counts as 0)."""
    cosine_of_mean: float
    """cos(mean ĝ, ∇J): is the expected update aimed at ∇J? (scale-free bias; 1 for an unbiased or shrunk ĝ)."""
    snr: float
    """‖mean ĝ‖² / tr Cov(ĝ)."""
    scale: float
    """c*, the best scalar rescaling argmin_c mean ‖c ĝ − ∇J‖²."""
    scaled_mse: float
    """mean ‖c* ĝ − ∇J‖² (scale-free: GRPO's std normalisation changes the scale of ĝ)."""
    relative_scaled_mse: float
    """scaled_mse / ‖∇J‖², in [0, 1]; 1 − relative_scaled_mse is the squared 'uncentred correlation'."""
    true_gradient_norm: float
    """‖∇J‖."""
    acceptance_rate: float
    """Mean over batches of the fraction of trajectories the trust region admitted."""
    ess: float
    """Mean over batches of Kish's ESS of the token importance ratios, (Σρ)²/Σρ²."""
    ess_fraction: float
    """Mean over batches of ESS / number of policy tokens."""
    token_acceptance_rate: float
    """Mean over batches of the fraction of policy tokens kept."""
    clip_fraction: float
    """Fraction of all measured policy tokens clipped (PPO clip) or capped (TIS)."""
    mean_length: float
    """Mean trajectory length T_i over all rollouts."""
    confidence: float
    """Level of the bootstrap intervals (e.g. 0.95)."""
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)
    """Basic cluster-bootstrap intervals ``(low, high)`` by statistic name (empty without bootstrap)."""
    directions: Tensor | None = None
    """ĝ of every batch, ``[M, num_params]`` float64, when ``measure_gradient(keep_directions=True)``; else None."""

    def to_dict(self, include_vectors: bool = False) -> dict[str, object]:
        """Flat, namespaced values (``config/…``, ``grad/…``, ``trust/…``), with ``…_ci_low``/``…_ci_high``.

        ``include_vectors`` adds ``grad/true_gradient`` and ``grad/mean_gradient`` as lists.
        """
        result: dict[str, object] = {
            "config/estimator": self.estimator,
            "config/budget": self.budget,
            "config/group_size": self.group_size,
            "config/num_batches": self.num_batches,
            "config/replicates": self.replicates,
        }
        for name in (
            "variance", "between_prompt", "within_prompt", "bias_norm", "bias_norm_debiased", "mse", "cosine",
            "cosine_of_mean", "snr", "scale", "scaled_mse", "relative_scaled_mse", "true_gradient_norm",
        ):
            result[f"grad/{name}"] = getattr(self, name)
            if name in self.intervals:
                result[f"grad/{name}_ci_low"], result[f"grad/{name}_ci_high"] = self.intervals[name]
        for name in ("acceptance_rate", "token_acceptance_rate", "ess", "ess_fraction", "clip_fraction"):
            result[f"trust/{name}"] = getattr(self, name)
        result["env/mean_length"] = self.mean_length
        result["config/confidence"] = self.confidence
        if include_vectors:
            result["grad/true_gradient"] = self.true_gradient.tolist()
            result["grad/mean_gradient"] = self.mean_gradient.tolist()
        return result
