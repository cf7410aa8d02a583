"""``warmup.cache``: arms of one seed share one warm-up and start RL from exactly the same state."""

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("transformers")

pytestmark = pytest.mark.slow  # four tiny runs


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


@pytest.fixture(scope="module")
def first(tmp_path_factory) -> tuple[Path, list[dict]]:
    """The warm-up cache after one run of seed 0 (which warmed up into it), and that run's rows; each test
    reads a copy of the cache."""
    root = tmp_path_factory.mktemp("shared_warmup")
    return root / "warmups", _run(root / "first", root / "warmups")


def _cache_copy(first: tuple[Path, list[dict]], tmp_path: Path) -> Path:
    return Path(shutil.copytree(first[0], tmp_path / "warmups"))  # copy2: the file's mtime is kept


def test_a_second_run_loads_the_shared_warmup_and_reproduces_the_first_exactly(first, tmp_path):
    cache, rows = _cache_copy(first, tmp_path), first[1]
    (saved,) = cache.glob("*.pt")
    written = saved.stat().st_mtime_ns
    second = _run(tmp_path / "second", cache)
    assert list(cache.glob("*.pt")) == [saved] and saved.stat().st_mtime_ns == written  # loaded, not trained again
    assert _numbers(second) == _numbers(rows)  # same weights, same random state: the same run
    other_seed = _run(tmp_path / "other", cache, seed=1)
    assert len(list(cache.glob("*.pt"))) == 2
    assert _numbers(other_seed)[0] != _numbers(rows)[0]


def test_arms_of_one_seed_start_from_the_same_warmed_up_policy(first, tmp_path):
    cache, flash = _cache_copy(first, tmp_path), first[1]
    grpo = _run(tmp_path / "grpo", cache, loss="grpo")
    assert len(list(cache.glob("*.pt"))) == 1
    assert _numbers(grpo)[0] == _numbers(flash)[0]  # update 0: the evaluation right after the warm-up
