"""Budgets and seeds of the simulator's experiments: the three profiles, each profile's seeds, the base run.

Every toy design (the claims of :mod:`~flashsim.studies.claims`, the follow-ups of
:mod:`~flashsim.studies.follow_ups`, a claim of your own) is built at one of :data:`PROFILES`:
``smoke`` runs each claim in seconds (2 seeds from 0; CI), ``quick`` is ``flashsim reproduce --quick``
(10 seeds from 10), ``full`` has 20 fresh seeds from 1100. A builder picks its sizes per profile with
:func:`pick`, its seeds with :func:`profile_seeds` and its shared settings with :func:`base`.

>>> pick("quick", smoke=16, quick=100, full=200), profile_seeds("smoke")
(100, (0, 1))
"""

from __future__ import annotations

from flashsim.sim.config import AlgorithmConfig, TrainConfig

PROFILES = ("smoke", "quick", "full")
SEEDS = {"smoke": 2, "quick": 10, "full": 20}
"""Default number of seeds per profile."""
FIRST_SEED = {"smoke": 0, "quick": 10, "full": 1100}
"""The profile's first seed: the full budget uses fresh seeds, so it replicates the quick one independently."""
PILOT_SEEDS = frozenset({0, 1, 1000})
"""Seeds the pilots that chose a design's settings ran on (C1's harder task, C2's MLP learning rate, C9's tool
error rate); the quick and full verdict seeds avoid them, so no verdict is read on a run that chose it."""


def profile_seeds(profile: str, count: int | None = None) -> tuple[int, ...]:
    """``count`` seeds (default: the profile's number) from ``profile``'s first seed."""
    return tuple(range(FIRST_SEED[profile], FIRST_SEED[profile] + (SEEDS[profile] if count is None else count)))


def pick(profile: str, smoke, quick, full):
    """The value of ``profile`` among the three (``ValueError`` naming the profiles for another name)."""
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {PROFILES}, got {profile!r}")
    return {"smoke": smoke, "quick": quick, "full": full}[profile]


def eval_every(updates: int) -> int:
    """An evaluation every twentieth of the run (at least every update)."""
    return max(1, updates // 20)


def base(env: str = "gridworld", batch_size: int = 128, updates: int = 100, eval_every: int = 10,
         **fields: object) -> TrainConfig:
    """The settings a claim's cells share (arms and knob values override dotted paths of it)."""
    return TrainConfig(env=env, algorithm=AlgorithmConfig(batch_size=batch_size), updates=updates,
                       eval_every=eval_every, **fields)


__all__ = ["FIRST_SEED", "PILOT_SEEDS", "PROFILES", "SEEDS", "base", "eval_every", "pick", "profile_seeds"]
