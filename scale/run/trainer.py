"""The training run: build everything from a :class:`Config`, warm up, then RL with evaluation,
metrics and checkpoints. Only this module (and the CLI) writes files or seeds anything.

Order of a run: model and tokenizer → prompt data → supervised warm-up (skipped on resume) →
evaluation "update 0" → for each update k: a batch from the rollout source (sync or async), its policy
lag, one learner step, weights published to the engines, a metrics row, periodic evaluation and
checkpoint → final evaluation and checkpoint → ``summary.json``.
"""

from __future__ import annotations

import functools
import itertools
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import yaml

from flashsim.io import atomic_write_text
from scale.checkpoint import load_checkpoint, save_checkpoint
from scale.config import Config, sampling_params, to_dict
from scale.data import PromptExample, PromptStream, arithmetic_task, load_prompts
from scale.distributed import broadcast_batch, broadcast_parameters, init_from_environment, rank, shard, world_size
from scale.engine.base import RolloutEngine, SamplingParams
from scale.engine.transformers_engine import TransformersEngine
from scale.learner import Learner
from scale.loop import AsyncRollouts, SyncRollouts, lag_metrics
from scale.metrics import MetricsWriter
from scale.model import build_tiny_model, load_pretrained
from scale.rewards import resolve_reward
from scale.rollout import RolloutSettings, evaluate
from scale.tokenizer import CharTokenizer
from scale.warmup import warmup

if TYPE_CHECKING:
    from scale.ray_rollouts import RayRollouts

VLLM_GPU_MEMORY_FRACTION = 0.35
"""Share of GPU memory a vLLM engine may take (weights + KV cache) when it shares the GPU with the learner,
which needs the rest for weights, gradients, AdamW state and activations (vLLM's default, 0.9, leaves none)."""
EVAL_SEED_OFFSET = 10_000
"""The evaluation engine's seed is ``seed + EVAL_SEED_OFFSET``, re-applied before every evaluation so
that successive evaluations share their random numbers (less noise in the learning curve)."""


def build_model(config: Config) -> tuple[Any, Any]:
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
    train = load_prompts(d.train)
    test = load_prompts(d.test) if d.test else []
    if config.warmup.steps > 0 and any(e.solution is None for e in train):
        raise ValueError("warmup.steps > 0 needs demonstrations, which prompt files do not have; set warmup.steps: 0")
    return train, test


def build_engine(config: Config, model: Any, tokenizer: Any, *, seed: int) -> RolloutEngine:
    """A rollout engine as ``rollout.engine`` says; its weights are published before it samples.

    The vLLM engine loads the model from a directory: a pretrained model's own path, or the tiny
    model's initial weights saved under ``log.out/engine_model_<seed>``. Evaluation always uses the
    transformers engine, so that both engines' learning curves are measured the same way.
    """
    if config.rollout.engine == "transformers":
        return TransformersEngine(model, tokenizer, seed=seed, device=config.model.device)
    from scale.engine.vllm_engine import VLLMEngine

    m = config.model
    options: dict[str, Any] = {"dtype": m.dtype}
    if m.device.startswith("cuda"):
        options["gpu_memory_utilization"] = VLLM_GPU_MEMORY_FRACTION
    if m.name == "tiny":
        path = str(Path(config.log.out) / f"engine_model_{seed}")
        model.save_pretrained(path)
        return VLLMEngine(path, tokenizer, seed=seed, max_model_len=m.max_positions, **options)
    return VLLMEngine(m.name, tokenizer, seed=seed, **options)


