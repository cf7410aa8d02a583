"""Across processes: two ``torchrun`` ranks (gloo, CPU) each score half of a generation batch, and each rank's
advantages are its rows of ``R − mean R`` over both ranks' rewards — not over its own half (which would give rank 0
advantages −1.5…1.5 instead of −3.5…−0.5). A subprocess: the process group is what is tested."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from flashsim.losses import batch_centered
from scale.testing import free_port

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def test_the_baseline_is_the_mean_over_every_process(tmp_path):
    pytest.importorskip("trl")
    port = free_port()
    path = os.pathsep.join([str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "2",
               "--master-port", port, str(ROOT / "tests" / "integrations" / "two_process_worker.py"), str(tmp_path)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    assert [r["processes"] for r in ranks] == [2, 2]
    assert ranks[0]["rewards"] == ranks[1]["rewards"] == [float(i) for i in range(8)]
    want = batch_centered(torch.tensor(ranks[0]["rewards"]))
    got = torch.tensor(ranks[0]["advantages"] + ranks[1]["advantages"])
    torch.testing.assert_close(got, want, rtol=0, atol=0)
