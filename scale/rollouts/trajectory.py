"""What the rollout wing makes: sampler settings, trajectories, scored rollouts, and the engine interface.

An engine (:class:`RolloutEngine`; transformers or vLLM, :mod:`scale.rollouts.engines`) holds a copy
of the policy's weights tagged with a **version** (the learner update that produced them) and turns
token-id prompts into :class:`Trajectory` objects that carry, for every generated token, the
log-probability under the distribution it was **actually sampled from** (the behaviour policy μ). The
learner never recomputes these; FlashREINFORCE's importance ratios and gate compare them with the
current policy. A :class:`Rollout` is a trajectory with its prompt example, reward and group: what the
rollout sources hand to the learner.

Full-support sampling (temperature only, ``top_p = 1``, ``top_k = 0``, ``min_p = 0``) is the default.
Truncating samplers (top-p, top-k, min-p, greedy) sample from a distribution whose support differs from
the policy's, so the ratio π/μ is biased (and undefined where μ = 0); :class:`SamplingParams` refuses
them unless ``allow_truncated_sampling=True`` (evaluation uses that for greedy decoding).
:class:`SamplingParams` is the one place these settings are checked: the training config builds one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from flashsim.validation import check_choice, check_int, check_real

FINISH_REASONS = ("eos", "stop", "length")


@dataclass(frozen=True)
class SamplingParams:
    """How to sample: from softmax(logits / τ), or greedily (a truncating sampler).

    Args:
        max_new_tokens: the most tokens generated per call (per trajectory, tool outputs included).
        temperature: τ > 0; tokens are drawn from softmax(logits / τ).
        top_p: nucleus mass in (0, 1]; 1 keeps the full support.
        top_k: keep the k most likely tokens; 0 keeps all.
        min_p: keep tokens whose probability is ≥ min_p × the largest; 0 keeps all.
        greedy: take the most likely token (``temperature`` is then unused; its log-prob is recorded as 0).
        stop: strings that end generation (the stop string stays in the output; finish reason "stop").
        stop_token_ids: token ids that end generation (kept in the output; finish reason "stop"). Engines
            without a tokenizer (vLLM with ``skip_tokenizer_init``) stop on ids only.
        allow_truncated_sampling: permit top_p < 1, top_k > 0, min_p > 0 or greedy (biases importance ratios).
    """

    max_new_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    greedy: bool = False
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    allow_truncated_sampling: bool = False

    def __post_init__(self) -> None:
        check_int("max_new_tokens", self.max_new_tokens, low=1)
        check_real("temperature", self.temperature, low=0.0, low_inclusive=False)
        check_real("top_p", self.top_p, low=0.0, high=1.0, low_inclusive=False)
        check_int("top_k", self.top_k, low=0)
        check_real("min_p", self.min_p, low=0.0, high=1.0, high_inclusive=False)
        if self.is_truncated and not self.allow_truncated_sampling:
            raise ValueError(
                f"truncating sampler (greedy={self.greedy}, top_p={self.top_p}, top_k={self.top_k}, "
                f"min_p={self.min_p}) refused: it samples outside the policy's support and its processed log-probs "
                "renormalise over the kept mass, which biases the importance ratio; use greedy=False, top_p=1, "
                "top_k=0, min_p=0, or set allow_truncated_sampling=True"
            )
        if isinstance(self.stop, str) or not all(isinstance(s, str) and s for s in self.stop):
            raise ValueError(f"stop must be a tuple of non-empty strings; got {self.stop!r}")
        if not isinstance(self.stop_token_ids, tuple) or not all(
            isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in self.stop_token_ids
        ):
            raise ValueError(f"stop_token_ids must be a tuple of token ids (ints ≥ 0); got {self.stop_token_ids!r}")

    @property
    def is_truncated(self) -> bool:
        """True if the sampler does not draw from the full tempered softmax."""
        return self.greedy or self.top_p < 1 or self.top_k > 0 or self.min_p > 0


@dataclass
class Trajectory:
    """One generated completion and what the learner needs about it.

    ``token_ids``, ``action_mask`` and ``log_probs`` are aligned: ``action_mask[t]`` is False for tokens
    the policy did not choose (tool outputs), whose ``log_probs[t]`` is 0.0 and unused. ``version`` is
    the engine's weight version at sampling (the oldest one if the turns of a multi-turn trajectory
    used several); policy lag = learner version at the update that consumes it − ``version``.
    """

    prompt_ids: list[int]
    token_ids: list[int]
    action_mask: list[bool]
    log_probs: list[float]
    finish_reason: str
    version: int
    num_tool_calls: int = 0
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not len(self.token_ids) == len(self.action_mask) == len(self.log_probs):
            raise ValueError(
                f"token_ids, action_mask, log_probs must align; got lengths {len(self.token_ids)}, "
                f"{len(self.action_mask)}, {len(self.log_probs)}"
            )
        check_choice("finish_reason", self.finish_reason, FINISH_REASONS)

    @property
    def num_actions(self) -> int:
        """Number of policy tokens (T_i)."""
        return sum(self.action_mask)


@dataclass
class Rollout:
    """A scored trajectory: the engine's :class:`Trajectory`, its prompt example, reward and group."""

    trajectory: Trajectory
    example: Any
    reward: float
    group_id: int
    response: str


@runtime_checkable
class RolloutEngine(Protocol):
    """A sampler of trajectories from a versioned copy of the policy."""

    @property
    def version(self) -> int:
        """Version of the weights the next :meth:`generate` call samples from."""
        ...

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams) -> list[Trajectory]:
        """One trajectory per prompt (token-id lists), in order."""
        ...

    def update_weights(self, weights: Any, version: int) -> None:
        """Publish new weights (a ``state_dict`` or a model); later :meth:`generate` calls use them."""
        ...
