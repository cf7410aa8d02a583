"""The lab's numbers: each setting's learning curves and update quality, resumable, and the page's data file.

:func:`learning_curve` runs one seed of a setting through the simulator; :func:`update_quality`
measures the setting's update direction against the exact gradient. :func:`run_lab` computes every
cell of a :class:`~flashsim.lab.grid.LabConfig` into ``OUT/cells/`` — one JSON file per finished cell,
written atomically, so an interrupted run (SIGKILL included) resumes where it stopped and gives the
same files — and :func:`lab_data` gathers them into the page's compact data.

Every number is rounded to :data:`DIGITS` decimals, in the cell files and the data alike, so the
committed data is what a fresh computation of any cell returns (``tests/lab`` recomputes one).
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from multiprocessing import get_context
from pathlib import Path

import numpy as np

from flashsim.config import to_dict
from flashsim.lab.grid import LabConfig, Setting, delta_label, is_gated, settings
from flashsim.policies import make_policy
from flashsim.sim import AlgorithmConfig, FixedLag, Simulation, TrainConfig, build_tables
from flashsim.storage import atomic_write_text
from flashsim.validation import check_int
from flashsim.variance import measure_gradient
from flashsim.variance.lag import lagged_policies

DIGITS = 6
"""Decimals kept of every number (the page shows three significant digits at most)."""
QUALITY_SEED = 0
"""Seed of every update-quality measurement (common random numbers across settings)."""
CONFIG, CELLS = "config.json", "cells"
DATA_PREFIX = "window.FLASHSIM_LAB = "
"""The data script is this prefix, the JSON text, and ``;`` (a script, so the page works from files)."""


def _round(values: list[float]) -> list[float | None]:
    return [None if math.isnan(v) else round(float(v), DIGITS) for v in values]


def train_config(config: LabConfig, setting: Setting, seed: int) -> TrainConfig:
    """The simulated run of ``setting`` with ``seed``."""
    algorithm = AlgorithmConfig.for_loss(
        setting.algorithm, batch_size=config.budget, group_size=setting.group_size,
        learning_rate=config.learning_rate, loss_options=setting.loss_options,
    )
    return TrainConfig(env=setting.env, algorithm=algorithm, lag=FixedLag(setting.lag), updates=config.updates,
                       seed=seed, eval_every=config.eval_every)


def learning_curve(config: LabConfig, setting: Setting, seed: int) -> dict[str, list[float | None]]:
    """Exact train success after 0, 1, eval_every, 2·eval_every, … updates, the rollouts spent by then, and
    the gate's mean acceptance rate over the updates since the previous point (None at the start).

    Shape:
        every list has ``updates // eval_every + 1`` entries (one more when eval_every does not divide it).
    """
    simulation = Simulation(train_config(config, setting, seed))
    success, rollouts, acceptance, window = [simulation.evaluate()["env/success_train"]], [0.0], [math.nan], []
    for _ in range(config.updates):
        row = simulation.step()
        window.append(row["trust/acceptance_rate"])
        evaluated = not math.isnan(row["env/success_train"])
        if evaluated or simulation.update == config.updates:
            success.append(row["env/success_train"] if evaluated else simulation.evaluate()["env/success_train"])
            rollouts.append(row["data/rollouts_total"])
            acceptance.append(float(np.mean(window)))
            window = []
    return {"rollouts": _round(rollouts), "success": _round(success), "acceptance": _round(acceptance)}


@functools.lru_cache(maxsize=8)
def _fixed_point(env: str, steps: int, step_size: float, lags: tuple[int, ...]):
    tables = build_tables(env)
    learner, behaviors = lagged_policies(tables, make_policy("tabular", tables), steps=steps, lags=list(lags),
                                         step_size=step_size)
    return tables, learner, behaviors


def update_quality(config: LabConfig, setting: Setting) -> dict[str, float | None]:
    """``flashsim variance``'s measures of ``setting``'s update direction ĝ at θ_N, behaviour θ_{N−L}: cosine of
    ĝ to ∇J (mean over batches), the bias ‖E ĝ − ∇J‖ (debiased), the variance E‖ĝ − E ĝ‖², ‖∇J‖ and the
    gate's acceptance rate."""
    tables, learner, behaviors = _fixed_point(setting.env, config.quality_steps, config.quality_step_size,
                                              tuple(sorted(set(config.lags))))
    report = measure_gradient(
        tables, learner, estimator=setting.algorithm, budget=config.budget, num_batches=config.quality_batches,
        seed=QUALITY_SEED, group_size=setting.group_size, behavior_policy=behaviors[setting.lag],
        grouped=setting.group_size > 1, bootstrap=0, **setting.loss_options,
    ).to_dict()
    names = {"cosine": "grad/cosine", "bias": "grad/bias_norm_debiased", "variance": "grad/variance",
             "gradient_norm": "grad/true_gradient_norm", "acceptance": "trust/acceptance_rate"}
    return dict(zip(names, _round([report[key] for key in names.values()]), strict=True))


# ----------------------------------------------------------------------------- the resumable run


def cell_file(out: Path | str, setting: Setting, seed: int | None) -> Path:
    """``OUT/cells/<key>__s<seed>.json`` (a curve) or ``OUT/cells/<key>__quality.json``."""
    name = setting.key.replace("|", "__") + ("__quality" if seed is None else f"__s{seed}")
    return Path(out) / CELLS / f"{name}.json"


