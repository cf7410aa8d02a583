"""``loop.mode: auto`` (the default): synchronous on CPU, asynchronous where the engines can run beside the learner."""

import pytest

pytest.importorskip("yaml")

from scale.run.config import load_config  # noqa: E402


@pytest.mark.parametrize("sets, mode", [
    ([], "sync"),
    (["model.device=cuda"], "async"),
    (["loop.placement=ray"], "async"),
    (["loop.mode=async"], "async"),
    (["loop.mode=sync", "model.device=cuda"], "sync"),
], ids=["cpu", "gpu", "ray-actors", "asked-async", "asked-sync"])
def test_the_default_loop_is_sync_on_cpu_and_async_on_a_gpu_or_with_ray(sets, mode):
    config = load_config(None, sets)
    assert config.loop.mode == (sets[0].split("=")[1] if sets and sets[0].startswith("loop.mode") else "auto")
    assert config.loop_mode == mode
