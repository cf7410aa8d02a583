"""C1 on the tiny transformer with each arm at its own best learning rate, committed before any run.

The transformer page's C1 (``scale.studies.claims``) compares FlashREINFORCE and GRPO G = 4 at the preset's learning
rate 3e-4 on the claims' task (a calculator wrong on 30 % of expressions; 60 updates × 64 rollouts; held-out
accuracy on 500 prompts every 10 updates). Here each arm gets its own grid and the committed rule of
:mod:`flashsim.studies.c1_tuned.rule` (interior best, extension by a factor 2, instability) picks its rate:

- **Arms**: FlashREINFORCE 64 × 1 and GRPO 16 × 4 token-mean (the registry's ``grpo``, DAPO's aggregation); the
  sample-mean GRPO and GRPO 32 × 4 are not run here (budget).
- **Measure**: ``auc``, the area under the held-out accuracy curve against rollouts over the rollouts spent (the
  transformer page's C1 primary): the transformer has no exact optimum, so rollouts to 0.9 of it do not exist; a
  level of held-out accuracy read every 10 updates on 500 sampled prompts would be too coarse to rank rates.
  Higher is better; the rule ranks the negated auc. A run that **collapses** (``collapse``: held-out accuracy at
  least 0.05 below its running peak at each of the last two evaluations) counts as censored, so a rate where
  ≥ 20 % of pilot runs collapse is ineligible.
- **Grid**: 3e-4 × 2^k, starting k ∈ {−1, 0, 1}, on pilot seeds :data:`TRANSFORMER_TUNING_PILOT_SEEDS` (fresh: the
  transformer's earlier pilots used 0–2 and 200–202, its verdicts 10–19, 100–129, 300–309); extended by
  :func:`~flashsim.studies.c1_tuned.rule.next_exponents` until interior (at most 6 rates per side).
- **Verdict**: :data:`VERDICT_SEEDS` (10 fresh seeds) at each arm's chosen rate, paired by seed (every arm of a
  seed starts from the same warm-up); ``auc`` FlashREINFORCE > GRPO with the project's rule (smallest effect
  0.01). The article's 2× is a factor in rollouts, not in area, so no size verdict is read here.
- **Confirmatory rerun** (``--confirmatory``): the committed verdict above ran past the design's stop rule, so it
  is exploratory (``docs/c1-tuned/design.md``); the rerun takes each arm's rate from that run's committed summary
  (the pilot's choice, :data:`EXPLORATORY_SUMMARY`) and runs the same verdict protocol on
  :data:`CONFIRMATORY_SEEDS`, seeds no run has used, into its own summary.
- **Budget**: the committed run started no cell after :data:`TRANSFORMER_TUNING_STOP_STARTING_UTC`
  (``--stop-starting``; by default the driver has no stop time); what is unfinished is reported as not done.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from flashsim.config import directory_argument
from flashsim.experiments import SMALLEST_EFFECTS, mean_interval, paired_verdict, with_overrides
from flashsim.storage import atomic_write_text, jsonable
from flashsim.studies.c1_tuned import rule
from scale.studies.cells import run_transformer_cell
from scale.studies.claims import FLASH_ARM, GRPO_ARM, base_config

TRANSFORMER_TUNING_ARMS = {"flash": FLASH_ARM, "grpo": GRPO_ARM}
"""FlashREINFORCE 64 × 1 and GRPO G = 4 (16 prompts × 4) token-mean, as the transformer page's C1."""
CENTRE = 3e-4
"""The preset's learning rate (``scale/configs/tiny_cpu.yaml``)."""
TRANSFORMER_TUNING_START_EXPONENTS = (-1, 0, 1)
TRANSFORMER_TUNING_PILOT_SEEDS = (400, 401)
VERDICT_SEEDS = tuple(range(410, 420))
CONFIRMATORY_SEEDS = tuple(range(420, 430))
"""The confirmatory rerun's verdict seeds (fresh: no pilot, verdict or earlier study used them)."""
EXPLORATORY_SUMMARY = Path("docs/c1-tuned/results/transformer_summary.json")
"""The committed summary of the first run, whose pilot chose the rates the confirmatory rerun uses."""
TRANSFORMER_TUNING_STOP_STARTING_UTC = "01:00"


def transformer_rate(exponent: int) -> float:
    return CENTRE * rule.FACTOR ** int(exponent)


def transformer_cell_config(arm: str, exponent: int, seed: int, warmups: Path):
    """The resolved ``scale`` config of one cell (the claims' full-budget task)."""
    return with_overrides(base_config("full", warmups), TRANSFORMER_TUNING_ARMS[arm],
                          {"train.learning_rate": transformer_rate(exponent), "seed": seed})


