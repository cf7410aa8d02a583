"""OpenRLHF 0.11.2, --advantage.estimator group_norm: a prompt whose rollouts all score 0.7 gets advantages of +10.

Calls OpenRLHF's own RemoteExperienceMaker.compute_advantages_and_returns (and through it compute_reward, with the
default --reward.clip_range (-10, 10)) on an instance built without a Ray cluster: the method reads only
self.strategy.args, self.kl_ctl and self.advantage_estimator. The module imports openrlhf.trainer.ray.launcher
(which needs a GPU stack for its model classes) only for a type, so that one import is replaced by an empty
module; every line the method runs is the installed wheel's.

Run: python docs/upstream/openrlhf_group_norm_epsilon.py (CPU, about 15 s: importing DeepSpeed).
"""

import importlib
import importlib.metadata
import importlib.util
import pathlib
import sys
import types

import torch

N = 8  # n_samples_per_prompt


def experience_maker_class() -> type:
    """RemoteExperienceMaker, imported without the package __init__ files (they import the GPU model stack)."""
    root = pathlib.Path(importlib.util.find_spec("openrlhf").origin).parent
    for name in ("models", "utils", "trainer", "trainer.ppo_utils", "trainer.ray"):
        package = types.ModuleType(f"openrlhf.{name}")
        package.__path__ = [str(root / name.replace(".", "/"))]
        sys.modules.setdefault(f"openrlhf.{name}", package)
    launcher = types.ModuleType("openrlhf.trainer.ray.launcher")
    launcher.RayActorGroup = object  # used by the module only as a type
    sys.modules.setdefault("openrlhf.trainer.ray.launcher", launcher)
    return importlib.import_module("openrlhf.trainer.ppo_utils.experience_maker").RemoteExperienceMaker


def advantages(rewards: list[float], clip_range=(-10, 10)) -> torch.Tensor:
    """The per-token advantages (one-token responses) compute_advantages_and_returns gives a batch of prompts × N."""
    maker_class = experience_maker_class()
    experience_class = importlib.import_module("openrlhf.trainer.ppo_utils.experience").Experience
    maker = maker_class.__new__(maker_class)  # no Ray actors: the method does not use them
    ns = types.SimpleNamespace
    maker.strategy = ns(args=ns(
        rollout=ns(n_samples_per_prompt=N),
        algo=ns(advantage=ns(estimator="group_norm", gamma=1.0, lambd=1.0, no_std_norm=False)),
        reward=ns(clip_range=clip_range, overlong_buffer_len=None, stop_properly_penalty_coef=None)))  # CLI defaults
    maker.kl_ctl = ns(value=0.0)
    maker.advantage_estimator = "group_norm"
    experience = experience_class(rewards=torch.tensor(rewards), kl=torch.zeros(len(rewards), 1),
                                  action_mask=torch.ones(len(rewards), 1, dtype=torch.bool),
                                  index=list(range(len(rewards))))
    (experience,) = maker.compute_advantages_and_returns([experience])
    return experience.advantages[:, 0]


if __name__ == "__main__":
    print(f"openrlhf {importlib.metadata.version('openrlhf')}, torch {torch.__version__}")
    normal, constant = [1.0, 0.0] * (N // 2), [0.7] * N  # prompt 0: half right; prompt 1: every rollout scores 0.7
    got = advantages(normal + constant)
    print("prompt 0 (half right):", [f"{a:+.4f}" for a in got[:N].tolist()])
    print("prompt 1 (all 0.7):   ", [f"{a:+.4f}" for a in got[N:].tolist()])
    print("without the clamp (--reward.clip_range unset):", f"{advantages(normal + constant, None)[N].item():+.4f}")
    print("the all-0.7 prompt alone in its batch:", f"{advantages(constant)[0].item():+.4f}")
    assert torch.equal(got[N:], torch.full((N,), 10.0)), got  # expected 0.0: the group has no contrast
    print("reproduced: a group of equal rewards gets +10 per member (the clip range's bound) instead of 0")
