"""C1 tuned (issue 38): the committed tuning rule on hand-made data, the factor in float64, and the driver's resume
after SIGKILL."""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from flashsim.studies.c1_tuned import rule as design
from flashsim.studies.c1_tuned.report import compare, tuned_size_verdict

NAN = math.nan


def test_censored_median_ranks_censored_runs_above_every_finished_run():
    assert design.censored_median([300.0, NAN, 100.0, 200.0, 500.0]) == 300.0  # NaN sorts last, not first
    assert design.censored_median([400.0, NAN, 100.0, 200.0]) == 300.0
    assert design.censored_median([100.0, NAN, 200.0, NAN]) == math.inf  # half censored: the median is censored
    assert design.censored_median([NAN, 5.0, NAN]) == math.inf
    assert math.isnan(design.censored_median([]))


def test_a_rate_is_ineligible_from_the_first_fifth_of_its_seeds_censored():
    assert design.eligible([1.0, 2.0, 3.0, 4.0, 5.0])
    assert not design.eligible([1.0, 2.0, 3.0, 4.0, NAN])  # 1 / 5 = 20 %
    assert design.eligible([1.0] * 5 + [NAN])  # 1 / 6 < 20 %
    assert design.settled_ineligible([NAN], 4) and not design.settled_ineligible([1.0, 2.0, 3.0], 4)
    assert not design.eligible([])


def test_the_best_rate_is_the_eligible_one_of_lowest_censored_median():
    grid = {-1: [900.0, 800.0, 1000.0, 950.0], 0: [300.0, 200.0, 250.0, NAN], 1: [500.0, 600.0, 400.0, 450.0]}
    assert design.best_rate(grid) == 1  # rate 0 has the lowest median but a censored seed: ineligible
    tie = {0: [100.0, 200.0, 300.0, 400.0], 1: [100.0, 200.0, 300.0, 700.0]}
    assert design.best_rate(tie) == 0  # same median 250: the lower capped mean wins
    assert design.best_rate({0: [NAN, 1.0]}) is None


def test_the_grid_grows_on_the_side_of_an_edge_best_and_stops_when_interior():
    assert design.next_exponents({}) == ("extend", design.TUNED_START_EXPONENTS)
    rising = {-1: [400.0], 0: [300.0], 1: [200.0], 2: [100.0]}
    assert design.next_exponents(rising) == ("extend", (3,))
    falling = {-1: [100.0], 0: [300.0], 1: [400.0], 2: [500.0]}
    assert design.next_exponents(falling) == ("extend", (-2,))
    assert design.next_exponents({**falling, -2: [200.0]}) == ("interior", ())
    # an ineligible neighbour counts as tried and worse: the best next to it is interior
    assert design.next_exponents({-1: [500.0], 0: [100.0], 1: [NAN]}) == ("interior", ())
    assert design.next_exponents({0: [NAN], 1: [NAN]}) == ("extend", (-1, 2))  # nothing eligible: both sides


def test_an_arm_whose_best_keeps_moving_is_reported_at_the_edge_after_max_extensions():
    top = max(design.TUNED_START_EXPONENTS) + design.MAX_EXTENSIONS
    grid = {k: [1000.0 - 10 * k] for k in range(min(design.TUNED_START_EXPONENTS), top + 1)}
    assert design.next_exponents(grid) == ("at edge", ())
    assert design.next_exponents({k: v for k, v in grid.items() if k < top})[0] == "extend"


def test_seeds_for_power_is_the_smallest_n_meeting_the_formula():
    for sd in (0.5, 1.0, 1.5, 1.8):
        n = design.seeds_for_power(sd)
        need = [m for m in range(2, 200) if (stats.t.ppf(0.975, m - 1) + stats.norm.ppf(0.9)) * sd / math.sqrt(m)
                <= 1]
        assert n == max(design.MIN_VERDICT_SEEDS, need[0])
    assert design.seeds_for_power(5.0) == design.MAX_VERDICT_SEEDS + 1
    with pytest.raises(ValueError, match="sd_z"):
        design.seeds_for_power(NAN)


