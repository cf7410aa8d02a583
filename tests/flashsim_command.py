"""Run the ``flashsim`` command as a user runs it: ``python -m flashsim ARGS`` in a subprocess."""

from __future__ import annotations

import subprocess
import sys


def run_flashsim(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """The finished process (exit status, stdout, stderr as text); never raises on a non-zero exit."""
    return subprocess.run(
        [sys.executable, "-m", "flashsim", *args], capture_output=True, text=True, timeout=timeout, check=False
    )
