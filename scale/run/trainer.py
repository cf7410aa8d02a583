"""The training run: warm up, then RL with evaluation, metrics and checkpoints, in flashsim's run directory.

:class:`Trainer` takes the parts :func:`scale.run.build.build` makes from a :class:`Config` and runs
them; only this module (and the CLI) writes files or seeds anything. The run directory is flashsim's
(:class:`flashsim.io.RunDirectory`, the simulator's too): ``config.yaml``, ``metrics.csv`` /
``metrics.jsonl`` (columns :data:`COLUMNS`), ``checkpoint/state.pt``, ``summary.json`` and, when
``tensorboard`` is installed, ``tensorboard/``.

Order of a run: supervised warm-up (skipped on resume) → evaluation "update 0" and a checkpoint → the
rollout source (sync, worker threads or Ray actors) → for each update k: a batch from the source, its
policy lag, one learner step, weights published to the engines, a metrics row, periodic evaluation and
checkpoint → final evaluation and checkpoint → ``summary.json``.

In the synchronous loop a resumed run reproduces the uninterrupted one exactly. In the asynchronous
loop the prompts in flight or queued at the save are not reissued (the stream resumes after them).
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from typing import Any

import numpy as np
import torch
import yaml

from flashsim.config import to_dict
from flashsim.io import SUMMARY, ProgressBar, RunDirectory
from scale.learner.distributed import broadcast_batch, broadcast_parameters, rank, shard, world_size
from scale.rollouts.collect import evaluate
from scale.rollouts.sources import lag_metrics
from scale.rollouts.trajectory import Rollout, RolloutEngine, SamplingParams
from scale.run.build import EVAL_SEED_OFFSET, build, build_source
from scale.run.config import Config
from scale.run.warmup import warmup

CHECKPOINT, CONFIG = "checkpoint/state.pt", "config.yaml"
COLUMNS = (
    "update",
    "rollout/reward", "rollout/length", "rollout/tool_calls", "rollout/truncation", "rollout/trajectories",
    "rollout/dropped",
    "lag/mean", "lag/max", "lag/min", "loop/queue_depth", "loop/failed_calls", "time/wait_s",
    "loss/policy", "grad/norm", "policy/entropy",
    "trust/acceptance_rate", "trust/sequence_kl_mean", "trust/sequence_kl_max", "trust/token_acceptance_rate",
    "trust/clip_fraction", "trust/ratio_mean", "trust/ratio_min", "trust/ratio_max",
    "time/learner_s", "time/elapsed_s", "optim/lr", "learner/ranks",
    "eval/accuracy", "eval/length", "eval/tool_calls", "eval/truncation", "eval/accuracy_greedy",
    "time/warmup_s", "warmup/loss",
)
"""Every key a metrics row may carry, in CSV column order (a new metric is added here)."""


class Trainer:
    """One training run described by ``config`` (``resume=True`` continues from ``log.out/checkpoint``)."""

    def __init__(self, config: Config, *, resume: bool = False) -> None:
        self.config, self.resume = config, resume
        self.parts = build(config)
        self.is_main = rank() == 0  # only rank 0 samples, evaluates and writes files
        self.run_dir = RunDirectory(config.log.out, COLUMNS, checkpoint=CHECKPOINT, writes=self.is_main,
                                    tensorboard=config.log.tensorboard)
        self.summary: dict[str, Any] = {}
        self.last_checkpoint: int | None = None
        """The update of the newest checkpoint on disk (``None`` before the first)."""

    @property
    def data_parallel(self) -> bool:
        """Whether this process is one of several data-parallel learners (``torchrun``)."""
        return self.parts.data_parallel

    def run(self) -> dict[str, Any]:
        """Warm up (or resume), train ``train.updates`` updates, evaluate; returns the summary."""
        started = time.perf_counter()
        with self.run_dir:
            if self.resume:
                self.run_dir.resume(self.load)
            else:
                self.run_dir.start(overwrite=True)
                self.run_dir.write_text(CONFIG, yaml.safe_dump(to_dict(self.config), sort_keys=False))
                self.warm_up()
            source = build_source(self.config, self.parts) if self.is_main else None
            try:
                self._train(source)
            finally:
                if source is not None:
                    source.close()
        self.summary.update({"updates": self.parts.learner.version,
                             "seconds_this_process": time.perf_counter() - started, "resumed": self.resume})
        final, initial = self.summary.get("final", {}), self.summary.get("after_warmup", {})
        if "eval/accuracy" in final and "eval/accuracy" in initial:
            self.summary["accuracy_gain"] = final["eval/accuracy"] - initial["eval/accuracy"]
        self.run_dir.write_json(SUMMARY, self.summary)
        return self.summary

    def warm_up(self) -> None:
        """Supervised warm-up, evaluation "update 0" and the first checkpoint."""
        w, p = self.config.warmup, self.parts
        start = time.perf_counter()
        bar = ProgressBar(w.steps, description="warm-up", unit="step", enabled=self.config.log.progress)
        losses = warmup(p.model, p.tokenizer, p.train_examples, steps=w.steps, batch_size=w.batch_size,
                        lr=w.learning_rate,
                        rng=np.random.default_rng([self.config.seed, 1]), chunk_size=self.config.train.chunk_size,
                        callback=lambda step, loss: bar.advance(loss=f"{loss:.3f}"))
        bar.close()
        if p.data_parallel:
            broadcast_parameters(p.model)
        row = {"update": 0, "time/warmup_s": time.perf_counter() - start,
               "warmup/loss": losses[-1] if losses else float("nan"), **self.evaluate()}
        self.summary.update({"warmup_seconds": row["time/warmup_s"], "after_warmup": _eval_part(row)})
        self.run_dir.write(row)
        self.save()

    def _train(self, source: Any) -> None:
        """The RL updates; with data-parallel learners rank 0 samples and every rank steps on its shard."""
        c, p = self.config, self.parts
        bar = ProgressBar(c.train.updates, initial=p.learner.version, description="RL", enabled=c.log.progress)
        rl_started = time.perf_counter()
        while p.learner.version < c.train.updates:
            batch = source.next_batch(c.train.batch_size) if source is not None else None
            rollouts, info = broadcast_batch(batch) if p.data_parallel else batch
            lag = lag_metrics(rollouts, p.learner.version)
            step_started = time.perf_counter()
            stats = p.learner.step(shard(rollouts, rank(), world_size()) if p.data_parallel else rollouts)
            p.scheduler.step()
            if source is not None:
                source.publish(p.model, p.learner.version)
            k = p.learner.version
            row = {"update": k, **_rollout_metrics(rollouts), **lag, **info, **stats,
                   "time/learner_s": time.perf_counter() - step_started,
                   "time/elapsed_s": time.perf_counter() - rl_started, "optim/lr": p.scheduler.get_last_lr()[0],
                   "learner/ranks": float(world_size() if p.data_parallel else 1)}
            if k % c.eval.every == 0 or k == c.train.updates:
                row.update(self.evaluate())
                if k == c.train.updates:
                    self.summary["final"] = _eval_part(row)
            self.run_dir.write(row)
            bar.advance(reward=f"{row['rollout/reward']:.2f}", lag=f"{lag['lag/mean']:.1f}",
                        acc=f"{row.get('eval/accuracy', float('nan')):.2f}")
            if self.run_dir.checkpoint_due(k, every=c.log.checkpoint_every, last=c.train.updates):
                self.save()
        bar.close()

    def evaluate(self) -> dict[str, float]:
        """Held-out accuracy at the training temperature (and greedy), with fixed random numbers (rank 0)."""
        p = self.parts
        examples = p.test_examples[: self.config.eval.num_prompts]
        if not examples or not self.is_main:
            return {}
        p.eval_engine.update_weights(p.model, p.learner.version)
        p.eval_engine.generator.manual_seed(self.config.seed + EVAL_SEED_OFFSET)
        size = self.config.eval.batch_size
        sampled = evaluate(p.eval_engine, p.tokenizer, examples, p.settings, batch_size=size)
        row = {f"eval/{k}": v for k, v in sampled.items() if k != "count"}
        if self.config.eval.greedy:
            greedy = SamplingParams(max_new_tokens=self.config.rollout.max_new_tokens, greedy=True,
                                    allow_truncated_sampling=True)
            settings = dataclasses.replace(p.settings, sampling=greedy, group_size=1)
            row["eval/accuracy_greedy"] = evaluate(p.eval_engine, p.tokenizer, examples, settings,
                                                   batch_size=size)["accuracy"]
        return row

    def state(self) -> dict[str, Any]:
        """Everything a resumed run needs; the group id it stores is skipped, never handed out twice."""
        p = self.parts
        return {
            "config": to_dict(self.config), "version": p.learner.version, "model": p.model.state_dict(),
            "optimizer": p.optimizer.state_dict(), "scheduler": p.scheduler.state_dict(),
            "stream": p.stream.state_dict(), "next_group_id": next(p.group_counter),
            "engine_generators": [_generator(e).get_state() if _generator(e) else None for e in p.engines],
            "torch_rng": torch.get_rng_state(), "summary": dict(self.summary),
        }

    def save(self) -> None:
        """Checkpoint (rank 0; the run directory adds the metrics' offsets, flushing the rows so far)."""
        if self.is_main:
            self.run_dir.save(self.state())
        self.last_checkpoint = self.parts.learner.version

    def load(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state` (on every rank: each holds its own model and optimizer)."""
        p = self.parts
        p.model.load_state_dict(state["model"])
        p.optimizer.load_state_dict(state["optimizer"])
        p.scheduler.load_state_dict(state["scheduler"])
        p.learner.version = self.last_checkpoint = state["version"]
        p.stream.load_state_dict(state["stream"])
        p.group_counter = itertools.count(state["next_group_id"])
        for engine, generator_state in zip(p.engines, state["engine_generators"]):
            if generator_state is not None and _generator(engine) is not None:
                _generator(engine).set_state(generator_state)
        torch.set_rng_state(state["torch_rng"])
        self.summary = dict(state["summary"])


def _generator(engine: RolloutEngine) -> torch.Generator | None:
    """The engine's sampling generator if it has one in this process (vLLM seeds its own, once)."""
    return getattr(engine, "generator", None)


def _rollout_metrics(rollouts: list[Rollout]) -> dict[str, float]:
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
