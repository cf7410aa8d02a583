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


def _summary_file(tmp_path, flash_status="interior"):
    grid = {"flash": {"status": flash_status, "best_exponent": 0}, "grpo": {"status": "interior", "best_exponent": -1}}
    path = tmp_path / "summary.json"
    path.write_text(json.dumps({"grid": grid}))
    return path


def test_the_confirmatory_rerun_reads_the_committed_choice_and_judges_only_its_fresh_seeds(tmp_path):
    exponents = c1_tuned.chosen_exponents(_summary_file(tmp_path))
    assert exponents == {"flash": 0, "grpo": -1}
    assert not set(c1_tuned.CONFIRMATORY_SEEDS) & set(c1_tuned.VERDICT_SEEDS + c1_tuned.TRANSFORMER_TUNING_PILOT_SEEDS)
    for seed in c1_tuned.VERDICT_SEEDS:  # the first run's cells at the same rates: never part of the rerun
        _cell(tmp_path, "flash", 0, seed, 0.9)
        _cell(tmp_path, "grpo", -1, seed, 0.1)
    for seed in c1_tuned.CONFIRMATORY_SEEDS[:-1]:
        _cell(tmp_path, "flash", 0, seed, 0.30 + 0.001 * seed)
        _cell(tmp_path, "grpo", -1, seed, 0.30 + 0.002 * (seed % 2))
    partial = c1_tuned.summarize_confirmatory(tmp_path, exponents)
    assert partial["comparison"] is None and partial["verdict_seeds_done"] == 9
    last = c1_tuned.CONFIRMATORY_SEEDS[-1]
    _cell(tmp_path, "flash", 0, last, 0.30 + 0.001 * last)
    _cell(tmp_path, "grpo", -1, last, 0.30 + 0.002 * (last % 2))
    summary = c1_tuned.summarize_confirmatory(tmp_path, exponents)
    c = summary["comparison"]
    flash = [0.30 + 0.001 * s for s in c1_tuned.CONFIRMATORY_SEEDS]
    grpo = [0.30 + 0.002 * (s % 2) for s in c1_tuned.CONFIRMATORY_SEEDS]
    assert c["seeds"] == 10 and c["difference"]["mean"] == pytest.approx(sum(flash) / 10 - sum(grpo) / 10, rel=1e-12)
    assert c["flash_ahead"] == sum(a > b for a, b in zip(flash, grpo))
    assert summary["rates"] == {"flash": pytest.approx(3e-4), "grpo": pytest.approx(1.5e-4)}
    assert [summary["auc_by_seed"]["flash"][str(s)] for s in c1_tuned.CONFIRMATORY_SEEDS] == flash


def test_the_confirmatory_rerun_refuses_a_summary_without_an_interior_choice(tmp_path):
    with pytest.raises(ValueError, match="--rates-from"):
        c1_tuned.chosen_exponents(_summary_file(tmp_path, flash_status="at edge"))


def test_the_page_prints_the_confirmatory_verdict_beside_the_exploratory_one():
    from flashsim.studies.c1_tuned.page import transformer_section

    interval = {"mean": 0.02, "low": 0.01, "high": 0.03, "n": 10}
    first = {"grid": {}, "tuned": {"at_edge": []}, "verdict_seeds": list(c1_tuned.VERDICT_SEEDS),
             "comparison": {"seeds": 10, "difference": interval, "flash": interval, "grpo": interval,
                            "verdict": "inconclusive", "p": 0.04}}
    rerun = {"verdict_seeds": list(c1_tuned.CONFIRMATORY_SEEDS), "verdict_seeds_done": 3, "comparison": None}
    text = "\n".join(transformer_section(first, rerun))
    assert "**Exploratory**" in text and "(410–419)" in text and "*inconclusive*" in text
    assert "**Confirmatory**" in text and "3 of the 10 verdict seeds (420–429)" in text
    done = {**rerun, "verdict_seeds_done": 10,
            "comparison": {**first["comparison"], "verdict": "supported", "flash_ahead": 9}}
    text = "\n".join(transformer_section(first, done))
    assert "(420–429)" in text and "*supported*" in text and "ahead on 9 of 10 seeds" in text
    assert "not run" not in "\n".join(transformer_section(first, done))
    assert "not run" in "\n".join(transformer_section(first, None))


def test_the_transformer_sentence_gives_the_confirmatory_verdict_first_and_says_when_it_is_not_done():
    from flashsim.studies.c1_tuned.page import transformer_sentence

    interval = {"mean": 0.02, "low": 0.01, "high": 0.03, "n": 10}
    first = {"verdict_seeds": list(c1_tuned.VERDICT_SEEDS), "comparison": {
        "seeds": 10, "difference": interval, "verdict": "inconclusive"}}
    rerun = {"verdict_seeds": list(c1_tuned.CONFIRMATORY_SEEDS), "comparison": {
        "seeds": 10, "difference": {**interval, "mean": 0.029}, "verdict": "supported", "flash_ahead": 10}}
    done = transformer_sentence(first, rerun)
    assert done.index("+0.029") < done.index("*supported*") < done.index("exploratory") < done.index("*inconclusive*")
    assert "420–429, FlashREINFORCE ahead on 10 of 10" in done and "410–419" in done
    assert "is not done" in transformer_sentence(first, {**rerun, "comparison": None})
    assert "is not done" in transformer_sentence(first, None) and "*inconclusive*" in transformer_sentence(first, None)
