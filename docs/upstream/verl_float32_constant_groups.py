"""verl 0.9.1, compute_grpo_outcome_advantage: a group of equal float32 rewards gets non-zero advantages.

Eight rollouts of one prompt all score 0.7. Their advantages must be 0 (no contrast). verl's reward managers write
float32 rewards (verl/workers/reward_manager/naive.py:98); the estimator subtracts the group mean and divides by
std + ε (verl/trainer/ppo/core_algos.py:326) with ε = 1e-6. In float32 the mean of eight 0.7s is one ulp
(5.96e-8) away from 0.7 while torch.std of the group is 0, so every member gets (one ulp) / 1e-6 = +0.056: the
whole group is pushed the same way, towards whatever it did.

Run: python docs/upstream/verl_float32_constant_groups.py (CPU, seconds).
"""

import torch
import verl
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage


def advantages(value: float, n: int, dtype: torch.dtype) -> torch.Tensor:
    """verl's GRPO advantages of one prompt's n rollouts that all scored `value` (one-token responses)."""
    scores = torch.full((n, 1), value, dtype=dtype)
    result, _ = compute_grpo_outcome_advantage(token_level_rewards=scores, response_mask=torch.ones_like(scores),
                                               index=["prompt-0"] * n)
    return result[:, 0]


if __name__ == "__main__":
    print(f"verl {verl.__version__}")
    got = advantages(0.7, 8, torch.float32)
    print("eight float32 rewards of 0.7 -> advantages", [f"{a:+.4f}" for a in got.tolist()])
    assert bool((got == got[0]).all()), "every member shifts the same way"
    assert abs(float(got[0]) - 0.0560) < 5e-4, got  # expected 0.0 for every member
    print("float64:", [f"{a:+.2e}" for a in advantages(0.7, 8, torch.float64).tolist()[:2]], "...")
    print("binary rewards (exact means):", advantages(1.0, 8, torch.float32).abs().max().item())
    print("reproduced: a constant group of float32 rewards gets advantage +0.056 per member instead of 0")
