"""``flashsim variance`` at a tiny budget, through ``main`` in this process (``python -m flashsim`` as a process is
tests/test_cli.py's business)."""

import csv

import pytest

from flashsim.cli import build_parser, main


@pytest.mark.slow
def test_variance_command_writes_a_table_csv_and_plots(tmp_path, capsys):
    code = main([
        "variance", "--env", "bandit", "--estimators", "flash_reinforce,grpo,rloo:groups", "--budget", "8,16",
        "--group-size", "2,4", "--lags", "0,2", "--batches", "8", "--bootstrap", "10", "--steps", "4",
        "--out", str(tmp_path),
    ])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "flash_reinforce" in out and "between" in out
    with (tmp_path / "variance.csv").open() as file:
        rows = list(csv.DictReader(file))
    # per lag: flash_reinforce at 2 budgets + (grpo, rloo:groups) at 2 budgets x 2 group sizes
    assert len(rows) == 2 * (2 + 2 * 2 * 2)
    assert {row["config/label"] for row in rows} == {"flash_reinforce", "grpo", "rloo:groups"}
    assert {"grad/variance_ci_low", "grad/between_prompt", "trust/acceptance_rate"} <= set(rows[0])
    for name in ("vs_lag.png", "vs_budget.png", "variance_split.png", "config.json"):
        assert (tmp_path / name).stat().st_size > 0


def test_bad_usage_exits_2_with_a_message(tmp_path, capsys):
    assert main(["variance", "--env", "bandit", "--budget", "10", "--group-size", "4", "--out", str(tmp_path)]) == 2
    assert "divisible" in capsys.readouterr().err
    assert main(["variance", "--env", "bandit", "--estimators", "reinforce", "--out", str(tmp_path)]) == 2
    assert "flash_reinforce" in capsys.readouterr().err
    assert main(["variance", "--env", "maze", "--out", str(tmp_path)]) == 2
    assert "env must be one of" in capsys.readouterr().err


def test_help_text_comes_from_the_sweep_config_docstrings():
    parser = build_parser("variance")
    subparsers = next(action for action in parser._actions if action.dest == "command")
    help_text = subparsers.choices["variance"].format_help()
    assert "Policy lags L" in help_text and "[default: 0,2,4,8]" in help_text


@pytest.mark.slow  # ~3 s: FrozenLake's 100-step horizon
def test_a_gymnasium_env_with_exact_tables_is_measured_and_one_without_is_refused(tmp_path, capsys):
    common = ["--estimators", "flash_reinforce", "--budget", "8", "--lags", "0,1", "--steps", "2",
              "--batches", "20", "--bootstrap", "0", "--quiet"]
    assert main(["variance", "--env", "FrozenLake-v1", *common, "--out", str(tmp_path / "lake")]) == 0
    rows = list(csv.DictReader((tmp_path / "lake" / "variance.csv").open()))
    assert {row["config/env"] for row in rows} == {"FrozenLake-v1"} and len(rows) == 2
    assert main(["variance", "--env", "Taxi-v4", *common, "--out", str(tmp_path / "taxi")]) == 2
    assert "exact tables" in capsys.readouterr().err  # Taxi's rewards lie outside [0, 1]


def test_delta_is_a_loss_option_of_the_sweep_and_the_old_key_names_the_new_one(tmp_path, capsys):
    from flashsim.cli.variance import sweep_config
    from flashsim.config import load
    from flashsim.variance.sweep import SweepConfig, options_for

    args = build_parser("variance").parse_args(["variance", "--delta", "0.01", "--out", str(tmp_path)])
    config = sweep_config(args)
    assert config.loss_options == {"delta": 0.01}
    # Each estimator gets the options that act on it: δ goes to the gated rows, not to GRPO's clip or no_gate.
    assert options_for("flash_reinforce", config.loss_options) == {"delta": 0.01}
    assert options_for("grpo", config.loss_options) == {} and options_for("no_gate", config.loss_options) == {}

    yaml = tmp_path / "old.yaml"
    yaml.write_text("delta: 0.01\n")
    for old in ({"path": yaml}, {"assignments": ["delta=0.01"]}):
        with pytest.raises(ValueError, match=r"^delta is now loss_options\.delta$"):
            load(SweepConfig, old.get("path"), old.get("assignments", ()))
    assert main(["variance", "--set", "delta=0.01", "--out", str(tmp_path / "run")]) == 2
    assert capsys.readouterr().err.strip() == "flashsim variance: error: delta is now loss_options.delta"
    assert not (tmp_path / "run").exists()
    with pytest.raises(ValueError, match="loss_options 'clip_eps' changes none of the estimators flash_reinforce"):
        SweepConfig(estimators=("flash_reinforce",), loss_options={"clip_eps": 0.1})
