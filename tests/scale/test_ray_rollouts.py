"""Engines as Ray actors: an injected engine crash loses no trajectory and uses none twice."""

import functools
import itertools
import math
import time

import pytest

pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("ray_cluster")]  # the session's cluster (conftest.py)


@pytest.mark.fault
def test_an_engine_crash_is_survived_with_every_prompt_delivered_once_from_current_weights(tokenizer):
    from scale.learner.model import build_tiny_model
    from scale.rollouts import SamplingParams
    from scale.rollouts.collect import RolloutSettings
    from scale.rollouts.engines import TransformersEngine
    from scale.rollouts.prompts import PromptExample, PromptStream
    from scale.rollouts.ray_sources import RayRollouts
    from scale.rollouts.rewards import math_reward

    model = build_tiny_model(tokenizer, hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, seed=0)
    stream = PromptStream([PromptExample(f"{i}*2=", str(2 * i), str(i)) for i in range(20_000)], seed=0)
    taken = []
    take = stream.take
    stream.take = lambda n: taken.extend(out := take(n)) or out
    settings = RolloutSettings(SamplingParams(max_new_tokens=4), math_reward, group_size=2)
    builders = [functools.partial(TransformersEngine, model, tokenizer, seed=seed) for seed in (0, 1)]
    # A queue of 2 groups, smaller than the batch of 4 groups: the learner takes groups as they come.
    source = RayRollouts(builders, tokenizer, stream, settings, itertools.count(), prompts_per_call=2, queue_size=2,
                         crash_on_call=2)
    # Published weights are all zeros: uniform logits, so every token's log-prob is −log V. A restarted
    # actor comes back with the random weights it was built with; had it sampled with them, this fails.
    # The first publication is version 0 (the warmed-up weights a run starts from): an actor's fresh engine
    # also reports version 0, and must load them all the same.
    zeros = {k: torch.zeros_like(v) for k, v in model.state_dict().items()}
    consumed, delivered_before_restart = [], None
    deadline = time.monotonic() + 240
    try:
        for version in itertools.count(0):  # until the restarted actor has delivered twice
            assert time.monotonic() < deadline, "the crashed actor was not restarted in time"
            time.sleep(0.1)  # the learner's step: the restart takes seconds, a batch a few milliseconds
            source.publish(zeros, version)
            rollouts, info = source.next_batch(8)
            assert len(rollouts) == 8 and all(r.trajectory.version <= version for r in rollouts)
            consumed += rollouts
            if source.failed_calls and delivered_before_restart is None:
                delivered_before_restart = source.delivered_calls[0]
            if delivered_before_restart is not None and source.delivered_calls[0] >= delivered_before_restart + 2:
                break
        pending = [e for _, examples, _ in source.in_flight.values() for e in examples]
        pending += [e for examples, _ in source.retry for e in examples]
        pending += [r.example for group in source.ready for r in group]
    finally:
        source.close()
    assert info["loop/failed_calls"] >= 1  # the injected crash happened, and the restarted actor delivered
    assert delivered_before_restart is not None and source.delivered_calls[0] >= delivered_before_restart + 2
    per_prompt = {}
    for r in consumed:
        per_prompt.setdefault(r.example.prompt, []).append(r.group_id)
    assert all(len(ids) == 2 and ids[0] == ids[1] for ids in per_prompt.values())  # each group once, whole
    consumed_prompts = set(per_prompt)
    pending_prompts = [e.prompt for e in pending]
    assert consumed_prompts.isdisjoint(pending_prompts)
    assert sorted(consumed_prompts | set(pending_prompts)) == sorted(e.prompt for e in taken)
    assert len(taken) == len(set(e.prompt for e in taken))
    uniform = -math.log(tokenizer.vocab_size)
    assert all(lp == pytest.approx(uniform, abs=1e-5) for r in consumed for lp in r.trajectory.log_probs)


def test_training_with_engines_in_ray_actors_finishes_and_logs_measured_lag(tmp_path):
    import json

    from scale.run.config import load_config
    from scale.run.trainer import Trainer

    config = load_config("scale/configs/tiny_cpu.yaml", [
        "loop.placement=ray", "loop.num_workers=2", f"log.out={tmp_path}", "warmup.steps=20", "train.updates=4",
        "train.batch_size=16", "loop.trajectories_per_call=8", "loop.queue_size=16", "data.num_test=32",
        "eval.every=4", "log.progress=false", "log.checkpoint_every=0",
    ])
    summary = Trainer(config).run()
    assert summary["updates"] == 4
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [row["update"] for row in rows] == [0, 1, 2, 3, 4]
    assert all(row["lag/mean"] >= 0 and row["loop/failed_calls"] == 0 for row in rows[1:])
