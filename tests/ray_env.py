"""Ray made hermetic for one cluster: the environment the test processes and the chaos soak give Ray.

A cluster's temp dir is its own (``$RAY_TMPDIR``), ``$RAY_ADDRESS`` is unset (nothing joins a cluster another
session or an old ``ray start`` left), and token authentication uses a token of the cluster's own
(``$RAY_AUTH_TOKEN``), not ``~/.ray/auth_token``: the first Ray start on a fresh machine writes that file, so a
cluster started before it existed had no token while a run joining it later had one, and every engine actor of that
run died at start (the chaos soak's failure in a fresh README install, reproduced with an empty ``$HOME``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

RAY_KEYS = ("RAY_TMPDIR", "RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
"""Every variable :func:`hermetic_ray_environment` sets or removes."""


def hermetic_ray_environment(ray_tmp: str, token: str, base: Mapping[str, str] = os.environ) -> dict[str, str]:
    """``base`` with Ray's temp dir ``ray_tmp``, the authentication token ``token``, and no ``RAY_ADDRESS`` or
    ``RAY_AUTH_TOKEN_PATH``."""
    env = {**base, "RAY_TMPDIR": ray_tmp, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}
    for key in ("RAY_ADDRESS", "RAY_AUTH_TOKEN_PATH"):
        env.pop(key, None)
    return env