def transformer_cell_path(out: Path, arm: str, exponent: int, seed: int) -> Path:
    return rule.rate_cell_path(Path(out) / "cells" / arm, exponent, seed)


def ranked_value(record: dict) -> float:
    """What the rule ranks (lower is better): −auc, NaN (censored) for a collapsed run."""
    metrics = record["metrics"]
    return math.nan if metrics["collapse"] else -float(metrics["auc"])


def run_transformer_cells(out: Path, arm: str, exponent: int, seeds: Sequence[int], pilot: bool = False,
              stop: str | None = None) -> bool:
    """Run the missing cells of one rate (atomic files); False when the stop time came first."""
    for seed in seeds:
        path = transformer_cell_path(out, arm, exponent, seed)
        if path.exists():
            continue
        done = [ranked_value(json.loads(transformer_cell_path(out, arm, exponent, s).read_text())) for s in seeds
                if transformer_cell_path(out, arm, exponent, s).exists()]
        if pilot and rule.settled_ineligible(done, len(seeds)):
            return True
        if rule.past_stop_time(stop, dt.datetime.now(dt.timezone.utc)):
            return False
        result = run_transformer_cell(transformer_cell_config(arm, exponent, seed, Path(out) / "warmups"))
        record = {"arm": arm, "exponent": exponent, "rate": transformer_rate(exponent), "seed": seed, **result}
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(record, sort_keys=True) + "\n")
        print(f"{arm} lr {transformer_rate(exponent):g} seed {seed}: auc {record['metrics']['auc']:.4f} "
              f"collapse {record['metrics']['collapse']}", flush=True)
    return True


def transformer_pilot_grid(out: Path, arm: str) -> dict[int, list[float]]:
    """Exponent → ranked values of the pilot seeds (:func:`~flashsim.studies.c1_tuned.rule.pilot_grid`)."""
    return rule.pilot_grid(Path(out) / "cells" / arm, TRANSFORMER_TUNING_PILOT_SEEDS,
                           lambda path: ranked_value(json.loads(path.read_text())))


def tune_transformer_arm(out: Path, arm: str, stop: str | None = None) -> tuple[str, int | None]:
    """The committed tuning loop (:func:`~flashsim.studies.c1_tuned.rule.tune`) on this arm's pilot;
    ``("stopped", None)`` if the stop time came first."""
    def run_rate(exponent: int) -> bool:
        return run_transformer_cells(out, arm, exponent, TRANSFORMER_TUNING_PILOT_SEEDS, pilot=True, stop=stop)

    return rule.tune(TRANSFORMER_TUNING_START_EXPONENTS, run_rate, lambda: transformer_pilot_grid(out, arm))


def run_transformer_tuning(out: Path, stop: str | None = None) -> dict[str, object]:
    """Tune both arms, then run the verdict seeds at the chosen rates (resumes from the cells on disk)."""
    tuned = {arm: tune_transformer_arm(out, arm, stop) for arm in TRANSFORMER_TUNING_ARMS}
    if all(status == "interior" for status, _ in tuned.values()):
        for arm, (_, k) in tuned.items():
            run_transformer_cells(out, arm, k, VERDICT_SEEDS, stop=stop)
    print(tuned, flush=True)
    return tuned


def verdict_cells(out: Path, exponents: dict[str, int], seeds: Sequence[int]) -> dict[str, object]:
    """Each arm's auc at its chosen exponent on ``seeds`` (``auc_by_seed``, so the verdict can be recomputed from
    the summary) and, once both arms have every seed, the paired verdict (a partial verdict run is reported as not
    done, never judged)."""
    arms = {arm: {s: json.loads(transformer_cell_path(out, arm, k, s).read_text())["metrics"]["auc"]
                  for s in seeds if transformer_cell_path(out, arm, k, s).exists()} for arm, k in exponents.items()}
    done = sorted(set(arms["flash"]) & set(arms["grpo"])) if len(arms) == 2 else []
    comparison = None
    if len(done) == len(seeds):
        flash, grpo = [arms["flash"][s] for s in done], [arms["grpo"][s] for s in done]
        v = paired_verdict(flash, grpo, "greater", SMALLEST_EFFECTS["auc"])
        comparison = {"seeds": len(done), "difference": v.difference.to_dict(), "verdict": v.verdict, "p": v.p,
                      "flash": mean_interval(flash).to_dict(), "grpo": mean_interval(grpo).to_dict(),
                      "flash_ahead": int(sum(a > b for a, b in zip(flash, grpo)))}
    return {"comparison": comparison, "verdict_seeds": list(seeds), "verdict_seeds_done": len(done),
            "auc_by_seed": {arm: {str(s): values[s] for s in sorted(values)} for arm, values in arms.items()}}


