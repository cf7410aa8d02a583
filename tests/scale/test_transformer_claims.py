"""``python -m scale reproduce``: the transformer claims through flashsim's claims machinery (issue 20).

The smoke budget (seconds per cell) checks the plumbing, not a result: a killed sweep resumes with no cell
lost or run twice and the same numbers, and the arms of one seed start from one shared warm-up.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flashsim.experiments.verdict import VERDICTS
from scale.studies.claims import CLAIM_SEEDS_FROM

pytest.importorskip("transformers")

pytestmark = pytest.mark.slow  # three sweeps of 4 tiny cells, ~1.5 min

ROOT = Path(__file__).resolve().parents[2]


def _command(out: Path) -> list[str]:
    return [sys.executable, "-m", "scale", "reproduce", "C3", "--smoke", "--out", str(out), "--jobs", "1",
            "--no-progress"]


def _results(out: Path) -> dict[str, dict]:
    return {path.name: json.loads(path.read_text())["result"] for path in sorted((out / "C3" / "cells").glob("*.json"))}


@pytest.fixture(scope="module")
def straight(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("straight")
    result = subprocess.run(_command(out), cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "C3: length: sample_mean < token_mean at tool30_tokens17:" in result.stdout
    return out


def test_a_sweep_writes_every_cell_and_a_verdict_from_the_rule(straight):
    assert len(_results(straight)) == 4  # 2 arms × 2 seeds
    assert (straight / "C3" / "C3_curves.png").stat().st_size > 0
    summary = json.loads((straight / "C3" / "summary.json").read_text())
    assert summary["primary"]["verdict"] in VERDICTS
    assert summary["cells_done"] == summary["cells_total"] == 4


def test_the_arms_of_a_seed_share_one_warmup_and_start_from_the_same_evaluation(straight):
    assert len(list((straight / "warmups").glob("*.pt"))) == 2  # one per seed, not per cell
    results = _results(straight)
    for seed in (CLAIM_SEEDS_FROM, CLAIM_SEEDS_FROM + 1):
        starts = [r["curve"] for name, r in results.items() if name.endswith(f"__s{seed:03d}.json")]
        assert len(starts) == 2
        assert starts[0]["accuracy"][0] == starts[1]["accuracy"][0]
        assert starts[0]["tool_calls"][0] == starts[1]["tool_calls"][0]


@pytest.mark.fault
def test_a_sweep_killed_mid_run_resumes_with_no_cell_lost_or_run_twice(straight, tmp_path):
    """The killed sweep starts from the straight one's warm-ups (a warm-up is keyed by its settings and seed, so
    it is the same file): the kill and the resume are about cells, and the warm-ups cost a process ~6 s."""
    out = tmp_path / "killed"
    shutil.copytree(straight / "warmups", out / "warmups")
    process = subprocess.Popen(_command(out), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while len(list((out / "C3" / "cells").glob("*.json"))) < 1:
            assert process.poll() is None, "the sweep ended before it could be killed"
            assert time.monotonic() < deadline
            time.sleep(0.05)
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.wait(timeout=60)
    done = {path.name: path.stat().st_mtime_ns for path in (out / "C3" / "cells").glob("*.json")}
    assert 1 <= len(done) < 4
    result = subprocess.run(_command(out), cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    cells = out / "C3" / "cells"
    assert {name: (cells / name).stat().st_mtime_ns for name in done} == done  # finished cells not run again
    assert not list(cells.glob(".*.tmp"))
    assert _results(out) == _results(straight)  # every cell, with the numbers of an uninterrupted sweep


def test_every_claim_runs_to_a_verdict_and_the_page_is_written(straight, tmp_path):
    """``reproduce all`` end to end at the smoke budget (2 seeds, 3 updates): the quick and full profiles differ
    from it only in the budget's numbers, and the quick one costs ~3.5 min of CPU, too much for every CI run.

    It starts from the straight C3 sweep's 2 warm-ups (cached by settings and seed; its cells belong to another
    design and are refused): no claim then warms up again, which the warm-up count below checks."""
    out = tmp_path / "smoke"
    shutil.copytree(straight / "warmups", out / "warmups")
    page = tmp_path / "page" / "results.md"
    command = [sys.executable, "-m", "scale", "reproduce", "all", "--smoke", "--out", str(out), "--jobs", "2",
               "--no-progress", "--report", str(page)]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, result.stderr[-3000:]
    for claim in ("C1", "C2", "C3", "C4", "C9"):
        summary = json.loads((out / claim / "summary.json").read_text())
        assert summary["cells_done"] == summary["cells_total"] > 0, claim
        assert summary["primary"]["verdict"] in VERDICTS, claim
        assert (out / claim / f"{claim}_curves.png").stat().st_size > 0, claim
    assert len(list((out / "warmups").glob("*.pt"))) == 2  # one warm-up per seed, shared by every claim's arms
    text = page.read_text()
    for claim in ("C1", "C2", "C3", "C4", "C9"):
        assert f"## {claim} · " in text and f"results/{claim}/{claim}_curves.png" in text, claim
        assert (page.parent / "results" / claim / f"{claim}_curves.png").exists(), claim
    assert "results/C1/C1.png" not in text  # the transformer claims draw no knob figure: no broken image
