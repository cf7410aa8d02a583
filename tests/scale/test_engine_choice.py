"""Choosing the rollout engine: ``rollout.engine`` in the config, ``--engine`` on the command line."""

import pytest

pytest.importorskip("transformers")


def test_an_unknown_engine_is_refused_naming_the_key_and_the_valid_ones():
    from scale.run.config import load_config

    with pytest.raises(ValueError, match="rollout.engine must be one of 'transformers', 'vllm'; got 'sglang'"):
        load_config(None, ["rollout.engine=sglang"])


def test_the_transformers_engine_is_the_default_and_vllm_is_selectable():
    from scale.run.config import load_config

    assert load_config(None).rollout.engine == "transformers"
    assert load_config("scale/configs/tiny_cpu.yaml", ["rollout.engine=vllm"]).rollout.engine == "vllm"


def test_the_engine_flag_reaches_the_config(capsys):
    from scale.cli import main

    assert main(["train", "--config", "tiny_cpu", "--engine", "sglang"]) == 2
    assert "rollout.engine must be one of" in capsys.readouterr().err


def test_ray_placement_is_refused_for_the_synchronous_loop():
    from scale.run.config import load_config

    with pytest.raises(ValueError, match=r"loop.placement 'ray' needs mode 'async' \(sync rollouts run in this"):
        load_config(None, ["loop.placement=ray", "loop.mode=sync"])


def test_the_ray_address_flag_reaches_the_config():
    from flashsim.config import flag_assignments
    from scale.cli import _parser
    from scale.run.config import load_config

    args = _parser().parse_args(["train", "--ray-address", "ray://head:10001", "--loop.placement", "ray"])
    config = load_config(None, args.set, flag_assignments(args, args.config_paths))
    assert (config.loop.ray_address, config.loop.placement) == ("ray://head:10001", "ray")


def test_an_empty_ray_address_is_refused(capsys):
    from scale.cli import main

    assert main(["train", "--ray-address", ""]) == 2
    assert "loop.ray_address must be a non-empty address or null" in capsys.readouterr().err


@pytest.mark.parametrize("recipe", ["paper_flash_reinforce", "paper_grpo"])
def test_the_paper_recipes_are_valid_configurations(recipe):
    from scale.run.config import load_config

    config = load_config(f"scale/examples/{recipe}.yaml")
    assert config.rollout.engine == "vllm" and config.train.batch_size == 128
    assert config.rollout.max_new_tokens == 4096
    assert config.train.batch_size // config.group_size == (128 if recipe == "paper_flash_reinforce" else 32)


def test_the_7b_tool_use_recipe_is_a_valid_sharded_configuration():
    from scale.run.config import load_config

    config = load_config("scale/examples/paper_tool_use_7b.yaml")
    assert config.rollout.engine == "vllm" and config.rollout.tools
    assert (config.learner.parallel, config.learner.activation_checkpointing, config.learner.mixed_precision) == \
           ("fsdp", True, True)
    assert config.train.batch_size % 4 == 0  # 4 learner ranks


def test_every_row_of_the_engine_table_names_a_builder_that_imports():
    import importlib
    import inspect

    from scale.run.config import ENGINES

    for name, path in ENGINES.items():
        module, _, function = path.partition(":")
        builder = getattr(importlib.import_module(module), function)
        assert list(inspect.signature(builder).parameters) == ["config", "model", "tokenizer", "seed"], name


@pytest.mark.slow  # a fresh interpreter (~3 s), so that nothing is imported already
def test_checking_a_config_imports_no_engine_module():
    import subprocess
    import sys

    code = ("import sys; from scale.run.config import load_config; load_config('scale/configs/tiny_cpu.yaml'); "
            "print(sorted(m for m in sys.modules if m.startswith('scale.rollouts.engines') or m == 'vllm'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_build_engine_refuses_a_name_missing_from_the_table_instead_of_falling_back_to_vllm(tokenizer):
    from scale.learner.model import build_tiny_model
    from scale.run.build import build_engine
    from scale.run.config import load_config

    config = load_config(None)
    object.__setattr__(config.rollout, "engine", "sglang")  # past the config's own check, as a caller could
    model = build_tiny_model(tokenizer, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=16)
    with pytest.raises(ValueError, match="rollout.engine must be one of transformers, vllm; got 'sglang'"):
        build_engine(config, model, tokenizer, seed=0)


def test_every_engine_shares_one_published_weights_base():
    from scale.rollouts.engines.engine_process import EngineProcess
    from scale.rollouts.engines.transformers_engine import TransformersEngine
    from scale.rollouts.engines.vllm_engine import VLLMEngine
    from scale.rollouts.engines.weights import EngineBase

    for engine in (TransformersEngine, VLLMEngine, EngineProcess):
        assert issubclass(engine, EngineBase)
        assert "version" not in vars(engine) and "update_weights" not in vars(engine)
