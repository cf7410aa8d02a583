"""The TRL, verl and OpenRLHF adapters: each reproduces its framework's loss and gradient, and the harness
flags a known-wrong declaration or a real property of the framework through it.

Each framework's tests skip when it is not installed (``pip install -e ".[conformance]"`` and
``requirements/conformance-nodeps.txt``; CI installs all three). Importing a framework takes seconds, so
these are marked slow.
"""

import dataclasses
import math
import types

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


# ---- TRL: a real GRPOTrainer ---------------------------------------------------------------------------
# A tiny float64 Llama built from a config, a BPE tokenizer trained on the spot, and a real
# ``trl.GRPOTrainer`` that generates and scores one generation batch of B = 6 completions (2 prompts × G = 3)
# and splits it into STEPS = 2 accumulation microbatches, as its ``_prepare_inputs`` does. For every TRL row
# the trainer's own ``_compute_loss`` (its settings set by its own ``__init__`` from the row's options) is
# compared with the adapter given the same batch: loss of each microbatch and gradient of the window's loss
# with respect to every model parameter, both to rtol = 1e-10 (float64; what is left is the trainer's fused
# LM head and a plain ``log_softmax`` rounding differently).

B, G, STEPS = 6, 3, 2
LENGTHS = [8, 3, 5, 1, 6, 4]
"""Completion lengths: a random tiny model rarely says EOS, so rows are cut as the trainer pads them."""


@pytest.fixture(scope="module")
def trl_run(tmp_path_factory):
    """The tiny model, tokenizer, data set and reward function every TRL trainer below shares."""
    pytest.importorskip("trl")
    import datasets

    from tests.tiny_llama import tiny_llama

    corpus = ["the cat sat on the mat", "a dog ran in the park", "one two three four five"]
    tokenizer, model = tiny_llama(corpus, vocab_size=120)
    dataset = datasets.Dataset.from_list([{"prompt": [{"role": "user", "content": text}]} for text in corpus])
    seen = []

    def reward(completions, completion_ids, **_):
        """Rewards in {0, ..., 4} from the token ids: groups with and without ties."""
        seen.append([float(sum(ids) % 5) for ids in completion_ids])
        return seen[-1]

    return types.SimpleNamespace(model=model, tokenizer=tokenizer, dataset=dataset, reward=reward, rewards=seen,
                                 out=tmp_path_factory.mktemp("trl"))


def _trainer(run, **options):
    """A real GRPOTrainer (CPU, float64, no reporting) with the row's ``options``, in training mode."""
    import trl

    options = {"max_completion_length": max(LENGTHS), **options}
    args = trl.GRPOConfig(output_dir=str(run.out), use_cpu=True, bf16=False, report_to="none", save_strategy="no",
                          per_device_train_batch_size=B // STEPS, gradient_accumulation_steps=STEPS,
                          num_generations=G, seed=0, **options)
    trainer = trl.GRPOTrainer(model=run.model, reward_funcs=run.reward, args=args, train_dataset=run.dataset,
                              processing_class=run.tokenizer)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = STEPS  # transformers' training loop sets it each window
    return trainer


