"""The rollout wing: from prompts to scored trajectories, and the sources that feed the learner.

Bottom of ``scale``: it imports neither :mod:`scale.learner` nor :mod:`scale.run`.

- :mod:`~scale.rollouts.trajectory` — :class:`SamplingParams`, :class:`Trajectory`, :class:`Rollout` and the
  :class:`RolloutEngine` interface (the vocabulary the learner consumes);
- :mod:`~scale.rollouts.prompts`, :mod:`~scale.rollouts.tokenizer` — prompts with verifiable answers (the
  synthetic arithmetic task, the user's files, a resumable stream) and the tokenizers;
- :mod:`~scale.rollouts.engines` — the transformers and vLLM engines and their published weights;
- :mod:`~scale.rollouts.tools`, :mod:`~scale.rollouts.rewards` — calculator turns; answer checking;
- :mod:`~scale.rollouts.collect` — one engine call: prompts → trajectories → scored rollouts; evaluation;
- :mod:`~scale.rollouts.sources`, :mod:`~scale.rollouts.ray_sources` — where the learner's batches come
  from (``next_batch`` / ``publish``): synchronous, worker threads, or Ray actors.
"""

from scale.rollouts.trajectory import FINISH_REASONS, Rollout, RolloutEngine, SamplingParams, Trajectory

__all__ = ["FINISH_REASONS", "Rollout", "RolloutEngine", "SamplingParams", "Trajectory"]
