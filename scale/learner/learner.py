"""The learner: pack rollouts, recompute log-probs in chunks, apply a flashsim loss, take one step.

One call of :meth:`Learner.step` is one optimizer step on one fresh batch of B trajectories (for
FlashREINFORCE the batch is then discarded). The batch may be split into microbatches for memory;
advantages are computed over the **whole** batch first and every microbatch loss gets the global
denominators (``num_sequences`` = B, ``num_tokens`` = the batch's policy tokens, ``max_tokens`` = the
generation budget), so the accumulated gradient equals the full-batch gradient (flashsim invariant 10).
With ``data_parallel=True`` each rank of a ``torch.distributed`` process group steps on its shard
and the same holds across ranks (see :mod:`scale.learner.distributed`), with the model replicated
(``parallel="ddp"``) or sharded (``parallel="fsdp"``, see :mod:`scale.learner.sharding`).

The loss is ``flashsim.losses.get_loss(name)`` unchanged; ``behavior_log_probs`` are the engine's,
stored at sampling. Left out on purpose: several optimizer steps per batch (PPO epochs; they would
break FlashREINFORCE's one-step-per-fresh-batch rule), a reference-policy KL, a value function.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from flashsim.losses import get_loss
from scale.learner.distributed import all_reduce_sum, data_parallel_scale, gather_batch
from scale.learner.logprobs import chunked_token_log_probs
from scale.learner.model import hidden_states
from scale.learner.sharding import PARALLEL, checkpoint_blocks, full_state_dict, shard_model
from scale.rollouts.trajectory import Rollout, Trajectory


@dataclass
class PackedBatch:
    """Rollouts as padded tensors: prompts left-padded to width P, completions right-padded to T.

    Shape:
        input_ids, attention_mask: ``[B, P + T]``; completion_ids, behavior_log_probs: ``[B, T]``;
        action_mask: ``[B, T]`` bool; rewards: ``[B]``; group_ids: ``[B]`` long.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    completion_ids: torch.Tensor
    action_mask: torch.Tensor
    behavior_log_probs: torch.Tensor
    rewards: torch.Tensor
    group_ids: torch.Tensor
    prompt_width: int


