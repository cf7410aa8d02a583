"""A dead rollout fleet stops the run loudly (non-zero exit, a message naming the engines and the resume
command), never hangs; the checkpoint stays intact and ``--resume`` writes each update row exactly once."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from scale.testing import engine_actor_pids  # noqa: E402
from tests.scale.fleet_drill import FAIL_FILE  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.fault]

ROOT = Path(__file__).resolve().parents[2]
UPDATES = 20
"""Far more than the batches already queued when the failure is injected at update 3: the run cannot finish
from its queue (with 8 updates, under load, the kill once came late enough that it did, exit 0)."""
EXIT_BOUND_S = 60.0
"""From the kill to the run's exit (measured ~3 s on 2 busy cores; notes/fleet.md)."""


def _sets(out: Path, *extra: str) -> list[str]:
    sets = [f"log.out={out}", "warmup.steps=10", f"train.updates={UPDATES}", "train.batch_size=8",
            "loop.trajectories_per_call=8", "loop.queue_size=8", "data.num_test=16", "eval.every=4",
            "log.checkpoint_every=2", "log.progress=false", *extra]
    return ["--config", "tiny_cpu", *[x for s in sets for x in ("--set", s)]]


def _rows(out: Path) -> list[dict]:
    path = out / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def _start(args: list[str], env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "scale", "train", *args], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _wait_for_update(process: subprocess.Popen, out: Path, update: int) -> None:
    deadline = time.monotonic() + 300
    while not any(r["update"] >= update for r in _rows(out)):
        assert process.poll() is None, f"the run ended early: {process.communicate()[1][-2000:]}"
        assert time.monotonic() < deadline, "the run did not reach the update in time"
        time.sleep(0.05)


def _stops_loudly(process: subprocess.Popen, out: Path, args: list[str], started: float) -> str:
    _, stderr = process.communicate(timeout=EXIT_BOUND_S + 60)
    exit_s = time.monotonic() - started
    assert process.returncode == 3, stderr[-3000:]
    assert exit_s < EXIT_BOUND_S
    assert "the rollout fleet is dead" in stderr and "last weight version delivered" in stderr
    resume = "python -m scale train " + " ".join(args) + " --resume"
    assert resume in stderr.replace("'", "")
    checkpoint = json.loads((out / "summary.json").read_text()) if (out / "summary.json").exists() else None
    assert checkpoint is None  # the run did not finish
    print(f"stopped {exit_s:.1f} s after the failure:\n{stderr[-1500:]}")
    return stderr


def _resume_writes_each_row_once(out: Path, args: list[str]) -> None:
    """``python -m scale train ARGS --resume`` run here (``scale.cli.main``, what ``python -m scale`` calls):
    the process boundary is the stopped run's, not the resume's, and a second interpreter cost ~4 s."""
    import torch

    from scale.cli import main

    saved = torch.load(out / "checkpoint" / "state.pt", weights_only=True)["version"]
    assert saved < UPDATES
    assert main(["train", *args, "--resume"]) == 0
    assert [r["update"] for r in _rows(out)] == list(range(UPDATES + 1))


def test_killing_every_engine_actor_stops_the_run_loudly_and_resume_completes_it(tmp_path, ray_cluster):
    """The run and its resume join the session's Ray cluster (``--set loop.ray_address``, conftest.py) rather than
    each starting one (~14 s each on 2 busy cores): what is tested is the fleet's death, not the cluster's start.
    Its actors are then this process's descendants (the cluster's raylet is), those that were not there before."""
    address = ray_cluster.get_runtime_context().gcs_address
    out = tmp_path / "run"
    args = _sets(out, "loop.placement=ray", "loop.num_workers=2", "loop.max_restarts=0", f"loop.ray_address={address}")
    before = set(engine_actor_pids(os.getpid()))
    process = _start(args)
    try:
        _wait_for_update(process, out, 3)
        actors = [pid for pid in engine_actor_pids(os.getpid()) if pid not in before]
        assert len(actors) == 2, actors
        for pid in actors:
            os.kill(pid, signal.SIGKILL)
        stderr = _stops_loudly(process, out, args, time.monotonic())
    finally:
        if process.poll() is None:
            process.kill()
    assert "engine 0 (ray actor EngineActor): given up" in stderr and "engine 1" in stderr
    _resume_writes_each_row_once(out, args)


def test_an_engine_thread_that_raises_stops_the_run_loudly_and_resume_completes_it(tmp_path):
    out, trigger = tmp_path / "run", tmp_path / "fail-now"
    args = _sets(out, "loop.mode=async", "loop.placement=threads", "loop.num_workers=2",
                 "rollout.reward=tests.scale.fleet_drill:reward_failing_on_file")
    env = {**os.environ, FAIL_FILE: str(trigger), "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    process = _start(args, env)
    try:
        _wait_for_update(process, out, 3)
        trigger.touch()
        stderr = _stops_loudly(process, out, args, time.monotonic())
    finally:
        if process.poll() is None:
            process.kill()
    assert "engine thread rollout-worker-" in stderr and "injected reward failure" in stderr
    trigger.unlink()
    os.environ[FAIL_FILE] = str(trigger)
    try:
        _resume_writes_each_row_once(out, args)
    finally:
        del os.environ[FAIL_FILE]
