"""Helpers for the failure drills: find a run's processes from outside, and a reward that fails on demand."""

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


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children, their children, ...), read from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def environment(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def engine_actor_pids(driver: int) -> list[int]:
    """The ``ray::EngineActor`` processes a driver's local Ray cluster runs (Ray names its workers so)."""
    return [p for p in descendants(driver) if command_line(p).startswith("ray::EngineActor")]