def test_the_factor_is_grpo_over_flash_with_the_delta_method_interval():
    flash = {1: 100.0, 2: 120.0, 3: 80.0, 4: 110.0}
    grpo = {1: 210.0, 2: 230.0, 3: 170.0, 4: 200.0, 5: 1.0}  # seed 5 is not paired
    c = compare(flash, grpo)
    a, b = np.array([100.0, 120.0, 80.0, 110.0]), np.array([210.0, 230.0, 170.0, 200.0])
    ratio = b.mean() / a.mean()
    z = (b - ratio * a) / a.mean()
    half = stats.t.ppf(0.975, 3) * z.std(ddof=1) / 2.0
    assert c["seeds"] == 4 and c["pairs"] == 4
    assert c["factor"] == pytest.approx(ratio, rel=1e-12)
    assert (c["low"], c["high"]) == pytest.approx((ratio - half, ratio + half), rel=1e-12)
    assert c["size_verdict"] == tuned_size_verdict(ratio - half, ratio + half)


def test_a_pair_censored_in_one_arm_only_makes_the_comparison_inconclusive():
    c = compare({1: 100.0, 2: 120.0, 3: 90.0}, {1: 300.0, 2: NAN, 3: 280.0})
    assert c["dropped_by_arm"] == 1 and c["verdict"] == "inconclusive"


def test_size_verdicts():
    assert tuned_size_verdict(0.7, 1.4) == "claimed size rejected"
    assert tuned_size_verdict(1.2, 2.0) == "consistent with the claimed size"
    assert tuned_size_verdict(2.01, 3.0) == "larger than the claimed size"
    assert tuned_size_verdict(NAN, 3.0) == "no interval"



@pytest.mark.parametrize("bad", ["25:00", "0050"])
def test_a_malformed_stop_time_exits_2_naming_the_flag(bad, capsys):
    from flashsim.studies.c1_tuned.run import main

    with pytest.raises(SystemExit) as exit_:
        main(["--out", "unused", "--stop-starting", bad])
    assert exit_.value.code == 2 and "--stop-starting" in capsys.readouterr().err


def test_a_stop_time_before_noon_is_the_next_mornings_for_an_evening_run():
    evening = dt.datetime(2026, 12, 5, 23, 0, tzinfo=dt.timezone.utc)
    assert not design.past_stop_time("00:50", evening)
    assert design.past_stop_time("00:50", evening + dt.timedelta(minutes=110))
    assert design.past_stop_time("22:00", evening) and not design.past_stop_time("23:30", evening)
    assert not design.past_stop_time(None, evening)


_TINY = """
import sys
from flashsim.studies.c1_tuned.run import Plan, run_tuned_stages
plan = Plan(stages=(("adam", "bandit", ("flash", "grpo")),), cap_rollouts=3840, pilot_seeds={"adam": (3800,)},
            verdict_seeds={"adam": 2}, stop_starting=None)
run_tuned_stages(sys.argv[1], plan)
"""


def _files(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): p.read_text() for p in sorted(folder.rglob("*.json"))}


def _run_tiny_here(out: Path, monkeypatch) -> None:
    """:data:`_TINY` in this process (not about the process boundary: no interpreter and torch import to pay)."""
    with monkeypatch.context() as patch:
        patch.setattr(sys, "argv", ["-c", str(out)])
        exec(compile(_TINY, "<tiny>", "exec"), {"__name__": "__tiny__"})


