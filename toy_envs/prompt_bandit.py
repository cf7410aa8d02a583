"""PromptBandit: one step per episode, P prompts x A answers, Bernoulli(s[p, a]) reward."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from flashsim.validation import check_int, check_real
from toy_envs.core import ToyEnv, ToyVectorEnv
from toy_envs.tables import MDPTables, answer_features, check_array, split_prompts

#: Beta concentration of the per-prompt difficulty (mean ``difficulty``; 4 gives a broad spread).
DIFFICULTY_CONCENTRATION = 4.0


@dataclass(frozen=True, eq=False)
class PromptBanditConfig:
    """Configuration of :class:`PromptBandit` (the defaults are the ``"default"`` preset)."""

    success_probs: Any = None
    """Explicit success probabilities ``[P, A]`` in [0, 1]; None generates them from ``seed``."""
    num_prompts: int = 64
    """P, number of generated prompts (ignored when ``success_probs`` is given)."""
    num_answers: int = 4
    """A, number of generated answers (ignored when ``success_probs`` is given)."""
    difficulty: float = 0.3
    """Mean per-prompt difficulty d_p ~ Beta (in (0, 1)); the good answer succeeds w.p. 1 - d_p."""
    wrong_success_ratio: float = 0.2
    """A wrong answer succeeds w.p. ``wrong_success_ratio * (1 - d_p)``."""
    feature_dim: int = 8
    """d, size of the generated prompt features (they predict the good answer linearly)."""
    prompt_features: Any = None
    """Explicit prompt features ``[P, d]``; None: generated ones, or one-hot with ``success_probs``."""
    heldout_fraction: float = 0.25
    """Fraction of prompts held out of training (``floor(fraction * P)`` prompts)."""
    step_duration: float = 1.0
    """Simulated seconds of the single step."""
    seed: int = 0
    """Seed of the generated probabilities, features and train / held-out split."""

    def __post_init__(self) -> None:
        check_int("num_prompts", self.num_prompts, low=1)
        check_int("num_answers", self.num_answers, low=2)
        check_real("difficulty", self.difficulty, low=0.0, high=1.0, low_inclusive=False, high_inclusive=False)
        check_real("wrong_success_ratio", self.wrong_success_ratio, low=0.0, high=1.0)
        check_int("feature_dim", self.feature_dim, low=1)
        check_real("heldout_fraction", self.heldout_fraction, low=0.0, high=1.0, high_inclusive=False)
        check_int("seed", self.seed, low=0)
        if self.success_probs is not None:
            check_array("success_probs", self.success_probs, (None, None), probability=True)


def bandit_tables(config: PromptBanditConfig) -> MDPTables:
    """Exact tables: hidden state = observation = prompt; every action ends the episode.

    Shape:
        returns tables with ``X = O = P``, ``H = 1``, ``reward = success_probs`` ``[P, A]``.
    """
    rng = np.random.default_rng(config.seed)
    if config.success_probs is None:
        P, A = config.num_prompts, config.num_answers
        features, good = answer_features(P, A, config.feature_dim, rng)
        a = DIFFICULTY_CONCENTRATION * config.difficulty
        difficulty = rng.beta(a, DIFFICULTY_CONCENTRATION - a, size=P)
        ratio = np.where(np.arange(A) == good[:, None], 1.0, config.wrong_success_ratio)
        success = (1.0 - difficulty)[:, None] * ratio
    else:
        success = check_array("success_probs", config.success_probs, (None, None), probability=True)
        P, A = success.shape
        if A < 1 or P < 1:
            raise ValueError(f"success_probs must have shape [P >= 1, A >= 1], got {list(success.shape)}.")
        features = np.eye(P)
    if config.prompt_features is not None:
        features = check_array("prompt_features", config.prompt_features, (P, None))
    train, heldout = split_prompts(P, config.heldout_fraction, rng)
    return MDPTables(
        horizon=1,
        num_prompts=P,
        num_states=P,
        num_observations=P,
        num_actions=A,
        observation_of_state=np.arange(P),
        initial_distribution=np.eye(P),
        next_state=np.full((P, A), -1),
        reward=success,
        tool_call=np.zeros((P, A)),
        train_prompts=train,
        heldout_prompts=heldout,
        observation_features=features,
    )


BANDIT_PRESETS: dict[str, dict[str, Any]] = {
    "default": {},
    "tiny": {"success_probs": [[0.9, 0.2], [0.3, 0.7]], "heldout_fraction": 0.0},
    "hard": {"difficulty": 0.7, "num_answers": 8},
}
"""Named PromptBandit configurations; ``"default"`` (64 prompts x 4 answers) is the constructor default."""


def bandit_preset(name: str) -> dict[str, Any]:
    """Keyword arguments of a named preset, for ``PromptBandit(**...)`` or ``gymnasium.make(id, **...)``.

    >>> bandit_preset("tiny")["success_probs"]
    [[0.9, 0.2], [0.3, 0.7]]
    """
    if name not in BANDIT_PRESETS:
        raise ValueError(f"Unknown bandit preset {name!r}; valid presets are {sorted(BANDIT_PRESETS)}.")
    return dict(BANDIT_PRESETS[name])


class PromptBandit(ToyEnv):
    """A contextual bandit over prompts: the RL-for-LLMs setting reduced to one step.

    ## Description
    Each episode draws a prompt ``p`` (uniform over the train prompts, or pinned with
    ``reset(options={"prompt": p})`` to form GRPO groups); the agent answers ``a`` and receives a
    Bernoulli(s[p, a]) reward. Generated problems have a per-prompt difficulty d_p ~ Beta (mean
    ``difficulty``), one good answer per prompt succeeding w.p. 1 - d_p and wrong answers w.p.
    ``wrong_success_ratio * (1 - d_p)``; the good answer is a linear argmax of the prompt features, so a
    linear policy generalises to held-out prompts. The optimum is ``mean_p max_a s[p, a]``.

    ## Action Space
    ``Discrete(A)``: the answer.

    ## Observation Space
    ``Discrete(P)``: the prompt id. ``tables().observation_features`` ``[P, d]`` are the prompt features.

    ## Rewards
    1 with probability ``s[p, a]``, else 0.

    ## Starting State
    The prompt, uniform over ``tables().train_prompts`` unless pinned.

    ## Episode End
    Terminated after the single step (H = 1; never truncated).

    ## Arguments
    See :class:`PromptBanditConfig` (``success_probs``, ``num_prompts``, ``num_answers``, ``difficulty``,
    ``wrong_success_ratio``, ``feature_dim``, ``prompt_features``, ``heldout_fraction``,
    ``step_duration``, ``seed``) and :func:`bandit_preset`.

    ## Vectorized environment
    :class:`PromptBanditVectorEnv` (``gymnasium.make_vec("toy_envs/PromptBandit-v0", num_envs)``), batched
    numpy over the same tables, NEXT_STEP autoreset; sub-env i with seed s + i equals this env with seed s + i.

    ## Version History
    * v0: initial version.

    Example:
        >>> env = PromptBandit(**bandit_preset("tiny"))
        >>> observation, info = env.reset(seed=0, options={"prompt": 1})
        >>> observation, info["prompt"], env.tables().expected_reward[1].tolist()
        (1, 1, [0.3, 0.7])
    """

    config_class = PromptBanditConfig
    tables_of = staticmethod(bandit_tables)


class PromptBanditVectorEnv(ToyVectorEnv):
    """Native vector :class:`PromptBandit` (same arguments plus ``num_envs``)."""

    env_class = PromptBandit
