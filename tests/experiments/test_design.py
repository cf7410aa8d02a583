"""Experiment designs: cells, config resolution, validation, and every claim at every profile."""

import pytest

from flashsim.config import from_dict, to_dict
from flashsim.experiments import (
    PROFILES,
    Arm,
    ClaimDesign,
    Comparison,
    KnobValue,
    Panel,
    with_overrides,
)
from flashsim.experiments.run_cell import CELL_METRICS
from flashsim.sim.config import AsyncWorkers, TrainConfig, env_timing
from flashsim.studies import CLAIMS, build_design


def small_design(**changes):
    fields = dict(
        claim="CX", title="t", paper="p", question="q", base=TrainConfig(env="bandit_tiny", updates=4),
        arms=(Arm("a", "A", {"algorithm.loss": "flash_reinforce"}), Arm("b", "B", {"algorithm.loss": "no_gate"})),
        knob_name="learning rate",
        knob=(KnobValue("lr0.1", "lr 0.1", {"algorithm.learning_rate": 0.1}),
              KnobValue("lr0.5", "lr 0.5", {"algorithm.learning_rate": 0.5}, {"b": {"updates": 8}})),
        comparisons=(Comparison("success_train", "a", "b"),), headline="lr0.1", seeds=(0, 1, 2),
    )
    fields.update(changes)
    return ClaimDesign(**fields)


def test_cells_are_the_cross_product_seed_major_with_resolved_configs():
    cells = small_design().cells()
    assert len(cells) == 2 * 2 * 3
    assert [cell.seed for cell in cells[:4]] == [0, 0, 0, 0]
    by_key = {cell.key: cell for cell in cells}
    assert by_key["b__lr0.5__s001"].config.updates == 8  # the knob's per-arm override
    assert by_key["a__lr0.5__s001"].config.updates == 4
    assert by_key["a__lr0.5__s001"].config.algorithm.learning_rate == 0.5
    assert by_key["b__lr0.1__s000"].config.algorithm.loss == "no_gate"
    assert all(cell.config.seed == cell.seed for cell in cells)
    assert len(by_key) == len(cells)


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"headline": "lr9"}, "headline"),
        ({"seeds": (0,)}, "seeds"),
        ({"comparisons": (Comparison("success_train", "a", "c"),)}, "arm 'c'"),
        ({"comparisons": ()}, "at least one comparison"),
        ({"arms": (Arm("a", "A"),)}, "two distinct arms"),
        ({"comparisons": (Comparison("success_train", "a", "b", knobs=("lr9",)),)}, "knob values"),
        ({"claim": "C 1"}, "file name"),
    ],
    ids=["headline-not-a-knob", "one-seed", "unknown-arm", "no-comparison", "one-arm", "unknown-knob", "bad-name"],
)
def test_invalid_designs_raise_value_error_naming_the_problem(changes, message):
    with pytest.raises(ValueError, match=message):
        small_design(**changes)


def test_unknown_override_paths_list_the_valid_ones():
    with pytest.raises(ValueError, match="unknown key algorithm.batchsize; valid keys of algorithm: .*batch_size"):
        with_overrides(TrainConfig(), {"algorithm.batchsize": 3})
    with pytest.raises(ValueError, match="unknown key batch_size; valid keys of TrainConfig: .*algorithm"):
        with_overrides(TrainConfig(), {"batch_size": 3})


@pytest.mark.parametrize(
    ("overrides", "error", "message"),
    [({"algorithm.batch_size": 0}, ValueError, "algorithm.batch_size must be an int >= 1"),
     ({"updates": 2.0}, TypeError, "updates must be an int"),
     ({"timing": [("tool_latency_sigma", 1.0)]}, TypeError, "timing must be TimingModel or null")],
    ids=["zero-batch", "float-updates", "timing-not-a-mapping"],
)
def test_a_bad_override_raises_the_validation_error_naming_it(overrides, error, message):
    with pytest.raises(error, match=message):
        with_overrides(TrainConfig(), overrides)


def test_overrides_read_the_lag_syntax_and_refine_the_envs_own_timing():
    config = with_overrides(TrainConfig(env="gridworld"), {"lag": "workers:64:sync"},
                            {"timing.tool_latency_sigma": 2.0})
    assert config.lag == AsyncWorkers(num_workers=64, synchronous=True)
    gridworld = env_timing("gridworld")
    assert config.timing.tool_latency_sigma == 2.0 and config.timing.tool_latency == gridworld.tool_latency != 0
    assert from_dict(TrainConfig, to_dict(config)) == config


def test_a_comparison_of_an_arm_with_itself_or_in_no_direction_is_rejected():
    with pytest.raises(ValueError, match="two different arms"):
        Comparison("success_train", "a", "a")
    with pytest.raises(ValueError, match="direction"):
        Comparison("success_train", "a", "b", direction="higher")


def test_design_to_dict_is_plain_json_data():
    import json

    data = small_design().to_dict()
    assert json.loads(json.dumps(data)) == data
    assert data["knob"][1]["arm_overrides"] == {"b": {"updates": 8}}
    assert from_dict(TrainConfig, data["base"]) == small_design().base


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("claim", list(CLAIMS))
def test_every_claim_builds_at_every_profile_into_valid_simulator_configs(claim, profile):
    design = build_design(claim, profile)
    assert design.claim == claim and design.profile == profile
    assert len(design.seeds) >= (10 if profile != "smoke" else 2)
    assert set(design.metric_names) <= set(CELL_METRICS)
    for cell in design.cells()[: len(design.arms) * len(design.knob)]:  # one seed's worth
        assert isinstance(cell.config, TrainConfig)  # resolved (and checked) when the cells are built


