"""A run killed with SIGKILL and resumed: no metrics row lost or duplicated; sync runs stay bit-identical."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.event_files import raw_scalars

pytest.importorskip("transformers")

pytestmark = [pytest.mark.slow, pytest.mark.fault]

ROOT = Path(__file__).resolve().parents[2]
UPDATES = 10


def _overrides(out: Path, mode: str) -> list[str]:
    return [f"log.out={out}", f"loop.mode={mode}", "warmup.steps=10", f"train.updates={UPDATES}",
            "train.batch_size=8", "loop.trajectories_per_call=8", "loop.queue_size=8", "data.num_test=16",
            "eval.every=5", "log.checkpoint_every=3", "log.progress=false",
            "log.logger=tensorboard"]


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]


def _command(out: Path, mode: str, *extra: str) -> list[str]:
    command = [sys.executable, "-m", "scale", "train", "--config", "tiny_cpu", *extra]
    for assignment in _overrides(out, mode):
        command += ["--set", assignment]
    return command


def _run(out: Path, mode: str, *extra: str) -> None:
    """A whole run in a fresh process, as the killed one ran (the pytest worker's torch state differs:
    threads and earlier tests' global state changed the straight run's numbers in an in-process run)."""
    result = subprocess.run(_command(out, mode, *extra), cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]


def _kill_after_update(out: Path, mode: str, update: int) -> None:
    process = subprocess.Popen(_command(out, mode), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            path = out / "metrics.jsonl"
            if path.exists() and any(r["update"] >= update for r in _rows(out)):
                break
            assert process.poll() is None, "the run ended before it could be killed"
            time.sleep(0.05)
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.wait(timeout=60)
    assert process.returncode == -signal.SIGKILL


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_run_killed_and_resumed_has_each_metrics_row_once(tmp_path, mode):
    killed = tmp_path / "killed"
    _kill_after_update(killed, mode, update=4)  # checkpoints at 3, 6, 9: rows 4.. are recomputed
    assert max(r["update"] for r in _rows(killed)) < UPDATES
    _run(killed, mode, "--resume")
    updates = [r["update"] for r in _rows(killed)]
    assert updates == list(range(UPDATES + 1))
    scalars = raw_scalars(killed)  # TensorBoard's copy: every step once, as in the metrics
    assert len({(tag, step) for tag, step, _ in scalars}) == len(scalars)
    assert sorted(step for tag, step, _ in scalars if tag == "eval/accuracy") == [0, 5, 10]
    assert sorted(step for tag, step, _ in scalars if tag == "rollout/reward") == list(range(1, UPDATES + 1))
    assert (killed / "curves.png").stat().st_size > 0
    if mode == "sync":  # same numbers as a run never interrupted (times excepted)
        straight = tmp_path / "straight"
        _run(straight, mode, "--set", "log.curves=false")  # only its numbers are compared
        for a, b in zip(_rows(killed), _rows(straight)):
            assert {k: v for k, v in a.items() if not k.startswith("time/")} == \
                   {k: v for k, v in b.items() if not k.startswith("time/")}
