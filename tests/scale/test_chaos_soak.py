"""The chaos soak's CI version (``benchmarks/chaos_soak.py``, a short window of faults): SIGKILLs of an engine
actor and of a learner rank, the run resumed as a supervisor would; the ledger's chain of state digests holds each
update once and each trajectory at most once, every resume loaded the state the ledger held, a replay of a window
of recorded updates lands on the recorded state (and would miss it with an update lost or repeated), the metrics
files parse. The long soaks (all three kinds of fault, the whole job killed too) are the benchmark's
(docs/performance.md, "scale: chaos soak").

The cheap tests below drive the soak's ledgered trainer with a two-layer model and AdamW: the digest checks pass on
a clean run with a resume and fail, exactly, for a lost update, a repeated one, a resume from the wrong
checkpoint and an optimizer state that does not belong to the weights."""

import copy
import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[2]


def _soak_module():
    spec = importlib.util.spec_from_file_location("chaos_soak", ROOT / "benchmarks" / "chaos_soak.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.fault
def test_a_chaos_soak_with_an_engine_and_a_learner_kill_loses_and_repeats_nothing(tmp_path):
    """Long (three launches of a 2-rank torchrun job with Ray actors, then four replays): a whole soak in small.

    Seed 1 draws an engine kill 4.3 s after the first update, then a learner kill 4.2 s later (the kinds do not
    depend on the gaps, the times do); the window closes before the resumed run could be up for a third fault.
    (``seconds=60, gap=(12, 20)`` drew the same engine and learner kills at 13 and 26 s, then a second engine kill
    if the resumed run was up by 43 s, and ran on to 60 s: about 30 s more, testing nothing else.)"""
    pytest.importorskip("ray")
    soak = _soak_module()
    report = soak.soak(tmp_path / "run", seconds=12, seed=1, gap=(4.0, 6.0))
    checks = report["checks"]
    print({k: v for k, v in report.items() if k != "checks"}, checks)
    assert report["final_exit"] == 0, report["exits"]
    assert [f["kind"] for f in report["faults"]] == ["engine", "learner"], report["faults"]
    assert report["faults"][1]["recovered_s"] is not None, report  # the resumed run trained past the kill
    assert checks["checkpoint_digest"] and checks["digest_chain"] and checks["resumes_verified"], checks
    assert checks["starts_on_chain"] and checks["per_attempt_once"] and checks["each_trajectory_once"], checks
    assert checks["sampled_before_update"] and checks["metrics_parse"], checks
    assert checks["replay_windows"] >= 1 and checks["replay_snapshots_exact"], checks
    assert checks["replay_max_abs_diff"] <= checks["replay_tolerance"] < checks["replay_last_update_lost_diff"], checks
    assert checks["replay_sensitive"] and checks["passed"], checks


def test_the_history_check_refuses_a_lost_or_a_repeated_update():
    """The ledger's digest chain: a missing step or a step applied twice leaves no chain to the final state."""
    soak = _soak_module()
    starts = [{"attempt": 0, "update": 0, "digest": "w0", "resumed": False, "expected": None}]
    steps = [{"attempt": 0, "update": k, "before": f"w{k - 1}", "after": f"w{k}", "rollouts": []} for k in (1, 2, 3)]
    assert [e["update"] for e in soak.history(steps, starts, "w3", 3)] == [1, 2, 3]
    resumed = [*steps[:2], {**steps[1], "attempt": 1, "after": "w2b"}, {**steps[2], "attempt": 1, "before": "w2b",
                                                                      "after": "w3b"}]
    assert [e["attempt"] for e in soak.history(resumed, starts, "w3b", 3)] == [0, 1, 1]
    with pytest.raises(ValueError, match="no recorded update 2"):
        soak.history([steps[0], steps[2]], starts, "w3", 3)  # update 2 lost
    with pytest.raises(ValueError, match="no recorded update"):  # update 3 applied on top of itself
        soak.history([*steps, {**steps[2], "before": "w3", "after": "w3x"}], starts, "w3x", 3)
    with pytest.raises(ValueError, match="no fresh start"):
        soak.history(steps, [{**starts[0], "digest": "other"}], "w3", 3)


class _TinyTrainer:
    """What the soak's ledgered trainer uses of :class:`scale.run.trainer.Trainer`: a two-layer model, AdamW and
    a schedule; each update's batch is a number that sets the gradient."""

    def __init__(self, seed: int = 0) -> None:
        from scale.learner.digest import state_digest

        torch.manual_seed(seed)
        model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2)).double()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: min(1.0, (k + 1) / 4))
        learner = SimpleNamespace(version=0, step=self._step, scheduler=scheduler)  # the learner owns the schedule
        self.parts = SimpleNamespace(model=model, optimizer=optimizer, learner=learner)
        self.is_main, self.resumed_digest, self._digest = True, None, state_digest

    def _step(self, rollouts: list) -> dict:
        p = self.parts
        p.optimizer.zero_grad()
        p.model(torch.full((2, 3), float(p.learner.version + 1), dtype=torch.float64)).square().sum().backward()
        p.optimizer.step()
        p.learner.scheduler.step()
        p.learner.version += 1
        return {}

    def digest(self) -> str:
        p = self.parts
        return self._digest(p.model, p.optimizer, p.learner.scheduler, p.learner.version)

    def warm_up(self) -> None:
        pass

    def load(self, state: dict) -> None:
        p = self.parts
        p.model.load_state_dict(state["model"])
        p.optimizer.load_state_dict(state["optimizer"])
        p.learner.scheduler.load_state_dict(state["scheduler"])
        p.learner.version = state["version"]
        self.resumed_digest = self.digest()

    def state(self) -> dict:
        p = self.parts
        return copy.deepcopy({"model": p.model.state_dict(), "optimizer": p.optimizer.state_dict(),
                              "scheduler": p.learner.scheduler.state_dict(), "version": p.learner.version})

    def train(self, updates: int, checkpoints: dict | None = None) -> None:
        """The trainer's loop: a step (the schedule's within it), the ledger's record; a checkpoint every 3 updates."""
        for _ in range(updates):
            self.parts.learner.step([])
            self.updated([])
            if checkpoints is not None and self.parts.learner.version % 3 == 0:
                checkpoints[self.parts.learner.version] = self.state()