def pack(
    trajectories: Sequence[Trajectory], pad_id: int, *, rewards: Sequence[float] | None = None,
    group_ids: Sequence[int] | None = None, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
) -> PackedBatch:
    """Pad trajectories into a :class:`PackedBatch` (the engine's left-padded prompt layout)."""
    if not trajectories:
        raise ValueError("pack needs at least one trajectory")
    B = len(trajectories)
    P = max(len(t.prompt_ids) for t in trajectories)
    T = max(max(len(t.token_ids) for t in trajectories), 1)
    input_ids = torch.full((B, P + T), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((B, P + T), dtype=torch.long)
    action_mask = torch.zeros((B, T), dtype=torch.bool)
    behavior = torch.zeros((B, T), dtype=dtype)
    for i, t in enumerate(trajectories):
        n = len(t.token_ids)
        input_ids[i, P - len(t.prompt_ids) : P] = torch.tensor(t.prompt_ids, dtype=torch.long)
        input_ids[i, P : P + n] = torch.tensor(t.token_ids, dtype=torch.long)
        attention_mask[i, P - len(t.prompt_ids) : P + n] = 1
        action_mask[i, :n] = torch.tensor(t.action_mask, dtype=torch.bool)
        behavior[i, :n] = torch.tensor(t.log_probs, dtype=dtype)
    rewards_t = torch.tensor(list(rewards) if rewards is not None else [0.0] * B, dtype=dtype)
    groups_t = torch.tensor(list(group_ids) if group_ids is not None else range(B), dtype=torch.long)
    return PackedBatch(
        input_ids.to(device), attention_mask.to(device), input_ids[:, P:].to(device), action_mask.to(device),
        behavior.to(device), rewards_t.to(device), groups_t.to(device), P,
    )


def policy_log_probs(
    model: Any, batch: PackedBatch, *, temperature: float = 1.0, chunk_size: int = 512
) -> tuple[torch.Tensor, torch.Tensor]:
    """log π(a_it) of the completion tokens (with graph) and the policy's entropies (detached).

    Only policy tokens are projected onto the vocabulary; other slots hold 0.

    Shape:
        returns ``[B, T]``, ``[B, T]``.
    """
    P, T = batch.prompt_width, batch.completion_ids.shape[1]
    hidden = hidden_states(model, batch.input_ids, batch.attention_mask)[:, P - 1 : P + T - 1]
    head = model.get_output_embeddings()
    mask = batch.action_mask
    rows_lp, rows_ent = chunked_token_log_probs(
        hidden[mask], head.weight, batch.completion_ids[mask], bias=head.bias,
        temperature=temperature, chunk_size=chunk_size,
    )
    log_probs = rows_lp.new_zeros(mask.shape).masked_scatter(mask, rows_lp)
    entropies = rows_ent.new_zeros(mask.shape).masked_scatter(mask, rows_ent)
    return log_probs, entropies


def _merge_stats(parts: list[dict[str, torch.Tensor]], tokens: list[int]) -> dict[str, float]:
    """Batch-level diagnostics from microbatch stats (per-trajectory ones concatenated)."""
    # A loss without a gate (GRPO) admits no trajectory out: every one is used. One without PPO's clip
    # (FlashREINFORCE) or a TIS cap (GRPO) clips or caps no token.
    parts = [{"admitted": torch.ones_like(p["advantages"], dtype=torch.bool), "clip_fraction": torch.zeros(()),
              "tis_capped_fraction": torch.zeros(()), **p} for p in parts]
    cat = {k: torch.cat([p[k].reshape(-1).double() for p in parts]) for k in ("admitted", "sequence_kl")}
    weights = torch.tensor(tokens, dtype=torch.float64) / sum(tokens)
    weighted = {k: float(sum(w * p[k].double() for w, p in zip(weights, parts))) for k in
                ("token_acceptance_rate", "clip_fraction", "tis_capped_fraction", "ratio_mean")}
    return {
        "trust/acceptance_rate": float(cat["admitted"].mean()),
        "trust/sequence_kl_mean": float(cat["sequence_kl"].mean()),
        "trust/sequence_kl_max": float(cat["sequence_kl"].max()),
        "trust/token_acceptance_rate": weighted["token_acceptance_rate"],
        "trust/clip_fraction": weighted["clip_fraction"],
        "trust/tis_capped_fraction": weighted["tis_capped_fraction"],
        "trust/ratio_mean": weighted["ratio_mean"],
        "trust/ratio_min": float(min(p["ratio_min"] for p in parts)),
        "trust/ratio_max": float(max(p["ratio_max"] for p in parts)),
    }


class PolicyScorer(torch.nn.Module):
    """:func:`policy_log_probs` as a module, so that DDP or FSDP can wrap the forward pass (FSDP's root:
    the LM head's weight is used directly, inside this forward, not through the model's own)."""

    def __init__(self, model: Any, *, temperature: float, chunk_size: int) -> None:
        super().__init__()
        self.model, self.temperature, self.chunk_size = model, temperature, chunk_size

    def forward(self, batch: PackedBatch, temperature: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """:func:`policy_log_probs` at ``temperature`` (``None``: the scorer's)."""
        temperature = self.temperature if temperature is None else temperature
        return policy_log_probs(self.model, batch, temperature=temperature, chunk_size=self.chunk_size)


OptimizerFactory = Callable[[Iterable[torch.nn.Parameter]], torch.optim.Optimizer]


class Learner:
    """Holds the trainable model and its optimizer; one :meth:`step` per fresh batch.

    Args:
        model: the policy (a ``transformers`` causal LM).
        optimizer: over ``model``'s parameters, or a function of the parameters that makes it (needed
            with ``parallel="fsdp"``, which replaces the parameters by their shards first).
        loss_name: a name of ``flashsim.losses.LOSSES`` (``flash_reinforce``, ``grpo``, ...).
        loss_options: keyword options of the loss (``delta``, ``clip_eps``, ...).
        temperature: the sampling temperature; the policy is ``softmax(logits / temperature)``.
        microbatch_size: trajectories per forward/backward (``None``: the whole batch).
        chunk_size: token rows per LM-head chunk.
        max_grad_norm: clip the gradient norm (``None``: no clipping).
        max_tokens: the generation budget, the constant of ``seq_mean_token_sum_norm``.
        data_parallel: this rank steps on its shard of the batch inside an initialised
            ``torch.distributed`` process group; gradients are summed over ranks.
        parallel: ``ddp`` (a full replica per rank) or ``fsdp`` (parameters, gradients and optimizer
            state sharded with FSDP2 when ``data_parallel``).
        activation_checkpointing: recompute each decoder block in the backward pass.
        mixed_precision: FSDP only: bfloat16 parameters and compute, float32 gradient reduction.
        cpu_offload: FSDP only: keep the parameter and optimizer shards in CPU memory.
        lr_schedule: the learning rate's multiplier after ``k`` updates, ``k ↦ factor`` (torch's ``LambdaLR``),
            stepped by :meth:`step` after each optimizer step; ``None``: the optimizer's rate throughout. The
            learner owns the schedule so that one call, :meth:`step`, is one whole update.
    """

    def __init__(
        self, model: Any, optimizer: torch.optim.Optimizer | OptimizerFactory, *, loss_name: str = "flash_reinforce",
        loss_options: dict[str, Any] | None = None, temperature: float = 1.0, microbatch_size: int | None = None,
        chunk_size: int = 512, max_grad_norm: float | None = 1.0, max_tokens: int | None = None,
        data_parallel: bool = False, parallel: str = "ddp", activation_checkpointing: bool = False,
        mixed_precision: bool = False, cpu_offload: bool = False, lr_schedule: Callable[[int], float] | None = None,
    ) -> None:
        if parallel not in PARALLEL:
            raise ValueError(f"parallel must be one of {list(PARALLEL)}; got {parallel!r}")
        if parallel != "fsdp" and (mixed_precision or cpu_offload):
            raise ValueError("mixed_precision and cpu_offload are FSDP policies; they need parallel='fsdp'")
        self.sharded = parallel == "fsdp" and data_parallel
        if self.sharded and isinstance(optimizer, torch.optim.Optimizer):
            raise ValueError("parallel='fsdp' replaces the parameters by their shards: pass optimizer as a function "
                             "of the parameters, e.g. functools.partial(torch.optim.AdamW, lr=1e-5)")
        self.loss_fn = get_loss(loss_name)
        self.model, self.parallel = model, parallel
        self.loss_options = dict(loss_options or {})
        self._filters_tokens = self.loss_fn.needs_entropies(self.loss_options)
        self.temperature, self.chunk_size = temperature, chunk_size
        self.microbatch_size, self.max_grad_norm, self.max_tokens = microbatch_size, max_grad_norm, max_tokens
        self.version = 0
        self.data_parallel = data_parallel
        if data_parallel and not torch.distributed.is_initialized():
            raise ValueError("data_parallel=True needs torch.distributed.init_process_group(...) first")
        if activation_checkpointing:
            checkpoint_blocks(model)
        self.scorer: torch.nn.Module = PolicyScorer(model, temperature=temperature, chunk_size=chunk_size)
        if self.sharded:
            shard_model(self.scorer, model, mixed_precision=mixed_precision, cpu_offload=cpu_offload)
        elif data_parallel:
            self.scorer = torch.nn.parallel.DistributedDataParallel(self.scorer)
        self.optimizer = (optimizer if isinstance(optimizer, torch.optim.Optimizer)
                          else optimizer(model.parameters()))
        self.scheduler = (torch.optim.lr_scheduler.LambdaLR(self.optimizer, lr_schedule)
                          if lr_schedule is not None else None)

    @property
    def local_scorer(self) -> torch.nn.Module:
        """The scorer for passes outside the RL step (the warm-up): sharded under FSDP, unwrapped from DDP."""
        return self.scorer.module if isinstance(self.scorer, torch.nn.parallel.DistributedDataParallel) \
            else self.scorer

    def weights(self) -> Any:
        """What the engines are given: the model, or under FSDP its gathered full state dict (a collective:
        every rank calls it; rank 0 receives the tensors, the others ``{}``)."""
        return full_state_dict(self.model) if self.sharded else self.model

    def step(self, rollouts: Sequence[Rollout]) -> dict[str, float]:
        """One optimizer step on ``rollouts``; returns namespaced metrics. Increments :attr:`version`."""
        device = next(self.model.parameters()).device
        dtype = torch.promote_types(next(self.model.parameters()).dtype, torch.float32)
        rewards = torch.tensor([r.reward for r in rollouts], dtype=dtype, device=device)
        group_ids = torch.tensor([r.group_id for r in rollouts], dtype=torch.long, device=device)
        num_tokens = sum(r.trajectory.num_actions for r in rollouts)
        # Advantages and denominators over the global batch (all ranks), then this rank's shard of them.
        batch_info = gather_batch(rewards, group_ids, num_tokens, data_parallel=self.data_parallel)
        advantages = self.loss_fn.compute_advantages(batch_info.rewards, batch_info.group_ids, self.loss_options)
        advantages = advantages[batch_info.offset : batch_info.offset + len(rollouts)]
        scale = data_parallel_scale(self.data_parallel)
        size = self.microbatch_size or len(rollouts)
        starts = range(0, len(rollouts), size)
        self.model.eval()  # dropout off: the learner must score tokens exactly as the engine sampled them
        self.optimizer.zero_grad(set_to_none=True)
        parts, tokens, entropy_sum, loss_sum = [], [], 0.0, 0.0
        for start in starts:
            chunk = rollouts[start : start + size]
            batch = pack([r.trajectory for r in chunk], self._pad_id(), rewards=[r.reward for r in chunk],
                         group_ids=[r.group_id for r in chunk], device=device, dtype=dtype)
            last = start == starts[-1]
            accumulate = self.data_parallel and not self.sharded and not last
            with self.scorer.no_sync() if accumulate else contextlib.nullcontext():
                log_probs, entropies = self.scorer(batch)
                # The negative-token entropy filter ranks a failed trajectory's tokens by entropy: the
                # learner's own (detached), which equal the behaviour policy's when the data is fresh.
                filtered = {"entropies": entropies, "failures": batch.rewards <= 0} if self._filters_tokens else {}
                loss, stats = self.loss_fn(
                    log_probs, batch.behavior_log_probs, batch.rewards, batch.action_mask, batch.group_ids,
                    advantages=advantages[start : start + size], num_sequences=batch_info.num_sequences,
                    num_tokens=batch_info.num_tokens, max_tokens=self.max_tokens or batch.action_mask.shape[1],
                    **filtered, **self.loss_options,
                )
                (loss * scale).backward()  # × W: DDP's (or FSDP's) average over ranks becomes the sum
            parts.append(stats)
            tokens.append(int(batch.action_mask.sum()))
            entropy_sum += float(entropies[batch.action_mask].sum())
            loss_sum += float(loss.detach())
        loss_sum = all_reduce_sum(loss_sum, data_parallel=self.data_parallel, device=device)
        entropy_sum = all_reduce_sum(entropy_sum, data_parallel=self.data_parallel, device=device)
        num_tokens = batch_info.num_tokens
        grad_norm = self._clip_gradients()
        self.optimizer.step()
        if self.scheduler is not None:
            self.scheduler.step()
        self.version += 1
        return {"loss/policy": loss_sum, "grad/norm": grad_norm, "policy/entropy": entropy_sum / num_tokens,
                **_merge_stats(parts, tokens)}

    def _pad_id(self) -> int:
        pad = getattr(self.model.config, "pad_token_id", None)
        return int(pad) if pad is not None else 0

    def _clip_gradients(self) -> float:
        parameters = [p for p in self.model.parameters() if p.grad is not None]
        if self.sharded:  # DTensor shards: the norms are reduced over ranks
            norm = (torch.nn.utils.get_total_norm([p.grad for p in parameters]) if self.max_grad_norm is None
                    else torch.nn.utils.clip_grad_norm_(parameters, self.max_grad_norm))
            return float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)
        if self.max_grad_norm is None:
            norms = [p.grad.detach().norm() for p in parameters]
            return float(torch.stack(norms).norm()) if norms else 0.0
        return float(torch.nn.utils.clip_grad_norm_(parameters, self.max_grad_norm))
