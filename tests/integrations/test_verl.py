"""flashsim.integrations.verl: FlashREINFORCE through verl's own registries, called as verl's trainer calls them.

The driver's ``compute_advantage`` (``verl/trainer/ppo/ray_trainer.py``, which needs torchdata and so is not
imported here) looks the estimator up with ``get_adv_estimator_fn`` and calls it with ``token_level_rewards``,
``response_mask``, ``config`` and ``index``; each actor worker then calls ``verl.workers.utils.losses.ppo_loss``
on its micro-batches with the global batch info. Two data-parallel ranks × two micro-batches each, the ranks'
gradient mean, must be ``flash_reinforce_loss`` on the whole batch with batch-centred advantages, to 1e-12.
Importing verl takes seconds: the file is marked slow.
"""

import pytest
import torch

from flashsim.losses import batch_centered, flash_reinforce_loss

pytestmark = pytest.mark.slow

B, WIDTH, PROMPT = 8, 6, 3
LENGTHS = [6, 2, 5, 1, 4, 6, 3, 5]
DP, MICRO = 2, 2


@pytest.fixture(scope="module")
def verl():
    pytest.importorskip("verl")
    pytest.importorskip("tensordict")
    import verl.workers.utils.losses as worker_losses
    from verl.trainer.config.algorithm import AlgoConfig
    from verl.trainer.ppo import core_algos

    import flashsim.integrations.verl  # noqa: F401 (registers flash_reinforce)
    from flashsim.testing.adapters.verl import actor_config

    config = actor_config(policy_loss={"loss_mode": "flash_reinforce"}, loss_agg_mode="seq-mean-token-mean")
    return core_algos, worker_losses, AlgoConfig(), config


@pytest.fixture(scope="module")
def batch():
    generator = torch.Generator().manual_seed(0)
    mask = torch.arange(WIDTH) < torch.tensor(LENGTHS)[:, None]
    log_probs = torch.rand(B, WIDTH, generator=generator, dtype=torch.float64).mul(0.9).add(0.05).log()
    behaviour = log_probs + 0.05 * torch.randn(B, WIDTH, generator=generator, dtype=torch.float64)
    behaviour[3] = log_probs[3] - 1.5  # far off-policy: the gate rejects it (and some of the others)
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.5], dtype=torch.float64)
    return log_probs, behaviour, rewards, mask


def _token_level_rewards(rewards, mask):
    """verl's outcome reward: the score on the last response token, 0 elsewhere."""
    last = mask.long().sum(1) - 1
    return torch.zeros(mask.shape, dtype=rewards.dtype).scatter(1, last[:, None], rewards[:, None])


def _worker_data(rows, log_probs, behaviour, advantages, mask):
    """One micro-batch as verl's worker hands ``ppo_loss`` its padded tensors, and the model output's log-probs in
    verl's no-padding layout (one flat ``[total_nnz]`` tensor, the response shifted left by one token)."""
    from tensordict import TensorDict

    rows = torch.as_tensor(rows)
    prompts = torch.ones(len(rows), PROMPT, dtype=torch.long)
    attention = torch.cat([torch.ones(len(rows), PROMPT, dtype=torch.long), mask[rows].long()], dim=1)
    data = TensorDict({"prompts": prompts, "responses": torch.ones(len(rows), WIDTH, dtype=torch.long),
                       "attention_mask": attention, "response_mask": mask[rows].long(),
                       "old_log_probs": behaviour[rows], "advantages": advantages[rows]}, batch_size=[len(rows)])
    for key, value in (("dp_size", DP), ("batch_num_tokens", int(mask.sum())), ("global_batch_size", B)):
        data.set_non_tensor(key, value)
    pieces = []
    for row in rows.tolist():
        length = int(mask[row].sum())
        pieces += [torch.zeros(PROMPT - 1, dtype=log_probs.dtype), log_probs[row, :length],
                   torch.zeros(1, dtype=log_probs.dtype)]
    return {"log_probs": torch.cat(pieces)}, data


