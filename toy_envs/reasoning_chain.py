"""ReasoningChain: think for t steps, then answer; success probability s_p(t) rises with t."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from flashsim.validation import check_int, check_real
from toy_envs.core import ToyEnv, ToyVectorEnv
from toy_envs.tables import MDPTables, answer_features, check_array, split_prompts

#: Gamma shape of the per-prompt thinking scale tau_p (mean ``thinking_scale``; 2 = moderate spread).
THINKING_SCALE_SHAPE = 2.0

THINK = 0
"""Action id of ``think``; ``answer_k`` is action ``1 + k``."""


@dataclass(frozen=True, eq=False)
class ReasoningChainConfig:
    """Configuration of :class:`ReasoningChain`."""

    success_curve: Any = None
    """Explicit s_p(t) ``[P, horizon]`` in [0, 1] (answer after t thinks); None generates it from ``seed``."""
    correct_answers: Any = None
    """With ``success_curve``: the correct answer id of each prompt ``[P]`` (default all 0)."""
    num_prompts: int = 16
    """P, number of generated prompts (ignored when ``success_curve`` is given)."""
    num_answers: int = 2
    """K, number of answer actions (``answer_0 .. answer_{K-1}``); a wrong answer never succeeds."""
    horizon: int = 16
    """H, at most H steps; an episode still thinking after H steps is truncated with reward 0."""
    thinking_scale: float = 4.0
    """Mean of the per-prompt thinking scale tau_p: s_p(t) = max_success * (1 - exp(-(t + 1) / tau_p))."""
    max_success: float = 0.95
    """Success probability of the correct answer after unlimited thinking."""
    feature_dim: int = 4
    """Size of the generated prompt features (they predict the correct answer linearly)."""
    heldout_fraction: float = 0.25
    """Fraction of prompts held out of training (``floor(fraction * P)`` prompts)."""
    step_duration: float = 1.0
    """Simulated seconds of one step (a thinking step or the answer)."""
    seed: int = 0
    """Seed of the generated curves, features and train / held-out split."""

    def __post_init__(self) -> None:
        check_int("num_prompts", self.num_prompts, low=1)
        check_int("num_answers", self.num_answers, low=1)
        check_int("horizon", self.horizon, low=1)
        check_real("thinking_scale", self.thinking_scale, low=0.0, low_inclusive=False)
        check_real("max_success", self.max_success, low=0.0, high=1.0)
        check_int("feature_dim", self.feature_dim, low=1)
        check_real("heldout_fraction", self.heldout_fraction, low=0.0, high=1.0, high_inclusive=False)
        check_int("seed", self.seed, low=0)
        if self.success_curve is not None:
            check_array("success_curve", self.success_curve, (None, self.horizon), probability=True)
        elif self.correct_answers is not None:
            raise ValueError("correct_answers is only used with an explicit success_curve; pass both or neither.")


def _curves(config: ReasoningChainConfig, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    """Success curves ``[P, H]``, correct answers ``[P]`` and prompt features ``[P, d']``."""
    H, K = config.horizon, config.num_answers
    if config.success_curve is None:
        P = config.num_prompts
        features, correct = answer_features(P, K, config.feature_dim, rng)
        tau = rng.gamma(THINKING_SCALE_SHAPE, config.thinking_scale / THINKING_SCALE_SHAPE, size=P)
        curve = config.max_success * (1.0 - np.exp(-(np.arange(H) + 1.0) / tau[:, None]))
        return curve, correct, np.concatenate([features, np.log(tau)[:, None]], axis=1)
    curve = check_array("success_curve", config.success_curve, (None, H), probability=True)
    P = curve.shape[0]
    correct = np.zeros(P, dtype=np.int64) if config.correct_answers is None else np.asarray(config.correct_answers)
    if correct.shape != (P,) or not np.issubdtype(correct.dtype, np.integer) or correct.min() < 0 or correct.max() >= K:
        raise ValueError(
            f"correct_answers must be {P} integers in [0, {K}) (num_answers), got {config.correct_answers!r}."
        )
    return curve, correct, np.eye(P)


def chain_tables(config: ReasoningChainConfig) -> MDPTables:
    """Exact tables: hidden state = observation = (prompt p, thinking steps t), index ``p * H + t``.

    ``think`` moves t to t + 1 (at t = H - 1 it stays: the horizon truncates first); ``answer_k``
    ends the episode with reward ``s_p(t) * [k == correct_p]``.

    Shape:
        returns tables with ``X = O = P * H``, ``A = 1 + K``.
    """
    rng = np.random.default_rng(config.seed)
    curve, correct, prompt_features = _curves(config, rng)
    (P, H), K = curve.shape, config.num_answers
    prompt, t = np.divmod(np.arange(P * H), H)
    next_state = np.full((P * H, 1 + K), -1)
    next_state[:, THINK] = prompt * H + np.minimum(t + 1, H - 1)
    reward = np.zeros((P * H, 1 + K))
    reward[np.arange(P * H), 1 + correct[prompt]] = curve[prompt, t]
    initial = np.zeros((P, P * H))
    initial[np.arange(P), np.arange(P) * H] = 1.0
    features = np.concatenate([prompt_features[prompt], (t / H)[:, None]], axis=1)
    train, heldout = split_prompts(P, config.heldout_fraction, rng)
    return MDPTables(
        horizon=H,
        num_prompts=P,
        num_states=P * H,
        num_observations=P * H,
        num_actions=1 + K,
        observation_of_state=np.arange(P * H),
        initial_distribution=initial,
        next_state=next_state,
        reward=reward,
        tool_call=np.zeros((P * H, 1 + K)),
        train_prompts=train,
        heldout_prompts=heldout,
        observation_features=features,
    )


class ReasoningChain(ToyEnv):
    """The LLM-length toy: how long to think before answering, under a hard length limit.

    ## Description
    Each episode draws a prompt ``p``; at every step the agent either thinks (action 0) or commits to an
    answer ``answer_k`` (action ``1 + k``). Answering after t thinking steps is correct with probability
    s_p(t), which rises with t (generated: ``max_success * (1 - exp(-(t + 1) / tau_p))`` with a
    per-prompt thinking scale tau_p ~ Gamma); a wrong answer never succeeds. Thinking until the horizon
    truncates the episode with nothing. This is where response length, truncation and the
    sample-mean vs token-mean aggregation bias show up.

    ## Action Space
    ``Discrete(1 + K)``: 0 = think, ``1 + k`` = answer k.

    ## Observation Space
    ``Discrete(P * H)``: ``p * H + t`` (prompt, thinking steps so far). ``tables().observation_features``
    are ``[prompt features, t / H]`` (generated prompt features end with log tau_p).

    ## Rewards
    On answering: 1 with probability ``s_p(t)`` if the answer is correct, else 0. Thinking gives 0.

    ## Starting State
    ``t = 0`` with the prompt uniform over the train prompts, unless pinned with ``options={"prompt": p}``.

    ## Episode End
    Terminated on answering; truncated (reward 0) after H steps without an answer. ``info["length"]``
    is the number of steps so far and ``info["truncated"]`` the truncation flag.

    ## Arguments
    See :class:`ReasoningChainConfig`.

    ## Vectorized environment
    :class:`ReasoningChainVectorEnv` (``gymnasium.make_vec("toy_envs/ReasoningChain-v0", num_envs)``).

    ## Version History
    * v0: initial version.

    Example:
        >>> env = ReasoningChain(success_curve=[[0.2, 0.6, 0.9]], horizon=3, num_answers=1)
        >>> _ = env.reset(seed=0)
        >>> [env.step(0)[4]["length"] for _ in range(2)], env.step(0)[3]
        ([1, 2], True)
    """

    config_class = ReasoningChainConfig
    tables_of = staticmethod(chain_tables)


class ReasoningChainVectorEnv(ToyVectorEnv):
    """Native vector :class:`ReasoningChain` (same arguments plus ``num_envs``)."""

    env_class = ReasoningChain
