"""Rollout engines behind one interface (:class:`RolloutEngine`): transformers (any device) and vLLM (CPU or GPU)."""

from scale.engine.base import FINISH_REASONS, RolloutEngine, SamplingParams, Trajectory
from scale.engine.transformers_engine import TransformersEngine, sample_tokens

__all__ = ["FINISH_REASONS", "RolloutEngine", "SamplingParams", "Trajectory", "TransformersEngine", "sample_tokens"]
