"""The vLLM-CPU engine inside a ``torchrun --nproc-per-node 2`` learner (rank 0's engine runs in a child
process of its own): an FSDP run's engine samples the gathered weights of every update, and the run
resumes after SIGKILL with each metrics row once; a DDP run completes.

Slow: each run starts a vLLM engine (20–40 s on 2 loaded cores). Every subprocess runs in a session of
its own and is killed with its whole process group (torchrun, both ranks, the engine) on timeout.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scale.testing import free_port

pytest.importorskip("transformers")
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 300
# One-digit products and a 40-step warm-up: some first rewards are 1, so the first update has a gradient, and
# at learning rate 1e-2 the weights move far enough that an engine left on older weights is caught (measured
# with publication switched off: ratios 0.008–30 at every update).
SETS = ["loop.mode=sync", "warmup.steps=40", "data.max_operand=9", "data.num_train=64", "data.num_test=16",
        "train.batch_size=16", "train.learning_rate=1e-2", "eval.every=2", "log.progress=false",
        "log.checkpoint_every=2", "rollout.engine=vllm", "log.curves=false"]  # no test reads curves.png
RATIO_TOLERANCE = 1e-4
"""vLLM-CPU float32 vs the learner's recomputed log-probs: measured |ratio - 1| ≤ 1.7e-6."""


@pytest.fixture(scope="module", autouse=True)
def vllm_installed():
    pytest.importorskip("vllm")



def _command(out: Path, *sets: str, resume: bool = False) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "2",
            "--master-port", free_port(), "-m", "scale", "train", "--config", "tiny_cpu", "--out", str(out),
            *["--resume"] * resume, *[x for s in (*SETS, *sets) for x in ("--set", s)]]


def _start(command: list[str], log: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def _kill_group(process: subprocess.Popen) -> None:
    """SIGKILL the process group the launcher leads, then wait until no process of it is left."""
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=60)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            os.killpg(process.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    raise AssertionError(f"processes of group {process.pid} outlived SIGKILL")


def _run(out: Path, *sets: str, resume: bool = False) -> None:
    log = out.parent / f"{out.name}-{time.monotonic_ns()}.log"
    process = _start(_command(out, *sets, resume=resume), log)
    try:
        process.wait(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        _kill_group(process)
        raise AssertionError(f"timed out after {TIMEOUT_S} s:\n{log.read_text()[-3000:]}") from None
    assert process.returncode == 0, log.read_text()[-3000:]


def _rows(out: Path) -> list[dict]:
    path = out / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


@pytest.mark.fault
def test_an_fsdp_run_with_the_vllm_engine_samples_each_update_s_weights_and_resumes_after_sigkill(tmp_path):
    out, updates = tmp_path / "run", 6
    process = _start(_command(out, f"train.updates={updates}", "learner.parallel=fsdp"), tmp_path / "killed.log")
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline and not any(r["update"] >= 3 for r in _rows(out)):
            assert process.poll() is None, (tmp_path / "killed.log").read_text()[-3000:]
            time.sleep(0.05)
    finally:
        _kill_group(process)  # torchrun, both ranks and rank 0's engine process
    assert 3 <= max(r["update"] for r in _rows(out)) < updates
    _run(out, f"train.updates={updates}", "learner.parallel=fsdp", resume=True)
    rows = _rows(out)
    assert [r["update"] for r in rows] == list(range(updates + 1))
    assert rows[1]["grad/norm"] > 0  # then AdamW's moments move the weights at every update ...
    for row in rows[1:]:
        assert row["learner/ranks"] == 2
        assert row["lag/max"] == 0  # ... each batch is tagged with the version of the step before ...
        assert abs(row["trust/ratio_min"] - 1) <= RATIO_TOLERANCE, row  # ... and was sampled by those weights
        assert abs(row["trust/ratio_max"] - 1) <= RATIO_TOLERANCE, row


def test_a_ddp_run_with_the_vllm_engine_completes(tmp_path):
    out = tmp_path / "run"
    _run(out, "train.updates=2", "learner.parallel=ddp")
    rows = _rows(out)
    assert [r["update"] for r in rows] == [0, 1, 2]
    assert all(r["lag/max"] == 0 and abs(r["trust/ratio_max"] - 1) <= RATIO_TOLERANCE for r in rows[1:])
