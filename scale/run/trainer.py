"""The training run: warm up, then RL with evaluation, metrics and checkpoints, in flashsim's run directory.

:class:`Trainer` takes the parts :func:`scale.run.build.build` makes from a :class:`Config` and runs
them; only this module (and the CLI) writes files or seeds anything. The run directory is flashsim's
(:class:`flashsim.outputs.RunDirectory`, the simulator's too): ``config.yaml``, ``metrics.csv`` /
``metrics.jsonl`` (columns :data:`COLUMNS`), ``checkpoint/state.pt``, ``summary.json``, ``curves.png``
(:data:`SCALE_PANELS`, drawn by the simulator's :func:`flashsim.outputs.plot_curves` at the end, and at evaluations
at most every ``log.curves_every_s``; ``log.curves: false`` turns it off) and,
with ``log.logger: tensorboard``, TensorBoard event files. With ``learner.parallel: fsdp`` the model and
optimizer are saved apart, every rank its shard, as the ``torch.distributed.checkpoint`` directory
``checkpoint/sharded-<update>`` that ``state.pt`` names (written first, so a kill between the two leaves
the previous pair intact); a resume may use another number of ranks.

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
import shutil
import time
from typing import Any

import numpy as np
import torch
import yaml

from flashsim.config import to_dict
from flashsim.outputs import SUMMARY, CurvePanel, ProgressBar, RunDirectory, plot_curves, read_metrics
from scale.learner.digest import state_digest
from scale.learner.distributed import broadcast_batch, broadcast_parameters, rank, shard, world_size
from scale.learner.sharding import load_sharded, save_sharded
from scale.rollouts.collect import evaluate_completions
from scale.rollouts.sources import InjectedLag, RolloutSource, lag_metrics
from scale.rollouts.trajectory import Rollout, RolloutEngine, SamplingParams
from scale.run.build import EVAL_SEED_OFFSET, build, build_source
from scale.run.config import Config
from scale.run.warmup import shared_warmup, warmup

CHECKPOINT, CONFIG, CURVES = "checkpoint/state.pt", "config.yaml", "curves.png"
SHARDED = "checkpoint/sharded-{update}"
COLUMNS = (
    "update",
    "rollout/reward", "rollout/length", "rollout/tool_calls", "rollout/truncation", "rollout/trajectories",
    "rollout/dropped",
    "lag/mean", "lag/max", "lag/min", "loop/queue_depth", "loop/failed_calls", "time/wait_s",
    "time/generate_s", "loss/policy", "grad/norm", "policy/entropy",
    "trust/acceptance_rate", "trust/sequence_kl_mean", "trust/sequence_kl_max", "trust/token_acceptance_rate",
    "trust/clip_fraction", "trust/tis_capped_fraction", "trust/ratio_mean", "trust/ratio_min", "trust/ratio_max",
    "time/learn_s", "time/eval_s", "time/plot_s", "time/elapsed_s", "optim/lr", "learner/ranks",
    "eval/accuracy", "eval/accuracy_low", "eval/accuracy_high", "eval/length", "eval/tool_calls", "eval/truncation",
    "eval/accuracy_tool", "eval/accuracy_no_tool",
    "eval/accuracy_greedy", "eval/accuracy_greedy_low", "eval/accuracy_greedy_high",
    "time/warmup_s", "warmup/loss",
)
"""Every key a metrics row may carry, in CSV column order (a new metric is added here).

