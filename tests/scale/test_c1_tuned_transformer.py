"""The transformer's C1 tuned driver: what its rule ranks, and no verdict read on a partial verdict run."""

from __future__ import annotations

import json
import math

import pytest

pytest.importorskip("transformers")

from scale.studies import c1_tuned  # noqa: E402


def _cell(out, arm, k, seed, auc, collapse=0.0):
    path = c1_tuned.transformer_cell_path(out, arm, k, seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"arm": arm, "exponent": k, "seed": seed, "metrics": {"auc": auc, "collapse": collapse}}
    path.write_text(json.dumps(record))


def test_the_rule_ranks_negated_auc_and_counts_a_collapse_as_censored():
    assert c1_tuned.ranked_value({"metrics": {"auc": 0.25, "collapse": 0.0}}) == -0.25
    assert math.isnan(c1_tuned.ranked_value({"metrics": {"auc": 0.25, "collapse": 1.0}}))


def test_a_partial_verdict_run_is_not_judged_and_a_complete_one_is(tmp_path):
    for arm, shift in (("flash", 0.0), ("grpo", -0.02)):
        for k, auc in ((-1, 0.20), (0, 0.30), (1, 0.25)):
            for seed in c1_tuned.TRANSFORMER_TUNING_PILOT_SEEDS:
                _cell(tmp_path, arm, k, seed, auc + shift)
    for seed in c1_tuned.VERDICT_SEEDS[:4]:
        _cell(tmp_path, "flash", 0, seed, 0.30 + 0.001 * seed)
        _cell(tmp_path, "grpo", 0, seed, 0.25 + 0.001 * seed)
    summary = c1_tuned.summarize_transformer_tuning(tmp_path)
    assert summary["tuned"]["status"] == {"flash": "interior", "grpo": "interior"}
    assert summary["tuned"]["best"] == {"flash": pytest.approx(3e-4), "grpo": pytest.approx(3e-4)}
    assert summary["comparison"] is None and summary["verdict_seeds_done"] == 4
    for seed in c1_tuned.VERDICT_SEEDS[4:]:
        _cell(tmp_path, "flash", 0, seed, 0.30 + 0.001 * seed)
        _cell(tmp_path, "grpo", 0, seed, 0.25 + 0.001 * seed)
    comparison = c1_tuned.summarize_transformer_tuning(tmp_path)["comparison"]
    assert comparison["seeds"] == 10 and comparison["verdict"] == "supported"
    assert comparison["difference"]["mean"] == pytest.approx(0.05, abs=1e-12)


def test_the_transformer_driver_rejects_a_malformed_stop_time_naming_the_flag(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        c1_tuned.main(["--out", str(tmp_path), "--stop-starting", "24:00"])
    assert exit_.value.code == 2 and "--stop-starting" in capsys.readouterr().err
    assert not (tmp_path / "cells").exists()
