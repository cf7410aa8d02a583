"""Supervised warm-up: a few steps of next-token cross-entropy on demonstrations, so RL starts from a
policy that sometimes succeeds (RL from a random tiny model would see reward 0 almost always).

Demonstrations are :class:`PromptExample` ``solution`` strings followed by EOS; tool outputs inside
them (``<out>...</out>``) are masked out of the loss, exactly as they are masked out of RL updates.
The loss uses the same chunked log-probs as the learner.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from flashsim.storage import load_checkpoint, save_checkpoint
from scale.learner.learner import pack, policy_log_probs
from scale.rollouts.prompts import PromptExample
from scale.rollouts.tokenizer import Tokenizer
from scale.rollouts.tools import OUTPUT_CLOSE, OUTPUT_OPEN
from scale.rollouts.trajectory import Trajectory
from scale.run.config import WarmupConfig

RAMP_FRACTION = 0.05
"""Share of the warm-up steps over which the learning rate ramps up (Adam is unstable at full lr from step 0)."""
_TOOL_OUTPUT = re.compile(f"({re.escape(OUTPUT_OPEN)}.*?{re.escape(OUTPUT_CLOSE)})")


def demonstration(example: PromptExample, tokenizer: Tokenizer) -> Trajectory:
    """The example's solution as a trajectory (action mask False on tool outputs; log-probs unused)."""
    if example.solution is None:
        raise ValueError(f"example {example.id!r} has no solution to warm up on")
    token_ids: list[int] = []
    action_mask: list[bool] = []
    for piece in _TOOL_OUTPUT.split(example.solution):
        if piece:
            ids = tokenizer.encode(piece)
            token_ids += ids
            action_mask += [not _TOOL_OUTPUT.fullmatch(piece)] * len(ids)
    token_ids.append(tokenizer.eos_id)
    action_mask.append(True)
    return Trajectory(tokenizer.encode_prompt(example.prompt), token_ids, action_mask,
                      [0.0] * len(token_ids), "eos", version=0)


def _warmup_then_linear_decay(step: int, *, steps: int) -> float:
    """Learning-rate factor: linear ramp over the first :data:`RAMP_FRACTION` of steps, then linear decay."""
    ramp = max(int(RAMP_FRACTION * steps), 1)
    return min((step + 1) / ramp, max(steps - step, 0) / max(steps - ramp, 1))


def warmup(
    model: Any,
    tokenizer: Tokenizer,
    examples: Sequence[PromptExample],
    *,
    steps: int,
    batch_size: int,
    lr: float,
    rng: np.random.Generator,
    chunk_size: int = 512,
    callback: Any = None,
    scorer: torch.nn.Module | None = None,
) -> list[float]:
    """Train ``model`` for ``steps`` AdamW steps of ``batch_size`` demonstrations drawn by ``rng``.

    Returns the per-step mean token negative log-likelihood. ``callback(step, loss)`` is called after
    each step (e.g. a progress bar). ``scorer``: the learner's FSDP-sharded scorer, through whose forward
    a sharded model must be run (``None``: :func:`policy_log_probs` on ``model``).
    """
    WarmupConfig(steps=steps, batch_size=batch_size, learning_rate=lr)  # the checks of warmup.* in the YAML
    if steps == 0:  # nothing to train on: prompt files without demonstrations are fine
        return []
    demos = [demonstration(e, tokenizer) for e in examples]
    device = next(model.parameters()).device
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, partial(_warmup_then_linear_decay, steps=steps))
    model.eval()  # no dropout, as in RL
    losses = []
    for step in range(steps):
        chosen = [demos[i] for i in rng.integers(0, len(demos), size=batch_size)]
        batch = pack(chosen, tokenizer.pad_id, device=device)
        log_probs, _ = (scorer(batch, 1.0) if scorer is not None
                        else policy_log_probs(model, batch, chunk_size=chunk_size))
        loss = -log_probs[batch.action_mask].mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
        losses.append(float(loss.detach()))
        if callback is not None:
            callback(step, losses[-1])
    return losses


def shared_warmup(folder: Path | str, settings: Mapping[str, Any], model: Any, train: Callable[[], list[float]]
                  ) -> list[float]:
    """Warm up once per ``settings``, shared by every run (and process) that uses ``folder``.

    The first run whose ``settings`` (model, data, warm-up and seed: everything the warm-up depends on)
    are new calls ``train()`` and saves the weights, the loss curve and torch's random state as
    ``FOLDER/<hash of settings>.pt`` (tensors and plain data only); a later run with the same settings
    loads them instead, so it starts RL from exactly the weights and random state an own warm-up would
    have left. Arms of one seed in ``python -m scale reproduce`` share one warm-up this way, which also
    pairs them exactly. A second process with the same settings waits on a lock rather than train twice.

    Returns the warm-up's per-step losses (those saved, when loaded).
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    text = json.dumps(dict(settings), sort_keys=True)
    path = folder / f"{hashlib.sha256(text.encode()).hexdigest()[:20]}.pt"
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if this process is killed
        if path.exists():
            state = load_checkpoint(path)
            if state["settings"] != text:
                raise ValueError(f"{path} holds the warm-up of other settings (a hash collision?); delete it")
            model.load_state_dict(state["model"])
            torch.set_rng_state(state["torch_rng"])
            return list(state["losses"])
        losses = train()
        save_checkpoint(path, {"settings": text, "model": model.state_dict(), "losses": losses,
                               "torch_rng": torch.get_rng_state()})
        return losses