def _generate(run, trainer):
    """One generation batch as the trainer builds it, and the rewards it scored it with."""
    rows = [run.dataset[prompt] for prompt in range(B // G) for _ in range(G)]
    inputs = trainer._generate_and_score_completions(rows)
    return inputs, torch.tensor(run.rewards[-1])


def _log_probs(model, inputs, temperature=1.0):
    """log π of each completion token from the model's plain forward pass (not the trainer's fused head)."""
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    width = inputs["completion_ids"].shape[1]
    logits = model(input_ids=ids, attention_mask=mask).logits[:, -width - 1:-1] / temperature
    return logits.log_softmax(-1).gather(-1, inputs["completion_ids"][..., None])[..., 0]


@pytest.fixture(scope="module")
def trl_batch(trl_run):
    """A generation batch with rows cut to LENGTHS (right-padded with the pad id, mask 0, as TRL pads) and
    stale behaviour log-probs (log π + N(0, 0.3²) per token), so ratios reach both sides of the clip."""
    inputs, rewards = _generate(trl_run, _trainer(trl_run))
    keep = torch.arange(inputs["completion_ids"].shape[1]) < torch.tensor(LENGTHS)[:, None]
    inputs["completion_ids"] = inputs["completion_ids"].masked_fill(~keep, trl_run.tokenizer.pad_token_id)
    inputs["completion_mask"] = inputs["completion_mask"] * keep
    inputs["num_items_in_batch"] = inputs["completion_mask"].sum()
    with torch.no_grad():
        noise = 0.3 * torch.randn(keep.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
        inputs["old_per_token_logps"] = _log_probs(trl_run.model, inputs) + noise
    return inputs, rewards


def _trainer_and_adapter(run, batch, loss_type, own_log_probs=True, overrides=None):
    """Losses of each microbatch and the gradient of their sum over the model's parameters: the real trainer's
    ``_compute_loss`` on its own microbatch split, and the adapter with each microbatch as a shard (the
    full batch's advantages and token count, STEPS shards). With ``own_log_probs`` the trainer scores tokens
    with the plain float64 forward pass the adapter is given (its only replaced method, so the rest of
    ``_compute_loss`` is compared exactly); without, with its own fused LM head, which works in float32.
    ``overrides`` change the row's options (the trainer's and the adapter's alike)."""
    from trl.trainer.utils import split_tensor_dict

    inputs, rewards = batch
    row = _row("trl", loss_type)
    if overrides:
        row = dataclasses.replace(row, options={**row.options, **overrides})
    trainer = _trainer(run, **row.options)
    if own_log_probs:
        def scored(model, input_ids, attention_mask, logits_to_keep, **_):
            tokens = {"prompt_ids": input_ids[:, :-logits_to_keep], "completion_ids": input_ids[:, -logits_to_keep:],
                      "prompt_mask": attention_mask[:, :-logits_to_keep],
                      "completion_mask": attention_mask[:, -logits_to_keep:]}
            log_probs = _log_probs(model, tokens, trainer.temperature)
            return log_probs, torch.zeros_like(log_probs), None

        trainer._get_per_token_logps_and_entropies = scored
    params = [p for p in run.model.parameters() if p.requires_grad]
    want = [trainer._compute_loss(run.model, microbatch) for microbatch in split_tensor_dict(inputs, STEPS)]
    want_gradient = torch.autograd.grad(sum(want), params)

    log_probs = _log_probs(run.model, inputs, trainer.temperature)
    mask = inputs["completion_mask"].bool()
    group_ids = torch.arange(B) // G
    got = []
    for shard in torch.arange(B).chunk(STEPS):
        got.append(row(log_probs[shard], inputs["old_per_token_logps"][shard], rewards[shard], mask[shard],
                       group_ids[shard], advantages=inputs["advantages"][shard], num_sequences=B,
                       num_tokens=int(mask.sum()), max_tokens=mask.shape[1], num_shards=STEPS))
    gradient = torch.autograd.grad(sum(got), params)
    return (torch.stack(got).detach(), torch.cat([g.flatten() for g in gradient]),
            torch.stack(want).detach(), torch.cat([g.flatten() for g in want_gradient]), trainer)


@pytest.mark.parametrize("loss_type", [row.variant for row in variants("trl") if hasattr(row, "loss_type")])
def test_the_trl_adapter_reproduces_a_real_grpo_trainers_loss_and_gradient(trl_run, trl_batch, loss_type):
    from flashsim.testing.adapters.trl import _Trainer

    loss, gradient, want, want_gradient, trainer = _trainer_and_adapter(trl_run, trl_batch, loss_type)
    assert want.dtype == torch.float64 and float(want_gradient.abs().max()) > 1e-3
    torch.testing.assert_close(loss, want, rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(gradient, want_gradient, rtol=1e-12, atol=1e-15)
    # Every setting the stand-in derives from a GRPOConfig is the one the real trainer's __init__ derives.
    stand_in = _Trainer(trainer.args, torch.zeros(1), STEPS)
    own = {"args", "_log_probs", "accelerator", "model", "_metrics"}
    for name in set(vars(stand_in)) - own:
        assert getattr(stand_in, name) == getattr(trainer, name), name
    # End to end, the trainer scoring tokens with its fused LM head (float32 accumulation): float32 agreement.
    loss, gradient, want, want_gradient, _ = _trainer_and_adapter(trl_run, trl_batch, loss_type, own_log_probs=False)
    torch.testing.assert_close(loss, want, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(gradient, want_gradient, rtol=1e-5, atol=1e-6)


def test_the_trl_adapter_reproduces_the_real_trainers_opsm_where_it_drops_sequences(trl_run, trl_batch):
    """The OPSM row's threshold (0.5) drops no sequence of the test batch, so the comparison above runs its gate
    on one side only: here the threshold is set between two negative-advantage sequences' mean KL estimates,
    so the gate drops some and keeps others, and the adapter still reproduces the real trainer."""
    from trl.trainer.grpo_trainer import GRPOTrainer

    inputs, _ = trl_batch
    mask = inputs["completion_mask"]
    log_probs = _log_probs(trl_run.model, inputs).detach()
    kl = ((inputs["old_per_token_logps"] - log_probs) * mask).sum(1) / mask.sum(1)
    negative = kl[inputs["advantages"] < 0].sort().values
    threshold = float(negative[:2].mean())
    keep = GRPOTrainer.get_off_policy_mask(inputs["advantages"][:, None], log_probs, inputs["old_per_token_logps"],
                                           mask, threshold)
    assert 0 < int(keep.sum()) < B, keep.flatten().tolist()
    loss, gradient, want, want_gradient, _ = _trainer_and_adapter(
        trl_run, trl_batch, "grpo off_policy_mask", overrides={"off_policy_mask_threshold": threshold})
    torch.testing.assert_close(loss, want, rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(gradient, want_gradient, rtol=1e-12, atol=1e-15)


def test_trls_fused_lm_head_hands_the_loss_float32_log_probs_with_zero_padding(trl_run, trl_batch):
    """What the conformance page says of TRL's ``padding`` and ``precision`` rows: the trainer's own log-probs
    are float32 whatever the model's dtype (float64 here) and exactly 0 in padding, so NaN padding or bf16
    log-probs reach ``_compute_loss`` only from a subclass or another log-prob source."""
    inputs, _ = trl_batch
    trainer = _trainer(trl_run)
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    with torch.no_grad():
        log_probs, _, _ = trainer._get_per_token_logps_and_entropies(trl_run.model, ids, mask,
                                                                     inputs["completion_ids"].shape[1])
    completion_mask = inputs["completion_mask"].bool()
    assert log_probs.dtype == torch.float32
    assert bool((log_probs[~completion_mask] == 0).all()) and bool((log_probs[completion_mask] < 0).all())


@pytest.mark.parametrize("scale_rewards", ["group", "none"])
def test_the_trl_adapters_advantages_are_the_real_trainers(trl_run, scale_rewards):
    """The adapter writes TRL's inline advantage code again (TRL has no function for it): compared here with
    what ``_generate_and_score_completions`` hands the loss, bit for bit (both float32)."""
    loss_type = "grpo" if scale_rewards == "group" else "dr_grpo"
    inputs, rewards = _generate(trl_run, _trainer(trl_run, scale_rewards=scale_rewards))
    adapter = _row("trl", loss_type)
    assert adapter.scale_rewards == scale_rewards
    advantages = adapter.advantages(rewards, torch.arange(B) // G)
    assert rewards.view(-1, G).std(1).min() < rewards.view(-1, G).std(1).max()  # the batch tells the two apart
    torch.testing.assert_close(advantages, inputs["advantages"], rtol=0, atol=0)


@pytest.mark.parametrize(("loss_type", "mutation"), [("grpo", "steps"), ("dapo", "tokens")])
def test_the_real_trainer_comparison_catches_a_stand_in_with_a_wrong_normalisation(trl_run, trl_batch,
                                                                                   monkeypatch, loss_type, mutation):
    """The comparison above can fail: a stand-in that forgets the accumulation steps (``grpo`` divides by them)
    or hands the microbatch's token count for the generation batch's (``dapo`` divides by it) is caught."""
    from flashsim.testing.adapters import trl as adapter_module

    if mutation == "steps":
        init = adapter_module._Trainer.__init__
        monkeypatch.setattr(adapter_module._Trainer, "__init__",
                            lambda self, args, log_probs, steps: init(self, args, log_probs, 1))
    else:
        loss = adapter_module.TRLLoss._loss
        monkeypatch.setattr(adapter_module.TRLLoss, "_loss",
                            lambda self, *a, num_tokens, **k: loss(self, *a, num_tokens=None, **k))
    got, gradient, want, want_gradient, _ = _trainer_and_adapter(trl_run, trl_batch, loss_type)
    with pytest.raises(AssertionError):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    with pytest.raises(AssertionError):
        torch.testing.assert_close(gradient, want_gradient, rtol=1e-10, atol=1e-12)


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
    bnpo = policy_loss("bnpo")  # checked against its documented local normalisation: holds as documented
    documented = check_loss(bnpo, invariants=["shards"], max_examples=30)
    assert documented["shards"].status == "documented" and "grpo_config.py" in documented["shards"].message
    bnpo.local_shards, bnpo.documented = False, {}  # judged by the global token mean instead: fails
    assert check_loss(bnpo, invariants=["shards"], max_examples=30)["shards"].failed
    dapo = check_loss(policy_loss("dapo"), invariants=["shards"], max_examples=30)
    assert dapo.passed, str(dapo)


# ---- verl ------------------------------------------------------------------------------------------------

VERL_ROWS = [(f"grpo {mode}", "vanilla", mode, {}) for mode in (
    "token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm", "token-sum")]
VERL_ROWS += [("gspo seq-mean-token-mean", "gspo", "seq-mean-token-mean", {}),
              ("sapo seq-mean-token-mean", "sapo", "seq-mean-token-mean", {}),
              ("geo_mean", "geo_mean", "token-mean", {}),
              ("dro dro_beta=0.1 token-mean", "dro", "token-mean", {"dro_beta": 0.1})]
VERL_ROWS += [(f"{loss_mode} token-mean", loss_mode, "token-mean", {})
              for loss_mode in ("gpg", "cispo", "dppo_tv", "dppo_kl", "kl_cov")]
"""(row, verl's loss_mode, loss_agg_mode, PolicyLossConfig fields): every verl row but the estimator-only ones."""


@pytest.mark.parametrize(("name", "loss_mode", "mode", "fields"), VERL_ROWS)
def test_the_verl_adapter_reproduces_verls_loss_and_gradient(name, loss_mode, mode, fields):
    core_algos = pytest.importorskip("verl.trainer.ppo.core_algos")
    from verl.workers.config import ActorConfig, PolicyLossConfig

    batch = _batch()
    adapter = _row("verl", name)
    loss, gradient = _grad(adapter, batch, batch.behavior_log_probs, batch.rewards, batch.action_mask,
                           batch.group_ids)
    advantages, _ = core_algos.compute_grpo_outcome_advantage(
        batch.rewards[:, None].expand(batch.action_mask.shape) * batch.action_mask / batch.lengths[:, None],
        batch.action_mask, batch.group_ids.numpy())
    config = ActorConfig(strategy="fsdp", ppo_micro_batch_size_per_gpu=1, rollout_n=1,
                         policy_loss=PolicyLossConfig(loss_mode=loss_mode, **fields))
    function = getattr(core_algos, f"compute_policy_loss_{loss_mode}")

    def direct(log_probs):
        return function(batch.behavior_log_probs, log_probs, advantages, batch.action_mask, loss_agg_mode=mode,
                        config=config)

    want, want_gradient = _grad(direct, batch)
    torch.testing.assert_close(loss, want, rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(gradient, want_gradient, rtol=1e-12, atol=1e-15)


def test_verl_grpo_with_one_rollout_per_prompt_has_no_baseline():
    pytest.importorskip("verl.trainer.ppo.core_algos")
    from flashsim.testing.adapters.verl import policy_loss

    row = policy_loss("token-mean")
    report = check_loss(row, invariants=["single_rollout_groups", "on_policy_gradient"], max_examples=10)
    result = report["single_rollout_groups"]  # A = R / (1 + ε), as verl documents: holds as documented
    assert result.status == "documented" and "groupwise.py" in result.message, str(report)
    assert report["on_policy_gradient"].status == "holds"
    row.singleton_fallback, row.documented = "zero", {}  # judged by "a group of one has no contrast": fails
    result = check_loss(row, invariants=["single_rollout_groups"], max_examples=10)["single_rollout_groups"]
    assert result.failed and "max |got − expected| = 1 " in result.message, result.message
    wrong = check_loss(policy_loss("token-mean"), aggregation="seq-mean-token-mean",
                       invariants=["on_policy_gradient"], max_examples=10)
    assert wrong["on_policy_gradient"].failed


# ---- OpenRLHF --------------------------------------------------------------------------------------------

OPENRLHF_CASES = [(row.variant, False) for row in variants("openrlhf")]
OPENRLHF_CASES += [(row.variant, True) for row in variants("openrlhf") if "gate" in row.variant]
"""Every row on the shared batch; each sequence gate again with trajectory 0 far outside every gate's band."""


@pytest.mark.parametrize(("variant", "rejected"), OPENRLHF_CASES)
def test_the_openrlhf_adapter_reproduces_openrlhfs_loss_and_gradient(variant, rejected):
    pytest.importorskip("openrlhf")
    pytest.importorskip("deepspeed")
    from flashsim.testing.adapters.openrlhf import policy_loss_class
    from flashsim.testing.strategies import LossBatch

    adapter = _row("openrlhf", variant)
    batch = _batch()
    if rejected:  # trajectory 0 at π = 0.5, μ = 0.05: ratio 10, total variation 0.45, Bernoulli KL 0.49
        mask = batch.action_mask[0]
        log_probs, behavior = batch.log_probs.clone(), batch.behavior_log_probs.clone()
        log_probs[0], behavior[0] = torch.where(mask, math.log(0.5), 0.0), torch.where(mask, math.log(0.05), 0.0)
        batch = LossBatch(log_probs, behavior, batch.rewards, batch.action_mask, batch.group_ids)
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
    if rejected:
        assert float(gradient[0].abs().max()) == 0.0 and float(gradient[1:].abs().max()) > 1e-3


def test_the_openrlhf_adapter_clamps_the_normalised_rewards_as_compute_reward_does_by_default():
    pytest.importorskip("openrlhf")
    pytest.importorskip("deepspeed")
    adapter = _row("openrlhf", "group_norm ppo token_level_loss")
    rewards = torch.tensor([1.0, 0.0] * 4 + [0.7] * 8)  # float32, as the experience maker holds them
    advantages = adapter.advantages(rewards, torch.arange(16) // 8)
    assert torch.equal(advantages[8:], torch.full((8,), 10.0))  # +59.6 unclamped: the default clip range's bound
    torch.testing.assert_close(advantages[:8], torch.tensor([0.9354143, -0.9354143] * 4))


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
