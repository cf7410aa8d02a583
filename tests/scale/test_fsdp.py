"""Sharded learners (FSDP2 over gloo on CPU) and activation checkpointing: the same step as one full-batch learner."""

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

WORKER = Path(__file__).with_name("fsdp_worker.py")
ROOT = Path(__file__).resolve().parents[2]
CASES = [f"{algo}/{case}" for algo in ("flash_reinforce", "grpo") for case in
         ("checkpointing", "fsdp/microbatches=1", "fsdp/microbatches=1/checkpointing", "fsdp/microbatches=2")]


def test_fsdp_gradients_and_stepped_parameters_equal_the_single_process_full_batch_ones(tmp_path):
    """dp 1 and 2 ranks (launched together) × FlashREINFORCE, GRPO × 1, 2 microbatches, float64, one AdamW step."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    jobs = {}
    for world in (1, 2):
        rendezvous = str(tmp_path / f"rendezvous{world}")
        for rank in range(world):
            output = tmp_path / f"world{world}_rank{rank}.json"
            jobs[output] = subprocess.Popen([sys.executable, str(WORKER), str(rank), str(world), rendezvous,
                                             str(output)], env=env)
    assert [job.wait(timeout=300) for job in jobs.values()] == [0] * len(jobs)
    for output in jobs:
        cases = json.loads(output.read_text())
        assert sorted(cases) == sorted(CASES)
        for name, case in cases.items():
            assert case["reference_norm"] > 1e-3, name
            assert case["grad"] <= 1e-12, (output.name, name, case)
            if "fsdp" in name:
                assert case["params"] <= 1e-12, (output.name, name, case)
                # rank 0 receives the full weights for the engines; the other ranks receive nothing
                assert case["gathered"] == (21 if output.name.endswith("rank0.json") else 0), (output.name, name)


def test_activation_checkpointing_stores_fewer_tensors_and_keeps_the_parameter_names(float64_model):
    from scale.learner.learner import PolicyScorer, pack
    from scale.learner.sharding import checkpoint_blocks
    from scale.rollouts.trajectory import Trajectory

    batch = pack([Trajectory([1, 2, 3], [4, 5, 6, 7], [True] * 4, [0.0] * 4, "eos", version=0)] * 2, pad_id=0,
                 dtype=torch.float64)

    def saved_tensors(model):
        count = [0]

        def pack_hook(tensor):
            count[0] += 1
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(pack_hook, lambda tensor: tensor):
            log_probs, _ = PolicyScorer(model, temperature=1.0, chunk_size=512)(batch)
        return count[0], log_probs

    plain = copy.deepcopy(float64_model)
    checkpointed = copy.deepcopy(float64_model)
    checkpoint_blocks(checkpointed)
    (plain_count, plain_lp), (checkpointed_count, checkpointed_lp) = saved_tensors(plain), saved_tensors(checkpointed)
    assert checkpointed_count < plain_count / 2
    torch.testing.assert_close(checkpointed_lp, plain_lp, rtol=0, atol=0)
    assert sorted(checkpointed.state_dict()) == sorted(plain.state_dict())


@pytest.mark.parametrize("options, message", [
    ({"parallel": "zero"}, "parallel must be one of"),
    ({"mixed_precision": True}, "need parallel='fsdp'"),
    ({"cpu_offload": True}, "need parallel='fsdp'"),
    ({"parallel": "fsdp", "data_parallel": True}, "pass optimizer as a function of the parameters"),
], ids=["unknown-layout", "mixed-precision-without-fsdp", "offload-without-fsdp", "fsdp-with-a-built-optimizer"])
def test_bad_learner_layouts_are_refused(float64_model, options, message):
    from scale.learner import Learner

    with pytest.raises(ValueError, match=message):
        Learner(float64_model, torch.optim.SGD(float64_model.parameters(), lr=0.0), **options)


def test_a_sharded_checkpoint_round_trips_the_model_and_the_optimizer(float64_model, tmp_path):
    """One process (no group): the format a 2-rank run writes, read back by one rank (DCP reshards)."""
    from scale.learner.sharding import load_sharded, save_sharded

    model = copy.deepcopy(float64_model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sum(p.sum() for p in model.parameters()).backward()
    optimizer.step()
    save_sharded(str(tmp_path / "sharded"), model, optimizer)
    restored = copy.deepcopy(float64_model)
    restored_optimizer = torch.optim.AdamW(restored.parameters(), lr=1e-2)
    load_sharded(str(tmp_path / "sharded"), restored, restored_optimizer)
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(restored.state_dict()[name], tensor, rtol=0, atol=0)
    saved, loaded = optimizer.state_dict()["state"], restored_optimizer.state_dict()["state"]
    assert sorted(saved) == sorted(loaded)
    for index in saved:
        for key in ("exp_avg", "exp_avg_sq", "step"):
            torch.testing.assert_close(loaded[index][key], saved[index][key], rtol=0, atol=0)


def test_sharded_checkpoint_metadata_that_would_run_code_is_refused(float64_model, tmp_path):
    import pickle

    from scale.learner.sharding import load_sharded, save_sharded

    model = copy.deepcopy(float64_model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    save_sharded(str(tmp_path / "sharded"), model, optimizer)

    class RunsCode:
        def __reduce__(self):
            return (os.system, ("touch " + str(tmp_path / "ran"),))

    (tmp_path / "sharded" / ".metadata").write_bytes(pickle.dumps(RunsCode()))
    with pytest.raises(pickle.UnpicklingError, match="not DCP metadata"):
        load_sharded(str(tmp_path / "sharded"), model, optimizer)
    assert not (tmp_path / "ran").exists()


@pytest.mark.parametrize("setting, message", [
    ("learner.parallel=zero", "learner.parallel must be one of 'ddp', 'fsdp'; got 'zero'"),
    ("learner.mixed_precision=true", "learner.mixed_precision is an FSDP policy"),
    ("learner.cpu_offload=true", "learner.cpu_offload is an FSDP policy"),
    ("learner.parallel=fsdp learner.cpu_offload=true", "learner.cpu_offload .* needs model.device: cuda"),
], ids=["unknown-layout", "mixed-precision-without-fsdp", "offload-without-fsdp", "offload-on-cpu"])
def test_bad_learner_settings_are_refused_naming_the_key(setting, message):
    from scale.run.config import load_config

    with pytest.raises(ValueError, match=message):
        load_config(None, setting.split())


def test_the_learner_defaults_are_the_ddp_replica_without_checkpointing():
    from scale.run.config import load_config

    learner = load_config(None).learner
    assert (learner.parallel, learner.activation_checkpointing, learner.mixed_precision, learner.cpu_offload) == \
           ("ddp", False, False, False)
