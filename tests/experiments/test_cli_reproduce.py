"""``flashsim reproduce`` through a subprocess: a smoke run, and a sweep killed with SIGKILL that resumes
to byte-identical files."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.experiments.test_runner import snapshot

CLAIMS = ("C4", "C5")  # 12 smoke cells between them, and 8 gradient-probe cells of C4
CELLS = 20


def reproduce(out, *extra, **kwargs):
    command = [sys.executable, "-m", "flashsim", "reproduce", *CLAIMS, "--smoke", "--out", str(out), "--no-progress",
               *extra]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, **kwargs)


@pytest.mark.slow
def test_reproduce_smoke_prints_verdicts_and_writes_the_report(tmp_path):
    process = reproduce(tmp_path / "out", "--jobs", "1", "--report", str(tmp_path / "docs" / "results.md"))
    output, _ = process.communicate(timeout=600)
    assert process.returncode == 0, output
    assert "C4: auc: signed > positive_only at gridworld:" in output
    text = (tmp_path / "docs" / "results.md").read_text()
    assert "## C5" in text and "flashsim reproduce C4 C5 --smoke --seeds 2" in text
    assert (tmp_path / "docs" / "results" / "C4" / "C4.png").exists()


@pytest.mark.slow
def test_a_sweep_killed_with_sigkill_resumes_to_the_same_files(tmp_path):
    reference = reproduce(tmp_path / "reference", "--jobs", "2")
    output, _ = reference.communicate(timeout=600)
    assert reference.returncode == 0, output

    out = tmp_path / "killed"
    process = reproduce(out, "--jobs", "2")
    deadline = time.monotonic() + 600
    while len(list(Path(out).glob("*/cells/*.json"))) < 3:
        assert process.poll() is None, "the sweep finished before it could be killed; give it more cells"
        assert time.monotonic() < deadline
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)  # the runner and its worker processes, mid-sweep
    process.communicate()
    done = len(list(Path(out).glob("*/cells/*.json")))
    assert 3 <= done < CELLS

    resumed = reproduce(out, "--jobs", "2")
    output, _ = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, output
    assert f"ran {CELLS - done} cells ({done} already done)" in output
    files = {name: data for name, data in snapshot(out).items() if not name.endswith(".png")}
    expected = {name: data for name, data in snapshot(tmp_path / "reference").items() if not name.endswith(".png")}
    assert files == expected


@pytest.mark.parametrize(
    "argv, message",
    [(["C4", "--smoke", "--seeds", "1"], "seeds must be an int >= 2"), (["C10", "--smoke"], "invalid choice")],
    ids=["one-seed", "unknown-claim"],
)
def test_bad_arguments_exit_with_status_2_and_say_why(argv, message, tmp_path, capsys):
    from flashsim.cli import main

    try:
        status = main(["reproduce", *argv, "--out", str(tmp_path)])
    except SystemExit as exit_:  # argparse rejects unknown choices itself
        status = exit_.code
    assert status == 2
    assert message in capsys.readouterr().err


def test_cells_of_the_former_format_are_refused_and_left_as_they_are(tmp_path, capsys):
    from flashsim.cli import main
    from flashsim.experiments import build_design
    from flashsim.experiments.runner import cell_path

    path = cell_path(tmp_path, build_design("C4", "smoke").cells()[0])
    path.parent.mkdir(parents=True)
    path.write_text('{"claim": "C4", "seed": 0, "spec": {"loss": "flash_reinforce"}, "result": {}}')
    assert main(["reproduce", "C4", "--smoke", "--out", str(tmp_path), "--no-progress"]) == 2
    assert "written by an older flashsim" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == [path.name]


@pytest.mark.slow
def test_a_follow_up_runs_by_name_on_its_own_page_with_per_seed_numbers(tmp_path):
    command = [sys.executable, "-m", "flashsim", "reproduce", "C1size", "--smoke", "--out", str(tmp_path / "out"),
               "--no-progress", "--jobs", "1", "--report", str(tmp_path / "docs" / "follow-ups.md")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    text = (tmp_path / "docs" / "follow-ups.md").read_text()
    assert text.startswith("# Follow-up experiments") and "## C1size" in text and "(claimed 2)" in text
    rows = (tmp_path / "docs" / "results" / "C1size" / "per_seed.csv").read_text().splitlines()
    assert rows[0].startswith("claim,setting,arm,seed,rollouts_to_70") and len(rows) == 1 + 2 * 3 * 2
