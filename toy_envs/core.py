"""The one implementation of toy-env dynamics, shared by every single env and every vector env.

:class:`TabularDynamics` steps a batch of episodes through :class:`~toy_envs.tables.MDPTables`;
:class:`TabularEnv` is the batch-of-one gymnasium env and :class:`TabularVectorEnv` the native
vector env (NEXT_STEP autoreset). Each toy env only builds its tables (a pure function of its
configuration) and subclasses :class:`ToyEnv` / :class:`ToyVectorEnv` (the shell: keyword arguments →
config → tables and latency), so there is no second copy of the physics to drift (gymnasium's CartPole
vector env copies its physics line by line; we do not). :class:`EnvRow` is one row of the registration
table, :data:`toy_envs.TOY_ENVS`.

Randomness is counter-based so that a vector env and a loop of single envs draw *the same* numbers:
each episode has a 64-bit key (from the env's seeded ``np_random`` and an episode counter) and every
draw is ``uniform(key, step, stream)``, a SplitMix64 hash (Steele, Lea & Flood, 2014). Nothing
depends on how many other envs run alongside, which makes "vector env == loop of single envs" exact.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from flashsim.validation import check_int, check_real
from toy_envs.tables import MDPTables

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_EPISODE_SALT = np.uint64(0xD1B54A32D192ED03)
_NUM_STREAMS = 8
_STREAM_PROMPT, _STREAM_START, _STREAM_REWARD, _STREAM_LATENCY_RADIUS, _STREAM_LATENCY_ANGLE, _STREAM_OUTCOME = range(6)
_KEY_BOUND = 2**63
_SEED_SALT = np.uint64(0x8CB92BA72F3D8DD7)


def _mix(z: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser on a uint64 array (array arithmetic wraps silently; keep ``z.ndim >= 1``)."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def episode_keys(base_keys: np.ndarray, episodes: np.ndarray) -> np.ndarray:
    """Key of episode ``e`` of an env whose seeded base key is ``k``.

    Shape:
        base_keys: ``[N] uint64``; episodes: ``[N] int64``; returns ``[N] uint64``.
    """
    return _mix(base_keys ^ _mix((episodes.astype(np.uint64) + np.uint64(1)) * _EPISODE_SALT))


def uniform(keys: np.ndarray, counters: np.ndarray, stream: int) -> np.ndarray:
    """Counter-based uniforms in ``[0, 1)``: draw number ``counters * 8 + stream`` of each key.

    Shape:
        keys: ``[N] uint64``; counters: ``[N] int64``; returns ``[N] float64``.
    """
    position = counters.astype(np.uint64) * np.uint64(_NUM_STREAMS) + np.uint64(stream + 1)
    z = _mix(keys + position * _GOLDEN)
    return (z >> np.uint64(11)).astype(np.float64) * 2.0**-53


def seed_keys(seeds: np.ndarray) -> np.ndarray:
    """Base key of an env reset with integer seed ``s`` (single env: ``seed``; vector env: ``seed + i``).

    A hash rather than ``np.random.default_rng(s)``: seeding 128 envs this way costs microseconds, so
    the simulator can reseed its vector env at every collection. Shape: ``[N] int -> [N] uint64``.
    """
    return _mix((np.asarray(seeds, dtype=np.uint64) ^ _SEED_SALT) * _GOLDEN)


def _standard_normals(keys: np.ndarray, counters: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two independent normals by Box–Muller (cosine and sine) from two counter-based uniforms."""
    radius = np.sqrt(-2.0 * np.log1p(-uniform(keys, counters, _STREAM_LATENCY_RADIUS)))
    angle = 2.0 * np.pi * uniform(keys, counters, _STREAM_LATENCY_ANGLE)
    return radius * np.cos(angle), radius * np.sin(angle)


