"""verl 0.9.1, loss_mode="kl_cov": how many tokens get the KL penalty depends on the micro-batch size.

KL-Cov penalises the top kl_cov_ratio of tokens by covariance(A, log π). verl takes that top-k over each
micro-batch, at least one token each: `k_percent_nums = max(1, int(len(cov_lst_all) * kl_cov_ratio))`
(verl/trainer/ppo/core_algos.py:1906). With the default ratio 2e-4 a micro-batch under 5,000 tokens penalises
one token, so a mini-batch split into k micro-batches penalises k tokens: the penalty follows
ppo_micro_batch_size_per_gpu and the dp size instead of the ratio.

Run: python docs/upstream/verl_kl_cov_microbatch.py (CPU, seconds).
"""

import torch
import verl
from verl.trainer.ppo.core_algos import get_policy_loss_fn
from verl.workers.config import ActorConfig, PolicyLossConfig

B, T = 8, 6


def penalised_tokens(micro_batches: int) -> int:
    """Tokens whose gradient carries the |log π − log μ| penalty when the mini-batch is split `micro_batches` ways."""
    generator = torch.Generator().manual_seed(0)
    log_prob = (-3 * torch.rand(B, T, generator=generator, dtype=torch.float64)).requires_grad_()
    old_log_prob = log_prob.detach() - 0.1  # every token off-policy: the penalty's gradient is ppo_kl_coef · 1
    advantages = torch.randn(B, 1, generator=generator, dtype=torch.float64).expand(B, T)
    mask = torch.ones(B, T, dtype=torch.float64)
    actor = ActorConfig(strategy="fsdp", ppo_micro_batch_size_per_gpu=1, rollout_n=1,
                        policy_loss=PolicyLossConfig(loss_mode="kl_cov"))
    actor.global_batch_info.update(dp_size=1, batch_num_tokens=B * T, global_batch_size=B,
                                   loss_scale_factor=actor.loss_scale_factor)
    total = 0.0
    for rows in torch.arange(B).chunk(micro_batches):
        loss, _ = get_policy_loss_fn("kl_cov")(old_log_prob=old_log_prob[rows], log_prob=log_prob[rows],
                                               advantages=advantages[rows], response_mask=mask[rows],
                                               loss_agg_mode="token-mean", config=actor)
        total = total + loss
    gradient = torch.autograd.grad(total, log_prob)[0]
    policy_gradient = -advantages * torch.exp(log_prob.detach() - old_log_prob) / (B * T)  # no penalty
    return int(((gradient - policy_gradient).abs() > 1e-12).sum())


if __name__ == "__main__":
    print(f"verl {verl.__version__}, kl_cov_ratio 2e-4 (default), a mini-batch of {B * T} tokens")
    counts = {k: penalised_tokens(k) for k in (1, 2, 4, 8)}
    for k, count in counts.items():
        print(f"{k} micro-batch(es): {count} token(s) penalised")
    assert counts == {1: 1, 2: 2, 4: 4, 8: 8}, counts  # expected the same count whatever the split
    print("reproduced: KL-Cov penalises one token per micro-batch")
