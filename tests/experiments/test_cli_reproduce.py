"""``flashsim reproduce``: a smoke run, a follow-up by name, and a sweep killed with SIGKILL (a subprocess, killed by
its process group from outside) that resumes to byte-identical files.

The runs that are not about the process boundary run in this process (``main([...])``): each ``python -m flashsim``
costs a torch import and, with ``--jobs 2``, two more in its spawned workers (docs/performance.md, "Test suite").
"""

import contextlib
import io
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


def reproduce_here(*argv: str) -> tuple[int, str]:
    """``flashsim reproduce ARGV --no-progress`` in this process: (exit status, stdout and stderr)."""
    from flashsim.cli import main

    output = io.StringIO()
    with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
        status = main(["reproduce", *argv, "--no-progress"])
    return status, output.getvalue()


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    """One clean run of C4 and C5 with the report: the smoke test reads it, the SIGKILL test compares with it."""
    root = tmp_path_factory.mktemp("smoke")
    status, output = reproduce_here(*CLAIMS, "--smoke", "--out", str(root / "out"), "--jobs", "1",
                                    "--report", str(root / "docs" / "results.md"))
    return root, status, output


@pytest.mark.slow
def test_reproduce_smoke_prints_verdicts_and_writes_the_report(smoke_run):
    root, status, output = smoke_run
    assert status == 0, output
    assert "C4: auc: signed > positive_only at gridworld:" in output
    text = (root / "docs" / "results.md").read_text()
    assert "## C5" in text and "flashsim reproduce C4 C5 --smoke --seeds 2" in text
    assert (root / "docs" / "results" / "C4" / "C4.png").exists()


@pytest.mark.fault
@pytest.mark.slow
def test_a_sweep_killed_with_sigkill_resumes_to_the_same_files(smoke_run, tmp_path):
    """The killed sweep is a ``python -m flashsim`` process group with two workers; the resume (not about the
    process boundary) and the clean run it is compared with run in this process, one cell at a time."""
    reference, status, output = smoke_run[0] / "out", smoke_run[1], smoke_run[2]
    assert status == 0, output

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

    status, output = reproduce_here(*CLAIMS, "--smoke", "--out", str(out), "--jobs", "1")
    assert status == 0, output
    assert f"ran {CELLS - done} cells ({done} already done)" in output
    files = {name: data for name, data in snapshot(out).items() if not name.endswith(".png")}
    expected = {name: data for name, data in snapshot(reference).items() if not name.endswith(".png")}
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
    from flashsim.experiments.runner import cell_path
    from flashsim.studies import build_design

    path = cell_path(tmp_path, build_design("C4", "smoke").cells()[0])
    path.parent.mkdir(parents=True)
    path.write_text('{"claim": "C4", "seed": 0, "spec": {"loss": "flash_reinforce"}, "result": {}}')
    assert main(["reproduce", "C4", "--smoke", "--out", str(tmp_path), "--no-progress"]) == 2
    assert "written by an older flashsim" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == [path.name]


@pytest.mark.slow
def test_a_follow_up_runs_by_name_on_its_own_page_with_per_seed_numbers(tmp_path):
    status, output = reproduce_here("C1size", "--smoke", "--out", str(tmp_path / "out"), "--jobs", "1",
                                    "--report", str(tmp_path / "docs" / "follow-ups.md"))
    assert status == 0, output
    text = (tmp_path / "docs" / "follow-ups.md").read_text()
    assert text.startswith("# Follow-up experiments") and "## C1size" in text
    assert "(flashsim's reading of the 2×)" in text
    rows = (tmp_path / "docs" / "results" / "C1size" / "per_seed.csv").read_text().splitlines()
    assert rows[0].startswith("claim,setting,arm,seed,rollouts_to_70") and len(rows) == 1 + 2 * 3 * 2
