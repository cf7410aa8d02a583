"""Data-parallel learners (torch.distributed, gloo on CPU): the summed gradient is the full-batch one."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from scale.learner.distributed import shard  # noqa: E402
from scale.testing import free_port  # noqa: E402

WORKER = Path(__file__).with_name("data_parallel_worker.py")
ROOT = Path(__file__).resolve().parents[2]



@pytest.mark.slow
@pytest.mark.parametrize("world_size", [1, 2])
def test_data_parallel_gradients_equal_the_single_process_full_batch_gradient(world_size, tmp_path):
    rendezvous = str(tmp_path / "rendezvous")
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    outputs = [tmp_path / f"rank{r}.json" for r in range(world_size)]
    ranks = [subprocess.Popen([sys.executable, str(WORKER), str(r), str(world_size), rendezvous, str(outputs[r])],
                              env=env)
             for r in range(world_size)]
    assert [p.wait(timeout=300) for p in ranks] == [0] * world_size
    for output in outputs:
        cases = json.loads(output.read_text())
        assert sorted(cases) == ["flash_reinforce/microbatches=1", "flash_reinforce/microbatches=2",
                                 "grpo/microbatches=1", "grpo/microbatches=2"]
        for name, case in cases.items():
            assert case["reference_norm"] > 1e-3, name
            assert case["max_abs_diff"] <= 1e-10, (name, case)


def test_shards_are_equal_contiguous_slices_in_rank_order():
    items = list(range(6))
    assert [shard(items, r, 3) for r in range(3)] == [[0, 1], [2, 3], [4, 5]]


@pytest.mark.parametrize("index, count, message", [(2, 2, "index must be an int in"), (0, 0, "count must be an int"),
                                                   (0, 4, "equal shards")], ids=["index-too-big", "no-shards",
                                                                                 "uneven"])
def test_bad_shards_are_refused(index, count, message):
    with pytest.raises(ValueError, match=message):
        shard(list(range(6)), index, count)


def test_data_parallel_learner_needs_an_initialised_process_group(float64_model):
    from scale.learner import Learner

    with pytest.raises(ValueError, match="init_process_group"):
        Learner(float64_model, torch.optim.SGD(float64_model.parameters(), lr=0.0), data_parallel=True)


@pytest.mark.slow
def test_training_with_two_data_parallel_learners_matches_one_learner(tmp_path):
    """``torchrun --nproc-per-node 2 -m scale train``: rank 0 samples, both ranks step on their half."""
    sets = ["loop.mode=sync", "warmup.steps=10", "train.updates=2", "train.batch_size=16", "data.num_test=16",
            "eval.every=2", "log.progress=false", "log.checkpoint_every=0",
            "data.max_operand=9", "data.num_train=64"]  # one-digit products: update 1 has rewards, so a gradient
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    runs = {}
    for name, launcher in (("one", []), ("two", ["-m", "torch.distributed.run", "--nnodes", "1",
                                                  "--nproc-per-node", "2", "--master-port", free_port()])):
        curves = ["log.curves=false"] if name == "one" else []  # curves.png: drawn by the torchrun run (rank 0)
        command = [sys.executable, *launcher, "-m", "scale", "train", "--config", "tiny_cpu",
                   "--out", str(tmp_path / name), *[x for s in sets + curves for x in ("--set", s)]]
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        runs[name] = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
    assert [r["update"] for r in runs["two"]] == [0, 1, 2]  # rank 0 alone writes, each row once
    assert (tmp_path / "two" / "curves.png").stat().st_size > 0
    one, two = runs["one"][1], runs["two"][1]  # update 1: same weights, same batch
    assert one["learner/ranks"] == 1 and two["learner/ranks"] == 2
    assert one["grad/norm"] > 0
    assert two["rollout/reward"] == one["rollout/reward"]
    assert two["loss/policy"] == pytest.approx(one["loss/policy"], rel=1e-5, abs=1e-7)
    assert two["grad/norm"] == pytest.approx(one["grad/norm"], rel=1e-5)
