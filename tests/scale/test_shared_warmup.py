"""``warmup.cache``: arms of one seed share one warm-up and start RL from exactly the same state."""

import json
from pathlib import Path

import pytest

pytest.importorskip("transformers")

pytestmark = pytest.mark.slow  # three tiny runs, ~25 s


def _run(out: Path, cache: Path, *, seed: int = 0, loss: str = "flash_reinforce") -> list[dict]:
    from scale.run.config import load_config
    from scale.run.trainer import Trainer

    overrides = [f"log.out={out}", f"warmup.cache={cache}", f"seed={seed}", f"train.loss={loss}", "loop.mode=sync",
                 "warmup.steps=20", "train.updates=3", "train.batch_size=8", "loop.trajectories_per_call=8",
                 "loop.queue_size=8", "data.num_test=16", "eval.every=3", "log.progress=false", "log.curves=false"]
    Trainer(load_config("scale/configs/tiny_cpu.yaml", overrides)).run()
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def _numbers(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if not k.startswith("time/")} for row in rows]


def test_a_second_run_loads_the_shared_warmup_and_reproduces_the_first_exactly(tmp_path):
    cache = tmp_path / "warmups"
    first = _run(tmp_path / "first", cache)
    (saved,) = cache.glob("*.pt")
    written = saved.stat().st_mtime_ns
    second = _run(tmp_path / "second", cache)
    assert list(cache.glob("*.pt")) == [saved] and saved.stat().st_mtime_ns == written  # loaded, not trained again
    assert _numbers(second) == _numbers(first)  # same weights, same random state: the same run
    other_seed = _run(tmp_path / "other", cache, seed=1)
    assert len(list(cache.glob("*.pt"))) == 2
    assert _numbers(other_seed)[0] != _numbers(first)[0]


def test_arms_of_one_seed_start_from_the_same_warmed_up_policy(tmp_path):
    cache = tmp_path / "warmups"
    flash = _run(tmp_path / "flash", cache)
    grpo = _run(tmp_path / "grpo", cache, loss="grpo")
    assert len(list(cache.glob("*.pt"))) == 1
    assert _numbers(grpo)[0] == _numbers(flash)[0]  # update 0: the evaluation right after the warm-up
