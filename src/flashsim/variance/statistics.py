"""Statistics of M update directions against the exact gradient, with a cluster bootstrap.

The M = D·r directions come from D prompt draws, each answered by r independent rollout sets
(``ĝ_ij``, draw i, replicate j; batch index ``i·r + j``). With ``ḡ_i = (1/r) Σ_j ĝ_ij`` and
``ḡ = (1/D) Σ_i ḡ_i``, the one-way random-effects analysis of variance (Searle, Casella & McCulloch,
*Variance Components*, 1992, ch. 3) gives unbiased estimates of the two terms of the law of total
variance ``tr Cov ĝ = tr Cov E[ĝ | prompts] + E tr Cov[ĝ | prompts]``:

    within  = 1/(D (r − 1)) Σ_ij ‖ĝ_ij − ḡ_i‖²                    (rollout noise, prompts fixed)
    between = 1/(D − 1) Σ_i ‖ḡ_i − ḡ‖² − within / r                (which prompts were drawn)
    variance = between + within                                    (so the parts add up exactly)

``between`` is unbiased and can therefore come out slightly negative when it is small. Everything
else, for the exact gradient g:

    bias_norm = ‖ḡ − g‖;   bias_norm_debiased = sqrt(max(0, ‖ḡ − g‖² − s²/D)),  s² = 1/(D−1) Σ_i ‖ḡ_i − ḡ‖²
    mse = mean_ij ‖ĝ_ij − g‖²;   cosine = mean_ij cos(ĝ_ij, g) (0 for ĝ = 0);   snr = ‖ḡ‖² / variance
    cosine_of_mean = cos(ḡ, g): the direction of the expected update (a scale-free bias)
    scale c* = mean ĝ·g / mean ‖ĝ‖² (argmin_c mean ‖c ĝ − g‖²);   scaled_mse = mean ‖c* ĝ − g‖²
    relative_scaled_mse = scaled_mse / ‖g‖² = 1 − (mean ĝ·g)² / (mean ‖ĝ‖² ‖g‖²)  ∈ [0, 1]

Confidence intervals come from a bootstrap that resamples whole prompt draws (clusters) with
replacement, since the r batches of a draw are correlated (Davison & Hinkley, *Bootstrap Methods*,
1997, §3.8), and are *basic* (pivotal) intervals ``[2θ̂ − q_high, 2θ̂ − q_low]`` (ibid. §5.2): the norms
and cosines of a noisy mean (bias_norm, cosine_of_mean, snr) are biased by the noise of ḡ, the
bootstrap replicates carry that bias once more, and the basic interval subtracts it — so for those
statistics the interval is centred on a bias-corrected value and need not contain θ̂. All bootstrap
replicates come from one matrix product.

Glossary: M batches, D prompt draws, r replicates per draw, P parameters, R bootstrap resamples.
"""

from __future__ import annotations

import torch
from torch import Tensor

#: Statistics that get bootstrap confidence intervals.
INTERVAL_STATISTICS = (
    "variance", "between_prompt", "within_prompt", "bias_norm", "bias_norm_debiased", "mse", "cosine",
    "cosine_of_mean", "snr", "scale", "scaled_mse", "relative_scaled_mse",
)


def cluster_summaries(directions: Tensor, true_gradient: Tensor, replicates: int) -> dict[str, Tensor]:
    """Per-draw sufficient statistics, centred on the overall mean for numerical accuracy.

    Shape:
        directions ``[D·r, P]``, true_gradient ``[P]``; returns ``mean [P]``, ``centered_means [D, P]``
        and ``[D]`` sums: ``centered_sq`` ‖ḡ_i − ḡ‖², ``within_ss`` Σ_j ‖ĝ_ij − ḡ_i‖², and per-batch
        sums over the draw of ``sq_norm`` ‖ĝ‖², ``dot`` ĝ·g, ``error`` ‖ĝ − g‖², ``cos``.
    """
    draws = directions.shape[0] // replicates
    grouped = directions.view(draws, replicates, -1)
    means = grouped.mean(dim=1)
    mean = means.mean(dim=0)
    centered = means - mean
    true_norm = torch.linalg.vector_norm(true_gradient)
    norms = torch.linalg.vector_norm(directions, dim=1)
    dots = directions @ true_gradient
    denominator = norms * true_norm
    cos = torch.where(denominator > 0, dots / torch.where(denominator > 0, denominator, 1.0), 0.0)
    per_batch = {
        "sq_norm": norms**2,
        "dot": dots,
        "error": torch.linalg.vector_norm(directions - true_gradient, dim=1) ** 2,
        "cos": cos,
    }
    summaries = {name: value.view(draws, replicates).sum(dim=1) for name, value in per_batch.items()}
    summaries.update(
        mean=mean,
        centered_means=centered,
        centered_sq=(centered**2).sum(dim=1),
        within_ss=((grouped - means[:, None]) ** 2).sum(dim=(1, 2)),
    )
    return summaries


