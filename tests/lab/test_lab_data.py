"""The lab's grid and data: the committed page data is what the code computes, and the run resumes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flashsim.cli import main
from flashsim.config import from_dict
from flashsim.lab import LabConfig, Setting, lab_data, learning_curve, read_data, run_lab, settings, write_data
from flashsim.lab.compute import cell_file, series, update_quality

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "docs" / "lab" / "data.js"
GRID = LabConfig(envs=("bandit_tiny",), lags=(0, 2), deltas=(1e-3,), budget=8, group_sizes=(1, 2), quality_steps=2)
TINY = LabConfig(envs=("bandit_tiny",), algorithms=("flash_reinforce", "grpo"), lags=(2,), deltas=(1e-3,), budget=8,
                 group_sizes=(2,), seeds=2, updates=4, eval_every=2, quality_batches=4, quality_steps=2)


@pytest.mark.slow
def test_a_cell_recomputed_from_scratch_equals_the_committed_data():
    data = read_data(DATA)
    config = from_dict(LabConfig, data["config"])
    setting = Setting("bandit", "flash_reinforce", config.deltas[0], config.lags[-2], config.group_sizes[-1])
    committed = data["series"][setting.key]
    curve = learning_curve(config, setting, seed=1)
    assert curve["success"] == committed["success"]["seeds"][1] and curve["rollouts"] == committed["rollouts"]
    assert update_quality(config, setting) == committed["quality"]


def test_the_committed_means_and_bands_are_those_of_the_committed_seeds():
    data = read_data(DATA)
    config = from_dict(LabConfig, data["config"])
    for setting in settings(config)[::17]:
        committed = data["series"][setting.key]
        seeds = committed["success"]["seeds"]
        curves = [{"rollouts": committed["rollouts"], "success": seed, "acceptance": committed["acceptance"]}
                  for seed in seeds]
        assert series(config, setting, curves, committed["quality"]) == committed


def test_the_committed_data_holds_every_setting_of_its_grid_and_fits_the_size_budget():
    data = read_data(DATA)
    config = from_dict(LabConfig, data["config"])
    assert set(data["series"]) == {setting.key for setting in settings(config)}
    assert config.seeds >= 5 and 16 in config.lags
    assert DATA.stat().st_size <= 5 * 2**20


def test_delta_is_a_setting_only_of_the_gated_losses_and_grpo_has_no_single_rollout_design():
    keys = {setting.key for setting in settings(GRID)}
    assert "bandit_tiny|flash_reinforce|0.001|2|1" in keys and "bandit_tiny|token_gate|0.001|0|2" in keys
    assert "bandit_tiny|no_gate|none|0|1" in keys and "bandit_tiny|grpo|none|2|2" in keys
    assert not any(key.startswith("bandit_tiny|grpo|") and key.endswith("|1") for key in keys)
    assert not any("|flash_reinforce|none|" in key or "|grpo|0.001|" in key for key in keys)


@pytest.mark.parametrize("fields, message", [
    ({"algorithms": ("nope",)}, "algorithms[0]"),
    ({"lags": (0, 40)}, "lags[1]"),
    ({"group_sizes": (1, 3)}, "group_sizes[1]"),
    ({"deltas": (0.0,)}, "deltas[0]"),
    ({"quality_batches": 5}, "quality_batches"),
    ({"envs": ()}, "envs"),
], ids=["unknown-loss", "lag-beyond-ascent", "design-not-dividing-budget", "zero-delta", "odd-batches", "no-env"])
def test_a_bad_grid_is_refused_naming_the_field(fields, message):
    with pytest.raises((ValueError, TypeError), match=message.replace("[", r"\[")):
        LabConfig(**fields)


def test_an_interrupted_run_resumes_to_the_same_data(tmp_path):
    assert run_lab(TINY, tmp_path / "whole") == len(settings(TINY)) * (TINY.seeds + 1)
    whole = lab_data(TINY, tmp_path / "whole")
    assert run_lab(TINY, tmp_path / "whole") == 0
    setting = settings(TINY)[1]
    cell_file(tmp_path / "whole", setting, 1).unlink()  # as if killed before this cell was written
    assert run_lab(TINY, tmp_path / "whole") == 1
    assert lab_data(TINY, tmp_path / "whole") == whole
    write_data(whole, tmp_path / "data.js")
    assert read_data(tmp_path / "data.js") == json.loads(json.dumps(whole))


def test_a_directory_of_another_grid_is_refused(tmp_path):
    run_lab(TINY, tmp_path, progress=None)
    with pytest.raises(ValueError, match="another grid"):
        run_lab(LabConfig(**{**TINY.__dict__, "seeds": 3}), tmp_path)


def test_the_command_writes_the_data_from_flags_generated_from_the_config(tmp_path, capsys):
    flags = ["--envs", "bandit_tiny", "--algorithms", "flash_reinforce,grpo", "--lags", "2", "--deltas", "0.001",
             "--budget", "8", "--group-sizes", "2", "--seeds", "2", "--updates", "4", "--eval-every", "2",
             "--quality-batches", "4", "--quality-steps", "2"]
    assert main(["lab", *flags, "--out", str(tmp_path / "out"), "--data", str(tmp_path / "page.js"), "--jobs", "1",
                 "--quiet"]) == 0
    assert read_data(tmp_path / "page.js") == read_data(tmp_path / "out" / "data.js") == json.loads(
        json.dumps(lab_data(TINY, tmp_path / "out")))
    assert main(["lab", "--lags", "0,99", "--out", str(tmp_path / "bad")]) == 2
    assert "lags[1]" in capsys.readouterr().err