def _ledgered(soak, folder: Path, attempt: int, seed: int = 0):
    return soak.ledgered_trainer(_TinyTrainer, soak.Ledger(folder, attempt))(seed)


def _soak_without_snapshots(monkeypatch):
    soak = _soak_module()
    monkeypatch.setattr(soak, "snapshot_due", lambda update: False)  # the replay's snapshots: not tested here
    return soak


def _checks(soak, folder: Path, trainer) -> dict:
    ledger = soak.Ledger(folder)
    checks = soak.digest_checks(ledger.entries(), ledger.starts(), trainer.digest(), trainer.parts.learner.version)
    checks.pop("chain", None)
    return checks


def test_the_digest_checks_pass_for_a_run_killed_and_resumed_from_its_checkpoint(tmp_path, monkeypatch):
    soak = _soak_without_snapshots(monkeypatch)
    first, checkpoints = _ledgered(soak, tmp_path, 0), {}
    first.warm_up()
    first.train(5, checkpoints)  # killed after update 5; its last checkpoint is update 3's
    second = _ledgered(soak, tmp_path, 1)
    second.load(checkpoints[3])
    second.train(3)
    checks = _checks(soak, tmp_path, second)
    assert checks == {"digest_chain": True, "resumes_verified": True, "starts_on_chain": True,
                      "per_attempt_once": True}, checks
    chain = soak.history(soak.Ledger(tmp_path).entries(), soak.Ledger(tmp_path).starts(), second.digest(), 6)
    assert [(e["attempt"], e["update"]) for e in chain] == [(0, 1), (0, 2), (0, 3), (1, 4), (1, 5), (1, 6)]


def _resume_from(soak, folder: Path, state: dict) -> tuple:
    """A resume from ``state``: the resume must refuse it (and say so in the ledger); the run then goes on from it
    regardless, to show that the final check fails too."""
    resumed = _ledgered(soak, folder, 1)
    with pytest.raises(RuntimeError, match="the ledger holds"):
        resumed.load(state)
    assert (folder / "violation-a001.json").is_file()
    resumed.last_digest = resumed.resumed_digest
    resumed.train(2)
    return resumed, _checks(soak, folder, resumed)


