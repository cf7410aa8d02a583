"""One rank of the FSDP equivalence test (run by tests/scale/test_fsdp.py, not by pytest).

Usage: ``python fsdp_worker.py RANK WORLD_SIZE RENDEZVOUS_FILE OUT_JSON``. Every rank builds the same float64
tiny model and the same 8 rollouts and takes one AdamW step single-process on the full batch (the reference),
then one FSDP2 step on its shard (with and without activation checkpointing), for FlashREINFORCE and GRPO ×
1 or 2 microbatches per shard. It writes, per case, the largest absolute difference of the gradients (the
FSDP gradient shards gathered) and of the parameters after the step (gathered as the engines get them).
"""

import copy
import functools
import json
import os
import sys

import torch
import torch.distributed as dist

from scale.learner import Learner
from tests.scale.data_parallel_worker import start  # test_fsdp puts the repository root on PYTHONPATH

ADAMW = functools.partial(torch.optim.AdamW, lr=1e-2, weight_decay=0.1)


def _step(model, rollouts, algo, microbatch_size, **options):
    """Gradient (flat, full) and parameters after one AdamW step (name -> full tensor) of a fresh copy."""
    model = copy.deepcopy(model)
    learner = Learner(model, ADAMW, loss_name=algo, max_grad_norm=None, microbatch_size=microbatch_size, **options)
    learner.step(rollouts)
    grads = [p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad for p in model.parameters()]
    weights = learner.weights()
    state = weights.state_dict() if isinstance(weights, torch.nn.Module) else weights
    return torch.cat([g.reshape(-1) for g in grads]), state


def _max_diff(state, reference):
    assert sorted(state) == sorted(reference), (sorted(state), sorted(reference))
    return max(float((state[k] - reference[k]).abs().max()) for k in reference)


def main() -> None:
    rank, out, model, rollouts, local = start(sys.argv)  # the DDP worker's group, model and rollouts
    result = {}
    for algo in ("flash_reinforce", "grpo"):
        grad, state = _step(model, rollouts, algo, None)
        checkpointed, _ = _step(model, rollouts, algo, None, activation_checkpointing=True)
        result[f"{algo}/checkpointing"] = {"grad": float((checkpointed - grad).abs().max()),
                                           "reference_norm": float(grad.norm())}
        for microbatches in (1, 2):
            for checkpointing in (False, True):
                if checkpointing and microbatches == 2:
                    continue
                sharded_grad, sharded_state = _step(model, local, algo, len(local) // microbatches,
                                                    data_parallel=True, parallel="fsdp",
                                                    activation_checkpointing=checkpointing)
                name = f"{algo}/fsdp/microbatches={microbatches}" + ("/checkpointing" if checkpointing else "")
                result[name] = {"grad": float((sharded_grad - grad).abs().max()),
                                "reference_norm": float(grad.norm()),
                                "params": _max_diff(sharded_state, state) if rank == 0 else 0.0,
                                "gathered": len(sharded_state)}
    with open(out, "w") as handle:
        json.dump(result, handle)
    dist.destroy_process_group()
    os._exit(0)  # torch 2.13 + gloo sometimes aborts in interpreter finalization (see data_parallel_worker.py)


if __name__ == "__main__":
    main()
