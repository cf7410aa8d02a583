"""The driver of C1 at each arm's own best learning rate: pilot grids extended by the committed rule,
then the verdict seeds, one cell at a time, each written atomically; a rerun resumes where a kill left it.

``python -m flashsim.studies.c1_tuned.run --out runs/c1-tuned`` runs the whole protocol of
:mod:`flashsim.studies.c1_tuned.rule`. A cell is one (optimizer, env, arm, grid exponent, seed): a simulated run that
stops when its exact train success first reaches the level (rollouts to the level do not depend on later updates)
or at the cap (censored). Its result is ``cells/<optimizer>/<env>/<arm>/k<exponent>_s<seed>.json``; an existing
file is never run again, so a SIGKILL loses at most the cell in flight. Which rates run is decided from the cells on
disk by :func:`~flashsim.studies.c1_tuned.rule.next_exponents`, never by hand.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from flashsim import exact
from flashsim.config import directory_argument
from flashsim.experiments.design import with_overrides
from flashsim.experiments.profiles import base
from flashsim.experiments.run_cell import rollouts_to
from flashsim.sim import Simulation
from flashsim.storage import atomic_write_text
from flashsim.studies.c1_tuned import rule as design


@dataclass(frozen=True)
class Plan:
    """What the driver runs (the defaults are the committed design; tests shrink them)."""

    stages: tuple[tuple[str, str, tuple[str, ...]], ...] = design.STAGES
    """(optimizer, env, arms) in the order they run; each stage's arms include FlashREINFORCE, the baseline."""
    cap_rollouts: int = design.CAP_ROLLOUTS
    pilot_seeds: dict = field(default_factory=lambda: {
        "adam": design.TUNED_PILOT_SEEDS[:design.TUNED_OPTIMIZERS["adam"]["pilot_seeds"]],
        "sgd": design.TUNED_PILOT_SEEDS[:design.TUNED_OPTIMIZERS["sgd"]["pilot_seeds"]]})
    verdict_seeds: dict = field(default_factory=lambda: {"adam": None, "sgd": design.SGD_VERDICT_SEEDS})
    """Verdict seeds per optimizer (None: the power rule's count)."""
    stop_starting: str | None = None
    """HH:MM UTC after which no new stage starts (None: no limit; the committed run used
    ``design.TUNED_STOP_STARTING_UTC``); a time before 12:00 is the next day's."""


