"""verl 0.9.1, loss_mode="kl_cov": the share of tokens that get the KL penalty follows the micro-batch size, not
kl_cov_ratio.

verl documents kl_cov_ratio as the "Ratio of tokens to be applied KL penalty for kl-cov loss"
(verl/workers/config/actor.py:88). compute_policy_loss_kl_cov takes the covariance and its top-k over the tensors
it is given, one micro-batch: `k_percent_nums = max(1, int(len(cov_lst_all) * kl_cov_ratio))`
(verl/trainer/ppo/core_algos.py:1906). The engine calls it once per micro-batch, so a mini-batch split into k
micro-batches penalises max(1, ⌊ratio · tokens / k⌋) tokens k times over.

Run: python docs/upstream/verl_kl_cov_microbatch.py (CPU, seconds).
"""

import torch
import verl
from verl.trainer.ppo.core_algos import get_policy_loss_fn
from verl.workers.config import ActorConfig, PolicyLossConfig

B, T = 16, 1024  # one mini-batch of 16 responses of 1,024 tokens
RATIO = 2e-4  # kl_cov_ratio's default


def penalised_tokens(micro_batches: int) -> int:
    """Tokens whose gradient carries the |log π − log μ| penalty when the mini-batch is split `micro_batches` ways."""
    generator = torch.Generator().manual_seed(0)
    log_prob = (-3 * torch.rand(B, T, generator=generator, dtype=torch.float64)).requires_grad_()
    old_log_prob = log_prob.detach() - 0.1  # every token off-policy: the penalty's gradient is ppo_kl_coef · 1
    advantages = torch.randn(B, 1, generator=generator, dtype=torch.float64).expand(B, T)
    mask = torch.ones(B, T, dtype=torch.float64)
    actor = ActorConfig(strategy="fsdp", ppo_micro_batch_size_per_gpu=1, rollout_n=1,
                        policy_loss=PolicyLossConfig(loss_mode="kl_cov", kl_cov_ratio=RATIO))
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
    print(f"verl {verl.__version__}, torch {torch.__version__}: kl_cov_ratio {RATIO}, one mini-batch of "
          f"{B} × {T} = {B * T} tokens ({RATIO * B * T:.2f} tokens at the configured ratio)")
    counts = {k: penalised_tokens(k) for k in (1, 4, 16)}
    for k, count in counts.items():
        print(f"{k:>2} micro-batch(es) of {B * T // k} tokens: {count} token(s) penalised, a share of "
              f"{count / (B * T):.2e} ({count / (RATIO * B * T):.1f} × kl_cov_ratio)")
    assert counts == {1: 3, 4: 4, 16: 16}, counts  # expected the same share (3 tokens) whatever the split
    print("reproduced: KL-Cov's penalised share follows the micro-batch size")
