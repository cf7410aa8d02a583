"""The ``flashsim`` command, run as a user runs it: through a subprocess."""

from __future__ import annotations

import pytest

import flashsim
from tests.flashsim_command import run_flashsim


@pytest.mark.slow
def test_version_prints_the_package_version():
    result = run_flashsim("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"flashsim {flashsim.__version__}"


@pytest.mark.slow
def test_no_command_prints_help_and_fails():
    result = run_flashsim()
    assert result.returncode == 2
    assert "demo" in result.stdout


@pytest.mark.slow
def test_unknown_command_is_an_error():
    result = run_flashsim("fly")
    assert result.returncode == 2
    assert "invalid choice" in result.stderr


@pytest.mark.slow
def test_demo_runs_and_prints_a_result():
    result = run_flashsim("demo", timeout=300)
    assert result.returncode == 0, result.stderr
    assert "FlashREINFORCE" in result.stdout
