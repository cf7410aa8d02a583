"""An empty ``--out`` is a usage error, not the working directory.

``Path("")`` is ``.``: before this check, ``flashsim train --out "$OUT"`` with ``$OUT`` unset wrote the run's files
into the directory the command ran from, and ``flashsim reproduce`` resumed whatever sweep that directory held.
"""

import argparse
import dataclasses
from pathlib import Path

import pytest

from flashsim.cli import main as flashsim_main
from flashsim.config import check_directory, directory_argument

FLASHSIM_COMMANDS = (["train"], ["variance"], ["reproduce", "C1", "--smoke"], ["demo"])
SCALE_COMMANDS = (["train"], ["reproduce", "C1", "--smoke"], ["warmup", "--model", "m", "--data", "d.jsonl"])


@pytest.mark.parametrize("command", FLASHSIM_COMMANDS, ids=lambda c: c[0])
@pytest.mark.parametrize("out", ["", "  "])
def test_flashsim_commands_refuse_an_empty_out_with_exit_status_2(command, out, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        flashsim_main([*command, "--out", out])
    assert exit_info.value.code == 2
    assert f"argument --out: must name a directory, got {out!r}" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # nothing written where the command ran


@pytest.mark.parametrize("command", SCALE_COMMANDS, ids=lambda c: c[0])
def test_scale_commands_refuse_an_empty_out(command, tmp_path, monkeypatch, capsys):
    pytest.importorskip("yaml")
    from scale.cli import main as scale_main

    monkeypatch.chdir(tmp_path)
    if command == ["train"]:  # --out is log.out: the config refuses it, naming the key (exit status 2)
        assert scale_main(["train", "--out", ""]) == 2
        assert "log.out must name a directory, got ''" in capsys.readouterr().err
    else:
        with pytest.raises(SystemExit) as exit_info:
            scale_main([*command, "--out", ""])
        assert exit_info.value.code == 2
        assert "argument --out: must name a directory, got ''" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_path_and_a_named_directory_pass_and_a_blank_or_a_non_string_does_not():
    assert check_directory("out", "runs/a") == "runs/a"
    assert check_directory("out", Path(".")) == Path(".")  # "." asks for the working directory in so many words
    assert directory_argument("runs/a") == Path("runs/a")
    with pytest.raises(ValueError, match=r"^out must name a directory, got '\\t'"):
        check_directory("out", "\t")
    with pytest.raises(TypeError, match="out must be a str, got int"):
        check_directory("out", 3)
    with pytest.raises(argparse.ArgumentTypeError, match="must name a directory, got ''"):
        directory_argument("")


def test_scales_log_config_refuses_an_empty_out():
    pytest.importorskip("yaml")
    from scale.run.config import LogConfig

    with pytest.raises(ValueError, match="out must name a directory"):
        LogConfig(out="")
    assert dataclasses.replace(LogConfig(), out=Path("runs/x")).out == Path("runs/x")
