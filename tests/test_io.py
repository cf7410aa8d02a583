"""Run outputs: metric rows in CSV and JSON lines, truncation on resume, atomic writes, the run directory."""

from __future__ import annotations

import json
import math
import os
import pickle
import sys
from collections import deque
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from flashsim.outputs import MetricsWriter, RunDirectory, read_metrics
from flashsim.storage import atomic_write_text, load_checkpoint, save_checkpoint


def test_rows_round_trip_with_nan_as_an_empty_cell_and_null(tmp_path):
    writer = MetricsWriter(tmp_path, ("update", "env/reward"))
    writer.write({"update": 0, "env/reward": 0.25})
    writer.write({"update": 1, "env/reward": math.nan})
    writer.close()
    assert (tmp_path / "metrics.csv").read_text() == "update,env/reward\n0,0.25\n1,\n"
    assert json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[1]) == {"update": 1, "env/reward": None}
    rows = read_metrics(tmp_path)
    assert rows[0] == {"update": 0, "env/reward": 0.25} and math.isnan(rows[1]["env/reward"])


def test_resuming_truncates_rows_written_after_the_recorded_offsets(tmp_path):
    writer = MetricsWriter(tmp_path, ("update",))
    writer.write({"update": 0})
    offsets = writer.offsets
    writer.write({"update": 1})
    writer.close()
    resumed = MetricsWriter(tmp_path, ("update",), offsets=offsets)
    resumed.write({"update": 7})
    resumed.close()
    assert [row["update"] for row in read_metrics(tmp_path)] == [0, 7]
    assert (tmp_path / "metrics.csv").read_text() == "update\n0\n7\n"


def test_a_row_with_a_key_outside_the_columns_is_refused(tmp_path):
    writer = MetricsWriter(tmp_path, ("update", "env/reward"))
    with pytest.raises(ValueError, match="env/success"):
        writer.write({"update": 0, "env/success": 1.0})


def test_a_row_may_leave_columns_out_as_empty_cells_in_column_order(tmp_path):
    writer = MetricsWriter(tmp_path, ("update", "env/reward", "eval/accuracy"))
    writer.write({"eval/accuracy": 0.5, "update": 0})
    writer.close()
    assert (tmp_path / "metrics.csv").read_text().splitlines()[1] == "0,,0.5"
    assert json.loads((tmp_path / "metrics.jsonl").read_text()) == {"eval/accuracy": 0.5, "update": 0}


def test_atomic_write_replaces_whole_files_and_leaves_nothing_behind_on_failure(tmp_path):
    target = tmp_path / "summary.json"
    atomic_write_text(target, "old")
    with pytest.raises(ZeroDivisionError):
        from flashsim.storage import atomic_write

        atomic_write(target, lambda file: (file.write(b"half"), 1 / 0))
    assert target.read_text() == "old"
    assert [path.name for path in tmp_path.iterdir()] == ["summary.json"]
    assert oct(target.stat().st_mode & 0o777) == "0o644"


