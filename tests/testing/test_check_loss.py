"""``flashsim.testing.check_loss``: passes correct losses, flags every mutant, reports a shrunk example.

The losses under test are in :mod:`tests.testing.mutants`: trainer-style implementations written
from the formulas in three calling conventions, and mutants with one real bug each.
"""

import functools
import importlib

import pytest
import torch
from hypothesis.internal.conjecture import providers

from flashsim.losses import flash_reinforce_loss, grpo_loss
from flashsim.testing import INVARIANTS, check_loss
from tests.testing import mutants

EXAMPLES = 25  # per invariant; the CLI and docs use the default (60)


@pytest.mark.parametrize(
    ("fn", "algorithm"), [(flash_reinforce_loss, "flash_reinforce"), (grpo_loss, "grpo")], ids=["flash", "grpo"]
)
def test_flashsims_own_losses_pass_every_invariant(fn, algorithm):
    report = check_loss(fn, algorithm=algorithm, max_examples=EXAMPLES)
    assert report.passed, str(report)
    assert {r.status for r in report.results} <= {"holds", "n/a"}


@pytest.mark.parametrize(("name", "algorithm", "convention"), mutants.CORRECT, ids=[c[0] for c in mutants.CORRECT])
def test_a_correct_trainer_style_loss_passes_in_its_convention(name, algorithm, convention):
    report = check_loss(getattr(mutants, name), algorithm=algorithm, convention=convention, max_examples=EXAMPLES)
    assert report.passed, str(report)


@pytest.mark.slow  # shrinking each counterexample takes up to ~7 s; test_a_failure_is_shrunk... is the fast one
@pytest.mark.parametrize("mutant", mutants.MUTANTS, ids=[m.name for m in mutants.MUTANTS])
def test_every_mutant_is_flagged_by_exactly_the_invariants_meant_to_catch_it(mutant):
    """At the default budget. Each invariant's search is derandomised and independent of the others, so
    the invariants a full ``check_loss`` run flags include these (the full run only adds the passing ones)."""
    report = check_loss(
        getattr(mutants, mutant.name), algorithm=mutant.algorithm, convention=mutant.convention,
        invariants=mutant.caught_by,
    )
    assert not report.passed and {r.name for r in report.failures} == set(mutant.caught_by), str(report)


def test_there_are_at_least_ten_mutants_covering_every_convention():
    assert len(mutants.MUTANTS) >= 10
    assert {m.convention for m in mutants.MUTANTS} == {"flashsim", "verl", "trl"}


def test_a_failure_is_shrunk_to_a_small_printed_counterexample():
    report = check_loss(mutants.grpo_no_clip, algorithm="grpo", invariants=["off_policy_gradient"])
    result = report["off_policy_gradient"]
    assert result.failed and "off-policy ∂L/∂log π" in result.message
    assert "B = 2, T = 1" in result.counterexample  # one clipped token and its group sibling
    text = str(report)
    assert "1 invariant(s) FAIL" in text and "minimal counterexample" in text


def test_invariants_that_do_not_apply_are_reported_not_applicable():
    report = check_loss(mutants.verl_grpo_policy_loss, algorithm="grpo", convention="verl", max_examples=5)
    status = {r.name: r.status for r in report.results}
    assert status["rejected_rows"] == "n/a"  # a FlashREINFORCE invariant
    assert status["advantage_baseline"] == "n/a"  # verl-style losses are handed their advantages
    assert len(report.results) == len(INVARIANTS)


def _no_shard_keywords(log_probs, behavior_log_probs, rewards, action_mask):
    return flash_reinforce_loss(log_probs, behavior_log_probs, rewards, action_mask)


def test_a_flashsim_style_loss_without_sharding_keywords_is_unsupported_not_failed():
    report = check_loss(_no_shard_keywords, invariants=["shards"], max_examples=5)
    assert report["shards"].status == "unsupported" and report.passed
    assert "shards unsupported" in str(report)
    assert "advantages=" in report["shards"].message and "num_sequences=" in report["shards"].message


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"algorithm": "ppo"}, ValueError),
        ({"convention": "openrlhf"}, ValueError),
        ({"delta": -1.0}, ValueError),
        ({"delta": "0.1"}, TypeError),
        ({"max_examples": 0}, ValueError),
        ({"max_examples": 2.5}, TypeError),
        ({"invariants": ["no_such_invariant"]}, ValueError),
    ],
    ids=["algorithm", "convention", "delta", "delta-type", "max_examples", "max_examples-type", "invariants"],
)
def test_invalid_arguments_raise_an_error_naming_them(options, error):
    with pytest.raises(error, match=next(iter(options))):
        check_loss(flash_reinforce_loss, **options)


def test_a_non_callable_raises_type_error():
    with pytest.raises(TypeError, match="fn must be callable"):
        check_loss("flash_reinforce_loss")


def _recording(drawn: list):
    """flash_reinforce_loss, writing down every batch it is called with (as text: a NaN in the padding equals itself
    there)."""

    @functools.wraps(flash_reinforce_loss)
    def loss(log_probs, behavior_log_probs, rewards, action_mask, **options):
        drawn.append(repr([t.tolist() for t in (log_probs, behavior_log_probs, rewards, action_mask)]))
        return flash_reinforce_loss(log_probs, behavior_log_probs, rewards, action_mask, **options)

    return loss


def test_the_examples_depend_on_the_seed_alone_not_on_what_the_process_imported(tmp_path, monkeypatch):
    """Hypothesis mines constants from every local module a process imports and mixes them into its draws (rewards
    in [−1, 1], integers); a check holds that pool empty, so importing a module full of such constants between two
    runs of the same seed changes no example. Without that, this import changed 6 of the 60 batches."""
    before, after = [], []
    check_loss(_recording(before), invariants=["padding"], max_examples=30, seed=7)
    (tmp_path / "pool_of_constants.py").write_text(
        "FLOATS = [" + ", ".join(f"{-0.9991 + k * 0.00937:.5f}" for k in range(200)) + "]\n"
        "INTS = [" + ", ".join(str(1009 * k + 17) for k in range(200)) + "]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module("pool_of_constants")
    # the premise, in the private function check_loss holds empty: the module's constants reach the pool (the call
    # also rescans sys.modules, which hypothesis otherwise does only when its length changed since it last looked)
    assert 0.13467 in providers._get_local_constants().floats
    check_loss(_recording(after), invariants=["padding"], max_examples=30, seed=7)
    assert len(before) > 30  # every example called the loss (twice: padding compares two layouts)
    assert after == before


def test_a_failure_message_names_the_largest_difference_where_the_printed_entries_stop():
    """A failure prints the first entries of got and expected; a largest difference past them is named with its
    index, so that the printed max |got − expected| can be found (a 6 × 6 gradient whose worst token is the last)."""
    from flashsim.testing.invariants import InvariantViolation, _close

    want = torch.zeros(6, 6, dtype=torch.float64)
    got = want.clone()
    got[5, 5], got[0, 1] = -0.2, 0.05
    with pytest.raises(InvariantViolation, match=r"largest at \[5, 5\]: got -0\.2, expected 0\.0"):
        _close("gradient", got, want, rtol=0.0, atol=1e-3)
    got[5, 5] = 0.0  # the largest difference is among the printed entries: no extra line
    with pytest.raises(InvariantViolation) as raised:
        _close("gradient", got, want, rtol=0.0, atol=1e-3)
    assert "largest at" not in str(raised.value)
