"""The transformer claims' designs (``scale/studies/claims.py``), without training: the seeds pair the arms, the
arms differ only in what the claim is about, and a config several claims run is the same text (run once)."""

import dataclasses

import pytest

pytest.importorskip("yaml")

from flashsim.config import to_dict  # noqa: E402
from scale.studies.claims import (  # noqa: E402
    C2_LAG,
    C3_MAX_NEW_TOKENS,
    TRANSFORMER_CLAIMS,
    TRANSFORMER_EXPERIMENTS,
    TRANSFORMER_PILOT_SEEDS,
    build_transformer_design,
)

WARMUP_SECTIONS = ("model", "data", "warmup")  # everything the shared warm-up depends on, with the seed


@pytest.fixture(scope="module")
def designs(tmp_path_factory):
    warmups = tmp_path_factory.mktemp("warmups")
    return {claim: build_transformer_design(claim, "full", warmups) for claim in TRANSFORMER_CLAIMS}


@pytest.mark.parametrize("claim", TRANSFORMER_CLAIMS)
def test_every_arm_runs_the_same_ten_seeds_from_the_same_warmup(designs, claim):
    design = designs[claim]
    assert design.seeds == tuple(range(10, 20))
    by_seed = {}
    for cell in design.cells():
        config = to_dict(cell.config)
        assert cell.config.seed == cell.seed
        by_seed.setdefault(cell.seed, []).append({section: config[section] for section in WARMUP_SECTIONS})
    assert sorted(by_seed) == list(design.seeds)
    for seed, warmups in by_seed.items():
        assert len(warmups) == len(design.arms) * len(design.knob)
        assert all(w == warmups[0] for w in warmups), f"{claim}: the arms of seed {seed} warm up differently"


@pytest.mark.parametrize("profile", ["smoke", "quick", "full"])
def test_the_verdict_seeds_are_disjoint_from_the_pilots_and_from_every_experiments_seeds(tmp_path, profile):
    claims = {seed for claim in TRANSFORMER_CLAIMS for seed in build_transformer_design(claim, profile, tmp_path).seeds}
    assert claims and not claims & set(TRANSFORMER_PILOT_SEEDS)
    assert {0, 1, 2, 200, 201} <= set(TRANSFORMER_PILOT_SEEDS)  # the seeds docs/transformer-pilot.md ran on
    for experiment in TRANSFORMER_EXPERIMENTS:
        full = set(build_transformer_design(experiment, "full", tmp_path).seeds)
        assert not claims & full, f"{experiment} shares seeds {sorted(claims & full)} with the claims"
        assert not full & set(TRANSFORMER_PILOT_SEEDS)


@pytest.mark.parametrize("claim", TRANSFORMER_CLAIMS)
def test_the_arms_of_a_seed_differ_only_in_their_own_overrides(designs, claim):
    design = designs[claim]
    knob = design.knob_value(design.headline)
    base = design.config(dataclasses.replace(design.arms[0], overrides={}), knob)
    for arm in design.arms:
        config, reference = to_dict(design.config(arm, knob)), to_dict(base)
        changed = {f"{section}.{key}" for section in config for key in (config[section] if isinstance(
            config[section], dict) else {}) if config[section][key] != reference[section][key]}
        unexplained = {path for path in changed
                       if not any(o == path or o.startswith(f"{path}.") for o in arm.overrides)}
        assert not unexplained, f"{claim} {arm.name} also changes {sorted(unexplained)}"


def test_c2_injects_the_pilots_lag_and_c3_tightens_the_token_budget_in_every_arm(designs):
    assert {cell.config.rollout.injected_lag for cell in designs["C2"].cells()} == {C2_LAG}
    assert {cell.config.rollout.max_new_tokens for cell in designs["C3"].cells()} == {C3_MAX_NEW_TOKENS}
    others = [cell for claim in ("C1", "C4", "C9") for cell in designs[claim].cells()]
    assert {(c.config.rollout.injected_lag, c.config.rollout.max_new_tokens) for c in others} == {(0, 24)}


def test_the_flash_reinforce_runs_of_c1_c4_and_c9_are_one_config_so_they_run_once(designs):
    def configs(claim, arm):
        return [to_dict(cell.config) for cell in designs[claim].cells() if cell.arm == arm]

    assert configs("C1", "flash") == configs("C4", "signed") == configs("C9", "flash")
    assert configs("C1", "grpo") == configs("C9", "grpo")


def test_every_arm_that_sets_a_group_size_takes_its_loss_from_the_registry_and_grpo_says_g_4(designs):
    from flashsim.losses import LOSSES
    from scale.studies.claims import C1_GRPO_GROUP_SIZE

    assert C1_GRPO_GROUP_SIZE == 4 != LOSSES["grpo"].group_size  # the claims' G is their own, written in the arm
    for claim in ("C1", "C9"):
        for arm in designs[claim].arms:
            loss, group_size = arm.overrides["train.loss"], arm.overrides["rollout.group_size"]
            assert loss in LOSSES
            assert group_size == (C1_GRPO_GROUP_SIZE if loss == "grpo" else LOSSES[loss].group_size)