def test_build_design_takes_a_seed_count_and_rejects_bad_ones():
    assert build_design("C4", "smoke", seeds=5).seeds == (0, 1, 2, 3, 4)
    with pytest.raises(ValueError, match="seeds"):
        build_design("C4", "smoke", seeds=1)
    with pytest.raises(ValueError, match="claim must be one of C1"):
        build_design("C10")
    with pytest.raises(ValueError, match="profile"):
        build_design("C1", "huge")


def test_the_probe_design_keeps_the_headline_and_the_comparisons_that_apply_there():
    from flashsim.experiments.probes import probe_design

    probed = [claim for claim in CLAIMS if build_design(claim, "smoke").probed]
    assert probed == ["C1", "C2", "C3", "C4"]
    for claim in probed:
        design = build_design(claim, "quick")
        probes = probe_design(design)
        assert probes.claim == f"{claim}-probes"
        assert [value.name for value in probes.knob] == [design.headline]
        assert all(c.knobs is None or design.headline in c.knobs for c in probes.comparisons)


def test_seeds_vary_the_task_instance_unless_the_design_says_not():
    cells = small_design().cells()
    assert all(cell.config.env_options["seed"] == cell.seed for cell in cells)
    fixed = small_design(vary_instance=False).cells()
    assert all("seed" not in cell.config.env_options for cell in fixed)


def test_a_comparison_needs_a_preregistered_smallest_effect():
    with pytest.raises(ValueError, match="smallest effect"):
        Comparison("rollouts", "a", "b")
    assert str(Comparison("rollouts_to_90", "a", "b", "less").smallest_effect) == "5% of the baseline"


def test_panels_must_name_knob_values_with_one_tick_each():
    assert small_design(panels=(Panel("rates", ["lr0.1", "lr0.5"]),)).panels[0].knobs == ("lr0.1", "lr0.5")
    with pytest.raises(ValueError, match="panels name knob values"):
        small_design(panels=(Panel("rates", ("lr0.2",)),))
    with pytest.raises(ValueError, match="at least one"):
        Panel("empty", ())
    with pytest.raises(ValueError, match="1 ticks for 2"):
        Panel("rates", ("lr0.1", "lr0.5"), ("0.1",))


def test_c1_panels_split_its_knob_into_budget_learning_rate_and_harder_task():
    design = build_design("C1", "full")
    budgets, rates, hard = (panel.knobs for panel in design.panels)
    values = {value.name: value for value in design.knob}
    assert {values[name].overrides.get("algorithm.learning_rate") for name in budgets} == {None}
    assert [values[name].overrides.get("algorithm.learning_rate", 0.1) for name in rates] == [0.03, 0.1, 0.3]
    assert [values[name].overrides["env"] for name in hard] == ["chain"]


def test_c2_adds_the_blamed_settings_at_the_headline_one_change_each():
    design = build_design("C2", "quick")
    headline = with_overrides(design.base, design.knob_value(design.headline).overrides)
    changed = {}
    for name in design.panels[1].knobs[1:]:
        config = with_overrides(design.base, design.knob_value(name).overrides)
        changed[name] = {field for field in ("policy", "logprob_noise", "env_options")
                         if getattr(config, field) != getattr(headline, field)}
        assert config.lag == headline.lag
    assert sorted(map(sorted, changed.values())) == [["env_options"], ["logprob_noise"], ["policy"]]


def test_c9_sets_the_tool_error_rate_of_the_gridworld_and_compares_tool_calls_first():
    design = build_design("C9", "quick")
    assert design.comparisons[0].metric == "tool_calls" and design.comparisons[0].source == "article"
    rates = {cell.knob: cell.config.env_options["tool_error_rate"] for cell in design.cells()}
    assert rates == {"err0.0": 0.0, "err0.3": 0.3} and design.headline == "err0.3"
    assert {cell.config.env for cell in design.cells()} == {"gridworld"}


def test_verdict_seeds_avoid_the_pilots_seeds():
    from flashsim.experiments.profiles import PILOT_SEEDS
    from flashsim.studies import EXPERIMENTS
    from flashsim.studies.follow_ups import C1_SIZE_PILOT_SEEDS

    for claim in CLAIMS:
        for profile in ("quick", "full"):
            assert not set(build_design(claim, profile).seeds) & PILOT_SEEDS, (claim, profile)
    for name in EXPERIMENTS:
        if name != "C1size_pilot":
            assert not set(build_design(name, "full").seeds) & (PILOT_SEEDS | set(C1_SIZE_PILOT_SEEDS)), name


def test_follow_up_experiments_build_by_name_and_stay_out_of_the_claims():
    from flashsim.studies import DESIGNS, EXPERIMENTS

    assert not set(EXPERIMENTS) & set(CLAIMS)
    assert [name for name in DESIGNS if DESIGNS[name].follow_up] == list(EXPERIMENTS)
    mechanism = build_design("C1mech", "full")
    assert [arm.name for arm in mechanism.arms][:2] == ["flash", "flash_depth"]
    rollouts = {arm.name: mechanism.config(arm, mechanism.knob[0]).algorithm for arm in mechanism.arms}
    assert {a.batch_size for a in rollouts.values()} == {128}  # every arm spends 128 rollouts per update
    assert rollouts["grpo_nostd"].loss_options == {"scale_by_std": False, "aggregation": "sample_mean"}
    size = build_design("C1size", "full")
    grpo = size.config(size.arm("grpo"), size.knob[0])
    flash = size.config(size.arm("flash"), size.knob[0])
    assert grpo.updates == 2 * flash.updates and size.comparisons[0].size == 2.0
    assert build_design("C1size", "full", seeds=3).seeds == (2000, 2001, 2002)
