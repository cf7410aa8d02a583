"""benchmarks/bench_vs_trl.py: each arm runs (2 updates) and the table lands between its markers."""

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bench_vs_trl.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_vs_trl", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_reward_is_one_when_the_last_integer_is_the_answer():
    reward = _bench().last_integer_reward
    assert [reward(None, text, "37") for text in (" 37", "12 and 37", "37 or 12", "", "3 7", "-37")] == \
           [1.0, 1.0, 0.0, 0.0, 0.0, 0.0]


def test_the_evaluation_numbers_are_never_trained_on():
    train, test = _bench()._problems()
    numbers = [[int(r["answer"]) for r in records] for records in (train, test)]
    assert len(numbers[0]) == 700 and len(numbers[1]) == 200 and not set(numbers[0]) & set(numbers[1])
    assert all(r["messages"][0]["content"] == f"Copy {r['answer']}. The answer is" for r in train + test)


def test_assets_built_for_other_settings_are_refused_not_measured(tmp_path):
    bench = _bench()
    (tmp_path / "model").mkdir()
    (tmp_path / "assets.json").write_text('{"prompt": "What is {a} plus {b}? The answer is"}')
    with pytest.raises(ValueError, match="--out: .* other settings"):
        bench.build_assets(tmp_path)


def test_the_report_replaces_its_own_section_and_keeps_the_rest_of_the_page(tmp_path):
    bench, page = _bench(), tmp_path / "performance.md"
    page.write_text("# Performance\n\nabove\n")
    bench.write_report(page, "first table\n")
    bench.write_report(page, "second table\n")
    text = page.read_text()
    assert text.startswith("# Performance\n\nabove\n") and text.count(bench.START) == 1
    assert "second table" in text and "first table" not in text


@pytest.mark.slow
def test_every_arm_runs_two_updates_and_the_table_is_written(tmp_path):
    """The script's ``main`` in this process (each arm still runs in a process of its own, as the benchmark runs
    it): long (~60 s in CI) because each of the four arms starts Python, torch and its trainer (TRL's imports
    vLLM and Ray where they are installed)."""
    pytest.importorskip("trl")
    import torch

    page, threads = tmp_path / "performance.md", torch.get_num_threads()
    try:
        assert _bench().main(["--quick", "--out", str(tmp_path / "bench"), "--report", str(page)]) == 0
    finally:
        torch.set_num_threads(threads)  # building the assets sets one thread for this process
    runs = json.loads((tmp_path / "bench" / "results.json").read_text())["runs"]
    assert sorted(r["arm"] for r in runs) == sorted(["flash_reinforce", "grpo", "trl_1thread", "trl"])
    for run in runs:
        assert run["updates"] == 2 and run["rollouts_per_s"] > 0 and run["peak_rss_mb"] > 0, run
        assert run["generate_s"] > 0 and run["learn_s"] > 0 and run["eval_s"] > 0, run
    text = page.read_text()
    assert "flashsim GRPO (G = 4)" in text and "TRL GRPO, 1 torch thread" in text and "Ratio flashsim" in text
