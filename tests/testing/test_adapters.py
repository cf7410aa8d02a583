"""The TRL, verl and OpenRLHF adapters: each reproduces its framework's loss and gradient, and the harness
flags a known-wrong declaration or a real property of the framework through it.

Each framework's tests skip when it is not installed (``pip install -e ".[conformance]"`` and
``requirements/conformance-nodeps.txt``; CI installs all three). Importing a framework takes seconds, so
these are marked slow.
"""

import pytest
import torch

from flashsim.testing import check_loss, random_loss_batch
from flashsim.testing.adapters import FrameworkMissing, variants

pytestmark = pytest.mark.slow


def _batch(seed: int = 0, group_size: int = 2):
    batch = random_loss_batch(torch.Generator().manual_seed(seed), batch_size=6, width=5, drift=0.4,
                              group_size=group_size, padding="zeros")
    return batch


def _grad(fn, batch, *args, **kwargs):
    leaf = batch.leaf()
    loss = fn(leaf, *args, **kwargs)
    loss = loss[0] if isinstance(loss, tuple) else loss
    (gradient,) = torch.autograd.grad(loss, leaf)
    return loss.detach(), gradient


def _row(framework: str, variant: str):
    return next(row for row in variants(framework) if row.variant == variant)


# ---- TRL -------------------------------------------------------------------------------------------------

