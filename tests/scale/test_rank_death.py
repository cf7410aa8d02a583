"""Data-parallel learners (torchrun, gloo): a rank SIGKILLed from outside stops the job within a bound, with a
message naming the failed rank; ``--resume`` continues and writes each update row exactly once."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from scale.testing import descendants, environment, free_port  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.fault]

ROOT = Path(__file__).resolve().parents[2]
UPDATES = 6
EXIT_BOUND_S = 60.0
"""From the kill to torchrun's exit; the surviving rank's collectives time out after
``train.process_group_timeout_s`` (set to 30 s here) if torchrun did not stop it first."""



def _rows(out: Path) -> list[dict]:
    path = out / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def test_a_killed_learner_rank_stops_the_job_within_the_bound_and_resume_completes_it(tmp_path):
    out = tmp_path / "run"
    sets = [f"log.out={out}", "loop.mode=sync", "warmup.steps=10", f"train.updates={UPDATES}", "train.batch_size=8",
            "data.num_test=16", "eval.every=3", "log.checkpoint_every=2", "log.progress=false",
            "train.process_group_timeout_s=30", "log.curves=false"]
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}

    def command() -> list[str]:
        return [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "2",
                "--master-port", free_port(), "-m", "scale", "train", "--config", "tiny_cpu",
                *[x for s in sets for x in ("--set", s)]]

    process = subprocess.Popen(command(), cwd=ROOT, env=env, text=True, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 300
        while not any(r["update"] >= 3 for r in _rows(out)):
            assert process.poll() is None, process.communicate()[1][-3000:]
            assert time.monotonic() < deadline
            time.sleep(0.05)
        rank1 = [p for p in descendants(process.pid) if environment(p).get("RANK") == "1"
                 and "scale" in Path(f"/proc/{p}/cmdline").read_text(errors="replace")]
        assert len(rank1) == 1, rank1
        os.kill(rank1[0], signal.SIGKILL)
        killed = time.monotonic()
        _, stderr = process.communicate(timeout=EXIT_BOUND_S + 60)
        exit_s = time.monotonic() - killed
    finally:
        if process.poll() is None:
            process.kill()
    print(f"torchrun exited {exit_s:.1f} s after the kill:\n{stderr[-1500:]}")
    assert process.returncode != 0 and exit_s < EXIT_BOUND_S
    assert "Signal 9 (SIGKILL)" in stderr and "rank" in stderr
    assert max(r["update"] for r in _rows(out)) < UPDATES
    done = subprocess.run(command() + ["--resume"], cwd=ROOT, env=env, text=True, capture_output=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert [r["update"] for r in _rows(out)] == list(range(UPDATES + 1))
