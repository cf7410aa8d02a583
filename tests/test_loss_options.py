"""check_loss_options: every option of a registry row honoured or refused, before anything is written.

The per-option effect (each offered option acts exactly as in a direct call of the loss) is the
property test ``tests/properties/test_every_option_acts.py``; this file checks the refusals, that the
trainers honour an advantage option, and that each command stops on a bad value with nothing on disk.
"""

from __future__ import annotations

import functools
import inspect
import subprocess
import sys
from dataclasses import replace

import pytest
import torch

from flashsim.losses import LOSSES, check_loss_options, grpo_loss
from flashsim.sim.config import AlgorithmConfig
from flashsim.sim.simulation import PolicyLearner
from tests.flashsim_command import run_flashsim

PLUMBING = ("advantages", "entropies", "failures", "num_sequences", "num_tokens", "validate", "reference_log_probs")


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_plumbing_is_refused_and_not_offered_as_an_option(name):
    for plumbing in PLUMBING:
        with pytest.raises(ValueError, match=f"has '{plumbing}', which {name} does not take") as error:
            check_loss_options(name, {plumbing: None})
        offered = str(error.value).split("its options are ")[1].split(", ")
        assert not set(offered) & set(PLUMBING) and set(offered) == set(LOSSES[name].configurable())


BAD_VALUES = [
    ("flash_reinforce", {"delta": -1.0}, ValueError, r"loss_options\.delta must lie in \[0\.0, inf\], got -1\.0"),
    ("flash_reinforce", {"delta": "small"}, TypeError, r"loss_options\.delta must be a real number, got str"),
    ("flash_reinforce", {"gate": "soft"}, ValueError, r"loss_options\.gate must be one of"),
    ("flash_reinforce", {"aggregation": "mean"}, ValueError, r"loss_options\.aggregation must be one of"),
    ("flash_reinforce", {"importance_sampling": 1}, TypeError, r"importance_sampling must be a bool, got int"),
    ("flash_reinforce", {"tis_cap": 0.0}, ValueError, r"loss_options\.tis_cap must lie in \(0\.0, inf\]"),
    ("flash_reinforce", {"ratio_bounds": 2.0}, TypeError, r"ratio_bounds must be a \(low, high\) pair"),
    ("flash_reinforce", {"ratio_bounds": (2.0, 1.0)}, ValueError, r"ratio_bounds\[1\] must lie in \[2\.0, inf\]"),
    ("flash_reinforce", {"log_ratio_clamp": -3.0}, ValueError, r"log_ratio_clamp must lie in \(0\.0, inf\]"),
    ("flash_reinforce", {"negative_token_fraction": 1.5}, ValueError, r"negative_token_fraction must lie in"),
    ("grpo", {"clip_eps": 1.0}, ValueError, r"loss_options\.clip_eps must lie in \(0\.0, 1\.0\)"),
    ("grpo", {"clip_eps_high": -0.1}, ValueError, r"clip_eps_high must lie in \(0\.0, inf\]"),
    ("grpo", {"scale_by_std": "false"}, TypeError, r"scale_by_std must be a bool, got str"),
    ("grpo", {"std_eps": -1e-6}, ValueError, r"std_eps must lie in \[0\.0, inf\]"),
    ("dr_grpo", {"max_tokens": 0}, ValueError, r"max_tokens must lie in \(0\.0, inf\]"),
    ("grpo", {"kl_coef": 0.1}, ValueError, r"has 'kl_coef', which grpo does not take"),
    ("ppo_clip", {"scale_by_std": False}, ValueError, r"has 'scale_by_std', which ppo_clip does not take"),
    ("dr_grpo", {"std_eps": 1e-4}, ValueError, r"has 'std_eps', which dr_grpo does not take"),
    ("no_gate", {"delta": 0.01}, ValueError, r"loss_options\.delta changes nothing for no_gate: gate='none'"),
    ("flash_reinforce", {"max_tokens": 64}, ValueError, r"max_tokens changes nothing for flash_reinforce"),
    ("tis", {"importance_sampling": False}, ValueError, r"importance_sampling changes nothing for tis"),
    ("grpo", {"scale_by_std": False, "std_eps": 1e-4}, ValueError, r"std_eps changes nothing for grpo"),
]


@pytest.mark.parametrize(("name", "options", "error", "message"), BAD_VALUES,
                         ids=[f"{n}-{'-'.join(o)}-{str(list(o.values())[-1])}" for n, o, _, _ in BAD_VALUES])
