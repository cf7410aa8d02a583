"""verl 0.9.1, loss_mode="geo_mean" (GMPO): the policy loss is a mean over each micro-batch, while verl's other
terms are normalised over the global batch, so GMPO's weight depends on how the mini-batch is split.

verl's engine calls backward once per micro-batch and adds the gradients; agg_loss normalises by the global
batch (config.global_batch_info) "to ensure the loss is invariant to fsdp/megatron parallelism"
(verl/trainer/ppo/core_algos.py:1150), and ppo_loss adds the entropy and KL-loss terms through agg_loss
(verl/workers/utils/losses.py:124-140). compute_policy_loss_geo_mean ends in `pg_loss = torch.mean(pg_losses)`
(core_algos.py:2000), the micro-batch's own mean. Split one mini-batch into k micro-batches and the policy term's
gradient grows k-fold against the KL term's, which does not move; split it unevenly and a sequence's weight
follows the size of its micro-batch.

Run: python docs/upstream/verl_gmpo_microbatch_gradient.py (CPU, seconds).
"""

import torch
import verl
from verl.trainer.ppo.core_algos import agg_loss, get_policy_loss_fn, kl_penalty
from verl.workers.config import ActorConfig, PolicyLossConfig

B, T = 4, 3
generator = torch.Generator().manual_seed(0)
LOG_PROB = -2 * torch.rand(B, T, generator=generator, dtype=torch.float64)
OLD_LOG_PROB = LOG_PROB + 0.05 * torch.randn(B, T, generator=generator, dtype=torch.float64)
REF_LOG_PROB = LOG_PROB + 0.1 * torch.randn(B, T, generator=generator, dtype=torch.float64)
ADVANTAGES = torch.tensor([1.0, -1.0, 0.5, -0.5], dtype=torch.float64)[:, None].expand(B, T)
MASK = torch.ones(B, T, dtype=torch.bool)


def gradients(loss_mode: str, splits: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """d(policy term)/d log π and d(KL-loss term)/d log π, summed over micro-batches of `splits` sequences, with
    the global batch info verl's ppo_loss sets (dp size 1, the mini-batch's token count and size)."""
    actor = ActorConfig(strategy="fsdp", ppo_micro_batch_size_per_gpu=1, rollout_n=1,
                        policy_loss=PolicyLossConfig(loss_mode=loss_mode))
    actor.global_batch_info.update(dp_size=1, batch_num_tokens=B * T, global_batch_size=B,
                                   loss_scale_factor=actor.loss_scale_factor)
    log_prob = LOG_PROB.clone().requires_grad_()
    policy = kl = 0.0
    for rows in torch.arange(B).split(splits):
        pg_loss, _ = get_policy_loss_fn(loss_mode)(old_log_prob=OLD_LOG_PROB[rows], log_prob=log_prob[rows],
                                                   advantages=ADVANTAGES[rows], response_mask=MASK[rows],
                                                   loss_agg_mode="token-mean", config=actor)
        kld = kl_penalty(logprob=log_prob[rows], ref_logprob=REF_LOG_PROB[rows], kl_penalty="low_var_kl")
        policy = policy + pg_loss
        kl = kl + agg_loss(loss_mat=kld, loss_mask=MASK[rows], loss_agg_mode="token-mean", **actor.global_batch_info)
    return torch.autograd.grad(policy, log_prob)[0], torch.autograd.grad(kl, log_prob)[0]


if __name__ == "__main__":
    print(f"verl {verl.__version__}, torch {torch.__version__}: one mini-batch of {B} sequences")
    for mode in ("vanilla", "geo_mean"):
        for splits in ([4], [2, 2], [1, 1, 1, 1]):
            policy, kl = gradients(mode, splits)
            print(f"{mode:<8} micro-batches {splits}: |policy grad| / |KL grad| = {policy.norm() / kl.norm():.4f}")
    (vanilla, kl1), (vanilla2, kl2) = gradients("vanilla", [4]), gradients("vanilla", [2, 2])
    torch.testing.assert_close(vanilla2, vanilla)  # vanilla PPO: independent of the split, as agg_loss intends
    torch.testing.assert_close(kl2, kl1)  # the KL term too
    one, two, four = (gradients("geo_mean", splits)[0] for splits in ([4], [2, 2], [1, 1, 1, 1]))
    torch.testing.assert_close(two, 2 * one)  # the bug: k micro-batches give the policy term k times its weight
    torch.testing.assert_close(four, 4 * one)
    uneven = gradients("geo_mean", [3, 1])[0]  # sequence 3 alone in its micro-batch: weight 1 instead of 1/4
    print("uneven split [3, 1]: sequence weights relative to one micro-batch:",
          [f"{w:.2f}" for w in (uneven.norm(dim=1) / one.norm(dim=1)).tolist()])
    torch.testing.assert_close(uneven[3], 4 * one[3])
    torch.testing.assert_close(uneven[:3], 4 / 3 * one[:3])
    print("reproduced: GMPO's policy term weighs k times more against the KL term with k micro-batches")