@dataclass(frozen=True)
class Latency:
    """Simulated wall-clock cost of a step (seconds, arbitrary units): the only latency model.

    A step lasts ``step_duration · e^{step_duration_sigma · z}`` plus, for a tool call,
    ``tool_latency · e^{tool_latency_sigma · z'}`` (z, z' independent standard normals; the medians are
    ``step_duration`` and ``tool_latency``). The gymnasium envs report it as ``info["duration"]`` and
    the simulator's event loop schedules workers with it.
    """

    step_duration: float = 1.0
    """Median duration of every step (a move, a thinking step, an answer)."""
    tool_latency: float = 0.0
    """Median extra latency of a tool call; the extra latency is lognormal (heavy-tailed)."""
    tool_latency_sigma: float = 1.0
    """Log-space standard deviation of the tool latency (0 makes it constant)."""
    step_duration_sigma: float = 0.0
    """Log-space standard deviation of the step duration (0: every step takes ``step_duration``)."""

    def __post_init__(self) -> None:
        for name in ("step_duration", "tool_latency", "tool_latency_sigma", "step_duration_sigma"):
            check_real(name, getattr(self, name), low=0.0)


@dataclass(frozen=True, eq=False)
class StepBatch:
    """Result of one batched step. Every field is ``[N]``."""

    state: np.ndarray
    observation: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    tool_call: np.ndarray
    duration: np.ndarray