def test_a_bad_option_name_value_or_combination_is_refused_naming_the_option(name, options, error, message):
    with pytest.raises(error, match=message):
        check_loss_options(name, options)


def test_options_are_returned_checked_and_a_yaml_list_becomes_a_pair():
    assert check_loss_options("ratio_mask", {"ratio_bounds": [0.8, 1.25]}) == {"ratio_bounds": (0.8, 1.25)}
    assert check_loss_options("no_gate", {"gate": "sequence", "delta": 1}) == {"gate": "sequence", "delta": 1.0}
    assert check_loss_options("grpo", {}) == {}


def test_the_simulators_learner_honours_grpos_scale_by_std():
    """The trap of issue 27: through LOSSES, scale_by_std=False returned the default loss."""
    generator = torch.Generator().manual_seed(1)
    mu = torch.rand(8, 3, generator=generator, dtype=torch.float64) * 0.8 + 0.1
    drift = torch.rand(8, 3, generator=generator, dtype=torch.float64) * 0.2 + 0.95
    log_probs, behavior = (mu * drift).log(), mu.log()
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0], dtype=torch.float64)
    mask, ids = torch.ones(8, 3, dtype=torch.bool), torch.arange(8) // 4
    direct, _ = grpo_loss(log_probs, behavior, rewards, mask, ids, scale_by_std=False)
    default, _ = grpo_loss(log_probs, behavior, rewards, mask, ids)
    learner = PolicyLearner(torch.nn.Linear(1, 1).double(), AlgorithmConfig.for_loss("grpo", loss_options={
        "scale_by_std": False}))
    advantages = learner.loss_fn.compute_advantages(rewards, ids, learner.options)
    through_registry, _ = LOSSES["grpo"](log_probs, behavior, rewards, mask, ids, advantages=advantages,
                                         **learner.options)
    assert torch.equal(through_registry, direct) and not torch.equal(direct, default)


# ----------------------------------------------------------------------------- every command, nothing written


def one_line_error(result: subprocess.CompletedProcess, option: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and option in lines[0] and "Traceback" not in result.stderr, result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("args", [
    ("train", "--delta", "-1"),
    ("train", "--algo", "grpo", "--set", "algorithm.loss_options.scale_by_std=1"),
    ("variance", "--delta", "-1"),
], ids=["train-delta", "train-scale_by_std", "variance-delta"])
def test_a_bad_loss_option_stops_the_command_before_it_writes_anything(tmp_path, args):
    out = tmp_path / "run"
    one_line_error(run_flashsim(*args, "--out", str(out)), "delta" if "delta" in " ".join(args) else "scale_by_std")
    assert not out.exists()


@pytest.mark.slow
def test_check_loss_refuses_a_bad_delta_in_one_line():
    one_line_error(run_flashsim("check-loss", "flashsim.losses:flash_reinforce_loss", "--delta", "-1"), "delta")


@pytest.mark.slow
def test_scale_train_refuses_a_bad_loss_option_before_the_warmup(tmp_path):
    out = tmp_path / "run"
    result = subprocess.run([sys.executable, "-m", "scale", "train", "--out", str(out), "--set",
                             "train.loss_options.delta=-1"], capture_output=True, text=True, timeout=300, check=False)
    one_line_error(result, "train.loss_options.delta")
    assert not out.exists()


def test_reproduce_refuses_a_claim_with_a_bad_loss_option_before_it_writes(tmp_path, monkeypatch):
    from flashsim.cli import main, reproduce
    from flashsim.studies import build_design

    def broken(name, profile, seeds):
        design = build_design(name, profile, seeds)
        first = replace(design.arms[0], overrides={**design.arms[0].overrides, "algorithm.loss_options.delta": -1.0})
        return replace(design, arms=(first, *design.arms[1:]))

    monkeypatch.setattr(reproduce, "build_design", broken)
    out = tmp_path / "claims"
    assert main(["reproduce", "C4", "--smoke", "--no-progress", "--out", str(out)]) == 2
    assert not out.exists()


# ----------------------------------------------------------------------------- adding an option: parameter + row


def with_option(loss, name: str, default: object, record: list):
    """``loss`` as it reads once the keyword parameter ``name`` is added to it: the same signature plus ``name``
    (before ``validate``), recording the value each call receives; everything else is the loss's own code."""
    signature = inspect.signature(loss)
    parameters = list(signature.parameters.values())
    added = inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default)

    @functools.wraps(loss)
    def extended(*tensors, **options):
        record.append(options.pop(name, default))
        return loss(*tensors, **options)

    extended.__signature__ = signature.replace(parameters=[*parameters[:-1], added, parameters[-1]])
    return extended