class Trainer:
    """One training run described by ``config`` (``resume=True`` continues from ``log.out/checkpoint``)."""

    def __init__(self, config: Config, *, resume: bool = False) -> None:
        self.config, self.resume = config, resume
        if config.loop.threads is not None:
            torch.set_num_threads(config.loop.threads)
        self.data_parallel = init_from_environment(config.model.device)
        self.is_main = rank() == 0  # only rank 0 samples, evaluates, logs and saves
        self.out = Path(config.log.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.model, self.tokenizer = build_model(config)
        self.train_examples, self.test_examples = build_data(config)
        r, t = config.rollout, config.train
        self.settings = RolloutSettings(sampling_params(config), resolve_reward(r.reward), config.group_size,
                                        r.tools, r.max_turns, r.on_reward_error)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=t.lr, weight_decay=t.weight_decay)
        ramp = max(t.lr_warmup_updates, 1)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda k: min(1.0, (k + 1) / ramp))
        self.learner = Learner(self.model, self.optimizer, loss_name=t.algo, loss_options=t.loss_options,
                               temperature=r.temperature, microbatch_size=t.microbatch_size,
                               chunk_size=t.chunk_size, max_grad_norm=t.max_grad_norm, max_tokens=r.max_new_tokens,
                               data_parallel=self.data_parallel)
        self.stream = PromptStream(self.train_examples, seed=config.seed)
        self.group_counter = itertools.count()
        lp = config.loop
        local_engines = 1 if lp.mode == "sync" else 0 if lp.placement == "ray" else lp.num_workers
        local_engines = local_engines if self.is_main else 0
        self.engines = [build_engine(config, self.model, self.tokenizer, seed=config.seed + 1 + i)
                        for i in range(local_engines)]
        self.eval_engine = TransformersEngine(self.model, self.tokenizer, seed=config.seed + EVAL_SEED_OFFSET,
                                              max_batch_size=config.eval.batch_size, device=config.model.device)
        self.metrics: MetricsWriter | None = None  # opened by run() on rank 0: afresh, or at the checkpoint's offsets
        self.summary: dict[str, Any] = {}

    # -- evaluation -------------------------------------------------------------------------------
    def evaluate(self) -> dict[str, float]:
        """Held-out accuracy at the training temperature (and greedy), with fixed random numbers (rank 0)."""
        examples = self.test_examples[: self.config.eval.num_prompts]
        if not examples or not self.is_main:
            return {}
        self.eval_engine.update_weights(self.model, self.learner.version)
        self.eval_engine.generator.manual_seed(self.config.seed + EVAL_SEED_OFFSET)
        size = self.config.eval.batch_size
        sampled = evaluate(self.eval_engine, self.tokenizer, examples, self.settings, batch_size=size)
        row = {f"eval/{k}": v for k, v in sampled.items() if k != "count"}
        if self.config.eval.greedy:
            greedy_sampling = SamplingParams(max_new_tokens=self.config.rollout.max_new_tokens, temperature=0.0,
                                             allow_truncated_sampling=True)
            greedy = RolloutSettings(greedy_sampling, self.settings.reward_fn, 1, self.settings.tools,
                                     self.settings.max_turns, self.settings.on_reward_error)
            row["eval/accuracy_greedy"] = evaluate(self.eval_engine, self.tokenizer, examples, greedy,
                                                   batch_size=size)["accuracy"]
        return row

    def _write(self, row: dict[str, Any]) -> None:
        if self.is_main:
            self.metrics.write(row)

    # -- checkpoints ------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        return {
            "config": to_dict(self.config), "version": self.learner.version, "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
            "stream": self.stream.state_dict(), "next_group_id": next(self.group_counter),
            "engine_generators": [_generator(e).get_state() if _generator(e) else None for e in self.engines],
            "torch_rng": torch.get_rng_state(), "summary": dict(self.summary),
            "metrics_offsets": self.metrics.offsets,  # flushes the rows so far; resume truncates to here
        }

    def save(self) -> None:
        if not self.is_main:
            return
        state = self.state()
        self.group_counter = itertools.count(state["next_group_id"])  # next() above consumed one id
        save_checkpoint(self.out / "checkpoint", state)

    def load(self) -> None:
        state = load_checkpoint(self.out / "checkpoint")
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.learner.version = state["version"]
        self.stream.load_state_dict(state["stream"])
        self.group_counter = itertools.count(state["next_group_id"])
        for engine, generator_state in zip(self.engines, state["engine_generators"]):
            if generator_state is not None and _generator(engine) is not None:
                _generator(engine).set_state(generator_state)
        torch.set_rng_state(state["torch_rng"])
        self.summary = dict(state["summary"])
        if self.is_main:
            self.metrics = MetricsWriter(self.out, offsets=tuple(state["metrics_offsets"]),
                                         tensorboard=self.config.log.tensorboard)

    # -- the run ----------------------------------------------------------------------------------
    def run_warmup(self) -> None:
        """Supervised warm-up, evaluation "update 0" and the first checkpoint."""
        w = self.config.warmup
        start = time.perf_counter()
        bar = _progress(self.config, w.steps, "warm-up")
        losses = warmup(self.model, self.tokenizer, self.train_examples, steps=w.steps, batch_size=w.batch_size,
                        lr=w.lr, rng=np.random.default_rng([self.config.seed, 1]),
                        chunk_size=self.config.train.chunk_size,
                        callback=lambda step, loss: _advance(bar, loss=f"{loss:.3f}"))
        _close(bar)
        if self.data_parallel:
            broadcast_parameters(self.model)
        row = {"update": 0, "time/warmup_s": time.perf_counter() - start,
               "warmup/loss": losses[-1] if losses else float("nan"), **self.evaluate()}
        self.summary.update({"warmup_seconds": row["time/warmup_s"], "after_warmup": _eval_part(row)})
        self._write(row)
        self.save()

    def run(self) -> dict[str, Any]:
        """Warm up (or resume), train ``train.updates`` updates, evaluate; returns the summary."""
        started = time.perf_counter()
        if self.resume:
            self.load()
        else:
            if self.is_main:
                atomic_write_text(self.out / "config.yaml", yaml.safe_dump(to_dict(self.config), sort_keys=False))
                self.metrics = MetricsWriter(self.out, tensorboard=self.config.log.tensorboard)
            self.run_warmup()
        source = self._source() if self.is_main else None
        try:
            self._train(source)
        finally:
            if source is not None:
                source.close()
            if self.metrics is not None:
                self.metrics.close()
        self.summary.update({"updates": self.learner.version, "seconds_this_process": time.perf_counter() - started,
                             "resumed": self.resume})
        final = self.summary.get("final", {})
        initial = self.summary.get("after_warmup", {})
        if "eval/accuracy" in final and "eval/accuracy" in initial:
            self.summary["accuracy_gain"] = final["eval/accuracy"] - initial["eval/accuracy"]
        if self.is_main:
            atomic_write_text(self.out / "summary.json", json.dumps(self.summary, indent=2))
        return self.summary

    def _source(self) -> SyncRollouts | AsyncRollouts | RayRollouts:
        for engine in self.engines:
            engine.update_weights(self.model, self.learner.version)
        lp = self.config.loop
        if lp.placement == "ray":
            from scale.ray_rollouts import RayRollouts

            builders = [functools.partial(build_engine, self.config, self.model, self.tokenizer,
                                          seed=self.config.seed + 1 + i) for i in range(lp.num_workers)]
            source = RayRollouts(builders, self.tokenizer, self.stream, self.settings, self.group_counter,
                                 prompts_per_call=lp.trajectories_per_call // self.config.group_size,
                                 queue_size=lp.queue_size // self.config.group_size, address=lp.ray_address)
            source.publish(self.model, self.learner.version)
            return source
        if lp.mode == "sync":
            return SyncRollouts(self.engines[0], self.tokenizer, self.stream, self.settings, self.group_counter)
        return AsyncRollouts(self.engines, self.tokenizer, self.stream, self.settings, self.group_counter,
                             prompts_per_call=lp.trajectories_per_call // self.config.group_size,
                             queue_size=lp.queue_size // self.config.group_size)

    def _train(self, source: SyncRollouts | AsyncRollouts | RayRollouts | None) -> None:
        """The RL updates; with data-parallel learners rank 0 samples and every rank steps on its shard."""
        c = self.config
        bar = _progress(c, c.train.updates, "RL", initial=self.learner.version)
        rl_started = time.perf_counter()
        while self.learner.version < c.train.updates:
            batch = source.next_batch(c.train.batch_size) if source is not None else None
            rollouts, info = broadcast_batch(batch) if self.data_parallel else batch
            lag = lag_metrics(rollouts, self.learner.version)
            step_started = time.perf_counter()
            stats = self.learner.step(shard(rollouts, rank(), world_size()) if self.data_parallel else rollouts)
            self.scheduler.step()
            if source is not None:
                source.publish(self.model, self.learner.version)
            k = self.learner.version
            row = {"update": k, **_rollout_metrics(rollouts), **lag, **info, **stats,
                   "time/learner_s": time.perf_counter() - step_started,
                   "time/elapsed_s": time.perf_counter() - rl_started, "optim/lr": self.scheduler.get_last_lr()[0],
                   "learner/ranks": float(world_size() if self.data_parallel else 1)}
            if k % c.eval.every == 0 or k == c.train.updates:
                row.update(self.evaluate())
                if k == c.train.updates:
                    self.summary["final"] = _eval_part(row)
            self._write(row)
            _advance(bar, reward=f"{row['rollout/reward']:.2f}", lag=f"{lag['lag/mean']:.1f}",
                     acc=f"{row.get('eval/accuracy', float('nan')):.2f}")
            if (c.log.checkpoint_every and k % c.log.checkpoint_every == 0) or k == c.train.updates:
                self.save()
        _close(bar)


def _generator(engine: RolloutEngine) -> torch.Generator | None:
    """The engine's sampling generator if it has one in this process (vLLM seeds its own, once)."""
    return getattr(engine, "generator", None)


def _rollout_metrics(rollouts: list) -> dict[str, float]:
    n = len(rollouts)
    return {
        "rollout/reward": sum(r.reward for r in rollouts) / n,
        "rollout/length": sum(r.trajectory.num_actions for r in rollouts) / n,
        "rollout/tool_calls": sum(r.trajectory.num_tool_calls for r in rollouts) / n,
        "rollout/truncation": sum(r.trajectory.finish_reason == "length" for r in rollouts) / n,
        "rollout/trajectories": float(n),
    }


def _eval_part(row: dict[str, Any]) -> dict[str, float]:
    return {k: v for k, v in row.items() if k.startswith("eval/")}


def _progress(config: Config, total: int, description: str, initial: int = 0) -> Any:
    if not config.log.progress:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc=description, dynamic_ncols=True)


def _advance(bar: Any, **postfix: str) -> None:
    if bar is not None:
        bar.set_postfix(postfix, refresh=False)
        bar.update(1)


def _close(bar: Any) -> None:
    if bar is not None:
        bar.close()