Where an update's time goes: ``time/generate_s`` the engines' seconds generating and scoring since the previous
batch (the worker threads' in the asynchronous loop, where it overlaps the learner; not measured with Ray
actors), ``time/wait_s`` the learner's seconds blocked waiting for the batch, ``time/learn_s`` the learner step
and the weights' publication, ``time/eval_s`` the held-out evaluation in this row (if any), ``time/plot_s``
drawing ``curves.png`` (if drawn), ``time/elapsed_s`` the wall-clock since RL started. ``eval/accuracy_low`` /
``_high`` bound a 95 % interval (:func:`scale.rollouts.collect.accuracy_interval`)."""
SCALE_PANELS = (
    CurvePanel("rollout/reward", "accuracy: train reward (held-out eval dashed)", dashed="eval/accuracy"),
    CurvePanel("lag/mean", "policy lag (mean, updates)"),
    CurvePanel("trust/acceptance_rate", "gate acceptance rate"),
    CurvePanel("trust/sequence_kl_mean", "mean sequence KL"),
    CurvePanel("policy/entropy", "policy entropy (nats/token)"),
    CurvePanel("rollout/tool_calls", "tool calls per trajectory (eval dashed)", dashed="eval/tool_calls"),
    CurvePanel("rollout/length", "length in policy tokens (eval dashed)", dashed="eval/length"),
    CurvePanel("rollout/truncation", "truncated at the token budget (eval dashed)", dashed="eval/truncation"),
)
"""The panels of ``curves.png``: training rollouts solid (a moving average), held-out evaluations dashed."""
CURVE_SMOOTHING = 5
"""Moving-average window (updates) of the per-batch curves."""


class Trainer:
    """One training run described by ``config`` (``resume=True`` continues from ``log.out/checkpoint``)."""

    def __init__(self, config: Config, *, resume: bool = False) -> None:
        self.config, self.resume = config, resume
        self.parts = build(config)
        self.is_main = rank() == 0  # only rank 0 samples, evaluates and writes files
        self.run_dir = RunDirectory(config.log.out, COLUMNS, checkpoint=CHECKPOINT, writes=self.is_main,
                                    logger=config.log.logger)
        self.summary: dict[str, Any] = {}
        self.rows: list[dict[str, Any]] = []
        """The metrics rows of the whole run so far (with those before a resume), for ``curves.png``."""
        self.last_checkpoint: int | None = None
        """The update of the newest checkpoint on disk (``None`` before the first)."""
        self.source: RolloutSource | None = None
        """Rank 0's rollout source while the run trains."""
        self._kept_weights: list | None = None
        """The injected lag's kept weights read from a checkpoint (``rollout.injected_lag`` > 0)."""
        self._last_plot = time.perf_counter()
        """When ``curves.png`` was last drawn (the run's start before the first drawing)."""
        self.resumed_digest: str | None = None
        """The :meth:`digest` of the state a resume loaded (checked against the one its checkpoint records)."""

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
                self.rows = read_metrics(self.run_dir.out) if self.run_dir.writes else []
            else:
                self.run_dir.start(overwrite=True)
                self.run_dir.write_text(CONFIG, yaml.safe_dump(to_dict(self.config), sort_keys=False))
                self.warm_up()
            weights = self.parts.learner.weights()
            source = build_source(self.config, self.parts, weights) if self.is_main else None
            if self._kept_weights is not None and isinstance(source, InjectedLag):
                source.load_state_dict(self._kept_weights)
            self.source = source
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
        steps = self.config.warmup_steps
        bar = ProgressBar(steps, description="warm-up", unit="step", enabled=self.config.log.progress)

        def train() -> list[float]:
            return warmup(p.model, p.tokenizer, p.train_examples, steps=steps, batch_size=w.batch_size,
                          lr=w.learning_rate, rng=np.random.default_rng([self.config.seed, 1]),
                          chunk_size=self.config.train.chunk_size,
                          callback=lambda step, loss: bar.advance(loss=f"{loss:.3f}"),
                          scorer=p.learner.local_scorer if p.learner.sharded else None)

        if w.cache is None:
            losses = train()
        elif p.learner.sharded:
            raise ValueError("warmup.cache keeps full weights; it cannot be combined with learner.parallel: fsdp "
                             "on several ranks (warm up once without it, or set warmup.cache: null)")
        else:  # everything the warm-up depends on (not the cache folder itself)
            c = self.config
            settings = {"seed": c.seed, "model": to_dict(c.model), "data": to_dict(c.data),
                        "warmup": {**to_dict(w), "steps": steps, "cache": None}, "chunk_size": c.train.chunk_size}
            losses = shared_warmup(w.cache, settings, p.model, train)
        bar.close()
        if p.data_parallel and not p.learner.sharded:  # FSDP ranks warmed up their shards together
            broadcast_parameters(p.model)
        row = {"update": 0, "time/warmup_s": time.perf_counter() - start,
               "warmup/loss": losses[-1] if losses else float("nan"), **self.timed_evaluate()}
        self.summary.update({"warmup_seconds": row["time/warmup_s"], "after_warmup": _eval_part(row)})
        self.write(row)
        self.save()

    def _train(self, source: RolloutSource | None) -> None:
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
            weights = p.learner.weights()
            if source is not None:
                source.publish(weights, p.learner.version)
            self.updated(rollouts)
            k = p.learner.version
            row = {"update": k, **_rollout_metrics(rollouts), **lag, **info, **stats,
                   "time/learn_s": time.perf_counter() - step_started,
                   "time/elapsed_s": time.perf_counter() - rl_started, "optim/lr": p.learner.scheduler.get_last_lr()[0],
                   "learner/ranks": float(world_size() if p.data_parallel else 1)}
            if k % c.eval.every == 0 or k == c.train.updates:
                row.update(self.timed_evaluate())
                if k == c.train.updates:
                    self.summary["final"] = _eval_part(row)
            self.write(row)
            bar.advance(reward=f"{row['rollout/reward']:.2f}", lag=f"{lag['lag/mean']:.1f}",
                        acc=f"{row.get('eval/accuracy', float('nan')):.2f}")
            every = c.log.checkpoint_every
            if (every > 0 and k % every == 0) or k == c.train.updates:
                self.save()
        bar.close()

    def updated(self, rollouts: list[Rollout]) -> None:
        """Called on every rank after each update (the step, the schedule, the weights published), with the whole
        batch; does nothing here. A subclass may record the update: the chaos soak's ledger records the
        :meth:`digest` of each update's state (``benchmarks/chaos_soak.py``)."""

    def digest(self) -> str:
        """The exact digest of the learner's state (weights, optimizer state, schedule, version): see
        :mod:`scale.learner.digest`. A collective with data-parallel learners: every rank calls it."""
        p = self.parts
        return state_digest(p.model, p.optimizer, p.learner.scheduler, p.learner.version)

    def write(self, row: dict[str, Any]) -> None:
        """Append a metrics row (rank 0 first draws ``curves.png`` when :meth:`_plot_due`, timed in the row)."""
        if self.run_dir.writes:
            self.rows.append(row)
            if self._plot_due(row):
                c, start = self.config, time.perf_counter()
                plot_curves({c.train.loss: self.rows}, self.run_dir.out / CURVES, panels=SCALE_PANELS,
                            smooth=CURVE_SMOOTHING,
                            title=f"{c.model.name} · {c.train.loss} · {c.loop_mode} loop · seed {c.seed}")
                self._last_plot = time.perf_counter()
                row["time/plot_s"] = self._last_plot - start
        self.run_dir.write(row)

    def _plot_due(self, row: dict[str, Any]) -> bool:
        """At the last update; at an evaluation once ``log.curves_every_s`` have passed since the last drawing."""
        log = self.config.log
        if not log.curves:
            return False
        if row["update"] >= self.config.train.updates:
            return True
        return "eval/accuracy" in row and time.perf_counter() - self._last_plot >= log.curves_every_s

    def timed_evaluate(self) -> dict[str, float]:
        """:meth:`evaluate` with its seconds as ``time/eval_s`` (rank 0)."""
        start = time.perf_counter()
        row = self.evaluate()
        return {**row, "time/eval_s": time.perf_counter() - start} if row else row

    def evaluate(self) -> dict[str, float]:
        """Held-out accuracy at the training temperature (and greedy), with fixed random numbers (rank 0)."""
        p = self.parts
        examples = p.test_examples[: self.config.eval.num_prompts]
        if not examples:
            return {}
        weights = p.learner.weights()
        if not self.is_main:
            return {}
        p.eval_engine.update_weights(weights, p.learner.version)
        p.eval_engine.generator.manual_seed(self.config.seed + EVAL_SEED_OFFSET)
        size = self.config.eval.batch_size
        sampled = evaluate_completions(p.eval_engine, p.tokenizer, examples, p.settings, batch_size=size)
        row = {f"eval/{k}": v for k, v in sampled.items() if k != "count"}
        if self.config.eval.greedy:
            greedy = SamplingParams(max_new_tokens=self.config.rollout.max_new_tokens, greedy=True,
                                    allow_truncated_sampling=True)
            settings = dataclasses.replace(p.settings, sampling=greedy, group_size=1)
            greedy_row = evaluate_completions(p.eval_engine, p.tokenizer, examples, settings, batch_size=size)
            for key in ("accuracy", "accuracy_low", "accuracy_high"):
                row[f"eval/{key.replace('accuracy', 'accuracy_greedy')}"] = greedy_row[key]
        return row

    def state(self) -> dict[str, Any]:
        """Everything a resumed run needs but the sharded model and optimizer; the group id it stores is
        skipped, never handed out twice."""
        p = self.parts
        learner = ({"sharded": SHARDED.format(update=p.learner.version)} if self._sharded_checkpoints else
                   {"model": p.model.state_dict(), "optimizer": p.optimizer.state_dict()})
        return {
            "config": to_dict(self.config), "version": p.learner.version, **learner,
            "scheduler": p.learner.scheduler.state_dict(),
            "stream": p.stream.state_dict(), "next_group_id": next(p.group_counter),
            "engine_generators": [_generator(e).get_state() if _generator(e) else None for e in p.engines],
            "torch_rng": torch.get_rng_state(), "summary": dict(self.summary),
            "injected_lag": self.source.state_dict() if isinstance(self.source, InjectedLag) else None,
        }

    @property
    def _sharded_checkpoints(self) -> bool:
        return self.config.learner.parallel == "fsdp"

    def save(self) -> None:
        """Checkpoint (rank 0; the run directory adds the metrics' offsets, flushing the rows so far), with the
        :meth:`digest` of the state it holds. Under FSDP every rank first writes its shards; the directories of
        older checkpoints then go."""
        sharded = None
        if self._sharded_checkpoints:
            sharded = self.run_dir.out / SHARDED.format(update=self.parts.learner.version)
            save_sharded(str(sharded), self.parts.model, self.parts.optimizer)
        digest = self.digest()  # after the save: what the checkpoint holds
        self.last_checkpoint = self.parts.learner.version
        if not self.is_main:
            return
        self.run_dir.save({**self.state(), "digest": digest})
        if sharded is not None:
            for old in sharded.parent.glob(SHARDED.format(update="*").rsplit("/", 1)[1]):
                if old != sharded:
                    shutil.rmtree(old, ignore_errors=True)

    def load(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state` (on every rank: each holds its own model and optimizer, or its shards)."""
        p = self.parts
        if "sharded" in state:
            load_sharded(str(self.run_dir.out / state["sharded"]), p.model, p.optimizer)
        else:
            p.model.load_state_dict(state["model"])
            p.optimizer.load_state_dict(state["optimizer"])
        p.learner.scheduler.load_state_dict(state["scheduler"])
        p.learner.version = self.last_checkpoint = state["version"]
        p.stream.load_state_dict(state["stream"])
        p.group_counter = itertools.count(state["next_group_id"])
        for engine, generator_state in zip(p.engines, state["engine_generators"]):
            if generator_state is not None and _generator(engine) is not None:
                _generator(engine).set_state(generator_state)
        torch.set_rng_state(state["torch_rng"])
        self.summary = dict(state["summary"])
        self._kept_weights = state.get("injected_lag")
        self.resumed_digest = self.digest()
        if state.get("digest", self.resumed_digest) != self.resumed_digest:  # checkpoints before digests have none
            raise ValueError(f"the checkpoint in {self.run_dir.out / 'checkpoint'} does not hold the state it was "
                             f"saved from (digest {self.resumed_digest[:12]}, recorded {state['digest'][:12]}): its "
                             "weights and optimizer state do not belong together; refusing to resume from it")


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
