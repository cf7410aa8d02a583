"""``flashsim train`` run as a user runs it: through a subprocess, at tiny budgets."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

from flashsim.cli import main


def run_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "flashsim", "train", *args], capture_output=True, text=True, timeout=timeout,
        check=False,
    )


def test_train_writes_metrics_plot_summary_and_resumes(tmp_path):
    out = tmp_path / "run"
    common = ("--env", "bandit_tiny", "--algo", "grpo", "--lag", "2", "--batch-size", "16", "--group-size", "4",
              "--seed", "1", "--out", str(out), "--checkpoint-every", "5", "--eval-every", "4")
    first = run_cli(*common, "--updates", "12", "--json")
    assert first.returncode == 0, first.stderr
    summary = json.loads(first.stdout)
    assert summary["updates"] == 12 and summary["algorithm"] == "grpo" and summary["rollouts"] == 12 * 16
    assert summary["accounting"]["consumed"] + summary["accounting"]["rejected"] == 12 * 16
    for name in ("metrics.csv", "metrics.jsonl", "curves.png", "summary.json", "config.json", "checkpoint.pt"):
        assert (out / name).stat().st_size > 0, name
    with open(out / "metrics.csv") as file:
        rows = list(csv.DictReader(file))
    assert [row["update"] for row in rows] == [str(k) for k in range(12)]
    assert [row["lag/max"] for row in rows[2:]] == ["2.0"] * 10

    resumed = run_cli("--out", str(out), "--resume", "--updates", "15", "--no-progress")
    assert resumed.returncode == 0, resumed.stderr
    assert "15 updates" in resumed.stdout
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