def tuned_cell_config(optimizer: str, env: str, arm: str, exponent: int, seed: int, cap_rollouts: int):
    """The resolved ``TrainConfig`` of one cell."""
    _, overrides = design.TUNED_ARMS[arm]
    config = with_overrides(base(env=env, eval_every=1), overrides, {
        "algorithm.optimizer": optimizer, "algorithm.learning_rate": design.tuned_rate(optimizer, exponent),
        "seed": seed})
    return with_overrides(config, {"updates": max(1, cap_rollouts // config.algorithm.batch_size)})


def run_to_level(config, level: float = design.THRESHOLD) -> dict[str, object]:
    """Train ``config`` until exact train success first reaches ``level`` × optimum or its update budget ends.

    Returns ``rollouts_to`` (linear between the last two evaluations, as ``run_cell``'s ``rollouts_to_90``; None
    when censored), ``censored``, ``updates`` and ``rollouts`` run, the final exact success and the optimum.
    """
    simulation = Simulation(config)
    optimum = exact.optimal_success(simulation.tables, "train")
    rollouts, success = [0.0], [float(simulation.evaluate()["env/success_train"])]
    updates = 0
    while success[-1] < level * optimum and updates < config.updates:
        row = simulation.step()
        updates += 1
        rollouts.append(float(row["data/rollouts_total"]))
        success.append(float(row["env/success_train"]))
    reached = rollouts_to(rollouts, success, level * optimum)
    return {"rollouts_to": None if math.isnan(reached) else reached, "censored": math.isnan(reached),
            "updates": updates, "rollouts": rollouts[-1], "success_final": success[-1], "optimum": optimum}


def tuned_cell_path(out: Path, optimizer: str, env: str, arm: str, exponent: int, seed: int) -> Path:
    return design.rate_cell_path(Path(out) / "cells" / optimizer / env / arm, exponent, seed)


def run_tuned_cells(out: Path, optimizer: str, env: str, arm: str, exponent: int, seeds: Sequence[int], plan: Plan,
              pilot: bool = False) -> bool:
    """Run every missing cell of one rate, atomically, in seed order; a ``pilot`` rate stops once it is
    ineligible (:func:`~flashsim.studies.c1_tuned.rule.settled_ineligible`: more seeds cannot change that).
    Returns True (the toy driver has no stop time inside a stage)."""
    for seed in seeds:
        path = tuned_cell_path(out, optimizer, env, arm, exponent, seed)
        if path.exists():
            continue
        done = [read_tuned_cell(tuned_cell_path(out, optimizer, env, arm, exponent, s)) for s in seeds
                if tuned_cell_path(out, optimizer, env, arm, exponent, s).exists()]
        if pilot and design.settled_ineligible(done, len(seeds)):
            return True
        config = tuned_cell_config(optimizer, env, arm, exponent, seed, plan.cap_rollouts)
        result = run_to_level(config)
        record = {"optimizer": optimizer, "env": env, "arm": arm, "exponent": exponent,
                  "rate": design.tuned_rate(optimizer, exponent), "seed": seed, **result}
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(record, sort_keys=True) + "\n")
        print(f"{optimizer} {env} {arm} lr {record['rate']:g} seed {seed}: "
              f"{'censored' if result['censored'] else round(result['rollouts_to'])}", flush=True)
    return True


def read_tuned_cell(path: Path) -> float:
    """A cell's rollouts to the level (NaN when censored)."""
    value = json.loads(Path(path).read_text())["rollouts_to"]
    return math.nan if value is None else float(value)


def tuned_pilot_grid(out: Path, optimizer: str, env: str, arm: str, seeds: Sequence[int]) -> dict[int, list[float]]:
    """The pilot cells on disk: exponent → rollouts per pilot seed
    (:func:`~flashsim.studies.c1_tuned.rule.pilot_grid`)."""
    return design.pilot_grid(Path(out) / "cells" / optimizer / env / arm, seeds, read_tuned_cell)


def tune_arm(out: Path, optimizer: str, env: str, arm: str, plan: Plan) -> tuple[str, int | None]:
    """The committed tuning loop (:func:`~flashsim.studies.c1_tuned.rule.tune`) on one arm's pilot.

    Returns the status (``interior``, ``at edge``) and the best exponent (None if no rate is eligible).
    """
    seeds = plan.pilot_seeds[optimizer]
    return design.tune(design.TUNED_START_EXPONENTS,
                       lambda k: run_tuned_cells(out, optimizer, env, arm, k, seeds, plan, pilot=True),
                       lambda: tuned_pilot_grid(out, optimizer, env, arm, seeds))


def verdict_count(out: Path, optimizer: str, env: str, best: dict[str, int | None], plan: Plan) -> int:
    """Verdict seeds for one pair: the plan's fixed count, or the power rule on the pilot at the chosen rates."""
    if plan.verdict_seeds[optimizer] is not None:
        return int(plan.verdict_seeds[optimizer])
    seeds = plan.pilot_seeds[optimizer]
    flash = [read_tuned_cell(tuned_cell_path(out, optimizer, env, design.BASELINE, best[design.BASELINE], s))
             for s in seeds]
    counts = [design.MIN_VERDICT_SEEDS]
    for arm, k in best.items():
        if arm == design.BASELINE or k is None:
            continue
        grpo = [read_tuned_cell(tuned_cell_path(out, optimizer, env, arm, k, s)) for s in seeds]
        z = design.delta_terms(grpo, flash)
        if z.size >= 2:
            counts.append(design.seeds_for_power(float(z.std(ddof=1))))
    return min(max(counts), design.MAX_VERDICT_SEEDS)


def run_stage(out: Path, optimizer: str, env: str, arms: Sequence[str], plan: Plan) -> dict[str, object]:
    """Tune ``arms`` of one (optimizer, env), then run their verdict seeds at the chosen rates (FlashREINFORCE's
    tuning, already on disk after the first stage, is read back, not rerun)."""
    if design.BASELINE not in arms:
        raise ValueError(f"arms must include the baseline {design.BASELINE!r}, got {arms!r}")
    tuned = {arm: tune_arm(out, optimizer, env, arm, plan) for arm in arms}
    best = {arm: k for arm, (_, k) in tuned.items()}
    if best[design.BASELINE] is None:
        return {"tuned": tuned, "verdict_seeds": 0}
    n = verdict_count(out, optimizer, env, best, plan)
    seeds = design.verdict_seeds(n)
    for arm in arms:
        if best[arm] is not None:
            run_tuned_cells(out, optimizer, env, arm, best[arm], seeds, plan)
    return {"tuned": tuned, "verdict_seeds": n}


def run_tuned_stages(out: Path, plan: Plan = Plan(), now=lambda: dt.datetime.now(dt.timezone.utc)) -> dict[str, object]:
    """Run the plan's stages in order (resuming from the cells on disk); returns what each stage did."""
    done = {}
    for optimizer, env, arms in plan.stages:
        name = f"{optimizer}/{env}/{'+'.join(arms)}"
        if design.past_stop_time(plan.stop_starting, now()):
            print(f"{name}: not started (past {plan.stop_starting} UTC)", flush=True)
            done[name] = "not started"
            continue
        done[name] = run_stage(Path(out), optimizer, env, arms, plan)
        print(f"{name}: {done[name]}", flush=True)
    return done


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=directory_argument, required=True,
                        help="folder of the cells (resumed if it exists)")
    args = design.parse_with_stop_starting(parser, argv, design.TUNED_STOP_STARTING_UTC, "stage")
    torch.set_num_threads(1)  # one process on a shared machine: no intra-op threads competing for its cores
    run_tuned_stages(args.out, Plan(stop_starting=args.stop_starting))



if __name__ == "__main__":
    main()
