"""OpenRLHF 0.11.2, advantage estimator group_norm: a group of equal rewards gets advantages of +59.6.

RemoteExperienceMaker.compute_advantages_and_returns holds rewards in float32
(openrlhf/trainer/ppo_utils/experience_maker.py:244), reshapes them to [prompts, n_samples_per_prompt] and
normalises each prompt's group with ε = 1e-9 (line 274, quoted below). In float32 the mean of a row of seven or
more rewards of 0.7 is one ulp (5.96e-8) off while its std is 0, so every member of the group gets
(one ulp) / 1e-9 = +59.6 instead of 0: the whole group is pushed, hard, towards whatever it did.

The line sits inside a method that needs a Ray cluster and a strategy object; this script checks that the
installed OpenRLHF holds it verbatim, then evaluates it on the tensor the method builds.

Run: python docs/upstream/openrlhf_group_norm_epsilon.py (CPU, seconds).
"""

import importlib.metadata
import importlib.util
import pathlib

import torch

LINE = "rewards = (rewards - rewards.mean(-1, keepdim=True)) / (rewards.std(-1, keepdim=True) + 1e-9)"


def installed_line() -> str:
    """``file:line`` of LINE in the installed OpenRLHF (read as text: importing it needs Ray and DeepSpeed)."""
    package = pathlib.Path(importlib.util.find_spec("openrlhf").origin).parent
    source = package / "trainer" / "ppo_utils" / "experience_maker.py"
    for number, text in enumerate(source.read_text().splitlines(), start=1):
        if text.strip() == LINE:
            return f"openrlhf/trainer/ppo_utils/experience_maker.py:{number}"
    raise AssertionError("the group_norm line is not in the installed OpenRLHF: the bug may be fixed")


def group_norm(rewards: torch.Tensor) -> torch.Tensor:
    """LINE, on rewards of shape [prompts, n_samples_per_prompt]."""
    rewards = rewards.to(torch.promote_types(rewards.dtype, torch.float32))  # line 244
    rewards = (rewards - rewards.mean(-1, keepdim=True)) / (rewards.std(-1, keepdim=True) + 1e-9)  # LINE
    return rewards


if __name__ == "__main__":
    print(f"openrlhf {importlib.metadata.version('openrlhf')}: {installed_line()}")
    rewards = torch.tensor([[1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0], [0.7] * 8])  # two prompts, n = 8
    got = group_norm(rewards)
    print("prompt 1 (all 0.7) -> advantages", [f"{a:+.1f}" for a in got[1].tolist()])
    assert bool((got[1] == got[1][0]).all()), "every member shifts the same way"
    assert abs(float(got[1][0]) - 59.6) < 0.1, got  # expected 0.0 for every member
    print("reproduced: a constant group of float32 rewards gets advantage +59.6 per member instead of 0")
