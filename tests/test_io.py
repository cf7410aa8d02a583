"""Run outputs: metric rows in CSV and JSON lines, truncation on resume, atomic writes."""

from __future__ import annotations

import json
import math
import os
import pickle
from collections import deque
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from flashsim.io import MetricsWriter, atomic_write_text, load_checkpoint, read_metrics, save_checkpoint


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
        from flashsim.io import atomic_write

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
