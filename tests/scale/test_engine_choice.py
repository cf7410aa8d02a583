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
    from scale.run.cli import main

    assert main(["train", "--config", "tiny_cpu", "--engine", "sglang"]) == 2
    assert "rollout.engine must be one of" in capsys.readouterr().err


def test_ray_placement_is_refused_for_the_synchronous_loop():
    from scale.run.config import load_config

    with pytest.raises(ValueError, match=r"loop.placement 'ray' needs mode 'async' \(sync rollouts run in this"):
        load_config(None, ["loop.placement=ray", "loop.mode=sync"])


def test_the_ray_address_flag_reaches_the_config():
    from flashsim.config import flag_assignments
    from scale.run.cli import _parser
    from scale.run.config import load_config

    args = _parser().parse_args(["train", "--ray-address", "ray://head:10001", "--loop.placement", "ray"])
    config = load_config(None, args.set, flag_assignments(args, args.config_paths))
    assert (config.loop.ray_address, config.loop.placement) == ("ray://head:10001", "ray")


def test_an_empty_ray_address_is_refused(capsys):
    from scale.run.cli import main

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


def test_the_engine_table_names_exactly_the_engines_the_config_accepts():
    from scale.run.build import ENGINES
    from scale.run.config import ENGINE_NAMES

    assert tuple(ENGINES) == ENGINE_NAMES


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
