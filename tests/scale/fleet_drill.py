"""A reward that fails on demand, for the failure drills (their process helpers are :mod:`scale.testing`)."""

import os
import threading
from pathlib import Path

from scale.rollouts.rewards import math_reward

FAIL_FILE = "FLASHSIM_TEST_REWARD_FAILS_IF"
"""Environment variable: :func:`reward_failing_on_file` raises while the file it names exists."""


def reward_failing_on_file(prompt, response, answer):
    """The math reward, except that it raises in an engine thread once the file named by
    ``$FLASHSIM_TEST_REWARD_FAILS_IF`` exists. The trainer's own thread (held-out evaluation) keeps scoring:
    the drill is an engine thread that raises, and an evaluation that raised first would end the run
    another way (seen under CI load)."""
    if threading.current_thread() is not threading.main_thread() and Path(os.environ[FAIL_FILE]).exists():
        raise RuntimeError("injected reward failure")
    return math_reward(prompt, response, answer)
