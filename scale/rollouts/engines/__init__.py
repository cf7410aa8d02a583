"""Rollout engines behind one interface (:class:`scale.rollouts.RolloutEngine`): transformers (any device) and
vLLM (CPU or GPU, :mod:`scale.rollouts.engines.vllm_engine`, imported on demand)."""

from scale.rollouts.engines.transformers_engine import TransformersEngine, sample_tokens

__all__ = ["TransformersEngine", "sample_tokens"]