@pytest.mark.slow  # one simulated update in process (~2 s)
def test_a_new_loss_option_is_its_parameter_plus_one_table_row_and_reaches_the_loss_from_the_cli(
        tmp_path, monkeypatch):
    from flashsim.cli import main
    from flashsim.losses import checks, options, registry

    received: list = []
    # The two edits of docs/design.md, "Adding a loss option": the parameter (here by wrapping the function the
    # registry row calls) and one row of the loss's option table. No other file is touched.
    monkeypatch.setitem(options.FLASH_REINFORCE_OPTIONS, "advantage_scale",
                        functools.partial(checks.check_real, low=0.0, low_inclusive=False))
    loss = checks.takes_options(options.FLASH_REINFORCE_OPTIONS)(
        with_option(LOSSES["flash_reinforce"].loss.__wrapped__, "advantage_scale", 1.0, received))
    monkeypatch.setitem(registry.LOSSES, "flash_reinforce", replace(LOSSES["flash_reinforce"], loss=loss))

    assert "advantage_scale" in LOSSES["flash_reinforce"].configurable()
    assert LOSSES["flash_reinforce"].resolved()["advantage_scale"] == 1.0
    args = ["train", "--env", "bandit", "--updates", "1", "--no-progress"]
    assert main([*args, "--set", "algorithm.loss_options.advantage_scale=2.5", "--out", str(tmp_path / "a")]) == 0
    assert received and set(received) == {2.5}  # every loss call of the run got the configured value
    received.clear()  # the row is also a flag of flashsim train, generated from the table
    assert main([*args, "--advantage-scale", "0.5", "--out", str(tmp_path / "flag")]) == 0
    assert received and set(received) == {0.5}

    # The row's check guards every entry point, as for a built-in option: nothing is written.
    assert main([*args, "--set", "algorithm.loss_options.advantage_scale=-1", "--out", str(tmp_path / "b")]) == 2
    assert not (tmp_path / "b").exists()
    with pytest.raises(ValueError, match=r"^advantage_scale must be a finite number in \(0\.0, inf\], got -1\.0$"):
        LOSSES["flash_reinforce"].loss(*tiny_batch(), advantage_scale=-1.0)


def test_without_its_table_row_a_new_parameter_is_refused_where_options_enter():
    with pytest.raises(ValueError, match="has 'advantage_scale', which flash_reinforce does not take"):
        check_loss_options("flash_reinforce", {"advantage_scale": 2.5})


def tiny_batch():
    log_probs = torch.log(torch.tensor([[0.5, 0.25], [0.5, 1.0]], dtype=torch.float64))
    return log_probs, log_probs, torch.tensor([1.0, 0.0], dtype=torch.float64), torch.ones(2, 2, dtype=torch.bool)


def test_the_default_delta_is_written_once_in_the_code():
    """Issue 36: δ's default is the one constant ``DEFAULT_DELTA``; every other place reads it. Any spelling of its
    value (``3e-3``, ``0.003``, ``3e-03``) in ``src/`` or ``scale/`` is a second copy, except the framework adapters'
    own configurations (``testing/adapters/``: TRL's, verl's and OpenRLHF's numbers, written as they write them) and
    lines where the same value is a learning rate."""
    from pathlib import Path

    from flashsim.experiments.analysis import fmt_sci
    from flashsim.losses import DEFAULT_DELTA

    root = Path(__file__).resolve().parents[1]
    spellings = {f"{DEFAULT_DELTA:g}", f"{DEFAULT_DELTA:.0e}", fmt_sci(DEFAULT_DELTA)}  # 0.003, 3e-03, the pages' 3e-3
    copies = []
    for path in sorted([*root.glob("src/**/*.py"), *root.glob("scale/**/*.py")]):
        if "testing/adapters" in path.as_posix():
            continue
        for line in path.read_text().splitlines():
            if any(s in line for s in spellings) and not any(w in line for w in ("lr ", "learning_rate", ">>>")):
                copies.append(f"{path.relative_to(root)}: {line.strip()}")
    assert copies == ["src/flashsim/losses/options.py: DEFAULT_DELTA = 3e-3"], copies