def _verl_step(verl, batch):
    """The advantages from verl's registry, then the ranks' mean of their summed micro-batch losses."""
    core_algos, worker_losses, algo_config, config = verl
    log_probs, behaviour, rewards, mask = batch
    estimator = core_algos.get_adv_estimator_fn("flash_reinforce")
    advantages, returns = estimator(token_level_rewards=_token_level_rewards(rewards, mask), response_mask=mask.long(),
                                    config=algo_config, index=[str(i) for i in range(B)])
    leaf = log_probs.clone().requires_grad_()
    ranks = []
    for rank in torch.arange(B).chunk(DP):
        ranks.append(sum(worker_losses.ppo_loss(config, *_worker_data(micro, leaf, behaviour, advantages, mask))[0]
                         for micro in rank.chunk(MICRO)))
    loss = sum(ranks) / DP  # DDP/FSDP average the ranks' gradients
    (gradient,) = torch.autograd.grad(loss, leaf)
    return advantages, returns, loss.detach(), gradient


def test_verls_registry_and_worker_loss_give_flash_reinforce_on_the_global_batch(verl, batch):
    log_probs, behaviour, rewards, mask = batch
    advantages, returns, loss, gradient = _verl_step(verl, batch)
    torch.testing.assert_close(advantages, batch_centered(rewards)[:, None] * mask, rtol=0, atol=0)
    torch.testing.assert_close(returns, advantages, rtol=0, atol=0)
    leaf = log_probs.clone().requires_grad_()
    want, stats = flash_reinforce_loss(leaf, behaviour, rewards, mask)
    (want_gradient,) = torch.autograd.grad(want, leaf)
    assert not bool(stats["admitted"][3]) and 0 < int(stats["admitted"].sum()) < B - 1  # the gate acts
    assert float(want_gradient.abs().max()) > 1e-3
    torch.testing.assert_close(loss, want.detach(), rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(gradient, want_gradient, rtol=1e-12, atol=1e-15)


def test_the_comparison_catches_a_loss_that_ignores_the_global_batch_info(verl, batch, monkeypatch):
    from flashsim.integrations import verl as integration

    loss_fn = integration.flash_reinforce_loss
    monkeypatch.setattr(integration, "flash_reinforce_loss",
                        lambda *a, num_sequences, **k: loss_fn(*a, num_sequences=None, **k))
    log_probs, behaviour, rewards, mask = batch
    _, _, loss, gradient = _verl_step(verl, batch)
    leaf = log_probs.clone().requires_grad_()
    want, _ = flash_reinforce_loss(leaf, behaviour, rewards, mask)
    with pytest.raises(AssertionError):
        torch.testing.assert_close(loss, want.detach(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(("call", "message"), [
    ({"loss_agg_mode": "token-mean"}, "actor.loss_agg_mode must be 'seq-mean-token-mean'"),
    ({"rollout_is_weights": torch.ones(2, 3)}, "rollout_is_weights given"),
], ids=["token-mean", "rollout-is-weights"])
def test_settings_the_loss_cannot_honour_are_refused(verl, call, message):
    core_algos = verl[0]
    tensors = torch.zeros(2, 3)
    with pytest.raises(ValueError, match=message):
        core_algos.get_policy_loss_fn("flash_reinforce")(old_log_prob=tensors, log_prob=tensors, advantages=tensors,
                                                         response_mask=tensors.bool(), config=verl[3], **call)


def test_a_second_name_registers_another_threshold_and_bad_ones_are_refused(verl):
    from flashsim.integrations.verl import register

    core_algos = verl[0]
    register("flash_reinforce_test_1e2", delta=1e-2)
    assert "flash_reinforce_test_1e2" in core_algos.POLICY_LOSS_REGISTRY
    assert core_algos.get_adv_estimator_fn("flash_reinforce_test_1e2") is core_algos.get_adv_estimator_fn(
        "flash_reinforce")
    with pytest.raises(ValueError, match="register.delta must lie in"):
        register("flash_reinforce_bad", delta=-1.0)


def test_verls_external_modules_hook_registers_flash_reinforce_on_import_verl(verl):
    """The documented way into every verl process: ``VERL_USE_EXTERNAL_MODULES``, read by ``import verl`` (a fresh
    interpreter: the hook runs at import time, before verl has finished importing)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    code = ("import verl; from verl.trainer.ppo import core_algos; "
            "print('flash_reinforce' in core_algos.POLICY_LOSS_REGISTRY, "
            "'flash_reinforce' in core_algos.ADV_ESTIMATOR_REGISTRY)")
    env = {**os.environ, "VERL_USE_EXTERNAL_MODULES": "flashsim.integrations.verl",
           "PYTHONPATH": os.pathsep.join([str(root / "src"), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True,
                            timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split()[-2:] == ["True", "True"]
