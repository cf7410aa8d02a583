"""DESIGN.md invariant 10: shards with global advantages and global denominators add up to the batch.

A batch of B = 12 trajectories (unequal lengths, padding junk, 5 of 12 rejected by the default gate,
16% of GRPO's tokens clipped) is split the way a data-parallel learner with gradient accumulation
splits it: rows are dealt to ``ranks`` replicas round-robin (as ``DistributedSampler`` does), and each
rank cuts its rows into ``microbatches`` consecutive pieces. Every piece gets the advantages computed
over the whole batch and the global counts (B, Σ T_i, T). Then the summed shard losses equal the
full-batch loss, and the shard gradients, accumulated per rank and put side by side, equal the
full-batch gradient — for every loss and every aggregation mode.

The hypothesis version over arbitrary partitions is ``tests/properties/test_shard_properties.py``.
"""

import pytest
import torch
from torch.testing import assert_close

from flashsim.losses import AGGREGATIONS, flash_reinforce_loss
from flashsim.testing import (
    LOSS_FUNCTIONS,
    evaluate_loss,
    evaluate_sharded_loss,
    global_advantages,
    random_loss_batch,
)

BATCH = random_loss_batch(torch.Generator().manual_seed(0), batch_size=12, width=7, drift=0.3, group_size=3)
SPLITS = [(ranks, microbatches) for ranks in (1, 2, 3) for microbatches in (1, 2, 3)]
TIGHT = {"rtol": 1e-12, "atol": 1e-15}


def data_parallel_shards(batch_size: int, ranks: int, microbatches: int) -> list[torch.Tensor]:
    """Row indices of every (rank, microbatch) piece: round-robin over ranks, consecutive within a rank."""
    return [
        piece
        for rank in range(ranks)
        for piece in torch.tensor_split(torch.arange(rank, batch_size, ranks), microbatches)
    ]


def test_the_shared_batch_exercises_rejection_clipping_unequal_lengths_and_padding_junk():
    _, _, flash = evaluate_loss("flash_reinforce_loss", BATCH)
    _, _, grpo = evaluate_loss("grpo_loss", BATCH)
    assert 0 < int(flash["admitted"].sum()) < BATCH.batch_size
    assert float(grpo["clip_fraction"]) > 0
    assert len(set(BATCH.lengths.tolist())) > 3
    assert not bool(torch.isfinite(BATCH.log_probs[~BATCH.action_mask]).all())


@pytest.mark.parametrize(("ranks", "microbatches"), SPLITS, ids=[f"{r}ranks-x{m}micro" for r, m in SPLITS])
@pytest.mark.parametrize("aggregation", AGGREGATIONS)
@pytest.mark.parametrize("name", LOSS_FUNCTIONS)
def test_shard_losses_and_gradients_add_up_to_the_full_batch(name, aggregation, ranks, microbatches):
    shards = data_parallel_shards(BATCH.batch_size, ranks, microbatches)
    assert sorted(torch.cat(shards).tolist()) == list(range(BATCH.batch_size))
    loss, gradient, stats = evaluate_loss(name, BATCH, aggregation=aggregation)
    total, shard_gradient, shard_stats = evaluate_sharded_loss(name, BATCH, shards, aggregation=aggregation)
    assert_close(total, loss, **TIGHT)
    assert_close(shard_gradient, gradient, **TIGHT)
    for key, values in shard_stats.items():
        assert_close(values, stats[key], rtol=0, atol=0, msg=key)


@pytest.mark.parametrize("ranks", [1, 2, 3])
def test_gradient_accumulation_on_rank_replicas_adds_up_to_the_full_batch_gradient(ranks):
    """The same with real accumulation: each rank owns a leaf replica of its rows and calls
    ``backward()`` once per microbatch; the per-rank ``.grad`` put side by side is the full gradient."""
    name, aggregation = "flash_reinforce_loss", "token_mean"
    _, gradient, _ = evaluate_loss(name, BATCH, aggregation=aggregation)
    advantages = global_advantages(name, BATCH)
    counts = {"num_sequences": BATCH.batch_size, "num_tokens": BATCH.num_tokens, "max_tokens": BATCH.width}
    assembled = torch.zeros_like(gradient)
    for rank in range(ranks):
        rows = torch.arange(rank, BATCH.batch_size, ranks)
        replica = BATCH.log_probs[rows].clone().requires_grad_(True)
        for piece in torch.tensor_split(torch.arange(len(rows)), 2):
            shard = BATCH.select(rows[piece])
            loss, _ = _flash(replica[piece], shard, advantages[rows[piece]], aggregation, counts)
            loss.backward()
        assembled[rows] = replica.grad
    assert_close(assembled, gradient, **TIGHT)


def _flash(log_probs, shard, advantages, aggregation, counts):
    return flash_reinforce_loss(
        log_probs, shard.behavior_log_probs, None, shard.action_mask,
        advantages=advantages, aggregation=aggregation, **counts,
    )


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
@pytest.mark.parametrize("name", ["flash_reinforce_loss", "grpo_loss"])
def test_without_global_advantages_and_denominators_the_shards_do_not_add_up(name, aggregation):
    """The control: local advantages and local counts give another loss, so the test above has teeth."""
    loss, _, _ = evaluate_loss(name, BATCH, aggregation=aggregation)
    local = sum(
        evaluate_loss(name, BATCH.select(rows), aggregation=aggregation)[0]
        for rows in data_parallel_shards(BATCH.batch_size, 2, 2)
    )
    assert not torch.allclose(local, loss, rtol=1e-6, atol=1e-9)
