"""Bad input gets a clear error that names the argument and the problem."""

from __future__ import annotations

import math

import pytest
import torch

from flashsim.losses import flash_reinforce_loss, get_loss, grpo_loss


def good():
    lp = torch.log(torch.tensor([[0.5, 0.4, 0.3], [0.2, 0.9, 0.6]], dtype=torch.float64))
    return {
        "log_probs": lp.clone().requires_grad_(True),
        "behavior_log_probs": lp.clone(),
        "rewards": torch.tensor([1.0, 0.0], dtype=torch.float64),
        "action_mask": torch.tensor([[True, True, True], [True, True, False]]),
    }


def with_change(**change):
    kwargs = good()
    for key, value in change.items():
        kwargs[key] = value(kwargs) if callable(value) else value
    return kwargs


def set_token(name, row, col, value):
    def change(kwargs):
        x = kwargs[name].detach().clone()
        x[row, col] = value
        return x
    return change


FLASH_CASES = [
    ("log_probs not a tensor", {"log_probs": [[-0.1]]}, TypeError, "log_probs must be a torch.Tensor"),
    ("log_probs integer", {"log_probs": torch.zeros(2, 3, dtype=torch.long)}, TypeError, "floating"),
    ("log_probs 1-D", {"log_probs": torch.zeros(3, dtype=torch.float64)}, ValueError, r"shape \[B, T\]"),
    ("log_probs empty", {"log_probs": torch.zeros(0, 3, dtype=torch.float64)}, ValueError, "at least one"),
    ("behavior shape", {"behavior_log_probs": torch.zeros(2, 4, dtype=torch.float64)}, ValueError,
     "behavior_log_probs must have the shape"),
    ("behavior dtype", {"behavior_log_probs": lambda k: k["behavior_log_probs"].float()}, TypeError,
     "behavior_log_probs has dtype"),
    ("mask not bool", {"action_mask": lambda k: k["action_mask"].long()}, TypeError, "action_mask must have dtype"),
    ("mask shape", {"action_mask": torch.ones(2, 2, dtype=torch.bool)}, ValueError, "action_mask must have the shape"),
    ("rewards shape", {"rewards": torch.zeros(3, dtype=torch.float64)}, ValueError, r"rewards must have shape \[B\]"),
    ("rewards integer", {"rewards": torch.zeros(2, dtype=torch.long)}, TypeError, "rewards must be a floating"),
    ("rewards NaN", {"rewards": torch.tensor([1.0, math.nan], dtype=torch.float64)}, ValueError,
     "rewards must be finite"),
    ("rewards and advantages None", {"rewards": None}, ValueError, "pass rewards"),
    ("empty trajectory", {"action_mask": torch.tensor([[True, True, True], [False, False, False]])}, ValueError,
     r"rows \[1\] have none"),
    ("NaN log-prob on a policy token", {"log_probs": set_token("log_probs", 0, 1, math.nan)}, ValueError,
     "log_probs must be finite on policy tokens"),
    ("-inf behaviour log-prob on a policy token",
     {"behavior_log_probs": set_token("behavior_log_probs", 1, 0, -math.inf)}, ValueError,
     "behavior_log_probs must be finite"),
    ("positive log-prob", {"log_probs": set_token("log_probs", 0, 0, 0.5)}, ValueError, "must be log-probabilities"),
]


@pytest.mark.parametrize(
    "change, error, message", [c[1:] for c in FLASH_CASES], ids=[c[0] for c in FLASH_CASES]
)
def test_flash_reinforce_loss_rejects_bad_tensors(change, error, message):
    kwargs = with_change(**change)
    with pytest.raises(error, match=message):
        flash_reinforce_loss(
            kwargs["log_probs"], kwargs["behavior_log_probs"], kwargs["rewards"], kwargs["action_mask"]
        )


HYPER_CASES = [
    ("negative delta", {"delta": -1e-3}, ValueError, "delta must lie in"),
    ("NaN delta", {"delta": math.nan}, ValueError, "delta must lie in"),
    ("bool delta", {"delta": True}, TypeError, "delta must be a real number"),
    ("string delta", {"delta": "3e-3"}, TypeError, "delta must be a real number"),
    ("unknown gate", {"gate": "sequnce"}, ValueError, "gate must be one of 'sequence', 'token', 'none'; got 'sequnce'"),
    ("unknown aggregation", {"aggregation": "mean"}, ValueError, "aggregation must be one of 'sample_mean'"),
    ("global B smaller than local", {"num_sequences": 1}, ValueError, "num_sequences is a global count"),
    ("zero global tokens", {"num_tokens": 0, "aggregation": "token_mean"}, ValueError, "num_tokens must lie in"),
    ("non-positive log-ratio clamp", {"log_ratio_clamp": 0.0}, ValueError, "log_ratio_clamp must lie in"),
    ("advantages wrong shape", {"advantages": torch.zeros(5, dtype=torch.float64)}, ValueError,
     r"advantages must have shape \[B\]"),
]