@pytest.mark.fault
@pytest.mark.slow
def test_the_driver_resumes_after_sigkill_with_the_same_cells_as_a_clean_run(tmp_path, monkeypatch):
    """The killed driver is a process killed by its PID; the clean run and the resume run in this process."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    clean, killed = tmp_path / "clean", tmp_path / "killed"
    _run_tiny_here(clean, monkeypatch)
    process = subprocess.Popen([sys.executable, "-c", _TINY, str(killed)], env=env, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while len(list(killed.rglob("*.json"))) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    partial = _files(killed)
    assert 3 <= len(partial) < len(_files(clean))
    assert not list(killed.rglob("*.tmp"))  # atomic: no half-written cell left behind
    _run_tiny_here(killed, monkeypatch)
    assert _files(killed) == _files(clean)
    verdict = [json.loads(t) for name, t in _files(clean).items() if "_s39" in name]
    assert {r["arm"] for r in verdict} == {"flash", "grpo"} and len(verdict) == 4


ROOT = Path(__file__).resolve().parents[2]


def test_the_results_page_quotes_the_sentence_generated_from_the_committed_summary():
    from flashsim.studies.c1_tuned.page import results_sentence

    summary = json.loads((ROOT / "docs/c1-tuned/results/summary.json").read_text())
    sentence = results_sentence(summary)
    assert sentence == (ROOT / "docs/c1-tuned/results/results_sentence.txt").read_text().strip()
    assert sentence in (ROOT / "docs/results.md").read_text()
    assert "{{ c1-tuned:sentence }}" in (ROOT / "docs/results/discussion/C1.md").read_text()
    relative = sentence.replace("](c1-tuned/results.md)", "](../c1-tuned/results.md)")
    assert relative in (ROOT / "docs/full-budget/results.md").read_text()
    assert "{{ c1-tuned:sentence ../ }}" in (ROOT / "docs/full-budget/results/discussion/C1.md").read_text()
    assert summary["tuned"]["at_edge"] == [] or "at an edge" in sentence


def test_the_generated_sentences_read_the_direction_off_the_interval():
    from flashsim.studies.c1_tuned.page import results_sentence

    c = {"factor": 0.7, "low": 0.55, "high": 0.85, "pairs": 20, "size_verdict": "claimed size rejected",
         "verdict": "not supported"}
    summary = {"headline": "adam/gridworld/grpo", "comparisons": {"adam/gridworld/grpo": c},
               "tuned": {"at_edge": []}}
    assert "tuned GRPO needed fewer rollouts than FlashREINFORCE" in results_sentence(summary)
    assert "0.70× [0.55, 0.85]" in results_sentence(summary)
    c.update(factor=1.3, low=0.9, high=1.7)
    assert "neither needed decidedly fewer rollouts (the point estimate favours FlashREINFORCE)" in \
        results_sentence(summary)
    summary["tuned"]["at_edge"] = ["adam/gridworld/grpo"]
    assert "1 arm(s) still at an edge" in results_sentence(summary)


def test_the_headline_states_a_direction_only_where_the_interval_decides_one():
    from flashsim.studies.c1_tuned.page import headline_sentences

    c = {"factor": 0.94, "low": 0.66, "high": 1.22, "pairs": 20, "dropped_by_arm": 0, "verdict": "inconclusive",
         "size_verdict": "claimed size rejected"}
    arms = {"adam/gridworld/flash": {"rate": 0.3}, "adam/gridworld/grpo": {"rate": 0.3}}
    summary = {"headline": "adam/gridworld/grpo", "comparisons": {"adam/gridworld/grpo": c}, "arms": arms}
    rows = [{"optimizer": "adam", "env": "gridworld", "arm": arm, "phase": "verdict", "rate": "0.3", "seed": str(seed),
             "rollouts_to_90": str(value), "censored": "False"}
            for seed, (flash, grpo) in enumerate([(100, 90), (100, 120), (200, 150)])
            for arm, value in (("flash", flash), ("grpo", grpo))]
    head = headline_sentences(summary, rows)[0]
    assert "neither tuned GRPO (32 × 4, token-mean) nor FlashREINFORCE needed decidedly fewer" in head
    assert "FlashREINFORCE needed fewer on 1 of 3 seeds, tuned GRPO on 2" in head and "median over seeds 0.90×" in head
    c.update(factor=0.7, low=0.55, high=0.85, verdict="not supported")
    assert "tuned GRPO needed fewer rollouts than FlashREINFORCE" in headline_sentences(summary, rows)[0]


def test_a_comparison_with_a_pair_censored_in_one_arm_prints_no_size_verdict():
    from flashsim.studies.c1_tuned.report import factor_sentence

    c = {"factor": 2.14, "low": 0.66, "high": 3.63, "pairs": 19, "dropped_by_arm": 1, "verdict": "inconclusive",
         "size_verdict": "consistent with the claimed size"}
    arms = {"adam/bandit/flash": {"rate": 0.6}, "adam/bandit/grpo_2batch": {"rate": 1.2}}
    sentence = factor_sentence("adam/bandit/grpo_2batch", c, arms)
    assert "consistent with the claimed size" not in sentence and "no size verdict" in sentence


def test_the_page_rerenders_from_its_committed_stores_byte_for_byte(tmp_path):
    from flashsim.studies.c1_tuned.page import rerender_tuned_page

    shutil.copytree(ROOT / "docs/c1-tuned", tmp_path / "c1-tuned")
    page = rerender_tuned_page(tmp_path / "c1-tuned" / "results.md")
    assert page.read_text() == (ROOT / "docs/c1-tuned/results.md").read_text()
