"""``scale/examples/gpu_smoke.sh --cpu``: with no model directory anywhere, the smoke script builds its own tiny model
and tokenizer, trains it with scale/ (2 gloo FSDP ranks, the transformers engine) and with the TRL integration,
and writes gpu_smoke.json. A subprocess: the shell script is what is tested."""

import json
import os
import subprocess
from pathlib import Path

import pytest

from scale.testing import free_port

pytest.importorskip("transformers")
pytest.importorskip("trl")
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
LOG_RATIO_TOLERANCE = 1e-4
"""Engine vs learner log-probs at lag 0 on a CPU, both float32 (measured max |log ρ| 2.4e-7)."""


def test_the_cpu_smoke_builds_its_own_model_and_writes_the_report(tmp_path):
    out = tmp_path / "smoke"
    path = os.pathsep.join([str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    result = subprocess.run(["bash", str(ROOT / "scale" / "examples" / "gpu_smoke.sh"), "--cpu", "--out", str(out)],
                            capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert result.returncode == 0, (result.stdout[-2000:], result.stderr[-3000:])
    assert (out / "model" / "config.json").exists() and (out / "model" / "tokenizer.json").exists()
    report = json.loads((out / "gpu_smoke.json").read_text())
    scale, trl = report["scale"], report["trl"]
    assert report["device"] == "cpu" and scale["ranks"] == 2
    for part in (scale, trl):
        assert part["updates"] == 2 and part["tokens_per_s"] > 0 and part["s_per_update"] > 0, part
        assert part["peak_memory_mb"] > 100, part
    assert scale["logprob_agreement"]["max_abs_log_ratio"] < LOG_RATIO_TOLERANCE
    assert trl["generation"] == "transformers" and trl["logprob_agreement"] is None


def test_an_unknown_option_is_a_usage_error(tmp_path):
    result = subprocess.run(["bash", str(ROOT / "scale" / "examples" / "gpu_smoke.sh"), "--gpu"], capture_output=True,
                            text=True, timeout=60, cwd=tmp_path)
    assert result.returncode == 2 and "usage: gpu_smoke.sh [--cpu] [--out OUT]" in result.stderr



@pytest.mark.parametrize("single_rank", [True, False], ids=["fsdp", "ddp"])
def test_one_torchrun_rank_joins_a_group_of_one_only_for_the_fsdp_learner(monkeypatch, single_rank):
    """The smoke's single-GPU case: under ``torchrun --nproc-per-node 1`` (WORLD_SIZE=1) ``learner.parallel: fsdp``
    joins a process group of one rank, so the FSDP2 learner shards (scale/run/build.py passes ``single_rank``); a
    DDP learner stays one plain process, as before."""

    import torch.distributed as dist

    from scale.learner.distributed import init_from_environment, world_size

    port = free_port()
    for key, value in {"WORLD_SIZE": "1", "RANK": "0", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": port}.items():
        monkeypatch.setenv(key, value)
    assert not dist.is_initialized()
    try:
        joined = init_from_environment("cpu", timeout_s=60, single_rank=single_rank)
        assert joined is single_rank and dist.is_initialized() is single_rank
        assert world_size() == 1
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
