"""Without ``--ray-address`` a run starts a Ray cluster of its own: the record of an old ``ray start`` whose cluster
is gone (``ray_current_cluster`` in Ray's temp dir, pointing at a dead address) does not stall it.

With ``ray.init(address=None)`` Ray reads that record and connects there; on this machine it was still retrying
the dead address when the test's timeout killed it (notes/i41.md)."""

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from scale.testing import free_port

pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[2]
RUN_BOUND_S = 150.0
"""From launch to exit of a 2-update Ray run (Ray's start-up is most of it: 37 s for ``ray.init`` alone at load
13 on the 2 shared cores, a few seconds on an idle machine)."""


def test_no_address_means_a_local_cluster_and_an_address_is_passed_on():
    from scale.rollouts.ray_sources import ray_address

    assert ray_address(None) == "local"
    assert ray_address("auto") == "auto"  # Ray's discovery, as Ray means it
    assert ray_address("ray://head:10001") == "ray://head:10001"


def _dead_address() -> str:
    return f"127.0.0.1:{free_port()}"  # a port that was free a moment ago: nothing listens there


@pytest.mark.fault
@pytest.mark.slow
def test_a_stale_cluster_record_does_not_stall_a_ray_run(tmp_path):
    pytest.importorskip("ray")
    temp = tempfile.mkdtemp(prefix="ray-stale-", dir="/tmp")  # short: Ray's socket paths must stay < 108 bytes
    try:
        (Path(temp) / "ray").mkdir()
        (Path(temp) / "ray" / "ray_current_cluster").write_text(_dead_address())
        env = {**os.environ, "RAY_TMPDIR": temp, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        env.pop("RAY_ADDRESS", None)
        sets = [f"log.out={tmp_path / 'run'}", "loop.placement=ray", "loop.mode=async", "warmup.steps=2",
                "train.updates=2", "train.batch_size=8", "loop.trajectories_per_call=8", "loop.queue_size=8",
                "data.num_test=8", "eval.every=2", "log.progress=false", "log.curves=false"]
        command = [sys.executable, "-m", "scale", "train", "--config", "tiny_cpu",
                   *[x for s in sets for x in ("--set", s)]]
        started = time.monotonic()
        try:
            done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=RUN_BOUND_S)
        except subprocess.TimeoutExpired as error:
            pytest.fail(f"the run was still starting {RUN_BOUND_S:.0f} s later (joined the stale record?): "
                        f"{(error.stderr or b'')[-2000:]!r}")
        seconds = time.monotonic() - started
        assert done.returncode == 0, done.stderr[-3000:]
        assert (tmp_path / "run" / "summary.json").exists()
        print(f"a Ray run beside a stale cluster record: {seconds:.1f} s from launch to exit")
    finally:
        shutil.rmtree(temp, ignore_errors=True)
