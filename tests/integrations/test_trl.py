"""flashsim.integrations.trl: a real TRL trainer whose loss and gradient are flash_reinforce_loss's.

A tiny float64 Llama built from a config, a BPE tokenizer trained on the spot, and a real
``FlashReinforceTrainer`` (one rollout per prompt) that generates and scores one generation batch of B = 6
completions and splits it into STEPS = 2 accumulation microbatches, as its ``_prepare_inputs`` does. The
trainer's ``_compute_loss`` summed over the microbatches, and its gradient with respect to every model
parameter, must equal ``flash_reinforce_loss`` on the whole batch with batch-centred advantages, to 1e-12.
Importing TRL takes seconds: the file is marked slow.
"""

import dataclasses
import types

import pytest
import torch

from flashsim.losses import batch_centered, flash_reinforce_loss

pytestmark = pytest.mark.slow

B, STEPS = 6, 2
LENGTHS = [8, 3, 5, 1, 6, 4]
"""Completion lengths: a random tiny model rarely says EOS, so rows are cut as the trainer pads them."""


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    pytest.importorskip("trl")
    import datasets

    from tests.tiny_llama import tiny_llama

    corpus = ["the cat sat on the mat", "a dog ran in the park", "one two three four five", "red green blue",
              "up and down", "left right left"]
    tokenizer, model = tiny_llama(corpus, vocab_size=120)
    dataset = datasets.Dataset.from_list([{"prompt": [{"role": "user", "content": text}]} for text in corpus])
    seen = []

    def reward(completions, completion_ids, **_):
        seen.append([float(sum(ids) % 5) for ids in completion_ids])
        return seen[-1]

    return types.SimpleNamespace(model=model, tokenizer=tokenizer, dataset=dataset, reward=reward, rewards=seen,
                                 out=tmp_path_factory.mktemp("trl"))


def _config(run, **options):
    from flashsim.integrations.trl import FlashReinforceConfig

    return FlashReinforceConfig(output_dir=str(run.out), use_cpu=True, bf16=False, report_to="none",
                                save_strategy="no", per_device_train_batch_size=B // STEPS,
                                gradient_accumulation_steps=STEPS, max_completion_length=max(LENGTHS), seed=0,
                                **options)


def _trainer(run, **options):
    from flashsim.integrations.trl import FlashReinforceTrainer

    trainer = FlashReinforceTrainer(model=run.model, reward_funcs=run.reward, args=_config(run, **options),
                                    train_dataset=run.dataset, processing_class=run.tokenizer)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = STEPS  # transformers' training loop sets it each window
    return trainer


def _log_probs(model, inputs):
    """log π of each completion token from the model's plain float64 forward pass."""
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    width = inputs["completion_ids"].shape[1]
    logits = model(input_ids=ids, attention_mask=mask).logits[:, -width - 1:-1]
    return logits.log_softmax(-1).gather(-1, inputs["completion_ids"][..., None])[..., 0]