def compute_cell(config: LabConfig, setting: Setting, seed: int | None) -> dict:
    """A curve (``seed`` given) or the quality measurement (``seed`` None) of ``setting``."""
    return learning_curve(config, setting, seed) if seed is not None else update_quality(config, setting)


def _run_and_write(out: str, config: LabConfig, setting: Setting, seed: int | None) -> None:
    import torch

    torch.set_num_threads(1)  # tiny tensors: one thread per process is fastest
    result = compute_cell(config, setting, seed)
    atomic_write_text(cell_file(out, setting, seed), json.dumps(result, sort_keys=True) + "\n")


def all_cells(config: LabConfig) -> list[tuple[Setting, int | None]]:
    """Every cell: each setting's seeds, then its quality measurement."""
    return [(setting, seed) for setting in settings(config) for seed in (*range(config.seeds), None)]


def run_lab(config: LabConfig, out: Path | str, *, jobs: int = 1,
            progress: Callable[[int, int], None] | None = None) -> int:
    """Compute every cell of ``config`` not yet in ``out``; return how many were computed now.

    Raises:
        ValueError: ``out`` holds the cells of another grid (its ``config.json`` differs).
    """
    check_int("jobs", jobs, low=1)
    out = Path(out)
    (out / CELLS).mkdir(parents=True, exist_ok=True)
    text = json.dumps(to_dict(config), sort_keys=True, indent=1) + "\n"
    if (out / CONFIG).exists() and (out / CONFIG).read_text() != text:
        raise ValueError(f"{out / CONFIG} holds another grid; use another --out, or delete it to start afresh")
    atomic_write_text(out / CONFIG, text)
    for stale in (out / CELLS).glob(".*.tmp"):  # a write killed half-way
        stale.unlink(missing_ok=True)
    cells = all_cells(config)
    pending = [cell for cell in cells if not cell_file(out, *cell).exists()]
    done = len(cells) - len(pending)
    if jobs == 1:
        for cell in pending:
            _run_and_write(str(out), config, *cell)
            done += 1
            if progress is not None:
                progress(done, len(cells))
        return len(pending)
    queue = iter(pending)
    with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn")) as pool:
        running = {pool.submit(_run_and_write, str(out), config, *cell) for cell in
                   (next(queue) for _ in range(min(2 * jobs, len(pending))))}
        while running:
            finished, running = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                future.result()  # a failed cell stops the run with its exception
                done += 1
                if progress is not None:
                    progress(done, len(cells))
                following = next(queue, None)
                if following is not None:
                    running.add(pool.submit(_run_and_write, str(out), config, *following))
    return len(pending)


# ----------------------------------------------------------------------------- the page's data


def series(config: LabConfig, setting: Setting, curves: list[dict], quality: dict) -> dict:
    """One setting's entry of the data: per-seed success, its mean and range over seeds, the rollouts, the mean
    acceptance, and the quality measures."""
    success = np.array([[math.nan if v is None else v for v in curve["success"]] for curve in curves])
    acceptance = np.array([[math.nan if v is None else v for v in curve["acceptance"]] for curve in curves])
    return {
        "rollouts": curves[0]["rollouts"],
        "success": {"mean": _round(success.mean(axis=0)), "low": _round(success.min(axis=0)),
                    "high": _round(success.max(axis=0)), "seeds": [curve["success"] for curve in curves]},
        "acceptance": [None] + _round(acceptance[:, 1:].mean(axis=0)),
        "quality": quality,
    }


def lab_data(config: LabConfig, out: Path | str) -> dict:
    """The page's data from the finished cells in ``out``.

    Raises:
        FileNotFoundError: a cell has not been computed (run :func:`run_lab` first).
    """
    def read(setting: Setting, seed: int | None) -> dict:
        return json.loads(cell_file(out, setting, seed).read_text())

    entries = {}
    for setting in settings(config):
        curves = [read(setting, seed) for seed in range(config.seeds)]
        if any(curve["rollouts"] != curves[0]["rollouts"] for curve in curves):
            raise ValueError(f"{setting.key}: the seeds spent different rollouts; the curves cannot be averaged")
        entries[setting.key] = series(config, setting, curves, read(setting, None))
    return {
        "config": to_dict(config),
        "axes": {
            "env": list(config.envs), "algorithm": list(config.algorithms), "lag": list(config.lags),
            "delta": [*map(delta_label, config.deltas), delta_label(None)], "group_size": list(config.group_sizes),
            "gated": [name for name in config.algorithms if is_gated(name)],
        },
        "series": entries,
    }


def write_data(data: dict, path: Path | str) -> None:
    """The data as the page's script (:data:`DATA_PREFIX`), written atomically."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, f"{DATA_PREFIX}{text};\n")


def read_data(path: Path | str) -> dict:
    """The data of a script written by :func:`write_data`."""
    text = Path(path).read_text()
    if not text.startswith(DATA_PREFIX):
        raise ValueError(f"{path} is not a lab data script (it does not start with {DATA_PREFIX!r})")
    return json.loads(text[len(DATA_PREFIX):].rstrip().removesuffix(";"))

