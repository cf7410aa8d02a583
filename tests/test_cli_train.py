"""``flashsim train`` at tiny budgets, through ``main`` in this process and, where a kill is tested, as a process."""

from __future__ import annotations

import csv
import json
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from flashsim.cli import main
from tests.event_files import raw_scalars


@pytest.mark.slow
def test_train_writes_metrics_plot_summary_and_resumes(tmp_path, capsys):
    """Through ``main`` in this process (the SIGKILL test below runs the command as a process)."""
    out = tmp_path / "run"
    common = ("--env", "bandit_tiny", "--algo", "grpo", "--lag", "2", "--batch-size", "16", "--group-size", "4",
              "--seed", "1", "--out", str(out), "--checkpoint-every", "5", "--eval-every", "4")
    assert main(["train", *common, "--updates", "12", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["updates"] == 12 and summary["algorithm"] == "grpo" and summary["rollouts"] == 12 * 16
    assert summary["accounting"]["consumed"] + summary["accounting"]["rejected"] == 12 * 16
    for name in ("metrics.csv", "metrics.jsonl", "curves.png", "summary.json", "config.json", "checkpoint.pt"):
        assert (out / name).stat().st_size > 0, name
    with open(out / "metrics.csv") as file:
        rows = list(csv.DictReader(file))
    assert [row["update"] for row in rows] == [str(k) for k in range(12)]
    assert [row["lag/max"] for row in rows[2:]] == ["2.0"] * 10

    assert main(["train", "--out", str(out), "--resume", "--updates", "15", "--no-progress"]) == 0
    assert "15 updates" in capsys.readouterr().out
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 15


def test_train_reports_bad_usage_as_errors_with_exit_code_two(tmp_path, capsys):
    assert main(["train", "--lag", "sometimes", "--out", str(tmp_path / "a")]) == 2
    assert "--lag" in capsys.readouterr().err
    assert main(["train", "--updates", "ten", "--out", str(tmp_path / "a")]) == 2
    assert "updates must be an int, got 'ten'" in capsys.readouterr().err
    assert main(["train", "--set", "algorithm.bogus=1", "--out", str(tmp_path / "a")]) == 2
    assert "algorithm.bogus" in capsys.readouterr().err
    assert main(["train", "--crash-prob", "0.1", "--updates", "1", "--out", str(tmp_path / "b")]) == 2
    assert "workers" in capsys.readouterr().err
    assert main(["train", "--out", str(tmp_path / "c"), "--resume"]) == 2
    assert "nothing to resume" in capsys.readouterr().err


@pytest.mark.fault
@pytest.mark.slow
def test_metrics_rows_after_sigkill_and_resume_are_neither_lost_nor_duplicated(tmp_path):
    """Nor the TensorBoard scalars of the killed run, which logs them too (the metrics files stay the record).

    The kill lands once 20 KB of rows (about 30 updates) are on disk, so 400 updates leave the run more than 90 %
    of its work to be killed in. Only the killed run is a process; the others run through ``main`` here."""
    updates = 400
    common = ("--env", "bandit_tiny", "--batch-size", "16", "--lag", "2", "--eval-every", "3", "--checkpoint-every",
              "7", "--updates", str(updates), "--no-progress")
    whole = tmp_path / "whole"
    assert main(["train", *common, "--out", str(whole)]) == 0  # in this process: only the killed run needs one
    killed = tmp_path / "killed"
    process = subprocess.Popen([sys.executable, "-m", "flashsim", "train", *common, "--out", str(killed),
                                "--logger", "tensorboard"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    while not _rows_past_a_checkpoint(killed) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)  # no cleanup: buffered rows after the last checkpoint are lost
    process.wait()
    assert process.returncode == -signal.SIGKILL, "the run finished before it could be killed; raise --updates"
    assert main(["train", "--out", str(killed), "--resume", "--no-progress", "--logger", "tensorboard"]) == 0
    for name in ("metrics.csv", "metrics.jsonl"):
        assert (killed / name).read_bytes() == (whole / name).read_bytes(), name
    rows = [json.loads(line) for line in (killed / "metrics.jsonl").read_text().splitlines()]
    assert [row["update"] for row in rows] == list(range(updates))
    assert len(list(killed.glob("events.out.tfevents.*"))) == 2  # the killed process's and the resumed one's
    scalars = raw_scalars(killed)
    assert len({(tag, step) for tag, step, _ in scalars}) == len(scalars)  # no step twice
    assert sorted((step, value) for tag, step, value in scalars if tag == "env/reward") == \
           [(row["update"], np.float32(row["env/reward"])) for row in rows]


def _rows_past_a_checkpoint(out) -> bool:
    """A checkpoint exists and rows beyond it have reached the disk (the kill lands between checkpoints)."""
    try:
        return (out / "checkpoint.pt").exists() and (out / "metrics.jsonl").stat().st_size > 20_000
    except FileNotFoundError:
        return False


def _config(*argv):
    """The config that ``flashsim train ARGV`` would run."""
    from flashsim.cli import build_parser
    from flashsim.cli.train import build_config

    return build_config(build_parser("train").parse_args(["train", "--out", "unused", *argv]))


def test_set_keys_of_the_lag_refine_the_lag_chosen_by_a_flag():
    from flashsim.sim import AsyncWorkers

    config = _config("--set", "lag.crash_prob=0.25", "--lag", "workers:8", "--max-queued", "256")
    assert config.lag == AsyncWorkers(num_workers=8, crash_prob=0.25, max_queued=256)


def test_timing_flags_refine_the_envs_own_latency_from_flags_set_or_a_file(tmp_path):
    from dataclasses import replace

    from flashsim.sim.config import env_timing

    expected = replace(env_timing("gridworld"), tool_latency_sigma=2.0)
    assert expected.tool_latency != 0
    assert _config("--env", "gridworld", "--tool-latency-sigma", "2").timing == expected
    assert _config("--set", "timing.tool_latency_sigma=2", "--set", "env=gridworld").timing == expected
    path = tmp_path / "run.yaml"
    path.write_text("env: gridworld\ntiming:\n  tool_latency_sigma: 2.0\n")
    assert _config("--config", str(path)).timing == expected
    assert _config("--env", "gridworld").timing is None


def test_algo_takes_the_group_size_of_its_loss_and_flags_override_single_fields():
    assert _config("--algo", "grpo").algorithm.group_size == 8
    assert _config("--algo", "rloo", "--group-size", "4").algorithm.group_size == 4
    minibatches = _config("--algo", "flash_reinforce", "--minibatches", "4").algorithm
    assert (minibatches.loss, minibatches.group_size, minibatches.minibatches) == ("flash_reinforce", 1, 4)
