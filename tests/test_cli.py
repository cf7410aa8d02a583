"""The ``flashsim`` command, run as a user runs it: through a subprocess."""

from __future__ import annotations

import subprocess
import sys

import pytest

import flashsim


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "flashsim", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.mark.slow
def test_version_prints_the_package_version():
    result = run_cli("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"flashsim {flashsim.__version__}"


@pytest.mark.slow
def test_no_command_prints_help_and_fails():
    result = run_cli()
    assert result.returncode == 2
    assert "demo" in result.stdout


@pytest.mark.slow
def test_unknown_command_is_an_error():
    result = run_cli("fly")
    assert result.returncode == 2
    assert "invalid choice" in result.stderr


@pytest.mark.slow
def test_demo_runs_and_prints_a_result():
    result = run_cli("demo", timeout=300)
    assert result.returncode == 0, result.stderr
    assert "FlashREINFORCE" in result.stdout
