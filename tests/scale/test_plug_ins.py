"""What plugs into ``scale`` plugs in as declared: an engine is its file and one row of
``scale.run.config.ENGINES``; every rollout source has the members of ``scale.rollouts.sources.RolloutSource``."""

import json
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("yaml")

from scale.run.config import ENGINES, load_config  # noqa: E402
from tests.scale.tiny_run import TINY  # noqa: E402
from tests.sim.test_plug_ins import assert_implements  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

COUNTING_ENGINE_FILE = '''
"""A throwaway engine: the project's transformers sampler, counting the trajectories it generates."""

from scale.rollouts.engines.transformers_engine import TransformersEngine


class CountingEngine(TransformersEngine):
    generated = 0

    def generate(self, prompts, sampling):
        type(self).generated += len(prompts)
        return super().generate(prompts, sampling)


def build(config, model, tokenizer, seed):
    return CountingEngine(model, tokenizer, seed=seed, device=config.model.device)
'''


@pytest.fixture
def counting_engine(tmp_path, monkeypatch):
    """The throwaway engine's file in a temporary folder on ``sys.path``, and its row added to the table."""
    (tmp_path / "throwaway_engine.py").write_text(textwrap.dedent(COUNTING_ENGINE_FILE))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(ENGINES, "counting", "throwaway_engine:build")
    import throwaway_engine

    return throwaway_engine.CountingEngine


@pytest.mark.slow  # a tiny scale run (~5 s)
def test_an_engine_added_as_one_file_and_one_row_samples_a_scale_run(counting_engine, tmp_path):
    from scale.run.trainer import Trainer

    config = load_config(ROOT / "scale/configs/tiny_cpu.yaml",
                         TINY + ["rollout.engine=counting", "loop.mode=sync", "train.updates=2", "eval.every=100",
                                 "log.checkpoint_every=100", f"log.out={tmp_path / 'run'}"])
    Trainer(config).run()
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert sum("loss/policy" in row for row in rows) == 2
    assert counting_engine.generated == 2 * 8  # every training trajectory came from the throwaway engine


def test_the_engine_builder_imports_the_row_it_is_given(counting_engine, tokenizer):
    from scale.learner.model import build_tiny_model
    from scale.run.build import build_engine

    config = load_config(None, ["rollout.engine=counting"])
    model = build_tiny_model(tokenizer, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=16)
    assert type(build_engine(config, model, tokenizer, seed=0)) is counting_engine


def test_without_its_row_the_throwaway_engine_is_refused():
    with pytest.raises(ValueError, match="rollout.engine must be one of 'transformers', 'vllm'; got 'counting'"):
        load_config(None, ["rollout.engine=counting"])


def test_every_scale_source_has_every_member_of_the_rollout_source_protocol():
    from scale.rollouts.ray_sources import RayRollouts
    from scale.rollouts.sources import AsyncRollouts, InjectedLag, RolloutSource, SyncRollouts

    for source in (SyncRollouts, AsyncRollouts, RayRollouts, InjectedLag):
        assert_implements(object.__new__(source), RolloutSource)  # the methods are the class's
