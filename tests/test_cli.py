"""The ``flashsim`` command, run as a user runs it: through a subprocess (the help texts through ``main``)."""

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


def test_only_the_chosen_subcommand_builds_its_parser_and_help_lists_them_all():
    from flashsim.cli import SUBCOMMANDS, build_parser

    def options(parser, command):
        subparsers = next(action for action in parser._actions if action.dest == "command")
        return {flag for action in subparsers.choices[command]._actions for flag in action.option_strings}

    listing = build_parser().format_help()
    assert all(name in listing and help_text.split()[0] in listing for name, help_text in SUBCOMMANDS.items())
    train_only = build_parser("train")
    assert "--lag" in options(train_only, "train") and options(train_only, "variance") == {"-h", "--help"}
    assert "--budget" in options(build_parser("variance"), "variance")
    assert "--quick" in options(build_parser("reproduce"), "reproduce")


def test_every_subcommand_help_is_complete(capsys):
    """In this process through ``main`` (the subprocess tests above cover the entry point): five interpreter
    start-ups with torch cost 54 s at load 15."""
    from flashsim.cli import main

    for command, option in (("demo", "--updates"), ("train", "--crash-prob"), ("variance", "--group-size"),
                            ("reproduce", "--jobs"), ("check-loss", "--convention")):
        with pytest.raises(SystemExit) as exit_info:
            main([command, "--help"])
        captured = capsys.readouterr()
        assert exit_info.value.code == 0 and option in captured.out, (command, captured.err)
