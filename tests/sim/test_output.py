"""Run outputs: metric rows in CSV and JSON lines, truncation on resume, atomic writes."""

from __future__ import annotations

import json
import math

import pytest

from flashsim.sim.output import MetricsWriter, atomic_write_text, read_metrics


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


def test_a_row_with_other_keys_is_refused(tmp_path):
    writer = MetricsWriter(tmp_path, ("update", "env/reward"))
    with pytest.raises(ValueError, match="columns"):
        writer.write({"env/reward": 1.0, "update": 0})


def test_atomic_write_replaces_whole_files_and_leaves_nothing_behind_on_failure(tmp_path):
    target = tmp_path / "summary.json"
    atomic_write_text(target, "old")
    with pytest.raises(ZeroDivisionError):
        from flashsim.sim.output import atomic_write

        atomic_write(target, lambda file: (file.write(b"half"), 1 / 0))
    assert target.read_text() == "old"
    assert [path.name for path in tmp_path.iterdir()] == ["summary.json"]
    assert oct(target.stat().st_mode & 0o777) == "0o644"
