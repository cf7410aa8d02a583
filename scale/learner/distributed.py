"""Data-parallel learners: each rank scores its shard of the batch, gradients are summed by DDP.

A batch of B trajectories is split into contiguous shards, one per rank (``torch.distributed``; gloo
on CPU, NCCL on GPU). For the accumulated gradient to equal the single-process full-batch gradient
(flashsim invariant 10), three things must be global, not per shard:

1. **advantages** — computed over the whole batch before sharding (batch-centred rewards subtract the
   mean over all B, group advantages see every sibling even when a group straddles two shards):
   :func:`gather_batch` all-gathers the rewards and group ids (B scalars each);
2. **denominators** — the losses take ``num_sequences`` = global B and ``num_tokens`` = the global
   policy-token count (all-reduced here), so each shard's loss is its share of one global sum;
3. **the reduction** — ``DistributedDataParallel`` averages gradients over the W ranks, so each rank
   back-propagates W × its share (:func:`data_parallel_scale`), and the average is the global sum.

Sharding (FSDP2, ``parallel="fsdp"``) is :mod:`scale.learner.sharding`; the three rules above hold
unchanged. Left out on purpose: unequal shards (DDP and FSDP need the same number of backward passes on
every rank, so B and the microbatch count must split evenly; :func:`gather_batch` refuses otherwise).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from flashsim.validation import check_int, check_real


def world_size() -> int:
    """Ranks in the default process group (1 when torch.distributed is not initialised)."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def rank() -> int:
    """This process's rank (0 when torch.distributed is not initialised)."""
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def shard(items: list, index: int, count: int) -> list:
    """The ``index``-th of ``count`` equal contiguous shards of ``items`` (``len(items)`` divisible by ``count``)."""
    check_int("count", count, low=1)
    check_int("index", index, low=0, high=count - 1)
    if len(items) % count:
        raise ValueError(f"cannot split {len(items)} items into {count} equal shards; use a multiple of {count}")
    size = len(items) // count
    return items[index * size : (index + 1) * size]


@dataclass(frozen=True)
class GlobalBatch:
    """What every rank needs to know about the whole batch.

    Shape:
        rewards, group_ids: ``[B]`` (global B, rank order); ``offset``: where this rank's shard starts.
    """

    rewards: torch.Tensor
    group_ids: torch.Tensor
    offset: int
    num_tokens: int

    @property
    def num_sequences(self) -> int:
        return int(self.rewards.shape[0])


def gather_batch(rewards: torch.Tensor, group_ids: torch.Tensor, num_tokens: int, *, data_parallel: bool
                 ) -> GlobalBatch:
    """All-gather the shards' rewards and group ids (rank order) and all-reduce the token count.

    The identity when not ``data_parallel`` (a learner outside the group) or with one rank.
    """
    W = world_size() if data_parallel else 1
    if W == 1:
        return GlobalBatch(rewards, group_ids, 0, int(num_tokens))
    counts = torch.tensor([rewards.shape[0], int(num_tokens)], dtype=torch.long, device=rewards.device)
    gathered = [torch.empty_like(counts) for _ in range(W)]
    dist.all_gather(gathered, counts)
    sizes = [int(g[0]) for g in gathered]
    if len(set(sizes)) != 1:
        raise ValueError(
            f"data-parallel shards must hold the same number of trajectories (DDP needs as many backward passes "
            f"on every rank); got {sizes}"
        )
    all_rewards = [torch.empty_like(rewards) for _ in range(W)]
    all_groups = [torch.empty_like(group_ids) for _ in range(W)]
    dist.all_gather(all_rewards, rewards.contiguous())
    dist.all_gather(all_groups, group_ids.contiguous())
    return GlobalBatch(torch.cat(all_rewards), torch.cat(all_groups), sizes[0] * rank(),
                       sum(int(g[1]) for g in gathered))


def data_parallel_scale(data_parallel: bool) -> float:
    """W: DDP averages gradients over W ranks; scaling each shard's loss by W turns the average into the sum."""
    return float(world_size()) if data_parallel else 1.0


def all_reduce_sum(value: float, *, data_parallel: bool, device: torch.device | str = "cpu") -> float:
    """Sum of a scalar over ranks (for logging global loss and entropy sums); ``value`` when not data-parallel."""
    if not data_parallel or world_size() == 1:
        return value
    tensor = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(tensor)
    return float(tensor)


def init_from_environment(device: str, *, timeout_s: float, single_rank: bool = False) -> bool:
    """Join the process group described by ``torchrun``'s environment (``WORLD_SIZE`` > 1); True if joined.

    gloo on CPU, NCCL on CUDA, where each rank takes the GPU of its ``LOCAL_RANK`` (``device: cuda`` then
    means that GPU). Without ``WORLD_SIZE`` (or with 1) nothing happens: one learner — unless ``single_rank``
    (``learner.parallel: fsdp`` under ``torchrun --nproc-per-node 1``): then a group of one rank, so that the
    FSDP2 learner runs on one GPU as on many. A collective that waits more than ``timeout_s`` seconds for another
    rank (dead, or stuck) raises instead of hanging.
    """
    world = int(os.environ.get("WORLD_SIZE", "0"))
    if world < 1 or (world == 1 and not single_rank) or dist.is_initialized():
        return dist.is_initialized() and (world_size() > 1 or single_rank)
    check_real("timeout_s", timeout_s, low=0.0, low_inclusive=False)
    if device.startswith("cuda"):
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if device.startswith("cuda") else "gloo", timeout=timedelta(seconds=timeout_s))
    return True


def broadcast_batch(batch: Any) -> Any:
    """Rank 0's batch on every rank (``broadcast_object_list``: pickled in memory between the ranks of
    this job; nothing is read from disk)."""
    box = [batch if rank() == 0 else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def broadcast_parameters(model: torch.nn.Module) -> None:
    """Make every rank's parameters and buffers rank 0's (after a per-rank warm-up or a resume)."""
    with torch.no_grad():
        for tensor in list(model.parameters()) + list(model.buffers()):
            dist.broadcast(tensor.data, src=0)