def _run_to_5(soak, folder: Path, seed: int = 0) -> tuple:
    run, checkpoints = _ledgered(soak, folder, 0, seed), {}
    run.warm_up()
    run.train(2, checkpoints)
    checkpoints[2] = run.state()
    run.train(2, checkpoints)
    checkpoints[4] = run.state()
    run.train(1, checkpoints)
    return run, checkpoints


def test_a_resume_that_lost_an_update_fails_the_digest_checks(tmp_path, monkeypatch):
    soak = _soak_without_snapshots(monkeypatch)
    _, checkpoints = _run_to_5(soak, tmp_path)
    lost = {**checkpoints[3], "version": 4}  # update 3's state, saved as update 4's: update 4 is lost
    _, checks = _resume_from(soak, tmp_path, lost)
    assert not checks["digest_chain"] and "no recorded update" in checks["digest_chain_error"], checks


def test_a_resume_that_repeats_an_update_fails_the_digest_checks(tmp_path, monkeypatch):
    soak = _soak_without_snapshots(monkeypatch)
    _, checkpoints = _run_to_5(soak, tmp_path)
    repeated = {**checkpoints[4], "version": 3}  # update 4's state, saved as update 3's: update 4 runs twice
    _, checks = _resume_from(soak, tmp_path, repeated)
    assert not checks["digest_chain"], checks


def test_a_resume_from_the_wrong_checkpoint_fails_the_digest_checks(tmp_path, monkeypatch):
    soak = _soak_without_snapshots(monkeypatch)
    _run_to_5(soak, tmp_path)
    _, others = _run_to_5(soak, tmp_path / "other", seed=1)  # another run's checkpoint of the same update
    _, checks = _resume_from(soak, tmp_path, others[3])
    assert not checks["digest_chain"], checks


def test_an_optimizer_state_that_does_not_belong_to_the_weights_fails_the_digest_checks(tmp_path, monkeypatch):
    soak = _soak_without_snapshots(monkeypatch)
    _, checkpoints = _run_to_5(soak, tmp_path)
    mixed = {**checkpoints[3], "optimizer": checkpoints[2]["optimizer"]}  # update 3's weights, update 2's moments
    assert torch.equal(mixed["model"]["0.weight"], checkpoints[3]["model"]["0.weight"])
    _, checks = _resume_from(soak, tmp_path, mixed)
    assert not checks["digest_chain"], checks


def test_weights_rolled_back_between_two_updates_fail_the_digest_checks(tmp_path, monkeypatch):
    """Within one attempt: the weights rolled back to an earlier update's between two steps (the effect of the
    updates since lost) break the attempt's chain: the next step starts from a state no update left."""
    soak = _soak_without_snapshots(monkeypatch)
    run, checkpoints = _run_to_5(soak, tmp_path)
    run.parts.model.load_state_dict(checkpoints[3]["model"])
    run.train(1)
    checks = _checks(soak, tmp_path, run)
    assert not checks["per_attempt_once"] and not checks["digest_chain"], checks


def test_the_report_reads_the_digest_checks_and_the_whole_run_replay_in_words():
    soak = _soak_module()
    checks = {"passed": True, "updates": 3, "trajectories": 48, "discarded_entries": 0, "checkpoint_digest": True,
              "digest_chain": True, "resumes_verified": True, "starts_on_chain": True, "per_attempt_once": True,
              "violations": [], "replay_windows": 1, "replay_window_updates": 10, "replay_max_abs_diff": 1e-15,
              "replay_tolerance": 1e-12, "replay_rounding_noise": 1e-15, "replay_last_update_lost_diff": 1e-3,
              "replay_last_update_repeated_diff": 1e-3,
              "full_replay": {"max_abs_diff": 0.1, "tolerance": 1e-8, "rounding_noise": 1e-9, "matches": False}}
    report = {"checks": checks, "faults": [], "seconds": 1.0, "attempts": 2, "leftover_processes_killed": 0,
              "median_update_s": 0.2}
    text = soak.markdown(report)
    assert "holds updates 1..3 once each" in text and "would fail" in text and "nothing lost or repeated" in text
    checks["digest_chain"], checks["passed"] = False, False
    assert "FAILS" in soak.markdown(report) and "CHECKS FAILED" in soak.markdown(report)
