"""The sweep runner: one atomic JSON file per cell, resume without redoing or losing cells, byte-identical."""

import json
from dataclasses import replace
from pathlib import Path

import pytest

from flashsim.config import from_dict, to_dict
from flashsim.experiments.runner import CELLS, cell_path, run_sweep
from flashsim.sim.config import TrainConfig
from tests.experiments.fakes import failing_after, fake_run
from tests.experiments.test_design import small_design


def snapshot(out):
    """Every file under ``out`` → its bytes."""
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(Path(out).rglob("*")) if p.is_file()}


def test_a_sweep_writes_one_json_file_per_cell_with_its_config_and_result(tmp_path):
    design = small_design()
    assert run_sweep([design], tmp_path, jobs=1, progress=False, run=fake_run) == len(design.cells())
    for cell in design.cells():
        record = json.loads(cell_path(tmp_path, cell).read_text())
        assert record["config"] == to_dict(cell.config) and record["seed"] == cell.seed == cell.config.seed
        assert from_dict(TrainConfig, record["config"]) == cell.config
        assert record["result"] == json.loads(json.dumps(fake_run(cell.config)))
    assert (tmp_path / "CX" / "design.json").exists()


@pytest.mark.fault
def test_an_interrupted_sweep_resumes_without_redoing_or_losing_cells_and_ends_byte_identical(tmp_path):
    design = small_design()
    reference = tmp_path / "reference"
    run_sweep([design], reference, jobs=1, progress=False, run=fake_run)

    out = tmp_path / "interrupted"
    interrupted = failing_after(5)
    with pytest.raises(KeyboardInterrupt):
        run_sweep([design], out, jobs=1, progress=False, run=interrupted)
    finished = snapshot(out)
    assert len([name for name in finished if f"/{CELLS}/" in name]) == 5
    (out / "CX" / CELLS / ".a__lr0.1__s002.json.xyz.tmp").write_text("half a fil")  # a write cut by SIGKILL

    resumed = failing_after(10 ** 6)
    ran = run_sweep([design], out, jobs=1, progress=False, run=resumed)
    assert ran == len(design.cells()) - 5 == len(resumed.calls)  # nothing redone
    assert not set(resumed.calls) & set(interrupted.calls)
    after = snapshot(out)
    assert {name: after[name] for name in finished if not name.endswith(".tmp")} == {
        name: data for name, data in finished.items() if not name.endswith(".tmp")}  # nothing lost or rewritten
    assert after == snapshot(reference)  # byte-identical, temporary file gone


def test_a_finished_sweep_runs_nothing_again(tmp_path):
    design = small_design()
    run_sweep([design], tmp_path, jobs=1, progress=False, run=fake_run)
    assert run_sweep([design], tmp_path, jobs=1, progress=False, run=failing_after(0)) == 0


def test_a_cell_file_of_another_design_is_an_error_not_overwritten(tmp_path):
    run_sweep([small_design()], tmp_path, jobs=1, progress=False, run=fake_run)
    other = small_design(base=replace(small_design().base, updates=5))
    with pytest.raises(ValueError, match="another design"):
        run_sweep([other], tmp_path, jobs=1, progress=False, run=fake_run)


def test_a_cell_file_of_the_former_format_is_refused_with_a_clear_error(tmp_path):
    design = small_design()
    path = cell_path(tmp_path, design.cells()[0])
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"claim": "CX", "seed": 0, "spec": {"loss": "flash_reinforce"}, "result": {}}))
    before = path.read_bytes()
    with pytest.raises(ValueError, match="older flashsim"):
        run_sweep([design], tmp_path, jobs=1, progress=False, run=fake_run)
    assert path.read_bytes() == before


@pytest.mark.parametrize(("jobs", "error"), [(0, ValueError), (-1, ValueError), (1.5, TypeError), (True, TypeError)],
                         ids=["zero", "negative", "float", "bool"])
def test_jobs_must_be_a_positive_int(tmp_path, jobs, error):
    with pytest.raises(error, match="jobs"):
        run_sweep([small_design()], tmp_path, jobs=jobs, progress=False, run=fake_run)


@pytest.mark.slow
def test_parallel_processes_write_the_same_files_as_one_process(tmp_path):
    design = small_design()
    run_sweep([design], tmp_path / "one", jobs=1, progress=False, run=fake_run)
    run_sweep([design], tmp_path / "two", jobs=2, progress=False, run=fake_run)
    assert snapshot(tmp_path / "one") == snapshot(tmp_path / "two")
