"""The losses' vocabulary: δ's default, the gates, the aggregation modes, and each loss's option table.

Data only (no function of this module runs): a table row is ``option name → the check of its value``
(:mod:`flashsim.losses.checks`). A loss declares its table with ``@takes_options(TABLE)``; the registry
(:func:`flashsim.losses.check_loss_options`) checks a row's options against the same table where they enter.

Adding an option to a loss is two edits: the keyword parameter of the loss function (with its default) and
one row here. Everything else reads the table and the signature: the configs and CLIs that take
``loss_options``, the registry's check, :meth:`flashsim.losses.LossSpec.resolved` (docs/design.md, "Adding a
loss option: one parameter + one row").
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from flashsim.losses.checks import check_bool, check_bounds, check_choice, check_count, check_optional, check_real

DEFAULT_DELTA = 3e-3
"""The sequence gate's threshold δ when none is given: flashsim's default, the one literal of it. The article gives
none; the reference implementation's FlashREINFORCE quick-start (NVIDIA-NeMo/labs-molt,
``examples/scripts/quick_start/rl_flash_reinforce_r1d_1p5b.sh``) sets 5e-3. The simulator, the variance
measurement, ``scale`` and the claims' drift unit (D̄ in units of δ) all use this value unless told otherwise."""

GATES = ("sequence", "token", "none")
"""Values of ``gate=``: the paper's Sequence Trust Region, its token-local ablation, no gate."""

AGGREGATIONS = ("sample_mean", "token_mean", "seq_mean_token_sum", "seq_mean_token_sum_norm")
"""How per-token terms become one scalar (:func:`flashsim.losses.token_weights`). Every mode gives the tokens of
trajectory i one weight u_i:

- ``sample_mean``: ``u_i = 1 / (B · T_i)`` (FlashREINFORCE; DeepSeekMath GRPO; TRL ``"grpo"``). Every
  trajectory weighs the same whatever its length; per token, a long trajectory weighs 1/T_i less.
- ``token_mean``: ``u_i = 1 / Σ_j T_j`` (DAPO; TRL's default). Trajectory i weighs ∝ T_i, so long
  trajectories (often long failures) dominate: the length blow-up of the article's §4.3.
- ``seq_mean_token_sum``: ``u_i = 1 / B``, the plain REINFORCE estimate of ∇J; its scale grows with length.
- ``seq_mean_token_sum_norm``: ``u_i = 1 / (B · T_max)`` (Dr. GRPO; TRL ``"dr_grpo"``), T_max the budget.
"""

Check = Callable[[str, object], object]

_positive = partial(check_real, low=0.0, low_inclusive=False, finite=False)
_nonnegative = partial(check_real, low=0.0, finite=False)
_aggregation = partial(check_choice, choices=AGGREGATIONS)
_max_tokens = check_optional(partial(check_count, at_least=0))

FLASH_REINFORCE_OPTIONS: dict[str, Check] = {
    "delta": _nonnegative,
    "gate": partial(check_choice, choices=GATES),
    "aggregation": _aggregation,
    "importance_sampling": check_bool,
    "tis_cap": check_optional(_positive),
    "ratio_bounds": check_optional(check_bounds),
    "max_tokens": _max_tokens,
    "log_ratio_clamp": check_optional(_positive),
    "negative_token_fraction": partial(check_real, low=0.0, high=1.0, finite=False),
}
"""The options of :func:`flashsim.losses.flash_reinforce_loss` and the check of each value."""

GRPO_OPTIONS: dict[str, Check] = {
    "clip_eps": partial(check_real, low=0.0, high=1.0, low_inclusive=False, high_inclusive=False, finite=False),
    "clip_eps_high": check_optional(_positive),
    "scale_by_std": check_bool,
    "std_eps": _nonnegative,
    "aggregation": _aggregation,
    "max_tokens": _max_tokens,
    "log_ratio_clamp": check_optional(_positive),
    "kl_coef": _nonnegative,
}
"""The options of :func:`flashsim.losses.grpo_loss` and the check of each value (``kl_coef`` is one only for
direct callers, who pass ``reference_log_probs``: no trainer has a reference policy)."""
