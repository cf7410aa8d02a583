"""DESIGN.md invariant 10 for any batch and any partition of its rows into 1–4 shards.

The parametrised version with data-parallel × microbatch splits is ``tests/test_loss_shards.py``.
"""

import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.testing import assert_close

from flashsim.testing import aggregations, evaluate_loss, evaluate_sharded_loss, loss_batches, loss_names, shard_sizes


@st.composite
def sharded_batches(draw):
    """A batch and a partition of its rows: a random order cut into 1–4 consecutive pieces."""
    batch = draw(loss_batches(max_drift=1.0, rewards=st.floats(-10, 10)))
    order = torch.tensor(draw(st.permutations(range(batch.batch_size))))
    sizes = draw(shard_sizes(batch.batch_size, max_shards=4))
    return batch, list(torch.split(order, sizes))


@given(sharded_batches(), loss_names(), aggregations())
def test_any_partition_with_global_advantages_and_denominators_adds_up_to_the_full_batch(sharded, name, aggregation):
    batch, shards = sharded
    loss, gradient, stats = evaluate_loss(name, batch, aggregation=aggregation)
    total, shard_gradient, shard_stats = evaluate_sharded_loss(name, batch, shards, aggregation=aggregation)
    # The sums run in another order: a few ulps of the largest term (|A| ≤ 20, ρ ≤ e, weights ≤ 1).
    assert_close(total, loss, rtol=1e-12, atol=1e-13)
    assert_close(shard_gradient, gradient, rtol=1e-12, atol=1e-15)
    for key, values in shard_stats.items():
        assert_close(values, stats[key], rtol=0, atol=0, msg=key)