@dataclass(frozen=True, eq=False)
class TabularDynamics:
    """Pure batched reset and step through ``tables`` (the only dynamics code of every toy env)."""

    tables: MDPTables
    latency: Latency = field(default_factory=Latency)

    def __post_init__(self) -> None:
        # Start distributions as padded (support, cdf) per prompt: sampling is one comparison per slot.
        distribution = self.tables.initial_distribution
        width = int((distribution > 0).sum(axis=1).max())
        support = np.zeros((self.tables.num_prompts, width), dtype=np.int64)
        cdf = np.full((self.tables.num_prompts, width), 2.0)  # padding is never below a uniform
        for prompt, row in enumerate(distribution):
            states = np.flatnonzero(row > 0)
            support[prompt, : states.size] = states
            cdf[prompt, : states.size] = np.cumsum(row[states])
            cdf[prompt, states.size - 1] = 1.0  # no rounding gap at the top
        object.__setattr__(self, "_start_support", support)
        object.__setattr__(self, "_start_cdf", cdf)
        outcome_cdf = np.cumsum(self.tables.transition_probability, axis=2)
        outcome_cdf[:, :, -1] = 2.0  # the last outcome catches every uniform (no rounding gap)
        object.__setattr__(self, "_outcome_cdf", outcome_cdf)
        object.__setattr__(self, "_tool_call", self.tables.tool_call > 0)

    def reset(self, keys: np.ndarray, prompts: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Draw prompts (uniform over the train prompts unless given) and start states.

        Shape:
            keys: ``[N] uint64``; prompts: ``[N] int64`` or None; returns ``(prompts, states)``, ``[N]`` each.
        """
        zeros = np.zeros(keys.shape, dtype=np.int64)
        if prompts is None:
            train = self.tables.train_prompts
            index = (uniform(keys, zeros, _STREAM_PROMPT) * train.size).astype(np.int64)
            prompts = train[np.minimum(index, train.size - 1)]
        u = uniform(keys, zeros, _STREAM_START)
        slot = (u[:, None] >= self._start_cdf[prompts]).sum(axis=1)
        states = self._start_support[prompts, np.minimum(slot, self._start_support.shape[1] - 1)]
        return prompts, states

    def step(self, states: np.ndarray, actions: np.ndarray, lengths: np.ndarray, keys: np.ndarray) -> StepBatch:
        """Take ``actions`` in ``states`` at step ``lengths`` (steps already taken) of each episode.

        On termination the state (and observation) stays the last non-terminal one.

        Shape:
            states, actions, lengths: ``[N] int64``; keys: ``[N] uint64``; every output field ``[N]``.
        """
        tables, latency = self.tables, self.latency
        outcome = 0
        if tables.num_outcomes > 1:  # deterministic tables draw nothing here
            u = uniform(keys, lengths, _STREAM_OUTCOME)
            outcome = (u[:, None] >= self._outcome_cdf[states, actions]).sum(axis=1)
        next_states = tables.next_state[states, actions, outcome]
        reward = (uniform(keys, lengths, _STREAM_REWARD) < tables.reward[states, actions, outcome]).astype(np.float64)
        terminated = next_states < 0
        truncated = ~terminated & (lengths + 1 >= tables.horizon)
        tool_call = self._tool_call[states, actions]
        duration = np.full(states.shape, latency.step_duration)
        timed_tool = latency.tool_latency > 0 and tool_call.any()
        if timed_tool or latency.step_duration_sigma > 0:
            z_tool, z_step = _standard_normals(keys, lengths)
            if latency.step_duration_sigma > 0:
                duration = duration * np.exp(latency.step_duration_sigma * z_step)
            if timed_tool:
                extra = latency.tool_latency * np.exp(latency.tool_latency_sigma * z_tool)
                duration = np.where(tool_call, duration + extra, duration)
        states = np.where(terminated, states, next_states)
        return StepBatch(
            state=states,
            observation=tables.observation_of_state[states],
            reward=reward,
            terminated=terminated,
            truncated=truncated,
            tool_call=tool_call,
            duration=duration,
        )

    def check_prompts(self, prompts: Any, shape: tuple[int, ...]) -> np.ndarray:
        """Validate ``options["prompt"]``: integers in ``[0, P)``, broadcastable to ``shape``."""
        array = np.asarray(prompts)
        P = self.tables.num_prompts
        if not np.issubdtype(array.dtype, np.integer):
            raise ValueError(f'options["prompt"] must be an integer prompt id in [0, {P}), got {prompts!r}.')
        if array.size and (array.min() < 0 or array.max() >= P):
            raise ValueError(
                f'options["prompt"] must lie in [0, {P}) (num_prompts); got {prompts!r}. '
                "Use env.unwrapped.tables().train_prompts / heldout_prompts for valid ids."
            )
        try:
            return np.broadcast_to(array.astype(np.int64), shape).copy()
        except ValueError:
            raise ValueError(f'options["prompt"] must be a scalar or have shape {shape}, got {array.shape}.') from None


def _check_options(options: dict[str, Any] | None, allowed: tuple[str, ...]) -> dict[str, Any]:
    options = {} if options is None else dict(options)
    unknown = set(options) - set(allowed)
    if unknown:
        raise ValueError(f"Unknown reset option(s) {sorted(unknown)}; valid options are {list(allowed)}.")
    return options


class TabularEnv(gym.Env[int, int]):
    """A single toy env: :class:`TabularDynamics` on a batch of one (subclasses build the tables).

    ``info`` carries ``prompt``, ``tool_call`` (this step), ``duration`` (simulated seconds of this
    step), ``length`` (steps taken in the episode), ``tool_calls`` (in the episode) and ``truncated``.
    """

    metadata = {"render_modes": []}

    def __init__(self, dynamics: TabularDynamics):
        self._dynamics = dynamics
        self.observation_space = gym.spaces.Discrete(dynamics.tables.num_observations)
        self.action_space = gym.spaces.Discrete(dynamics.tables.num_actions)
        self._base_key: np.ndarray | None = None
        self._episode = np.full(1, -1, dtype=np.int64)
        self._key = np.zeros(1, dtype=np.uint64)
        self._prompt = self._state = self._length = self._tool_calls = np.zeros(1, dtype=np.int64)
        self._done = True

    def tables(self) -> MDPTables:
        """The exact tables of this env (see :class:`toy_envs.MDPTables`)."""
        return self._dynamics.tables

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[int, dict]:
        super().reset(seed=seed)
        options = _check_options(options, ("prompt",))
        if seed is not None:
            self._base_key = seed_keys(np.array([seed]))
            self._episode = np.full(1, -1, dtype=np.int64)
        elif self._base_key is None:
            self._base_key = self.np_random.integers(0, _KEY_BOUND, size=1, dtype=np.uint64)
            self._episode = np.full(1, -1, dtype=np.int64)
        self._episode = self._episode + 1
        self._key = episode_keys(self._base_key, self._episode)
        pinned = self._dynamics.check_prompts(options["prompt"], (1,)) if "prompt" in options else None
        self._prompt, self._state = self._dynamics.reset(self._key, pinned)
        self._length = np.zeros(1, dtype=np.int64)
        self._tool_calls = np.zeros(1, dtype=np.int64)
        self._done = False
        observation = int(self._dynamics.tables.observation_of_state[self._state[0]])
        return observation, {"prompt": int(self._prompt[0]), "length": 0, "tool_calls": 0}

    def step(self, action: int) -> tuple[int, float, bool, bool, dict]:
        if self._done:
            raise RuntimeError("The episode has ended; call reset() before step().")
        if not self.action_space.contains(action):
            raise ValueError(f"action must be an integer in [0, {self.action_space.n}), got {action!r}.")
        result = self._dynamics.step(self._state, np.full(1, action, dtype=np.int64), self._length, self._key)
        self._state = result.state
        self._length = self._length + 1
        self._tool_calls = self._tool_calls + result.tool_call
        terminated, truncated = bool(result.terminated[0]), bool(result.truncated[0])
        self._done = terminated or truncated
        info = {
            "prompt": int(self._prompt[0]),
            "tool_call": bool(result.tool_call[0]),
            "duration": float(result.duration[0]),
            "length": int(self._length[0]),
            "tool_calls": int(self._tool_calls[0]),
            "truncated": truncated,
        }
        return int(result.observation[0]), float(result.reward[0]), terminated, truncated, info


class TabularVectorEnv(VectorEnv):
    """Native vector env over :class:`TabularDynamics` (batched numpy, NEXT_STEP autoreset).

    Sub-env ``i`` seeded with ``seed + i`` reproduces a single env reset with ``seed + i`` exactly.
    ``reset(options={"prompt": array[N] or int, "reset_mask": bool[N]})`` pins prompts and/or resets
    only some envs. ``info`` holds ``[N]`` arrays with the single env's keys (no ``_key`` masks).
    """

    metadata = {"render_modes": [], "autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(self, dynamics: TabularDynamics, num_envs: int):
        self._dynamics = dynamics
        self.num_envs = check_int("num_envs", num_envs, low=1)
        self.single_observation_space = gym.spaces.Discrete(dynamics.tables.num_observations)
        self.single_action_space = gym.spaces.Discrete(dynamics.tables.num_actions)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        N = self.num_envs
        self._base_keys: np.ndarray | None = None
        self._episodes = np.full(N, -1, dtype=np.int64)
        self._keys = np.zeros(N, dtype=np.uint64)
        self._prompts, self._states = np.zeros(N, dtype=np.int64), np.zeros(N, dtype=np.int64)
        self._lengths, self._tool_calls = np.zeros(N, dtype=np.int64), np.zeros(N, dtype=np.int64)
        self._needs_reset = np.ones(N, dtype=bool)

    def tables(self) -> MDPTables:
        """The exact tables of this env (see :class:`toy_envs.MDPTables`)."""
        return self._dynamics.tables

    def _seed(self, seed: int | list[int] | None) -> None:
        N = self.num_envs
        if seed is None:
            self._base_keys = seeding.np_random(None)[0].integers(0, _KEY_BOUND, size=N, dtype=np.uint64)
        else:
            seeds = [seed + i for i in range(N)] if isinstance(seed, (int, np.integer)) else list(seed)
            if len(seeds) != N:
                raise ValueError(f"seed must be an int or a list of {N} ints (one per env), got {len(seeds)}.")
            self._base_keys = seed_keys(np.array(seeds, dtype=np.uint64))
        self._episodes = np.full(N, -1, dtype=np.int64)

    def reset(
        self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict]:
        options = _check_options(options, ("prompt", "reset_mask"))
        if seed is not None or self._base_keys is None:
            self._seed(seed)
        mask = np.asarray(options.get("reset_mask", np.ones(self.num_envs, dtype=bool)))
        if mask.shape != (self.num_envs,) or mask.dtype != np.bool_:
            raise ValueError(f'options["reset_mask"] must be a bool array of shape ({self.num_envs},).')
        pinned = None
        if "prompt" in options:
            pinned = self._dynamics.check_prompts(options["prompt"], (self.num_envs,))[mask]
        self._reset_envs(mask, pinned)
        observations = self._dynamics.tables.observation_of_state[self._states]
        return observations, {"prompt": self._prompts.copy(), "length": self._lengths.copy()}

    def _reset_envs(self, mask: np.ndarray, prompts: np.ndarray | None) -> None:
        self._episodes[mask] += 1
        self._keys[mask] = episode_keys(self._base_keys[mask], self._episodes[mask])
        self._prompts[mask], self._states[mask] = self._dynamics.reset(self._keys[mask], prompts)
        self._lengths[mask] = 0
        self._tool_calls[mask] = 0
        self._needs_reset[mask] = False

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
        actions = np.asarray(actions, dtype=np.int64)
        if actions.shape != (self.num_envs,):
            raise ValueError(f"actions must have shape ({self.num_envs},), got {actions.shape}.")
        autoreset = self._needs_reset.copy()
        result = self._dynamics.step(self._states, actions, self._lengths, self._keys)
        self._states = result.state
        self._lengths = self._lengths + 1
        self._tool_calls = self._tool_calls + result.tool_call
        terminated, truncated = result.terminated, result.truncated
        reward, tool_call, duration = result.reward, result.tool_call, result.duration
        if autoreset.any():  # NEXT_STEP autoreset: envs that ended last step ignore their action and reset
            self._reset_envs(autoreset, None)
            terminated, truncated = terminated & ~autoreset, truncated & ~autoreset
            reward = np.where(autoreset, 0.0, reward)
            tool_call = tool_call & ~autoreset
            duration = np.where(autoreset, 0.0, duration)
        self._needs_reset = terminated | truncated
        info = {
            "prompt": self._prompts.copy(),
            "tool_call": tool_call,
            "duration": duration,
            "length": self._lengths.copy(),
            "tool_calls": self._tool_calls.copy(),
            "truncated": truncated,
        }
        observations = self._dynamics.tables.observation_of_state[self._states]
        return observations, reward, terminated, truncated, info


def configured_latency(config: Any) -> Latency:
    """The :class:`Latency` an env's config describes: its fields named as :class:`Latency`'s (the others keep
    their defaults)."""
    return Latency(**{f.name: getattr(config, f.name) for f in fields(Latency) if hasattr(config, f.name)})


class ToyEnv(TabularEnv):
    """The shell every toy env shares: keyword arguments → the env's config → its tables and latency.

    A toy env subclasses it and names two things, its ``config_class`` (a frozen dataclass whose
    ``__post_init__`` checks the arguments) and ``tables_of`` (config → :class:`MDPTables`); the keyword
    ``latency=`` (a :class:`Latency`) overrides the configured latency, as the simulator's timing does.
    """

    config_class: ClassVar[type]
    """The env's configuration dataclass, called with the env's keyword arguments."""
    tables_of: ClassVar[Callable[[Any], MDPTables]]
    """The env's exact tables as a pure function of its configuration (a ``staticmethod``)."""

    def __init__(self, **kwargs: Any):
        super().__init__(self.dynamics_of(kwargs))

    @classmethod
    def dynamics_of(cls, kwargs: dict[str, Any]) -> TabularDynamics:
        """The :class:`TabularDynamics` of the env that ``kwargs`` describe."""
        latency = kwargs.pop("latency", None)  # a Latency overriding the configured one
        config = cls.config_class(**kwargs)
        return TabularDynamics(cls.tables_of(config), latency or configured_latency(config))


class ToyVectorEnv(TabularVectorEnv):
    """The native vector env of a :class:`ToyEnv` (``env_class``): the same keyword arguments plus ``num_envs``."""

    env_class: ClassVar[type[ToyEnv]]

    def __init__(self, num_envs: int = 1, **kwargs: Any):
        super().__init__(self.env_class.dynamics_of(kwargs), num_envs)


@dataclass(frozen=True)
class EnvRow:
    """One row of :data:`toy_envs.TOY_ENVS`: a toy env, registered with gymnasium, and its ``--env`` presets.

    Args:
        env_id: the gymnasium id (``toy_envs/PromptBandit-v0``).
        entry_point: ``"module:Class"`` of its :class:`ToyEnv`; the module also defines ``ClassVectorEnv``.
        presets: ``--env`` name → keyword arguments of the env (``flashsim.sim.config.ENVS`` reads them).
    """

    env_id: str
    entry_point: str
    presets: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def register(self) -> None:
        """Register the env and its vector env with gymnasium (nothing happens when the id is registered)."""
        if self.env_id not in gym.registry:
            gym.register(id=self.env_id, entry_point=self.entry_point,
                         vector_entry_point=f"{self.entry_point}VectorEnv")
