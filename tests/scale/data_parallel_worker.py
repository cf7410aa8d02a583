"""One rank of the data-parallel gradient test (run by tests/scale/test_data_parallel.py, not by pytest).

Usage: ``python data_parallel_worker.py RANK WORLD_SIZE RENDEZVOUS_FILE OUT_JSON``. Every rank builds the same
float64 tiny model and the same 8 rollouts, computes the single-process full-batch gradient, then the
data-parallel gradient on its shard, for FlashREINFORCE and GRPO × 1 or 2 microbatches per shard, and
writes the largest absolute difference of each case to ``OUT_JSON``.
"""

import copy
import json
import os
import sys

import torch
import torch.distributed as dist

from scale.learner import Learner
from scale.learner.distributed import shard
from scale.learner.model import build_tiny_model
from scale.rollouts import Rollout, SamplingParams
from scale.rollouts.engines import TransformersEngine
from scale.rollouts.tokenizer import CharTokenizer

REWARDS = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0]
GROUP_IDS = [0, 1, 0, 1, 0, 1, 0, 1]
"""Groups interleaved so that each group straddles both shards: per-shard advantages would be wrong."""


def _rollouts(model, tokenizer):
    engine = TransformersEngine(model, tokenizer, seed=0)
    prompts = [tokenizer.encode_prompt(f"{g}*{g + 3}=") for g in GROUP_IDS]
    trajectories = engine.generate(prompts, SamplingParams(max_new_tokens=6))
    return [Rollout(t, None, r, g, "") for t, r, g in zip(trajectories, REWARDS, GROUP_IDS)]


def _gradient(model, rollouts, algo, microbatch_size, data_parallel):
    model = copy.deepcopy(model)
    learner = Learner(model, torch.optim.SGD(model.parameters(), lr=0.0), loss_name=algo, max_grad_norm=None,
                      microbatch_size=microbatch_size, data_parallel=data_parallel)
    learner.step(rollouts)
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def start(argv: list[str]) -> tuple[int, str, torch.nn.Module, list, list]:
    """Join the gloo group of ``RANK WORLD_SIZE RENDEZVOUS_FILE OUT_JSON``; build the float64 tiny model and
    the 8 rollouts every rank shares. Returns ``(rank, out, model, rollouts, this rank's shard of them)``
    (also used by ``fsdp_worker.py``)."""
    rank, world, rendezvous, out = int(argv[1]), int(argv[2]), argv[3], argv[4]
    torch.set_num_threads(1)
    # A file store, not TCP: with TCP, rank 0 hosts the store, and a rank still tearing down after rank 0
    # exited was aborted ("terminate called without an active exception", exit -6), even after a barrier.
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=world)
    tokenizer = CharTokenizer()
    model = build_tiny_model(tokenizer, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64, seed=0)
    model = model.double()
    rollouts = _rollouts(model, tokenizer)
    return rank, out, model, rollouts, shard(rollouts, rank, world)


def main() -> None:
    _, out, model, rollouts, local = start(sys.argv)
    result = {}
    for algo in ("flash_reinforce", "grpo"):
        reference = _gradient(model, rollouts, algo, None, data_parallel=False)
        for microbatches in (1, 2):
            size = len(local) // microbatches
            gradient = _gradient(model, local, algo, size, data_parallel=True)
            result[f"{algo}/microbatches={microbatches}"] = {
                "max_abs_diff": float((gradient - reference).abs().max()),
                "reference_norm": float(reference.norm()),
            }
    with open(out, "w") as handle:
        json.dump(result, handle)
    dist.destroy_process_group()
    # Skip interpreter finalization: in ~11 % of runs (torch 2.13, gloo) a rank aborted *after* its result
    # was written and the group destroyed ("terminate called without an active exception", exit -6),
    # with a TCP or a file store, with or without a barrier. That is torch's exit path, not the gradients
    # under test (pytorch/pytorch#190489, #179291).
    os._exit(0)


if __name__ == "__main__":
    main()
