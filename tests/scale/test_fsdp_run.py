"""``torchrun --nproc-per-node 2 -m scale train`` with ``learner.parallel: fsdp``: the DDP run's numbers, a
resume after SIGKILL with each metrics row once, and a resume onto one rank."""

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
SETS = ["loop.mode=sync", "warmup.steps=10", "train.batch_size=16", "data.num_test=16", "eval.every=2",
        "log.progress=false", "log.checkpoint_every=2", "log.curves=false"]
"""No curves.png: no test here reads it, and drawing it cost each run about a second (it is drawn under torchrun in
``test_data_parallel.py``)."""



def _command(out: Path, ranks: int, *sets: str, resume: bool = False) -> list[str]:
    launcher = ["-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", str(ranks),
                "--master-port", free_port()] if ranks > 1 else []
    command = [sys.executable, *launcher, "-m", "scale", "train", "--config", "tiny_cpu", "--out", str(out)]
    return command + ["--resume"] * resume + [x for s in (*SETS, *sets) for x in ("--set", s)]


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}


def _rows(out: Path) -> list[dict]:
    path = out / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def _run(command: list[str]) -> None:
    done = subprocess.run(command, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


COMPARED = ("train.updates=3", "data.max_operand=9", "data.num_train=64", "train.learning_rate=1e-2")
"""The FSDP run two tests read, and the DDP run it is compared with: one-digit products give the first update a
gradient after the 10 warm-up steps (the two-digit task's rewards were all 0 there, and so were the loss and the
gradient the two runs were compared on), and learning rate 1e-2 moves the weights far between updates."""


@pytest.fixture(scope="module")
def fsdp_rows(tmp_path_factory) -> list[dict]:
    """The metrics rows of a synchronous 2-rank FSDP run of :data:`COMPARED` (one torchrun job for two tests)."""
    out = tmp_path_factory.mktemp("fsdp") / "run"
    _run(_command(out, 2, *COMPARED, "learner.parallel=fsdp", "rollout.engine=transformers"))
    return _rows(out)


def test_an_fsdp_run_matches_the_ddp_run(fsdp_rows, tmp_path):
    _run(_command(tmp_path / "ddp", 2, *COMPARED, "learner.parallel=ddp", "rollout.engine=transformers"))
    assert [r["update"] for r in fsdp_rows] == [0, 1, 2, 3]
    ddp, fsdp = _rows(tmp_path / "ddp")[1], fsdp_rows[1]  # update 1: same weights, same batch
    assert fsdp["grad/norm"] > 0
    assert fsdp["learner/ranks"] == 2
    assert fsdp["rollout/reward"] == ddp["rollout/reward"]
    assert fsdp["loss/policy"] == pytest.approx(ddp["loss/policy"], rel=1e-5, abs=1e-7)
    assert fsdp["grad/norm"] == pytest.approx(ddp["grad/norm"], rel=1e-5)


@pytest.mark.fault
def test_an_fsdp_run_killed_resumes_with_each_row_once_and_then_on_one_rank(tmp_path):
    out, updates = tmp_path / "run", 6
    process = subprocess.Popen(_command(out, 2, f"train.updates={updates}", "learner.parallel=fsdp"), cwd=ROOT,
                               env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not any(r["update"] >= 3 for r in _rows(out)):
            assert process.poll() is None, "the run ended before it could be killed"
            time.sleep(0.05)
        os.killpg(process.pid, signal.SIGKILL)  # torchrun and both ranks: the group this test started
    finally:
        process.wait(timeout=60)
    assert max(r["update"] for r in _rows(out)) < updates
    _run(_command(out, 2, f"train.updates={updates}", "learner.parallel=fsdp", resume=True))
    assert [r["update"] for r in _rows(out)] == list(range(updates + 1))
    _run(_command(out, 1, f"train.updates={updates + 2}", "learner.parallel=fsdp", resume=True))
    rows = _rows(out)
    assert [r["update"] for r in rows] == list(range(updates + 3))
    assert [r["learner/ranks"] for r in rows[updates + 1:]] == [1.0, 1.0]
    assert sorted(p.name for p in (out / "checkpoint").iterdir()) == [f"sharded-{updates + 2}", "state.pt"]


def test_an_fsdp_learner_publishes_its_gathered_weights_to_the_engines(fsdp_rows):
    """Synchronous, so every batch is sampled by the weights of the step before (lag 0): the learner's
    recomputed log-probs equal the engine's only if each step's gathered full weights reached the engine
    (:data:`COMPARED` gives the first update a gradient and moves the weights far). The vLLM engine's variant is
    in ``test_vllm_torchrun.py``."""
    rows = fsdp_rows[1:]
    assert [r["update"] for r in rows] == [1, 2, 3]
    assert rows[0]["grad/norm"] > 0
    for row in rows:
        assert row["lag/max"] == 0
        assert row["trust/ratio_min"] == pytest.approx(1, abs=1e-3), row
        assert row["trust/ratio_max"] == pytest.approx(1, abs=1e-3), row