def _trl_reference(loss_type, log_probs, batch, advantages, budget=32):
    """TRL's documented GRPO-family losses, written from its docs: −min(ρA, clip(ρ, 1 ± ε)A), aggregated per type."""
    mask = batch.action_mask.to(torch.float64)
    ratio = torch.exp(log_probs - batch.behavior_log_probs)
    a = advantages[:, None]
    per_token = -torch.minimum(ratio * a, ratio.clamp(0.8, 1.2) * a)
    if loss_type == "grpo":
        return ((per_token * mask).sum(-1) / mask.sum(-1)).mean()
    if loss_type in ("bnpo", "dapo"):
        return (per_token * mask).sum() / mask.sum()
    return (per_token * mask).sum() / (mask.shape[0] * budget)  # dr_grpo


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])
def test_the_trl_adapter_reproduces_trls_loss_and_gradient(loss_type):
    pytest.importorskip("trl")
    from flashsim.testing.adapters.trl import policy_loss

    batch = _batch()
    adapter = policy_loss(loss_type)
    advantages = adapter.advantages(batch.rewards, batch.group_ids)
    loss, gradient = _grad(adapter, batch, batch.behavior_log_probs, batch.rewards, batch.action_mask,
                           batch.group_ids)
    want, want_gradient = _grad(lambda lp: _trl_reference(loss_type, lp, batch, advantages), batch)
    torch.testing.assert_close(loss, want, rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(gradient, want_gradient, rtol=1e-12, atol=1e-15)
    # TRL's advantages: (R − group mean) / (unbiased group std + 1e-4), or unscaled for dr_grpo.
    grouped = batch.rewards.view(-1, 2)
    centred = (grouped - grouped.mean(1, keepdim=True)).flatten()
    scale = 1.0 if loss_type == "dr_grpo" else grouped.std(1).repeat_interleave(2) + 1e-4
    torch.testing.assert_close(advantages, torch.nan_to_num(centred / scale))


def test_trl_bnpo_declared_as_a_sample_mean_fails_the_gradient_invariants():
    pytest.importorskip("trl")
    from flashsim.testing.adapters.trl import policy_loss

    names = ["on_policy_gradient", "length_normalisation"]
    right = check_loss(policy_loss("bnpo"), invariants=names, max_examples=10)
    assert right.passed, str(right)
    wrong = check_loss(policy_loss("bnpo"), aggregation="trl:grpo", invariants=names, max_examples=10)
    assert {r.name for r in wrong.failures} == set(names), str(wrong)


def test_trl_masks_padding_by_multiplying_and_bnpo_is_not_microbatch_invariant():
    pytest.importorskip("trl")
    from flashsim.testing.adapters.trl import policy_loss

    report = check_loss(policy_loss("grpo"), invariants=["padding"], max_examples=20)
    assert report["padding"].failed and "non-finite" in report["padding"].message
    bnpo = check_loss(policy_loss("bnpo"), invariants=["shards"], max_examples=30)
    assert bnpo["shards"].failed, str(bnpo)
    dapo = check_loss(policy_loss("dapo"), invariants=["shards"], max_examples=30)
    assert dapo.passed, str(dapo)


# ---- verl ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"])
def test_the_verl_adapter_reproduces_verls_loss_and_gradient(mode):
    core_algos = pytest.importorskip("verl.trainer.ppo.core_algos")
    from verl.workers.config import ActorConfig

    from flashsim.testing.adapters.verl import policy_loss

    batch = _batch()
    adapter = policy_loss(mode)
    loss, gradient = _grad(adapter, batch, batch.behavior_log_probs, batch.rewards, batch.action_mask,
                           batch.group_ids)
    advantages, _ = core_algos.compute_grpo_outcome_advantage(
        batch.rewards[:, None].expand(batch.action_mask.shape) * batch.action_mask / batch.lengths[:, None],
        batch.action_mask, batch.group_ids.numpy())
    config = ActorConfig(strategy="fsdp", ppo_micro_batch_size_per_gpu=1, rollout_n=1)

    def direct(log_probs):
        return core_algos.compute_policy_loss_vanilla(batch.behavior_log_probs, log_probs, advantages,
                                                      batch.action_mask, loss_agg_mode=mode, config=config)

    want, want_gradient = _grad(direct, batch)
    torch.testing.assert_close(loss, want, rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(gradient, want_gradient, rtol=1e-12, atol=1e-15)


def test_verl_grpo_with_one_rollout_per_prompt_has_no_baseline():
    pytest.importorskip("verl.trainer.ppo.core_algos")
    from flashsim.testing.adapters.verl import policy_loss

    report = check_loss(policy_loss("token-mean"), invariants=["single_rollout_groups", "on_policy_gradient"],
                        max_examples=10)
    result = report["single_rollout_groups"]
    assert result.failed and "max |got − expected| = 1 " in result.message, str(report)
    assert report["on_policy_gradient"].status == "holds"
    wrong = check_loss(policy_loss("token-mean"), aggregation="seq-mean-token-mean",
                       invariants=["on_policy_gradient"], max_examples=10)
    assert wrong["on_policy_gradient"].failed


# ---- OpenRLHF --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("variant", [row.variant for row in variants("openrlhf")])
def test_the_openrlhf_adapter_reproduces_openrlhfs_loss_and_gradient(variant):
    pytest.importorskip("openrlhf")
    pytest.importorskip("deepspeed")
    from flashsim.testing.adapters.openrlhf import policy_loss_class

    adapter = _row("openrlhf", variant)
    batch = _batch()
    group_ids = None if adapter.algorithm == "flash_reinforce" else batch.group_ids
    loss, gradient = _grad(adapter, batch, batch.behavior_log_probs, batch.rewards, batch.action_mask, group_ids)
    advantages = adapter.advantages(batch.rewards, group_ids)
    options = {k: v for k, v in adapter.options.items()}
    module = policy_loss_class()(**options)

    def direct(log_probs):
        token_advantages = advantages[:, None].expand(batch.action_mask.shape)
        if adapter.gated:
            return module(log_probs, log_probs.detach(), token_advantages, batch.action_mask,
                          rollout_log_probs=batch.behavior_log_probs)[0]
        return module(log_probs, batch.behavior_log_probs, token_advantages, batch.action_mask)[0]

    want, want_gradient = _grad(direct, batch)
    torch.testing.assert_close(loss, want, rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(gradient, want_gradient, rtol=1e-12, atol=1e-15)


def test_openrlhf_masks_padding_by_multiplying_and_a_token_mean_declared_per_sample_fails():
    pytest.importorskip("openrlhf")
    pytest.importorskip("deepspeed")
    row = _row("openrlhf", "group_norm ppo token_level_loss")
    report = check_loss(row, invariants=["padding"], max_examples=20)
    assert report["padding"].failed, str(report)
    wrong = check_loss(row, aggregation="sample_mean", invariants=["on_policy_gradient"], max_examples=10)
    assert wrong["on_policy_gradient"].failed


def test_a_missing_framework_raises_a_clear_import_error(monkeypatch):
    from flashsim.testing.adapters.trl import TRLLoss

    row = TRLLoss("grpo", "grpo", "trl:grpo", "group_mean_std", options={"loss_type": "grpo"})
    monkeypatch.setattr(TRLLoss, "distribution", "no-such-distribution-flashsim")
    with pytest.raises(FrameworkMissing, match="no-such-distribution-flashsim is not installed"):
        check_loss(row, max_examples=1)
