"""``scale``: asynchronous RL for language models with flashsim's losses (layer 7 of flashsim).

Uses flashsim's public API only (``flashsim.losses``); flashsim never imports ``scale``.

Modules:
- :mod:`scale.data`, :mod:`scale.rewards`, :mod:`scale.tokenizer`, :mod:`scale.model` — prompts with
  verifiable answers, answer checking, the character tokenizer and the tiny Llama built from a config;
- :mod:`scale.engine` — the rollout-engine interface and its transformers and vLLM implementations;
- :mod:`scale.tools` — multi-turn trajectories with a calculator tool;
- :mod:`scale.logprobs`, :mod:`scale.learner` — chunked sampled-token log-probs and the learner step;
- :mod:`scale.rollout`, :mod:`scale.loop` — scoring and the synchronous / asynchronous rollout sources;
- :mod:`scale.ray_rollouts`, :mod:`scale.distributed` — engines as Ray actors; data-parallel learners;
- :mod:`scale.warmup`, :mod:`scale.trainer`, :mod:`scale.cli` — the supervised warm-up and the run;
- :mod:`scale.checkpoint`, :mod:`scale.metrics` — atomic checkpoints; CSV/JSONL/TensorBoard metrics.

Left out on purpose: reference-policy KL, several optimizer steps per batch (they would break
FlashREINFORCE's one step per fresh batch), sharded optimizers (ZeRO/FSDP).

Start with ``python -m scale train --config scale/configs/tiny_cpu.yaml`` (see ``docs/scale.md``).
"""
