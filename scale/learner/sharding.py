"""Paper-sized learners: FSDP2 sharding, activation checkpointing, mixed precision and sharded checkpoints.

``learner.parallel: fsdp`` shards every parameter, gradient and AdamW state over the W ranks with FSDP2
(``torch.distributed.fsdp.fully_shard``): each decoder block is one FSDP unit (its parameters are
all-gathered just before its forward and backward, and freed after), then the root (the
:class:`~scale.learner.learner.PolicyScorer` that wraps the model: embeddings, final norm and LM head).
A rank then holds about 1/W of the ``16`` bytes per parameter that fp32 AdamW training needs.
The gradient is the DDP one: FSDP reduce-scatters the *average* over ranks, and the learner scales each
shard's loss by W exactly as under DDP (see :mod:`scale.learner.distributed`).

Activation checkpointing (``learner.activation_checkpointing``) keeps only each decoder block's input
and recomputes the block in the backward pass (``torch.utils.checkpoint``, non-reentrant, through
``checkpoint_wrapper``, which keeps the Hugging Face parameter names in ``state_dict``). The learner
scores with dropout off, so the recomputation is exact: gradients are unchanged.

Mixed precision (``learner.mixed_precision``) is FSDP2's ``MixedPrecisionPolicy``: parameters are
all-gathered and computed in bfloat16, gradients reduced in float32 into the float32 master shards.

The engines get the full weights from :func:`full_state_dict` (a collective: every rank calls it,
rank 0 receives them on CPU). Checkpoints of the model and optimizer are ``torch.distributed.checkpoint``
directories, resharded on load when the number of ranks changed. Their tensors are read with
``torch.load(weights_only=True)``; DCP pickles its ``.metadata`` file, which :func:`safe_reader` unpickles
with an allow-list of DCP's own metadata classes (torch 2.13), so nothing loaded runs code.

Left out on purpose: tensor and pipeline parallelism (a 30B dense model trains on 4-8 80 GB GPUs with
FSDP alone), FSDP's own gradient-accumulation switch (``set_requires_gradient_sync``: microbatches are
reduce-scattered each, which costs bandwidth but no unsharded gradient memory).
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import torch

# torch.distributed.checkpoint is imported where it is used: it takes about a second to import, which every
# run would pay at start-up, and only FSDP runs need it.

PARALLEL = ("ddp", "fsdp")
"""Data-parallel layouts of the learner: full replicas (DDP) or sharded parameters (FSDP2)."""


def decoder_blocks(model: Any) -> list[tuple[torch.nn.Module, str, torch.nn.Module]]:
    """``(parent, name, block)`` of each decoder block: the modules whose class the model lists in
    ``_no_split_modules`` (Hugging Face's own name for the unit that FSDP and device maps keep whole)."""
    names = set(getattr(model, "_no_split_modules", None) or ())
    found = [(parent, name, child) for parent in model.modules() for name, child in parent.named_children()
             if type(child).__name__ in names]
    if not found:
        raise ValueError(f"found no decoder blocks in {type(model).__name__} (its _no_split_modules is "
                         f"{sorted(names)}); activation checkpointing and FSDP wrap those blocks")
    return found


def checkpoint_blocks(model: Any) -> None:
    """Recompute each decoder block's activations in the backward pass instead of storing them."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointImpl, checkpoint_wrapper

    for parent, name, block in decoder_blocks(model):
        setattr(parent, name, checkpoint_wrapper(block, checkpoint_impl=CheckpointImpl.NO_REENTRANT))


def shard_model(
    scorer: torch.nn.Module, model: Any, *, mixed_precision: bool = False, cpu_offload: bool = False
) -> None:
    """``fully_shard`` each decoder block of ``model``, then ``scorer`` (the root, which holds ``model``)."""
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard

    options: dict[str, Any] = {"offload_policy": CPUOffloadPolicy() if cpu_offload else OffloadPolicy()}
    if mixed_precision:
        options["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for _, _, block in decoder_blocks(model):
        fully_shard(block, **options)
    fully_shard(scorer, **options)


def full_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The whole model's weights (Hugging Face names) on CPU, on rank 0; ``{}`` on the other ranks.

    A collective under FSDP: every rank must call it.
    """
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


class _MetadataUnpickler(pickle.Unpickler):
    """Rebuilds DCP's metadata only: its own dataclasses, sizes, dtypes, layouts and paths."""

    ALLOWED = {("torch", "Size"), ("torch.serialization", "_get_layout"), ("pathlib", "PosixPath"),
               ("pathlib", "PurePosixPath"), ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
               ("collections", "OrderedDict")}

    def find_class(self, module: str, name: str) -> Any:
        if module == "torch.distributed.checkpoint.metadata" or (module, name) in self.ALLOWED:
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise pickle.UnpicklingError(f"checkpoint metadata names {module}.{name}, which is not DCP metadata; "
                                     "refusing to load it")


def safe_reader(path: str) -> Any:
    """A ``FileSystemReader`` of ``path`` whose ``.metadata`` is unpickled through an allow-list (see the module
    docstring)."""
    import torch.distributed.checkpoint as dcp
    import torch.distributed.checkpoint.metadata as dcp_metadata

    class SafeReader(dcp.FileSystemReader):
        def read_metadata(self, *args: Any, **kwargs: Any) -> dcp_metadata.Metadata:
            with open(Path(self.path) / ".metadata", "rb") as handle:
                metadata = _MetadataUnpickler(handle).load()
            if not isinstance(metadata, dcp_metadata.Metadata):
                raise pickle.UnpicklingError(f"{self.path}/.metadata holds a {type(metadata).__name__}, "
                                             "not DCP metadata")
            if getattr(metadata, "storage_meta", None) is None:
                metadata.storage_meta = dcp_metadata.StorageMeta()
            metadata.storage_meta.load_id = self.load_id
            return metadata

    return SafeReader(path)


def save_sharded(path: str, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Write the model and optimizer state as a ``torch.distributed.checkpoint`` directory (every rank its shard)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optimizer_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=path)


def load_sharded(path: str, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Restore :func:`save_sharded`'s directory into ``model`` and ``optimizer``, whatever the number of ranks
    that wrote it (DCP reshards)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_state_dict,
        set_model_state_dict,
        set_state_dict,
    )

    reader = safe_reader(path)
    metadata = reader.read_metadata()  # refuse bad metadata here, with its own error (DCP wraps it in an assertion)
    if not any(key.startswith("optimizer.state.") for key in metadata.state_dict_metadata):
        # Saved before the optimizer's first step (the checkpoint after the warm-up, whose gradients kept DCP from
        # initialising the state): the model only, the optimizer stays as fresh as it was. get_state_dict would
        # initialise this optimizer's state and then find no such keys in the checkpoint.
        model_state = get_model_state_dict(model)
        dcp.load({"model": model_state}, storage_reader=reader)
        set_model_state_dict(model, model_state)
        return
    model_state, optimizer_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optimizer": optimizer_state}
    dcp.load(state, storage_reader=reader)
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