def weighted_estimates(
    summaries: dict[str, Tensor], true_gradient: Tensor, replicates: int, weights: Tensor
) -> dict[str, Tensor]:
    """Every statistic of the module docstring, once per row of draw ``weights`` (counts summing to D).

    Shape:
        weights ``[R, D]`` (a row of ones is the point estimate); every returned value is ``[R]``.
    """
    draws = weights.shape[1]
    batches = draws * replicates
    offset = weights @ summaries["centered_means"] / draws
    mean = summaries["mean"] + offset
    between_draws = (weights @ summaries["centered_sq"] - draws * (offset**2).sum(dim=1)) / (draws - 1)
    within = weights @ summaries["within_ss"] / (draws * (replicates - 1))
    between = between_draws - within / replicates
    variance = between + within
    bias_sq = ((mean - true_gradient) ** 2).sum(dim=1)
    mean_sq, mean_dot = (weights @ summaries[name] / batches for name in ("sq_norm", "dot"))
    true_sq = (true_gradient**2).sum()
    mean_norm = torch.linalg.vector_norm(mean, dim=1) * true_sq.sqrt()
    cosine_of_mean = torch.where(mean_norm > 0, mean @ true_gradient / torch.where(mean_norm > 0, mean_norm, 1.0), 0.0)
    scale = torch.where(mean_sq > 0, mean_dot / torch.where(mean_sq > 0, mean_sq, 1.0), 0.0)
    scaled_mse = true_sq - scale * mean_dot
    return {
        "variance": variance,
        "between_prompt": between,
        "within_prompt": within,
        "bias_norm": bias_sq.sqrt(),
        "bias_norm_debiased": (bias_sq - between_draws / draws).clamp(min=0).sqrt(),
        "mse": weights @ summaries["error"] / batches,
        "cosine": weights @ summaries["cos"] / batches,
        "cosine_of_mean": cosine_of_mean,
        "snr": (mean**2).sum(dim=1) / variance,
        "scale": scale,
        "scaled_mse": scaled_mse,
        "relative_scaled_mse": scaled_mse / true_sq,
    }


def bootstrap_weights(draws: int, resamples: int, generator: torch.Generator) -> Tensor:
    """Counts of each draw in ``resamples`` resamples of the D draws with replacement. Shape: ``[R, D]``."""
    picks = torch.randint(draws, (resamples, draws), generator=generator)
    counts = torch.zeros(resamples, draws, dtype=torch.float64)
    return counts.scatter_add_(1, picks, torch.ones(resamples, draws, dtype=torch.float64))


def gradient_statistics(
    directions: Tensor, true_gradient: Tensor, *, replicates: int, resamples: int, confidence: float,
    generator: torch.Generator,
) -> tuple[dict[str, float], dict[str, tuple[float, float]], Tensor]:
    """Point estimates, basic cluster-bootstrap intervals and the mean direction.

    Shape:
        directions ``[D·r, P]`` float64 (batch ``i·r + j`` is replicate j of draw i); true_gradient ``[P]``.
        Returns ``(estimates, intervals, mean [P])``.
    """
    summaries = cluster_summaries(directions, true_gradient, replicates)
    draws = directions.shape[0] // replicates
    ones = torch.ones(1, draws, dtype=torch.float64)
    estimates = weighted_estimates(summaries, true_gradient, replicates, ones)
    point = {name: float(value[0]) for name, value in estimates.items()}
    intervals: dict[str, tuple[float, float]] = {}
    if resamples > 0:
        weights = bootstrap_weights(draws, resamples, generator)
        replicated = weighted_estimates(summaries, true_gradient, replicates, weights)
        tail = (1 - confidence) / 2
        levels = torch.tensor([tail, 1 - tail], dtype=torch.float64)
        for name in INTERVAL_STATISTICS:
            low, high = torch.nanquantile(replicated[name], levels).tolist()
            intervals[name] = (2 * point[name] - high, 2 * point[name] - low)
    return point, intervals, summaries["mean"]