class _Evil:
    """Unpickling this runs ``touch <path>`` (what a tampered checkpoint would do)."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return os.system, (f"touch {self.path}",)


def test_a_checkpoint_crafted_to_run_code_on_unpickling_is_refused_and_runs_nothing(tmp_path):
    witness = tmp_path / "pwned"
    checkpoint = tmp_path / "checkpoint.pt"
    torch.save({"simulation": _Evil(witness)}, checkpoint)  # a plain torch.save of a malicious object
    with pytest.raises(ValueError, match="refusing to load"):
        load_checkpoint(checkpoint)
    assert not witness.exists()
    with open(checkpoint, "wb") as file:
        pickle.dump({"state": _Evil(witness)}, file)  # a raw pickle, not even a torch zip
    with pytest.raises(ValueError, match="refusing to load"):
        load_checkpoint(checkpoint)
    assert not witness.exists()


@dataclass
class _State:
    counts: np.ndarray
    label: str


def test_checkpoints_round_trip_tensors_arrays_scalars_and_named_classes(tmp_path):
    state = {"weights": torch.arange(3.0), "table": np.eye(2), "count": np.int64(7), "slice": slice(1, None),
             "queue": deque([1, 2]), "big": 2**100, "by_version": {3: (1.5, None)}, "typed": _State(np.ones(2), "a")}
    save_checkpoint(tmp_path / "c.pt", state, types=[_State])
    loaded = load_checkpoint(tmp_path / "c.pt", types=[_State])
    assert torch.equal(loaded["weights"], state["weights"]) and np.array_equal(loaded["table"], state["table"])
    assert type(loaded["count"]) is np.int64 and loaded["count"] == 7 and loaded["slice"] == slice(1, None)
    assert loaded["queue"] == deque([1, 2]) and loaded["big"] == 2**100 and loaded["by_version"] == {3: (1.5, None)}
    assert isinstance(loaded["typed"], _State) and loaded["typed"].label == "a"
    with pytest.raises(ValueError, match="_State"):
        load_checkpoint(tmp_path / "c.pt")  # a class the loader was not told to accept


def test_a_checkpoint_refuses_to_store_an_object_it_could_not_load_safely(tmp_path):
    with pytest.raises(TypeError, match=r"state\.model"):
        save_checkpoint(tmp_path / "c.pt", {"model": torch.nn.Linear(1, 1)})
    assert not (tmp_path / "c.pt").exists()


def _killed_run(out, *, checkpoint="checkpoint.pt"):
    """A run that checkpointed after update 1 and was killed after writing update 2."""
    run = RunDirectory(out, ("update",), checkpoint=checkpoint)
    run.start()
    for update in range(3):
        run.write({"update": update})
        if update == 1:
            run.save({"update": update})
    run.close()  # what a kill leaves behind: the rows of update 2 after the checkpoint's offsets


def test_a_resumed_run_directory_restores_the_state_then_writes_the_rows_after_the_checkpoint_once(tmp_path):
    _killed_run(tmp_path, checkpoint="checkpoint/state.pt")
    restored = []
    with RunDirectory(tmp_path, ("update",), checkpoint="checkpoint/state.pt") as run:
        run.resume(restored.append)
        run.write({"update": 2})
    assert restored == [{"update": 1}]  # the metrics' offsets are the run directory's own entry
    assert (tmp_path / "metrics.csv").read_text() == "update\n0\n1\n2\n"
    assert [row["update"] for row in read_metrics(tmp_path)] == [0, 1, 2]


def test_a_refused_checkpoint_leaves_the_metrics_untouched(tmp_path):
    _killed_run(tmp_path)
    before = (tmp_path / "metrics.csv").read_bytes()

    def refuse(state):
        raise ValueError("another configuration")

    with pytest.raises(ValueError, match="another configuration"):
        RunDirectory(tmp_path, ("update",)).resume(refuse)
    assert (tmp_path / "metrics.csv").read_bytes() == before


def test_a_fresh_run_refuses_a_directory_holding_a_run_unless_told_to_overwrite_it(tmp_path):
    _killed_run(tmp_path)
    with pytest.raises(FileExistsError, match="--resume"):
        RunDirectory(tmp_path, ("update",)).start()
    with RunDirectory(tmp_path, ("update",)) as run:
        run.start(overwrite=True)
    assert (tmp_path / "metrics.csv").read_text() == "update\n"


@pytest.mark.parametrize("out, message", [(None, "out=None"), ("missing", "no checkpoint")], ids=["no-dir", "no-file"])
def test_resuming_without_a_directory_or_a_checkpoint_is_an_error(tmp_path, out, message):
    with pytest.raises((ValueError, FileNotFoundError), match=message):
        RunDirectory(tmp_path / out if out else None, ("update",)).resume(lambda state: None)


def test_checkpoints_fall_due_every_n_updates_and_after_the_last_and_only_where_files_are_written(tmp_path):
    run = RunDirectory(tmp_path, ("update",))
    assert [k for k in range(1, 8) if run.checkpoint_due(k, every=3, last=7)] == [3, 6, 7]
    assert [k for k in range(1, 8) if run.checkpoint_due(k, every=0, last=7)] == [7]
    assert not RunDirectory(tmp_path, ("update",), writes=False).checkpoint_due(3, every=3, last=7)
    assert not RunDirectory(None, ("update",)).checkpoint_due(7, every=3, last=7)


def test_an_in_memory_run_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with RunDirectory(None, ("update",)) as run:
        run.start()
        run.write({"update": 0})
        run.save({"update": 0})
        run.write_json("summary.json", {"a": 1})
    assert list(tmp_path.iterdir()) == []


def test_json_files_are_strict_json_with_nan_as_null_and_a_final_newline(tmp_path):
    run = RunDirectory(tmp_path, ("update",))
    run.write_json("summary.json", {"reward": math.nan, "updates": np.int64(3)})
    assert (tmp_path / "summary.json").read_text() == '{\n  "reward": null,\n  "updates": 3\n}\n'


def _logged_run(out, updates, *, save_after=None, resume=False):
    """A run logging to TensorBoard that writes rows ``updates`` (resuming first), saving after ``save_after``.

    It then closes, which writes out every scalar: more than a killed run leaves, the worst case for a resume.
    """
    run = RunDirectory(out, ("update", "env/reward", "note"), logger="tensorboard")
    if resume:
        run.resume(lambda state: None)
    else:
        run.start()
    for update in updates:
        run.write({"update": update, "env/reward": update / 8, "note": "text is not a scalar"})
        if update == save_after:
            run.save({})
    run.close()


def test_a_resumed_run_has_each_step_once_in_its_event_files_for_any_reader(tmp_path):
    pytest.importorskip("tensorboard")
    from tests.event_files import raw_scalars, tensorboard_scalars

    _logged_run(tmp_path, range(4), save_after=1)  # killed after update 3, checkpoint after 1
    _logged_run(tmp_path, range(2, 5), resume=True)  # killed after update 4 before any checkpoint
    _logged_run(tmp_path, range(2, 6), save_after=5, resume=True)  # resumed from update 1 again
    expected = [("env/reward", k, k / 8) for k in range(6)]
    assert sorted(raw_scalars(tmp_path)) == expected  # cut back, not hidden: a raw reader sees each step once
    assert tensorboard_scalars(tmp_path) == {"env/reward": [(k, k / 8) for k in range(6)]}
    assert len(list(tmp_path.glob("events.out.tfevents.*"))) == 2  # the second process's file began after update 1


def test_a_fresh_run_deletes_the_event_files_of_the_run_it_overwrites(tmp_path):
    pytest.importorskip("tensorboard")
    from tests.event_files import raw_scalars

    _logged_run(tmp_path, range(3), save_after=2)
    with RunDirectory(tmp_path, ("update",)) as run:  # no logger this time
        run.start(overwrite=True)
    assert raw_scalars(tmp_path) == [] and not list(tmp_path.glob("events.out.tfevents.*"))


def test_an_unknown_logger_or_a_missing_tensorboard_package_is_an_error_before_the_run(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="logger must be one of \\['tensorboard'\\] or None; got 'wandb'"):
        RunDirectory(tmp_path, ("update",), logger="wandb")
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # what an environment without it gives
    with pytest.raises(ImportError, match="pip install tensorboard"):
        RunDirectory(tmp_path, ("update",), logger="tensorboard")
    RunDirectory(tmp_path, ("update",), logger="tensorboard", writes=False)  # a rank that writes nothing needs none
    assert list(tmp_path.iterdir()) == []