@pytest.fixture(scope="module")
def batch(run):
    """One generation batch (6 prompts, one rollout each) cut to LENGTHS, with stale sampling log-probs
    (log π + N(0, 0.3²) per token) stored as vLLM's would be, and the rewards it was scored with."""
    inputs = _trainer(run)._generate_and_score_completions([run.dataset[i] for i in range(B)])
    rewards = torch.tensor(run.rewards[-1])
    keep = torch.arange(inputs["completion_ids"].shape[1]) < torch.tensor(LENGTHS)[:, None]
    inputs["completion_ids"] = inputs["completion_ids"].masked_fill(~keep, run.tokenizer.pad_token_id)
    inputs["completion_mask"] = inputs["completion_mask"] * keep
    with torch.no_grad():
        noise = 0.3 * torch.randn(keep.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
        inputs["sampling_per_token_logps"] = _log_probs(run.model, inputs) + noise
    return inputs, rewards


def _gate_between_trajectories(run, inputs):
    """A δ between the sampled trajectories' mean Bernoulli KLs: the gate rejects some and admits others."""
    with torch.no_grad():
        _, stats = flash_reinforce_loss(_log_probs(run.model, inputs), inputs["sampling_per_token_logps"],
                                        torch.zeros(B, dtype=torch.float64), inputs["completion_mask"].bool())
    return float(stats["sequence_kl"].median())


def _trainer_and_reference(run, batch, behaviour="sampling_per_token_logps", own_log_probs=True):
    """The trainer's loss summed over its microbatches and its gradient, and flash_reinforce_loss's on the batch."""
    from trl.trainer.utils import split_tensor_dict

    inputs, rewards = batch
    inputs = {**inputs}
    if behaviour != "sampling_per_token_logps":
        inputs[behaviour] = inputs.pop("sampling_per_token_logps")
    delta = _gate_between_trajectories(run, {**inputs, "sampling_per_token_logps": inputs[behaviour]})
    trainer = _trainer(run, gate_delta=delta)
    if own_log_probs:
        def scored(model, input_ids, attention_mask, logits_to_keep, **_):
            tokens = {"prompt_ids": input_ids[:, :-logits_to_keep], "completion_ids": input_ids[:, -logits_to_keep:],
                      "prompt_mask": attention_mask[:, :-logits_to_keep],
                      "completion_mask": attention_mask[:, -logits_to_keep:]}
            return _log_probs(model, tokens), None, None

        trainer._get_per_token_logps_and_entropies = scored
    params = [p for p in run.model.parameters() if p.requires_grad]
    got = sum(trainer._compute_loss(run.model, microbatch) for microbatch in split_tensor_dict(inputs, STEPS))
    got_gradient = torch.autograd.grad(got, params)
    want, stats = flash_reinforce_loss(_log_probs(run.model, inputs), inputs[behaviour], None,
                                       inputs["completion_mask"].bool(), advantages=batch_centered(rewards),
                                       delta=delta)
    want_gradient = torch.autograd.grad(want, params)
    assert 0 < int(stats["admitted"].sum()) < B  # the gate acts on the batch compared
    return (got.detach(), torch.cat([g.flatten() for g in got_gradient]), want.detach(),
            torch.cat([g.flatten() for g in want_gradient]), trainer)


def test_the_trainer_forms_batch_centred_advantages_over_the_generation_batch(run, batch):
    inputs, rewards = batch
    assert rewards.unique().numel() > 1
    torch.testing.assert_close(inputs["advantages"], batch_centered(rewards).to(inputs["advantages"]),
                               rtol=0, atol=0)


@pytest.mark.parametrize("behaviour", ["sampling_per_token_logps", "old_per_token_logps"],
                         ids=["vllm-sampling-log-probs", "generation-time-log-probs"])
def test_the_trainers_loss_and_gradient_are_flash_reinforce_losss(run, batch, behaviour):
    got, gradient, want, want_gradient, _ = _trainer_and_reference(run, batch, behaviour)
    assert want.dtype == torch.float64 and float(want_gradient.abs().max()) > 1e-3
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(gradient, want_gradient, rtol=1e-12, atol=1e-15)
    # End to end, the trainer scoring tokens with TRL's fused LM head (float32 accumulation): float32 agreement.
    got, gradient, want, want_gradient, _ = _trainer_and_reference(run, batch, behaviour, own_log_probs=False)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(gradient, want_gradient, rtol=1e-5, atol=1e-6)


def test_the_comparison_catches_a_trainer_that_forgets_the_accumulation_steps(run, batch, monkeypatch):
    from flashsim.integrations import trl as integration

    loss = integration.flash_reinforce_loss
    monkeypatch.setattr(integration, "flash_reinforce_loss",
                        lambda *a, num_sequences, **k: loss(*a, num_sequences=num_sequences // STEPS, **k))
    got, gradient, want, want_gradient, _ = _trainer_and_reference(run, batch)
    with pytest.raises(AssertionError):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


def test_a_token_vllm_could_not_score_gets_ratio_one_and_no_kl():
    pytest.importorskip("trl")  # flashsim.integrations.trl imports TRL
    from flashsim.integrations.trl import behavior_log_probs

    log_probs = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    stored = torch.tensor([[float("nan"), -2.5]])
    got = behavior_log_probs({"sampling_per_token_logps": stored, "old_per_token_logps": stored + 9}, log_probs)
    torch.testing.assert_close(got, torch.tensor([[-1.0, -2.5]]))
    assert behavior_log_probs({}, log_probs).requires_grad is False


def test_unscored_trajectories_get_no_advantage_and_stay_out_of_the_baseline():
    pytest.importorskip("trl")  # flashsim.integrations.trl imports TRL
    from flashsim.integrations.trl import generation_batch_advantages

    nan = float("nan")
    rewards = torch.tensor([[1.0, nan], [0.0, 1.0], [nan, nan], [0.0, 0.0]])
    got = generation_batch_advantages(rewards, torch.tensor([1.0, 2.0]))
    torch.testing.assert_close(got, torch.tensor([1 - 1.0, 2 - 1.0, 0.0, 0 - 1.0]))


def test_trl_refuses_one_rollout_per_prompt_and_the_flash_config_accepts_it(run):
    import trl

    with pytest.raises(ValueError, match="at least 2 generations"):
        trl.GRPOConfig(output_dir=str(run.out), use_cpu=True, report_to="none", num_generations=1,
                       per_device_train_batch_size=3)
    config = _config(run)
    assert config.num_generations == 1 and config.generation_batch_size == B and config.steps_per_generation == STEPS
    # Skipping TRL's G ≥ 2 check skips nothing else: every field is what GRPOConfig derives from the same arguments
    # with G = 2.
    grpo = trl.GRPOConfig(output_dir=str(run.out), use_cpu=True, bf16=False, report_to="none", save_strategy="no",
                          per_device_train_batch_size=B // STEPS, gradient_accumulation_steps=STEPS,
                          max_completion_length=max(LENGTHS), seed=0, num_generations=2,
                          vllm_importance_sampling_correction=False)
    differ = {f.name for f in dataclasses.fields(trl.GRPOConfig)
              if f.name != "num_generations" and getattr(grpo, f.name) != getattr(config, f.name)}
    assert not differ, differ


@pytest.mark.parametrize(("options", "message"), [
    ({"beta": 0.04}, "beta=0.04 is a GRPO setting"),
    ({"scale_rewards": "batch"}, r"never scaled. Remove it \(the trainer ignores its default, .group.\)"),
    ({"num_iterations": 2}, "one optimizer step per fresh batch"),
    ({"vllm_importance_sampling_correction": True}, "vllm_importance_sampling_correction=True"),
    ({"gate": "seq"}, "FlashReinforceConfig.gate must be one of"),
    ({"gate_delta": -1.0}, r"FlashReinforceConfig.gate_delta must lie in \[0.0, inf\]"),
    ({"gate": "none", "gate_delta": 0.01}, "FlashReinforceConfig.gate_delta changes nothing"),
    ({"num_generations": 0}, "num_generations must be an int >= 1"),
], ids=["beta", "scale-rewards", "iterations", "vllm-is", "gate", "delta", "inert-delta", "generations"])
def test_settings_the_trainer_would_ignore_or_cannot_take_are_refused(run, options, message):
    with pytest.raises(ValueError, match=message):
        _config(run, **options)


def test_a_grpo_config_is_refused_by_the_flash_trainer(run):
    import trl

    from flashsim.integrations.trl import FlashReinforceTrainer

    args = trl.GRPOConfig(output_dir=str(run.out), use_cpu=True, report_to="none", num_generations=2,
                          per_device_train_batch_size=2)
    with pytest.raises(TypeError, match="args must be a FlashReinforceConfig"):
        FlashReinforceTrainer(model=run.model, reward_funcs=run.reward, args=args, train_dataset=run.dataset,
                              processing_class=run.tokenizer)


def _train(run, **options):
    """A copy of the tiny model trained for two optimizer steps; the trainer's log rows and the warnings it gave."""
    import copy
    import warnings

    from flashsim.integrations.trl import FlashReinforceConfig, FlashReinforceTrainer

    config = FlashReinforceConfig(**{**dict(
        output_dir=str(run.out), use_cpu=True, bf16=False, report_to="none", save_strategy="no", seed=0,
        per_device_train_batch_size=B // STEPS, max_completion_length=max(LENGTHS), max_steps=2, logging_steps=1,
        learning_rate=1e-2, lr_scheduler_type="constant", disable_tqdm=True), **options})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = FlashReinforceTrainer(model=copy.deepcopy(run.model), reward_funcs=run.reward, args=config,
                                        train_dataset=run.dataset, processing_class=run.tokenizer)
    trainer.train()
    rows = [row for row in trainer.state.log_history if "trust/sequence_kl" in row]
    return rows, [str(w.message) for w in caught if "FlashReinforceTrainer: μ is" in str(w.message)]


def test_the_gate_acts_on_a_generation_batch_used_after_an_optimizer_step(run):
    """steps_per_generation = 2 > 1 accumulation step: the second step trains on half a generation batch that the
    first step's weights did not sample, against TRL's generation-time log-probs: KL > 0, and δ = 1e-9 rejects."""
    rows, warned = _train(run, gradient_accumulation_steps=1, steps_per_generation=2, gate_delta=1e-9)
    assert not warned
    assert len(rows) == 2
    assert rows[1]["trust/sequence_kl"] > 0 and rows[1]["trust/acceptance_rate"] < 1, rows
    assert "frac_reward_zero_std" not in rows[0] and rows[0]["frac_batch_reward_zero_std"] in (0.0, 1.0)


def test_the_trainer_says_once_when_the_gate_has_nothing_to_correct(run):
    """No vLLM and each generation batch used within one optimizer step: μ is the learner's own log-probs."""
    rows, warned = _train(run, gradient_accumulation_steps=STEPS, steps_per_generation=STEPS, gate_delta=1e-9)
    assert len(warned) == 1 and "use_vllm=True" in warned[0] and "steps_per_generation >" in warned[0]
    assert all(row["trust/acceptance_rate"] == 1 and row["trust/sequence_kl"] == 0 for row in rows), rows


def test_a_batch_without_signal_is_one_whose_rewards_are_all_equal():
    pytest.importorskip("trl")  # flashsim.integrations.trl imports TRL
    from flashsim.integrations.trl import batch_rewards_all_equal

    nan, weights = float("nan"), torch.tensor([1.0, 2.0])
    assert batch_rewards_all_equal(torch.tensor([[1.0, 0.0], [1.0, 0.0], [nan, nan]]), weights)
    assert batch_rewards_all_equal(torch.tensor([[2.0, 0.0], [0.0, 1.0]]), weights)  # 2 = 0 + 2·1
    assert not batch_rewards_all_equal(torch.tensor([[1.0, 0.0], [0.0, 0.0]]), weights)
