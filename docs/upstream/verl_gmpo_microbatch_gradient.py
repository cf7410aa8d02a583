"""verl 0.9.1, loss_mode="geo_mean" (GMPO): the gradient of one mini-batch grows with its number of micro-batches.

verl's engine calls backward once per micro-batch and adds the gradients, so every policy loss divides by the
global batch's size (config.global_batch_info), not the micro-batch's. compute_policy_loss_geo_mean ends in
`pg_loss = torch.mean(pg_losses)` (verl/trainer/ppo/core_algos.py:2000): a mean over the micro-batch's own
sequences. Split a mini-batch into k micro-batches and its gradient is k times the one-micro-batch gradient;
vanilla PPO, given the same global_batch_info, gives the same gradient for any k.

Run: python docs/upstream/verl_gmpo_microbatch_gradient.py (CPU, seconds).
"""

import torch
import verl
from verl.trainer.ppo.core_algos import get_policy_loss_fn
from verl.workers.config import ActorConfig, PolicyLossConfig

B, T = 4, 3


def config(loss_mode: str, mask: torch.Tensor) -> ActorConfig:
    """The actor config verl's ppo_loss hands the policy loss: dp size 1, the mini-batch's global counts."""
    actor = ActorConfig(strategy="fsdp", ppo_micro_batch_size_per_gpu=1, rollout_n=1,
                        policy_loss=PolicyLossConfig(loss_mode=loss_mode))
    actor.global_batch_info.update(dp_size=1, batch_num_tokens=int(mask.sum()), global_batch_size=mask.shape[0],
                                   loss_scale_factor=actor.loss_scale_factor)
    return actor


def gradient(loss_mode: str, micro_batches: int) -> torch.Tensor:
    """d(Σ micro-batch losses)/d log π, as the engine accumulates it over `micro_batches` micro-batches."""
    generator = torch.Generator().manual_seed(0)
    log_prob = (-2 * torch.rand(B, T, generator=generator, dtype=torch.float64)).requires_grad_()
    old_log_prob = log_prob.detach() + 0.05 * torch.randn(B, T, generator=generator, dtype=torch.float64)
    advantages = torch.tensor([1.0, -1.0, 0.5, -0.5], dtype=torch.float64)[:, None].expand(B, T)
    mask = torch.ones(B, T, dtype=torch.float64)
    actor = config(loss_mode, mask)
    total = 0.0
    for rows in torch.arange(B).chunk(micro_batches):
        loss, _ = get_policy_loss_fn(loss_mode)(old_log_prob=old_log_prob[rows], log_prob=log_prob[rows],
                                                advantages=advantages[rows], response_mask=mask[rows],
                                                loss_agg_mode="token-mean", config=actor)
        total = total + loss
    return torch.autograd.grad(total, log_prob)[0]


if __name__ == "__main__":
    print(f"verl {verl.__version__}")
    vanilla_1, vanilla_2 = gradient("vanilla", 1), gradient("vanilla", 2)
    torch.testing.assert_close(vanilla_2, vanilla_1)  # vanilla: independent of the micro-batch split
    for k in (1, 2, 4):
        norm = float(gradient("geo_mean", k).norm())
        print(f"geo_mean, {k} micro-batch(es) of {B // k}: |gradient| = {norm:.6f}")
    one, two, four = gradient("geo_mean", 1), gradient("geo_mean", 2), gradient("geo_mean", 4)
    torch.testing.assert_close(two, 2 * one)  # the bug: k micro-batches give k times the gradient
    torch.testing.assert_close(four, 4 * one)
    print("reproduced: GMPO's gradient is k times too large with k micro-batches")
