"""What scale's tests and its benchmarks share: a hermetic Ray environment, a run's processes found from outside,
and a free port. The standard library only.

**Ray made hermetic for one cluster** (:func:`hermetic_ray_environment`): a cluster's temp dir is its own
(``$RAY_TMPDIR``), ``$RAY_ADDRESS`` is unset (nothing joins a cluster another session or an old ``ray start``
left), and token authentication uses a token of the cluster's own (``$RAY_AUTH_TOKEN``), not
``~/.ray/auth_token``: the first Ray start on a fresh machine writes that file, so a cluster started before it
existed had no token while a run joining it later had one, and every engine actor of that run died at start (the
chaos soak's failure in a fresh README install, reproduced with an empty ``$HOME``).

**A run's processes** (:func:`descendants`, :func:`command_line`, :func:`environment`, :func:`engine_actor_pids`):
read from ``/proc``, for the failure drills that kill one of them.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from pathlib import Path

RAY_KEYS = ("RAY_TMPDIR", "RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
"""Every variable :func:`hermetic_ray_environment` sets or removes."""


def hermetic_ray_environment(ray_tmp: str, token: str, base: Mapping[str, str] = os.environ) -> dict[str, str]:
    """``base`` with Ray's temp dir ``ray_tmp``, the authentication token ``token``, and no ``RAY_ADDRESS`` or
    ``RAY_AUTH_TOKEN_PATH``.

    >>> env = hermetic_ray_environment("/tmp/ray_a", "t0k3n", {"RAY_ADDRESS": "auto", "HOME": "/home/me"})
    >>> sorted(env.items())  # doctest: +NORMALIZE_WHITESPACE
    [('HOME', '/home/me'), ('RAY_AUTH_MODE', 'token'), ('RAY_AUTH_TOKEN', 't0k3n'), ('RAY_TMPDIR', '/tmp/ray_a')]
    """
    env = {**base, "RAY_TMPDIR": ray_tmp, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}
    for key in ("RAY_ADDRESS", "RAY_AUTH_TOKEN_PATH"):
        env.pop(key, None)
    return env


def free_port() -> str:
    """A TCP port on 127.0.0.1 that was free a moment ago (for ``torchrun --master-port`` and the like)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return str(probe.getsockname()[1])


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
    """The command line of process ``pid`` (arguments joined by spaces; "" once it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def environment(pid: int) -> dict[str, str]:
    """The environment of process ``pid`` ({} once it is gone, or when it is not readable)."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def engine_actor_pids(driver: int) -> list[int]:
    """The ``ray::EngineActor`` processes a driver's local Ray cluster runs (Ray names its workers so)."""
    return [p for p in descendants(driver) if command_line(p).startswith("ray::EngineActor")]


__all__ = ["RAY_KEYS", "command_line", "descendants", "engine_actor_pids", "environment", "free_port",
           "hermetic_ray_environment"]