@pytest.mark.parametrize("options, error, message", [c[1:] for c in HYPER_CASES], ids=[c[0] for c in HYPER_CASES])
def test_flash_reinforce_loss_rejects_bad_hyperparameters(options, error, message):
    kwargs = good()
    with pytest.raises(error, match=message):
        flash_reinforce_loss(
            kwargs["log_probs"], kwargs["behavior_log_probs"], kwargs["rewards"], kwargs["action_mask"], **options
        )


GRPO_CASES = [
    ("no group ids", {"group_ids": None}, ValueError, "needs group_ids"),
    ("float group ids", {"group_ids": torch.tensor([0.0, 1.0])}, TypeError, "group_ids must be an integer tensor"),
    ("group ids wrong shape", {"group_ids": torch.tensor([0, 0, 1])}, ValueError, r"group_ids must have shape \[B\]"),
    ("clip_eps zero", {"clip_eps": 0.0}, ValueError, "clip_eps must lie in"),
    ("clip_eps one", {"clip_eps": 1.0}, ValueError, "clip_eps must lie in"),
    ("negative clip_eps_high", {"clip_eps_high": -0.1}, ValueError, "clip_eps_high must lie in"),
    ("negative kl_coef", {"kl_coef": -1.0}, ValueError, "kl_coef must lie in"),
]


@pytest.mark.parametrize("options, error, message", [c[1:] for c in GRPO_CASES], ids=[c[0] for c in GRPO_CASES])
def test_grpo_loss_rejects_bad_arguments(options, error, message):
    kwargs = good()
    group_ids = options.pop("group_ids", torch.tensor([0, 0]))
    with pytest.raises(error, match=message):
        grpo_loss(
            kwargs["log_probs"], kwargs["behavior_log_probs"], kwargs["rewards"], kwargs["action_mask"], group_ids,
            **options,
        )


ABLATION_CASES = [
    ("zero TIS cap", {"gate": "none", "tis_cap": 0.0}, ValueError, "tis_cap must lie in"),
    ("inverted ratio band", {"gate": "none", "ratio_bounds": (2.0, 0.5)}, ValueError,
     r"ratio_bounds\[1\] must lie in"),
    ("ratio band not a pair", {"gate": "none", "ratio_bounds": 2.0}, TypeError, "ratio_bounds must be"),
]


@pytest.mark.parametrize("options, error, message", [c[1:] for c in ABLATION_CASES], ids=[c[0] for c in ABLATION_CASES])
def test_flash_reinforce_loss_rejects_bad_ablation_options(options, error, message):
    kwargs = good()
    with pytest.raises(error, match=message):
        flash_reinforce_loss(
            kwargs["log_probs"], kwargs["behavior_log_probs"], None, kwargs["action_mask"],
            advantages=torch.zeros(2, dtype=torch.float64), **options,
        )


def test_unknown_loss_name_lists_the_valid_ones():
    with pytest.raises(ValueError, match="loss must be one of 'flash_reinforce', 'token_gate'"):
        get_loss("flash")


def test_grouped_registry_loss_without_group_ids_says_so():
    kwargs = good()
    with pytest.raises(ValueError, match="need group_ids"):
        get_loss("grpo")(kwargs["log_probs"], kwargs["behavior_log_probs"], kwargs["rewards"], kwargs["action_mask"])


def test_validate_false_skips_value_checks_but_not_structure():
    kwargs = with_change(log_probs=set_token("log_probs", 0, 1, 0.5))
    flash_reinforce_loss(
        kwargs["log_probs"], kwargs["behavior_log_probs"], kwargs["rewards"], kwargs["action_mask"], validate=False
    )
    with pytest.raises(ValueError, match="action_mask must have the shape"):
        flash_reinforce_loss(
            kwargs["log_probs"], kwargs["behavior_log_probs"], kwargs["rewards"], torch.ones(1, 3, dtype=torch.bool),
            validate=False,
        )


def test_device_mismatch_is_named():
    kwargs = good()
    meta = kwargs["behavior_log_probs"].to("meta")  # a second device that exists on every machine
    with pytest.raises(ValueError, match="behavior_log_probs is on meta but log_probs are on cpu"):
        flash_reinforce_loss(kwargs["log_probs"], meta, kwargs["rewards"], kwargs["action_mask"])