def summarize_transformer_tuning(out: Path) -> dict[str, object]:
    """The rule re-applied to the pilot cells, each arm at its chosen rate on the verdict seeds, and the verdict."""
    tuned = {}
    for arm in TRANSFORMER_TUNING_ARMS:
        grid = transformer_pilot_grid(out, arm)
        status, _ = rule.next_exponents(grid)
        best = rule.best_rate(grid)
        tuned[arm] = {"status": "pilot unfinished" if status == "extend" else status,
                      "best_rate": None if best is None else transformer_rate(best), "best_exponent": best,
                      "grid": [{"rate": transformer_rate(k), "runs": len(v), "collapsed": rule.censored(v),
                                "eligible": rule.eligible(v),
                                "mean_auc": -float(np.mean([x for x in v if math.isfinite(x)]))
                                if rule.censored(v) < len(v) else math.nan} for k, v in sorted(grid.items())]}
    chosen = {arm: t["best_exponent"] for arm, t in tuned.items()
              if t["best_exponent"] is not None and t["status"] == "interior"}
    at_edge = sorted(arm for arm, t in tuned.items() if t["status"] == "at edge")
    return jsonable({"tuned": {"at_edge": at_edge, "status": {a: t["status"] for a, t in tuned.items()},
                               "best": {a: t["best_rate"] for a, t in tuned.items()}},
                     "grid": tuned, **verdict_cells(out, chosen, VERDICT_SEEDS)})


def chosen_exponents(summary_path: Path) -> dict[str, int]:
    """The exponents the committed run's pilot chose for each arm (both must be interior)."""
    grid = json.loads(Path(summary_path).read_text())["grid"]
    if sorted(grid) != sorted(TRANSFORMER_TUNING_ARMS) or any(t["status"] != "interior" for t in grid.values()):
        raise ValueError(f"--rates-from: {summary_path} does not hold an interior choice for both arms")
    return {arm: int(t["best_exponent"]) for arm, t in grid.items()}


def run_confirmatory(out: Path, exponents: dict[str, int], stop: str | None = None) -> None:
    """The confirmatory rerun: each arm at its committed chosen rate on :data:`CONFIRMATORY_SEEDS`, seed by seed
    (both arms of a seed in turn, so a stopped run leaves whole pairs)."""
    for seed in CONFIRMATORY_SEEDS:
        for arm, k in exponents.items():
            if not run_transformer_cells(out, arm, k, (seed,), stop=stop):
                return


def summarize_confirmatory(out: Path, exponents: dict[str, int]) -> dict[str, object]:
    return jsonable({"rates": {arm: transformer_rate(k) for arm, k in exponents.items()},
                     "exponents": exponents, **verdict_cells(out, exponents, CONFIRMATORY_SEEDS)})


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=directory_argument, required=True,
                        help="folder of the cells and warm-ups (resumed)")
    parser.add_argument("--summary", type=Path, default=None,
                        help="only write the summary of the cells on disk to this JSON file (no runs)")
    parser.add_argument("--confirmatory", action="store_true",
                        help="the confirmatory rerun: the rates the committed run's pilot chose (--rates-from), on "
                             f"seeds {CONFIRMATORY_SEEDS[0]}–{CONFIRMATORY_SEEDS[-1]}")
    parser.add_argument("--rates-from", type=Path, default=EXPLORATORY_SUMMARY,
                        help="the committed summary whose chosen rates --confirmatory uses (default: %(default)s)")
    args = rule.parse_with_stop_starting(parser, argv, TRANSFORMER_TUNING_STOP_STARTING_UTC, "cell")
    if args.confirmatory:
        exponents = chosen_exponents(args.rates_from)
        if args.summary is None:
            run_confirmatory(args.out, exponents, args.stop_starting)
        else:
            atomic_write_text(args.summary, json.dumps(summarize_confirmatory(args.out, exponents), indent=1,
                                                       sort_keys=True) + "\n")
        return
    if args.summary is not None:
        summary = summarize_transformer_tuning(args.out)
        atomic_write_text(args.summary, json.dumps(summary, indent=1, sort_keys=True) + "\n")
        return
    run_transformer_tuning(args.out, args.stop_starting)


if __name__ == "__main__":
    main()
