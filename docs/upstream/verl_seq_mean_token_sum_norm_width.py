"""verl 0.9.1, loss_agg_mode="seq-mean-token-sum-norm" without loss_scale_factor: a sequence's weight depends on the
longest response in its micro-batch.

verl documents the mode's normaliser as "If null, uses response_length" (verl/trainer/config/actor/actor.yaml:88-89).
agg_loss divides by loss_mask.shape[-1] instead (verl/trainer/ppo/core_algos.py:1191). Under the default V1 trainer
(trainer.use_v1: true, verl/trainer/config/ppo_trainer.yaml:232) responses are stored unpadded and ppo_loss pads
each micro-batch with no_padding_2_padding, which nothing gives a max_response_len, so the width is the
micro-batch's longest response (verl/workers/utils/padding.py:119). Two identical sequences in different
micro-batches then get different gradients.

Run: python docs/upstream/verl_seq_mean_token_sum_norm_width.py (CPU, seconds).
"""

import torch
import verl
from tensordict import TensorDict
from verl.trainer.ppo.core_algos import get_policy_loss_fn
from verl.workers.config import ActorConfig
from verl.workers.utils.padding import no_padding_2_padding

RESPONSE_LENGTHS = [4, 4, 4, 32]  # one mini-batch; sequences 0 and 2 are the same (4 tokens, advantage +1)
ADVANTAGES = [1.0, -1.0, 1.0, -1.0]
RESPONSE_LENGTH = 32  # data.max_response_length: what the documentation says the normaliser is


def jagged(lengths: list[int]) -> torch.Tensor:
    return torch.nested.nested_tensor([torch.zeros(n, dtype=torch.long) for n in lengths], layout=torch.jagged)


def token_gradients(micro_batches: list[list[int]], loss_scale_factor=None) -> list[torch.Tensor]:
    """d(mini-batch loss)/d log π of each sequence's response tokens (on-policy, vanilla PPO), the mini-batch run as
    `micro_batches` (lists of sequence indices), each padded the way ppo_loss pads it."""
    actor = ActorConfig(strategy="fsdp", ppo_micro_batch_size_per_gpu=1, rollout_n=1,
                        loss_agg_mode="seq-mean-token-sum-norm", loss_scale_factor=loss_scale_factor)
    actor.global_batch_info.update(dp_size=1, batch_num_tokens=sum(RESPONSE_LENGTHS),
                                   global_batch_size=len(RESPONSE_LENGTHS), loss_scale_factor=loss_scale_factor)
    grads = [None] * len(RESPONSE_LENGTHS)
    for rows in micro_batches:
        lengths = [RESPONSE_LENGTHS[i] for i in rows]
        data = TensorDict({"prompts": jagged([1] * len(rows)), "responses": jagged(lengths)}, batch_size=[len(rows)])
        flat = torch.full((len(rows) + sum(lengths),), -1.0, dtype=torch.float64, requires_grad=True)  # model output
        log_prob = no_padding_2_padding(flat, data)  # [micro-batch, its longest response]
        mask = no_padding_2_padding(torch.ones_like(flat), data)
        advantages = torch.tensor([ADVANTAGES[i] for i in rows], dtype=torch.float64)[:, None] * mask
        loss, _ = get_policy_loss_fn("vanilla")(old_log_prob=log_prob.detach(), log_prob=log_prob,
                                                advantages=advantages, response_mask=mask.bool(),
                                                loss_agg_mode=actor.loss_agg_mode, config=actor)
        gradient = torch.autograd.grad(loss, log_prob)[0]
        for row, i in enumerate(rows):
            grads[i] = gradient[row, : RESPONSE_LENGTHS[i]]
    return grads


if __name__ == "__main__":
    print(f"verl {verl.__version__}, torch {torch.__version__}: responses of {RESPONSE_LENGTHS} tokens")
    for scale in (None, RESPONSE_LENGTH):
        for split in ([[0, 1, 2, 3]], [[0, 1], [2, 3]]):
            grads = token_gradients(split, scale)
            print(f"loss_scale_factor={scale}, micro-batches {split}: per-token gradient of sequence 0 = "
                  f"{grads[0][0].item():.6f}, of sequence 2 = {grads[2][0].item():.6f}")
    fixed_one, fixed_two = token_gradients([[0, 1, 2, 3]], RESPONSE_LENGTH), token_gradients([[0, 1], [2, 3]], 32)
    for a, b in zip(fixed_one, fixed_two):
        torch.testing.assert_close(a, b)  # with the documented normaliser the split does not matter
    split = token_gradients([[0, 1], [2, 3]])
    torch.testing.assert_close(split[0], 8 * split[2])  # the bug: 8 × the weight of an identical sequence
    print("reproduced: without loss_scale_factor a sequence's weight follows its micro-batch's longest response")
