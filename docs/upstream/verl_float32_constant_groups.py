"""verl 0.9.1, compute_grpo_outcome_advantage: a prompt whose rollouts all score the same float32 reward gets
non-zero advantages, of a sign and size set by the rounding of the group's mean.

verl's reward managers write float32 rewards (verl/workers/reward_manager/naive.py:98). The estimator subtracts the
group mean and divides by std + ε, ε = 1e-6 (verl/trainer/ppo/core_algos.py:326). For some values and group sizes
the float32 mean of n equal rewards is one ulp off while torch.std of the group is exactly 0, so every member
gets ±(one ulp) / 1e-6: up to ±0.056, where a group with half its rollouts right gets ±0.94.

Run: python docs/upstream/verl_float32_constant_groups.py (CPU, seconds).
"""

import torch
import verl
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

SIZES = (2, 3, 4, 5, 6, 7, 8, 16)


def advantages(rewards: list[float], dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """verl's GRPO advantages of one prompt's rollouts (one-token responses) that scored `rewards`."""
    scores = torch.tensor(rewards, dtype=dtype)[:, None]
    result, _ = compute_grpo_outcome_advantage(token_level_rewards=scores, response_mask=torch.ones_like(scores),
                                               index=["prompt-0"] * len(rewards))
    return result[:, 0]


if __name__ == "__main__":
    print(f"verl {verl.__version__}, torch {torch.__version__}")
    print("a group with half its 8 rollouts right:", [f"{a:+.4f}" for a in advantages([1.0, 0.0] * 4).tolist()])
    print("every member's advantage when all n rollouts score the same float32 reward (expected 0 throughout):")
    print("reward " + " ".join(f"{f'n={n}':>8}" for n in SIZES))
    for value in (0.1, 0.3, 0.5, 0.7, 0.9):
        print(f"{value:<6} " + " ".join(f"{float(advantages([value] * n)[0]):+8.4f}" for n in SIZES))
    got = advantages([0.7] * 8)
    print("eight rewards of 0.7, float64:", float(advantages([0.7] * 8, torch.float64)[0]))
    assert bool((got == got[0]).all()) and abs(float(got[0]) - 0.0560) < 5e-4, got  # expected 0.0
    assert float(advantages([0.9] * 8)[0]) < -0.05  # the sign follows the rounding
    print("reproduced: groups of equal float32 rewards get advantages up to ±0.056 per member instead of 0")
