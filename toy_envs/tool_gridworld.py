"""ToolGridworld: find the prompt's goal cell; a slow tool call reveals which candidate it is."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from flashsim.validation import check_int, check_real
from toy_envs.core import Latency, ToyEnv, ToyVectorEnv
from toy_envs.tables import ROW_SUM_TOLERANCE, MDPTables, check_array, split_prompts

UP, RIGHT, DOWN, LEFT, TOOL = range(5)
"""Action ids: four moves, then the tool call."""
_ROW_STEP = np.array([-1, 0, 1, 0])
_COLUMN_STEP = np.array([0, 1, 0, -1])
#: Attempts at drawing candidate cells that are pairwise >= 2 apart before giving up.
_MAX_CANDIDATE_DRAWS = 1000


@dataclass(frozen=True, eq=False)
class ToolGridworldConfig:
    """Configuration of :class:`ToolGridworld` (defaults: 5 x 5, H = 20, 8 prompts x 3 candidates)."""

    width: int = 5
    """Grid width (columns)."""
    height: int = 5
    """Grid height (rows)."""
    horizon: int = 20
    """H, at most H steps; not reaching the goal in H steps truncates with reward 0."""
    num_prompts: int = 8
    """P, number of generated prompts (ignored when ``candidates`` is given)."""
    num_candidates: int = 3
    """K, candidate goal cells per generated prompt (ignored when ``candidates`` is given)."""
    goal_concentration: float = 1.0
    """Dirichlet concentration of the generated goal probabilities over a prompt's candidates."""
    candidates: Any = None
    """Explicit candidate cells ``[P, K]`` (cell = row * width + column); None generates them."""
    goal_probs: Any = None
    """Explicit goal probabilities ``[P, K]`` (rows sum to 1); None: Dirichlet or uniform."""
    start: Any = None
    """Start cell (row * width + column); None is the centre."""
    tool_error_rate: float = 0.0
    """Probability that a tool call shows a wrong candidate (uniform over the K - 1 others); each call draws
    anew and the observation shows the latest answer. 0: the tool always shows the goal."""
    tool_latency: float = 5.0
    """Median simulated latency of a tool call, on top of ``step_duration`` (lognormal)."""
    tool_latency_sigma: float = 1.0
    """Log-space standard deviation of the tool latency (heavy tail; 0 makes it constant)."""
    step_duration: float = 1.0
    """Simulated seconds of every step."""
    heldout_fraction: float = 0.25
    """Fraction of prompts held out of training (``floor(fraction * P)`` prompts)."""
    seed: int = 0
    """Seed of the generated candidates, goal probabilities and train / held-out split."""

    def __post_init__(self) -> None:
        check_int("width", self.width, low=1)
        check_int("height", self.height, low=1)
        check_int("horizon", self.horizon, low=1)
        check_int("num_prompts", self.num_prompts, low=1)
        check_int("num_candidates", self.num_candidates, low=1)
        check_real("goal_concentration", self.goal_concentration, low=0.0, low_inclusive=False)
        check_real("heldout_fraction", self.heldout_fraction, low=0.0, high=1.0, high_inclusive=False)
        check_real("tool_error_rate", self.tool_error_rate, low=0.0, high=1.0)
        if self.tool_error_rate > 0 and self.candidates is None and self.num_candidates < 2:
            raise ValueError("tool_error_rate > 0 needs num_candidates >= 2 (a wrong candidate to show).")
        check_int("seed", self.seed, low=0)
        if self.start is not None:
            check_int("start", self.start, low=0)
            if self.start >= self.num_cells:
                raise ValueError(f"start must be a cell in [0, {self.num_cells}) (row * width + column).")
        Latency(self.step_duration, self.tool_latency, self.tool_latency_sigma)  # validates the latency

    @property
    def num_cells(self) -> int:
        return self.width * self.height

    @property
    def start_cell(self) -> int:
        return (self.height // 2) * self.width + self.width // 2 if self.start is None else int(self.start)


def move(cells: np.ndarray, actions: np.ndarray, width: int, height: int) -> np.ndarray:
    """Cells after moves (``UP, RIGHT, DOWN, LEFT``); moving into a wall stays put. Shape: ``[N] -> [N]``."""
    rows = np.clip(cells // width + _ROW_STEP[actions], 0, height - 1)
    columns = np.clip(cells % width + _COLUMN_STEP[actions], 0, width - 1)
    return rows * width + columns


def _distances(config: ToolGridworldConfig, blocked: np.ndarray) -> np.ndarray:
    """Breadth-first step distances ``[cells]`` from the start, not walking through ``blocked`` cells."""
    distance = np.full(config.num_cells, -1)
    distance[config.start_cell] = 0
    frontier = np.array([config.start_cell])
    while frontier.size:
        reached = np.unique(
            move(np.repeat(frontier, 4), np.tile(np.arange(4), frontier.size), config.width, config.height)
        )
        reached = reached[distance[reached] < 0]
        distance[reached] = distance[frontier[0]] + 1
        frontier = reached[~blocked[reached]]
    return distance


def _draw_candidates(config: ToolGridworldConfig, rng: np.random.Generator) -> np.ndarray:
    """``[P, K]`` cells, not the start, pairwise at least 2 apart (so none can wall another in)."""
    cells = np.setdiff1d(np.arange(config.num_cells), [config.start_cell])
    rows = []
    for _ in range(config.num_prompts):
        for _ in range(_MAX_CANDIDATE_DRAWS):
            chosen = rng.choice(cells, size=config.num_candidates, replace=False)
            gaps = np.abs(chosen[:, None] // config.width - chosen // config.width)
            gaps += np.abs(chosen[:, None] % config.width - chosen % config.width)
            if np.all(gaps + 2 * np.eye(chosen.size, dtype=np.int64) >= 2):
                break
        else:
            raise ValueError(
                f"Cannot place {config.num_candidates} candidates 2 cells apart on a "
                f"{config.width} x {config.height} grid; lower num_candidates or enlarge the grid."
            )
        rows.append(np.sort(chosen))
    return np.array(rows)


def _goal_layout(config: ToolGridworldConfig, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Validated candidates ``[P, K]`` (int64) and goal probabilities ``[P, K]``."""
    if config.candidates is None:
        candidates = _draw_candidates(config, rng)
    else:
        candidates = np.asarray(config.candidates)
        if candidates.ndim != 2 or not np.issubdtype(candidates.dtype, np.integer):
            raise ValueError(f"candidates must be an integer array [P, K], got {config.candidates!r}.")
    P, K = candidates.shape
    if config.goal_probs is not None:
        probs = check_array("goal_probs", config.goal_probs, (P, K), probability=True)
        if np.max(np.abs(probs.sum(axis=1) - 1.0)) > ROW_SUM_TOLERANCE:
            raise ValueError(f"goal_probs rows must sum to 1 (one distribution per prompt), got {probs.sum(axis=1)}.")
    elif config.candidates is None:
        probs = rng.dirichlet(np.full(K, config.goal_concentration), size=P)
    else:
        probs = np.full((P, K), 1.0 / K)
    for p in range(P):
        row = candidates[p]
        if row.min() < 0 or row.max() >= config.num_cells or config.start_cell in row or np.unique(row).size < K:
            raise ValueError(
                f"candidates[{p}] must be distinct cells in [0, {config.num_cells}) other than "
                f"the start {config.start_cell}, got {row.tolist()}."
            )
        blocked = np.isin(np.arange(config.num_cells), row)
        distance = _distances(config, blocked)[row]
        if distance.min() < 0 or distance.max() + 1 > config.horizon:
            raise ValueError(
                f"candidates[{p}] = {row.tolist()} cannot all be reached (after one tool call) "
                f"within horizon {config.horizon} without crossing another candidate; "
                "move them or raise the horizon."
            )
    return candidates.astype(np.int64), probs


def _features(config: ToolGridworldConfig, candidates: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """``[O, 10]``: known, unknown, then 4 direction flags (up, right, down, left) towards the revealed
    goal when known, and 4 towards the prompt's most likely candidate when unknown."""
    P, K = candidates.shape
    prompt, shown, cell = (a.ravel() for a in np.indices((P, K + 1, config.num_cells)))
    known = shown < K
    target = np.where(known, candidates[prompt, np.minimum(shown, K - 1)], candidates[prompt, probs.argmax(1)[prompt]])
    d_row = target // config.width - cell // config.width
    d_col = target % config.width - cell % config.width
    directions = np.stack([d_row < 0, d_col > 0, d_row > 0, d_col < 0], axis=1).astype(np.float64)
    return np.concatenate(
        [known[:, None], ~known[:, None], directions * known[:, None], directions * ~known[:, None]], axis=1
    ).astype(np.float64)


def _tool_outcomes(config: ToolGridworldConfig, K: int, goal: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Shown index ``s`` after a tool call and its probability, per hidden state's goal. Shape: ``[X, K_out]`` each.

    Exact tool (``tool_error_rate == 0``): one outcome, ``s = 1`` (the goal shown). Noisy tool: K outcomes,
    ``s = 1 + j`` shows candidate j, with probability ``1 - e`` for the goal and ``e / (K - 1)`` for each other.
    """
    error = config.tool_error_rate
    if error == 0:
        return np.ones((goal.size, 1), dtype=np.int64), np.ones((goal.size, 1))
    if K < 2:
        raise ValueError("tool_error_rate > 0 needs at least 2 candidates per prompt (a wrong one to show).")
    shown = np.arange(K)
    probability = np.where(shown == goal[:, None], 1.0 - error, error / (K - 1))
    return np.broadcast_to(1 + shown, probability.shape).copy(), probability


def gridworld_tables(config: ToolGridworldConfig) -> MDPTables:
    """Exact tables over hidden states (prompt p, goal k, shown s, cell c).

    Hidden index ``((p * K + k) * S + s) * C + c``, ``s = 0`` before any tool call. With an exact tool
    (``tool_error_rate == 0``) S = 2 and ``s = 1`` once the goal is revealed; with a noisy tool S = K + 1
    and ``s = 1 + j`` while candidate j is shown (a tool call moves to ``s = 1 + j`` with probability
    ``1 - e`` for j = k, ``e / (K - 1)`` otherwise). Observation index ``(p * (K + 1) + g) * C + c`` with
    g the shown candidate and ``g = K`` ("unknown") before. Moving onto the goal ends the episode with
    reward 1, onto another candidate ends it with reward 0 (a wrong commitment).

    Shape:
        returns tables with ``X = P * K * S * C``, ``O = P * (K + 1) * C``, ``A = 5``, and K outcomes per
        step (1 for the exact tool, K for a noisy one; moves are deterministic).
    """
    rng = np.random.default_rng(config.seed)
    candidates, probs = _goal_layout(config, rng)
    (P, K), C = candidates.shape, config.num_cells
    S = 2 if config.tool_error_rate == 0 else K + 1
    prompt, goal, shown, cell = (a.ravel() for a in np.indices((P, K, S, C)))
    X = P * K * S * C
    targets = move(np.repeat(cell, 4), np.tile(np.arange(4), X), config.width, config.height).reshape(X, 4)
    on_candidate = (targets[:, :, None] == candidates[prompt][:, None, :]).any(axis=2)
    shown_after, tool_probability = _tool_outcomes(config, K, goal)
    outcomes = shown_after.shape[1]
    next_state = np.full((X, 5, outcomes), -1, dtype=np.int64)
    next_state[:, :4, 0] = np.where(on_candidate, -1, np.arange(X)[:, None] + targets - cell[:, None])
    next_state[:, TOOL] = ((prompt * K + goal)[:, None] * S + shown_after) * C + cell[:, None]
    transition_probability = np.zeros((X, 5, outcomes))
    transition_probability[:, :4, 0] = 1.0
    transition_probability[:, TOOL] = tool_probability
    reward = np.zeros((X, 5, outcomes))
    reward[:, :4, 0] = targets == candidates[prompt, goal][:, None]
    tool_call = np.zeros((X, 5))
    tool_call[:, TOOL] = 1.0
    initial = np.zeros((P, X))
    starts = ((np.arange(P)[:, None] * K + np.arange(K)) * S) * C + config.start_cell
    np.put_along_axis(initial, starts, probs, axis=1)
    train, heldout = split_prompts(P, config.heldout_fraction, rng)
    revealed = np.where(S == 2, goal, shown - 1)
    return MDPTables(
        horizon=config.horizon,
        num_prompts=P,
        num_states=X,
        num_observations=P * (K + 1) * C,
        num_actions=5,
        observation_of_state=(prompt * (K + 1) + np.where(shown > 0, revealed, K)) * C + cell,
        initial_distribution=initial,
        next_state=next_state,
        reward=reward,
        tool_call=tool_call,
        train_prompts=train,
        heldout_prompts=heldout,
        observation_features=_features(config, candidates, probs),
        transition_probability=transition_probability,
    )


class ToolGridworld(ToyEnv):
    """The agentic toy: walk to the prompt's goal, or first pay for a tool call that says where it is.

    ## Description
    Each prompt has K candidate goal cells and goal probabilities; at reset the episode's goal is drawn
    among them. The agent starts in the centre and does not know which candidate is the goal: stepping
    onto the goal ends the episode with reward 1, stepping onto another candidate ends it with reward 0
    (a wrong commitment). The ``tool`` action reveals the goal in the observation at the cost of one
    step and a heavy-tailed (lognormal) simulated latency. Without the tool the best success rate is the
    prompt's largest goal probability; with it, 1 — so the tool is useful, and slow. With
    ``tool_error_rate = e > 0`` the tool shows a wrong candidate with probability e (each call draws
    anew), so following it succeeds with probability 1 - e: worth calling only where 1 - e beats the
    prompt's largest goal probability.

    ## Action Space
    ``Discrete(5)``: 0 up, 1 right, 2 down, 3 left, 4 tool. Moving into a wall stays put.

    ## Observation Space
    ``Discrete(P * (K + 1) * C)``, index ``(p * (K + 1) + g) * C + c``: prompt p, the revealed goal's
    candidate index g (or g = K while unknown) and the cell c = row * width + column. The policy never
    sees which candidate is the goal before calling the tool. ``tables().observation_features`` ``[O, 10]``
    are direction flags towards the revealed goal (or the most likely candidate), see ``_features``.

    ## Rewards
    1 on stepping onto the goal, 0 otherwise (tool calls cost time, not reward).

    ## Starting State
    The start cell (default the centre), goal unknown; the prompt uniform over the train prompts unless
    pinned with ``options={"prompt": p}``; the goal drawn from the prompt's goal probabilities.

    ## Episode End
    Terminated on stepping onto any candidate; truncated (reward 0) after H steps (default 20).

    ## Arguments
    See :class:`ToolGridworldConfig`. ``info`` has ``tool_call``, ``tool_calls`` (this episode) and
    ``duration`` (``step_duration`` plus, for a tool call, ``tool_latency * exp(tool_latency_sigma * z)``).

    ## Vectorized environment
    :class:`ToolGridworldVectorEnv` (``gymnasium.make_vec("toy_envs/ToolGridworld-v0", num_envs)``).

    ## Version History
    * v0: initial version; ``tool_error_rate`` (default 0, the exact tool) added later without changing
      the default tables.

    Example:
        >>> env = ToolGridworld(candidates=[[0, 24]], goal_probs=[[1.0, 0.0]], heldout_fraction=0.0)
        >>> _ = env.reset(seed=0)
        >>> observation, reward, terminated, truncated, info = env.step(TOOL)
        >>> info["tool_call"], info["duration"] > 1.0
        (True, True)
    """

    config_class = ToolGridworldConfig
    tables_of = staticmethod(gridworld_tables)


class ToolGridworldVectorEnv(ToyVectorEnv):
    """Native vector :class:`ToolGridworld` (same arguments plus ``num_envs``)."""

    env_class = ToolGridworld
