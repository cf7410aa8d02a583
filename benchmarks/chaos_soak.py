"""Chaos soak: an asynchronous ``scale`` run survives random SIGKILLs and loses or repeats nothing.

The run: ``torchrun --nproc-per-node 2 -m scale train`` on the tiny preset with two Ray engine actors and the FSDP2
learner over gloo (``learner.parallel: fsdp``, the most distributed learner that runs on a CPU machine), in
float64 so that a replay can be compared tightly. For ``--seconds`` (counted from the first RL update) this script
SIGKILLs, by PID and from outside, at random moments (``--gap`` seconds apart, seeded):

- ``engine``: one ``ray::EngineActor`` process (the run replaces it and re-queues its call);
- ``learner``: one learner rank (torchrun stops the other; this script, as a supervisor would, starts the run
  again with ``--resume`` from its last checkpoint);
- ``group``: the whole job at once (torchrun and both ranks, each in a session of its own), then ``--resume``
  likewise.

The Ray cluster is started once, by this script (``ray start --head`` in a temp dir of its own), and each attempt
joins it with ``--ray-address auto``: on the 2 shared cores at load 16 a local cluster started by the run timed
out in Ray's fixed 30 s raylet registration five attempts in a row (notes/i41.md), and a cluster outliving its
jobs is also how a real deployment runs. The engine actors die with their driver and are rebuilt by the next.

Then it stops the run, resumes it one last time for 2 more updates to a clean finish, and checks:

- **the state digests, exactly** (:mod:`scale.learner.digest`: SHA-256 over the weights, the AdamW state, the
  schedule and the version, each rank digesting its own FSDP shards, independent of the number of ranks): every
  rank of every attempt runs the run's own trainer with a :class:`Ledger` (:func:`ledgered_trainer`); rank 0
  records, per update, the batch (ids, tokens, the version each was sampled at) and the digests of the state just
  before and just after the step, and, per attempt, the digest it started from. A resume checks that the state it
  loaded has the digest the ledger holds for its update (else it stops, and the soak fails); the trainer itself
  checks that a checkpoint holds the state it recorded. At the end the chain of digests from the final
  checkpoint (recomputed in one process) back to the warmed-up state must hold updates 1..N once each, every start
  on it, each attempt's updates consecutive, each from the state the previous one left. A lost update, a repeated
  one, a resume from the wrong checkpoint, an optimizer state that does not belong to the weights: each is an exact
  mismatch at any length, with no tolerance. Each trajectory at most once, each sampled before its update;
- **a replay in windows**: every :data:`SNAPSHOT_EVERY` updates the run saves its full state (and again
  :data:`REPLAY_WINDOW` updates later); one process replays each window's batches from the start snapshot and must
  land on the end snapshot within :data:`REPLAY_NOISE_FACTOR` times the window's reduction-order noise (the same
  window with each gradient summed over two microbatches, the two ranks' shards); the same with the window's last
  update left out or applied twice must miss by ten times more. This ties the recorded batches to the recorded
  states; windows keep the tolerance tight whatever the run's length (the tiny model's training under Adam is
  chaotic over hundreds of updates, so a whole-run replay's rounding grows to what one update moves:
  ``--full-replay`` runs that former check too, for comparison);
- **the metrics files** parse (``metrics.jsonl`` and ``metrics.csv``), one row per update 0..N.

It reports the faults injected, the recoveries and the time each fault cost (the stall from the kill until
the run writes an update past the one it had reached, and that stall less one median update interval)::

    nice -n 5 python benchmarks/chaos_soak.py --out runs/chaos --seconds 600
    python benchmarks/chaos_soak.py --out runs/chaos12 --seconds 12 --gap 4 6 --seed 1  # CI (test_chaos_soak.py)
    python benchmarks/chaos_soak.py --out runs/chaos --recheck  # the checks again, on a finished soak

Figures: docs/performance.md, "scale: chaos soak".
"""

from __future__ import annotations

import argparse
import copy
import csv
import json
import math
import os
import random
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from scale.testing import command_line, descendants, environment, free_port, hermetic_ray_environment

ROOT = Path(__file__).resolve().parents[1]

KINDS = ("engine", "learner", "group")
"""The faults the soak injects: an engine actor, a learner rank, the whole job."""


def markdown(report: dict) -> str:
    """The report as docs/performance.md shows it: one row per fault, then the checks; the sentence is made from
    the numbers."""
    c = report["checks"]
    lines = ["| # | at (s) | kill | update reached | recovered after (s) | time lost (s) |",
             "|---:|---:|---|---:|---:|---:|"]
    for i, f in enumerate(report["faults"], 1):
        rec = "not timed" if f["recovered_s"] is None else f"{f['recovered_s']:.1f}"
        lost = "" if f.get("lost_s") is None else f"{f['lost_s']:.1f}"
        lines.append(f"| {i} | {f['t']:.0f} | {f['kind']}{' (escalated)' if f.get('escalated') else ''} | "
                     f"{f['update']} | {rec} | {lost} |")
    kinds = {k: sum(f["kind"] == k for f in report["faults"]) for k in KINDS}
    recovered = sum(f["recovered_s"] is not None for f in report["faults"])
    verdict = "nothing lost or repeated" if c.get("passed") else "CHECKS FAILED"
    lines += ["", f"{len(report['faults'])} faults ({', '.join(f'{n} {k}' for k, n in kinds.items())}) in "
              f"{report['seconds']:.0f} s, {recovered} timed recoveries, {report['attempts']} launches (the first, a "
              f"resume after each learner or group kill or failed start, the final 2-update resume), "
              f"{report['leftover_processes_killed']} orphaned "
              f"processes killed; median {report['median_update_s']:.2f} s per update between faults. "
              f"Final run: {c.get('updates')} updates, {c.get('trajectories')} trajectories, "
              f"{c.get('discarded_entries')} ledger entries discarded (updates redone after a resume). "
              f"{_digests(c)} "
              f"Replay, {c.get('replay_windows', 0)} windows of at most {c.get('replay_window_updates', '?')} updates "
              f"between recorded states: max |replayed - recorded| = {c.get('replay_max_abs_diff', float('nan')):.1e} "
              f"(tolerance {c.get('replay_tolerance', float('nan')):.1e}, reduction-order noise "
              f"{c.get('replay_rounding_noise', float('nan')):.1e}); "
              f"last update lost: {c.get('replay_last_update_lost_diff', 0):.1e}, "
              f"repeated: {c.get('replay_last_update_repeated_diff', 0):.1e} (the smallest over the windows)."
              f"{_full_replay_words(c)} Verdict: {verdict}."]
    return "\n".join(lines)


def _digests(c: dict) -> str:
    """The exact checks in words."""
    if "digest_chain" not in c:
        return "Digest checks: not run (the final resume failed)."
    keys = ("checkpoint_digest", "digest_chain", "resumes_verified", "starts_on_chain", "per_attempt_once")
    if all(c.get(k) for k in keys) and not c.get("violations"):
        found = (f"holds updates 1..{c.get('updates')} once each, every resume loaded the state the ledger held "
                 "and each attempt went on from it")
    else:
        found = f"FAILS: {c.get('digest_chain_error') or {k: c.get(k) for k in (*keys, 'violations')}}"
    return f"State digests (weights, optimizer state, schedule): the chain from the final checkpoint {found}."


def _full_replay_words(c: dict) -> str:
    """The whole-run replay (``--full-replay``), if it ran: for comparison, not part of the verdict."""
    f = c.get("full_replay")
    if not f:
        return ""
    return (f" Whole-run replay from the warmed-up weights (the former check, not part of the verdict): "
            f"max diff {f['max_abs_diff']:.1e}, tolerance {f['tolerance']:.1e} from a one-ulp nudge "
            f"({f['rounding_noise']:.1e}): {'would pass' if f['matches'] else 'would fail'}.")

SETS = ("model.dtype=float64", "loop.mode=async", "loop.num_workers=2", "learner.parallel=fsdp",
        "data.max_operand=9", "data.num_train=84", "warmup.steps=40", "train.learning_rate=1e-3", "train.batch_size=16",
        "loop.trajectories_per_call=8", "loop.queue_size=16", "data.num_test=16", "eval.every=10",
        "log.checkpoint_every=3", "log.progress=false", "log.curves=false", "train.process_group_timeout_s=300",
        "train.updates=1000000")
PLACEMENT_SETS = {"ray": ("loop.placement=ray", "loop.ray_address=auto"), "threads": ("loop.placement=threads",)}
"""``threads`` (engine threads, no engine kills): a dry run of the machinery where Ray cannot start."""
"""The soak's run (besides ``--config tiny_cpu --out``); the last resume overrides ``train.updates``. One-digit
products after 40 warm-up steps give most batches mixed rewards, so most updates move the weights (with 10 steps
on the preset's task every reward was 0 and every update a no-op: a replay could not tell anything apart)."""
REPLAY_NOISE_FACTOR = 10.0
"""A window's replay may miss the recorded end state by at most this many times its reduction-order noise, and
must miss it by ten times more with its last update left out or applied twice (see :func:`_replay_window`)."""
REPLAY_TOLERANCE_FLOOR = 1e-12
"""The tolerance where the measured noise is below it (float64 weights of order 0.1-1: thousands of ulps)."""
SNAPSHOT_EVERY = 100
"""A replay window starts at every update divisible by this (0, 100, 200, ...)."""
REPLAY_WINDOW = 10
"""Updates per replay window. The run sums each gradient over 2 FSDP ranks and a replay in one process, so they
round differently, and Adam on the tiny model amplifies such differences exponentially over hundreds of updates
(two reduction orders of one replay: 7e-15 apart after 59 updates, 3e-10 after 150, 8e-6 after 335, ~1e-2 by ~900,
as much as one update moves). Windows of 10 updates from an exactly recorded state keep that noise near rounding
whatever the soak's length; the digest chain, not the replay, covers every update."""
ATTEMPT = "CHAOS_SOAK_ATTEMPT"
LEDGER = "ledger"
RECOVERY_WAIT_S = 300.0
"""After the fault window, how long the soak waits for the last faults' recoveries (to time them)."""
MAX_FAILED_STARTS = 5
"""Attempts in a row that train nothing before the soak gives up (Ray's node start can time out under load)."""
STOP_BOUND_S = 240.0
"""A run whose learner rank was killed must have exited by then (torchrun stops the other rank)."""


# ----------------------------------------------------------------------------- worker side (every rank)


class Ledger:
    """The ledger folder: what rank 0 of each attempt records, read back by the resumes and the checks.

    - ``a<attempt>-u<update>.pt``: an update: its batch (ids, tokens, the version each was sampled at) and the
      :func:`~scale.learner.digest.state_digest` of the learner's state before and after it;
    - ``a<attempt>-start.pt``: where the attempt started: the digest of the warmed-up state (a fresh run) or of
      the state its resume loaded, and whether that matched what the ledger held for that update;
    - ``snap-u<update>-a<attempt>`` (a ``torch.distributed.checkpoint`` directory, every rank its shards) and
      ``snap-u<update>-a<attempt>.pt`` (its digest and schedule, written once the directory is complete): the
      full state at the ends of the replay's windows (:data:`SNAPSHOT_EVERY`, :data:`REPLAY_WINDOW`);
    - ``violation-a<attempt>.json``: a resume that loaded a state the ledger does not hold (the attempt stops).
    """

    def __init__(self, folder: Path, attempt: int = 0) -> None:
        self.folder, self.attempt = folder, attempt

    def write(self, name: str, record: dict) -> None:
        from flashsim.storage import save_checkpoint

        self.folder.mkdir(parents=True, exist_ok=True)
        save_checkpoint(self.folder / name, {"attempt": self.attempt, **record})

    def record_update(self, update: int, before: str, after: str, rollouts: list) -> None:
        self.write(f"a{self.attempt:03d}-u{update:07d}.pt", {"update": update, "before": before, "after": after,
                                                               "time": time.time(),
                                                               "rollouts": [_plain(r) for r in rollouts]})

    def record_start(self, update: int, digest: str, resumed: bool, expected: str | None) -> None:
        self.write(f"a{self.attempt:03d}-start.pt", {"update": update, "digest": digest, "resumed": resumed,
                                                     "expected": expected, "time": time.time()})

    def entries(self) -> list[dict]:
        from flashsim.storage import load_checkpoint

        return [load_checkpoint(p) for p in sorted(self.folder.glob("a*-u*.pt"))]

    def starts(self) -> list[dict]:
        from flashsim.storage import load_checkpoint

        return [load_checkpoint(p) for p in sorted(self.folder.glob("a*-start.pt"))]

    def snapshots(self) -> list[dict]:
        """The complete snapshots' records, each with its directory as ``path``."""
        from flashsim.storage import load_checkpoint

        return [{**load_checkpoint(p), "path": str(p.with_suffix(""))} for p in sorted(self.folder.glob("snap-*.pt"))]

    def expected(self, update: int) -> str | None:
        """The digest the ledger holds for the state after ``update``: the latest attempt's (an update's ``after``,
        or the state an attempt started from at that update). Checkpoints only move forward, so the checkpoint a
        resume loads was written by the latest attempt that reached its update."""
        from flashsim.storage import load_checkpoint

        held = [(e["attempt"], e["after"]) for e in map(load_checkpoint, self.folder.glob(f"a*-u{update:07d}.pt"))]
        held += [(s["attempt"], s["digest"]) for s in self.starts() if s["update"] == update]
        return max(held)[1] if held else None


def _plain(rollout: Any) -> dict:
    t = rollout.trajectory
    return {"group_id": int(rollout.group_id), "reward": float(rollout.reward), "version": int(t.version),
            "prompt_ids": list(t.prompt_ids), "token_ids": list(t.token_ids), "action_mask": list(t.action_mask),
            "log_probs": [float(x) for x in t.log_probs], "finish_reason": t.finish_reason,
            "num_tool_calls": int(t.num_tool_calls)}


def snapshot_due(update: int) -> bool:
    """Whether the state after ``update`` starts or ends a replay window."""
    return update % SNAPSHOT_EVERY in (0, REPLAY_WINDOW)


def ledgered_trainer(base: type, ledger: Ledger) -> type:
    """A subclass of the run's :class:`~scale.run.trainer.Trainer` that records its updates, starts and snapshots
    in ``ledger`` (rank 0 writes; every rank takes part in the digests and snapshots, which are collectives)."""

    class LedgeredTrainer(base):
        last_digest: str | None = None
        """The digest of the state after the last update (or the start)."""
        before_digest: str | None = None
        """The digest of the live state just before the current update's step (a change between two updates, a
        rollback or a save that touched the optimizer, then breaks the chain)."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            learner = self.parts.learner
            step = learner.step

            def step_after_digest(rollouts: list) -> dict:
                self.before_digest = self.digest()
                return step(rollouts)

            learner.step = step_after_digest

        def warm_up(self) -> None:
            super().warm_up()
            self._started(resumed=False)

        def load(self, state: dict[str, Any]) -> None:
            super().load(state)  # checks the checkpoint's own digest
            self._started(resumed=True)

        def _started(self, resumed: bool) -> None:
            version = self.parts.learner.version
            digest = self.resumed_digest if resumed else self.digest()
            expected = ledger.expected(version) if resumed and self.is_main else None
            if self.is_main:
                ledger.record_start(version, digest, resumed, expected)
                if resumed and expected != digest:
                    ledger.folder.joinpath(f"violation-a{ledger.attempt:03d}.json").write_text(json.dumps(
                        {"attempt": ledger.attempt, "update": version, "loaded": digest, "ledger": expected}))
                    raise RuntimeError(f"resumed at update {version} from a state with digest {digest[:12]}, but "
                                       f"the ledger holds {str(expected)[:12]} for that update")
            self.last_digest = digest
            if not resumed and snapshot_due(version):
                self._snapshot(version, digest)

        def updated(self, rollouts: list) -> None:
            after = self.digest()
            version = self.parts.learner.version
            if self.is_main:
                ledger.record_update(version, self.before_digest, after, rollouts)
            self.last_digest = after
            if snapshot_due(version):
                self._snapshot(version, after)

        def _snapshot(self, version: int, digest: str) -> None:
            from scale.learner.sharding import save_sharded

            name = f"snap-u{version:07d}-a{ledger.attempt:03d}"
            save_sharded(str(ledger.folder / name), self.parts.model, self.parts.optimizer)
            if self.is_main:
                ledger.write(f"{name}.pt", {"update": version, "digest": digest,
                                            "scheduler": self.parts.learner.scheduler.state_dict()})

    return LedgeredTrainer


def worker(folder: Path, argv: list[str]) -> int:
    """One torchrun rank: ``python -m scale train`` with the run's trainer recording in the ledger."""
    import scale.run.trainer as trainer
    from scale.cli import main

    trainer.Trainer = ledgered_trainer(trainer.Trainer, Ledger(folder, int(os.environ.get(ATTEMPT, "0"))))
    return main(argv)


# ----------------------------------------------------------------------------- supervisor side


def _rows(out: Path) -> list[dict]:
    path = out / "metrics.jsonl"
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:  # a row being written
            pass
    return rows


def _top(out: Path) -> int:
    return max((r["update"] for r in _rows(out)), default=-1)


def _progress(out: Path, attempt: int) -> int:
    """The last update ``attempt`` recorded (its ledger entry is written at the step; metrics rows are flushed
    at checkpoints only), -1 before its first."""
    names = (out / LEDGER).glob(f"a{attempt:03d}-u*.pt")
    return max((int(path.stem.split("-u")[1]) for path in names), default=-1)


def _checkpoint_version(out: Path) -> int | None:
    import torch

    path = out / "checkpoint" / "state.pt"
    return int(torch.load(path, weights_only=True)["version"]) if path.exists() else None


_TOKENS: dict[str, str] = {}


def ray_environment(ray_tmp: str) -> dict[str, str]:
    """The environment of this soak's cluster and of its attempts (:func:`scale.testing.hermetic_ray_environment`):
    the cluster's temp dir, no ``RAY_ADDRESS``, and one authentication token per cluster, so that every attempt
    presents the token its cluster was started with."""
    return hermetic_ray_environment(ray_tmp, _TOKENS.setdefault(ray_tmp, secrets.token_hex(32)))


def start_cluster(ray_tmp: str, tries: int = 5) -> None:
    """``ray start --head`` with its temp dir in ``ray_tmp`` (where ``--ray-address auto`` finds it)."""
    env = ray_environment(ray_tmp)
    ray = str(Path(sys.executable).with_name("ray"))
    for _ in range(tries):
        done = subprocess.run([ray, "start", "--head", "--port", free_port(), "--num-cpus", "4",
                               "--include-dashboard=false", "--disable-usage-stats"], env=env, capture_output=True,
                              text=True, timeout=600)
        if done.returncode == 0:
            return
        _kill_tagged(ray_tmp, None)
    raise RuntimeError(f"ray start failed {tries} times: {done.stderr[-2000:]}")


def _tagged(ray_tmp: str, attempt: int | None) -> list[int]:
    """Processes whose environment carries this soak's Ray temp dir (and ``attempt``'s tag, unless None)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            env = environment(int(entry.name))
            if env.get("RAY_TMPDIR") == ray_tmp and (attempt is None or env.get(ATTEMPT) == str(attempt)):
                found.append(int(entry.name))
    return found


def _kill_tagged(ray_tmp: str, attempt: int | None) -> int:
    killed = 0
    for pid in _tagged(ray_tmp, attempt):
        try:
            os.kill(pid, signal.SIGKILL)
            killed += 1
        except ProcessLookupError:
            pass
    return killed


def engine_actors(ray_tmp: str) -> list[int]:
    """The ``ray::EngineActor`` processes of this soak's cluster."""
    return [p for p in _tagged(ray_tmp, None) if command_line(p).startswith("ray::EngineActor")]


class Run:
    """The run's attempts: launched, watched and killed (by PID, from outside) by the supervisor."""

    def __init__(self, out: Path, ray_tmp: str, placement: str = "ray") -> None:
        self.out, self.ray_tmp, self.attempt, self.process = out, ray_tmp, -1, None
        self.sets = (*SETS, *PLACEMENT_SETS[placement])
        self.exits: list[dict] = []
        self.leftovers = 0

    def launch(self, *extra: str) -> None:
        self.attempt += 1
        resume = _checkpoint_version(self.out) is not None
        command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "2",
                   "--master-port", free_port(), str(Path(__file__).resolve()), "worker", str(self.out / LEDGER),
                   "--", "train", "--config", "tiny_cpu", "--out", str(self.out),
                   *[x for s in (*self.sets, *extra) for x in ("--set", s)], *(["--resume"] if resume else [])]
        env = {**ray_environment(self.ray_tmp), ATTEMPT: str(self.attempt),
               "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        log = open(self.out.parent / f"{self.out.name}-attempt{self.attempt}.log", "w")  # noqa: SIM115
        self.process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                        start_new_session=True)
        log.close()
        self.started = time.monotonic()

    def learner_pids(self) -> list[int]:
        return [p for p in descendants(self.process.pid) if "chaos_soak.py worker" in command_line(p)
                and not command_line(p).startswith("ray::")]

    def kill_group(self) -> None:
        """SIGKILL torchrun and every process below it at once (the ranks run in sessions of their own, so
        ``killpg`` of torchrun's group would leave them running)."""
        for pid in [self.process.pid, *descendants(self.process.pid)]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.wait()

    def reap(self) -> int:
        """Record the exit, then SIGKILL what the attempt left running (Ray processes orphaned by a kill)."""
        code = self.process.wait()
        self.exits.append({"attempt": self.attempt, "code": code})
        self.leftovers += _kill_tagged(self.ray_tmp, self.attempt)
        return code


def _inject(run: Run, kind: str, rng: random.Random) -> int | None:
    """SIGKILL by PID; the PID killed (None if there was nothing of that kind to kill)."""
    if kind == "engine":
        pids = engine_actors(run.ray_tmp)
    elif kind == "learner":
        pids = run.learner_pids()
    else:
        pids = [run.process.pid]
    if not pids:
        return None
    pid = rng.choice(sorted(pids))
    if kind == "group":
        run.kill_group()
    else:
        os.kill(pid, signal.SIGKILL)
    return pid


def soak(out: Path, seconds: float, seed: int, gap: tuple[float, float], placement: str = "ray",
         full_replay: bool = False) -> dict:
    """Run, inject faults for ``seconds`` after the first RL update, stop, finish cleanly; the report."""
    rng = random.Random(seed)
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(out, ignore_errors=True)
    for old in out.parent.glob(f"{out.name}-attempt*.log"):
        old.unlink()
    ray_tmp = tempfile.mkdtemp(prefix="ray-soak-", dir="/tmp")
    if placement == "ray":
        start_cluster(ray_tmp)
    kinds = KINDS if placement == "ray" else KINDS[1:]
    run, faults, arrivals = Run(out, ray_tmp, placement), [], []
    launched = time.monotonic()
    run.launch()
    deadline = next_fault = None
    top, failures = -1, 0
    try:
        while deadline is None or time.monotonic() < deadline or (
                any(f["recovered_s"] is None for f in faults) and time.monotonic() < deadline + RECOVERY_WAIT_S):
            now = time.monotonic()
            if run.process.poll() is not None:  # killed, or failed by itself (Ray's start-up timed out under load)
                run.reap()
                if any((out / LEDGER).glob("violation-*.json")):  # a resume refused its state: nothing to go on with
                    break
                failures = failures + 1 if _progress(out, run.attempt) < 0 else 0
                if failures > MAX_FAILED_STARTS:
                    raise RuntimeError(f"{failures} attempts in a row trained nothing; see {out}-attempt*.log")
                run.launch()
                continue
            new_top = _progress(out, run.attempt)
            if new_top > top:
                arrivals.append((now, new_top, run.attempt))
                for fault in faults:
                    if fault["recovered_s"] is None and new_top > fault["update"]:
                        fault["recovered_s"] = now - fault["at"]
            top = new_top
            if deadline is None and top >= 1:
                deadline, next_fault = now + seconds, now + rng.uniform(*gap)
            up = top >= 0  # the current attempt has trained since it started
            if next_fault is not None and now >= next_fault and up and now < deadline:
                kind = rng.choice(kinds)
                pid = _inject(run, kind, rng)
                if pid is not None:
                    faults.append({"kind": kind, "pid": pid, "attempt": run.attempt, "update": top, "at": now,
                                   "t": now - launched, "recovered_s": None})
                    next_fault = now + rng.uniform(*gap)
            elif faults and faults[-1]["kind"] == "learner" and faults[-1]["attempt"] == run.attempt \
                    and now - faults[-1]["at"] > STOP_BOUND_S:
                faults[-1]["escalated"] = True  # the run did not stop by itself: as a supervisor would
                run.kill_group()
            time.sleep(0.2)
        report = _finish(run, faults, arrivals, seconds, seed, launched, full_replay)
        report["placement"] = placement
        return report
    finally:
        if run.process.poll() is None:
            run.kill_group()
        _kill_tagged(ray_tmp, None)  # the cluster this soak started (never `ray stop`: it stops every cluster here)
        shutil.rmtree(ray_tmp, ignore_errors=True)


def _finish(run: Run, faults: list, arrivals: list, seconds: float, seed: int, launched: float,
            full_replay: bool = False) -> dict:
    """Stop the soaked run, resume it to a clean finish, check the digests, the ledger, the replay and the metrics."""
    out = run.out
    if not run.exits or run.exits[-1]["attempt"] != run.attempt:  # not reaped yet
        if run.process.poll() is None:
            run.kill_group()
        run.reap()
    version = _checkpoint_version(out)
    violations = sorted(p.name for p in (out / LEDGER).glob("violation-*.json"))
    code = None
    if not violations:
        run.launch(f"train.updates={version + 2}")
        deadline = time.monotonic() + 900
        while run.process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        if run.process.poll() is None:
            run.kill_group()
        code = run.reap()
    now = time.monotonic()
    interval = _median_interval(arrivals, faults)
    for fault in faults:
        fault["lost_s"] = None if fault["recovered_s"] is None else max(fault["recovered_s"] - interval, 0.0)
    report = {"seconds": seconds, "seed": seed, "wall_s": now - launched, "attempts": run.attempt + 1,
              "final_exit": code, "exits": run.exits, "leftover_processes_killed": run.leftovers,
              "median_update_s": interval, "faults": [{k: v for k, v in f.items() if k != "at"} for f in faults]}
    report["checks"] = (check(out, version + 2, run.sets, full_replay) if code == 0 else
                        {"final_resume": False, "violations": violations, "passed": False})
    (out / "chaos_report.json").write_text(json.dumps(report, indent=2) + "\n")
    return report


def _median_interval(arrivals: list, faults: list) -> float:
    """Median seconds between consecutive new updates, away from faults (a fault's stall excluded)."""
    windows = [(f["at"], f["at"] + (f["recovered_s"] or 0.0)) for f in faults]
    gaps = [b[0] - a[0] for a, b in zip(arrivals, arrivals[1:]) if b[1] == a[1] + 1 and b[2] == a[2]
            and not any(lo <= b[0] and a[0] <= hi for lo, hi in windows)]
    return statistics.median(gaps) if gaps else float("nan")


# ----------------------------------------------------------------------------- checks


def history(entries: list[dict], starts: list[dict], final_digest: str, final_update: int) -> list[dict]:
    """The updates the final state holds: the chain of state digests from ``final_digest`` back to a fresh
    start's warmed-up state (the latest attempt's entry where two attempts made the same step). Raises
    ``ValueError`` where the chain breaks: a lost update, a repeated one or a resume from a state no recorded
    step produced leaves a state whose digest no entry holds."""
    by_after: dict[tuple[int, str], dict] = {}
    for entry in sorted(entries, key=lambda e: e["attempt"]):  # later attempts overwrite earlier ones
        by_after[(entry["update"], entry["after"])] = entry
    chain, current, update = [], final_digest, final_update
    while update > 0:
        entry = by_after.get((update, current))
        if entry is None:
            raise ValueError(f"no recorded update {update} produced the state {current[:12]}: lost or repeated")
        chain.append(entry)
        current, update = entry["before"], update - 1
    if not any(s["update"] == 0 and not s["resumed"] and s["digest"] == current for s in starts):
        raise ValueError(f"the chain ends at a state {current[:12]} that no fresh start warmed up")
    return chain[::-1]


def digest_checks(entries: list[dict], starts: list[dict], final_digest: str, final_update: int) -> dict:
    """The exact checks of the ledger's digests: the chain from the final state back to the warmed-up one holds
    updates 1..N once each; every attempt started from a state on that chain, the one the ledger held for its
    update (checked by the resume itself, and again here); each attempt's updates follow one another, each from
    the state the previous one left, each changing the state."""
    checks: dict[str, Any] = {"resumes_verified": all(s["digest"] == s["expected"] for s in starts if s["resumed"])}
    by_attempt: dict[int, list[dict]] = {}
    for entry in entries:
        by_attempt.setdefault(entry["attempt"], []).append(entry)
    start_of = {s["attempt"]: s for s in starts}
    consecutive = True
    for attempt, mine in by_attempt.items():
        start = start_of.get(attempt)
        consecutive &= start is not None
        previous = (start["update"], start["digest"]) if start else (None, None)
        for entry in sorted(mine, key=lambda e: e["update"]):
            consecutive &= (entry["update"], entry["before"]) == (previous[0] + 1, previous[1]) if start else False
            consecutive &= entry["before"] != entry["after"]
            previous = (entry["update"], entry["after"])
    checks["per_attempt_once"] = consecutive
    try:
        chain = history(entries, starts, final_digest, final_update)
    except ValueError as error:
        return {**checks, "digest_chain": False, "digest_chain_error": str(error), "starts_on_chain": False}
    at = {0: chain[0]["before"] if chain else final_digest, **{e["update"]: e["after"] for e in chain}}
    checks["digest_chain"] = [e["update"] for e in chain] == list(range(1, final_update + 1))
    checks["starts_on_chain"] = all(at.get(s["update"]) == s["digest"] for s in starts)
    checks["chain"] = chain
    return checks


def check(out: Path, updates: int, sets: tuple[str, ...] = SETS, full_replay: bool = False) -> dict:
    """The digest, ledger, replay and metrics checks of the finished run (each a bool, with its numbers)."""
    from scale.learner.digest import state_digest

    ledger = Ledger(out / LEDGER)
    entries, starts = ledger.entries(), ledger.starts()
    parts, state = _checkpoint_parts(out, sets)
    recorded = state.get("digest")
    p = parts
    final_digest = state_digest(p.model, p.optimizer, p.learner.scheduler, p.learner.version)
    checks: dict[str, Any] = {"updates": updates, "ledger_entries": len(entries),
                              "checkpoint_digest": final_digest == recorded,
                              "violations": sorted(x.name for x in (out / LEDGER).glob("violation-*.json"))}
    exact = digest_checks(entries, starts, final_digest, updates)
    chain = exact.pop("chain", None)
    checks.update(exact)
    if chain is None:
        checks["passed"] = False
        return checks
    ids = [(r["group_id"], sum(1 for q in e["rollouts"][:i] if q["group_id"] == r["group_id"]))
           for e in chain for i, r in enumerate(e["rollouts"])]
    checks.update({"discarded_entries": len(entries) - len(chain), "trajectories": len(ids),
                   "each_trajectory_once": len(ids) == len(set(ids)),
                   "sampled_before_update": all(0 <= r["version"] < e["update"] for e in chain for r in e["rollouts"])})
    final = {"update": updates, "digest": recorded, "path": str(out / state["sharded"]),
             "scheduler": state["scheduler"]}  # the final checkpoint ends a window too
    checks.update(_replay_windows(chain, [*ledger.snapshots(), final], sets))
    if full_replay:
        checks["full_replay"] = _full_replay(chain, ledger.snapshots(), p.model, sets)
    checks.update(_metrics_ok(out, updates))
    checks["passed"] = not checks["violations"] and all(checks[k] for k in (
        "checkpoint_digest", "digest_chain", "resumes_verified", "starts_on_chain", "per_attempt_once",
        "each_trajectory_once", "sampled_before_update", "replay_matches", "replay_sensitive", "metrics_parse"))
    return checks


def _config(updates: int, sets: tuple[str, ...] = SETS) -> Any:
    from scale.run.config import load_config, resolve_config_path

    return load_config(resolve_config_path("tiny_cpu"), [*sets, f"train.updates={max(updates, 1)}"])


def _load_state(parts: Any, path: str, scheduler: dict, version: int) -> None:
    """A sharded checkpoint's model and optimizer into ``parts`` (in one process: DCP reshards), its schedule and
    version."""
    from scale.learner.sharding import load_sharded

    load_sharded(path, parts.model, parts.optimizer)
    parts.learner.scheduler.load_state_dict(scheduler)
    parts.learner.version = version


def _checkpoint_parts(out: Path, sets: tuple[str, ...]) -> tuple[Any, dict]:
    """The final checkpoint's state, gathered into one process, and its ``state.pt``."""
    import torch

    from scale.run.build import build

    state = torch.load(out / "checkpoint" / "state.pt", weights_only=True)
    parts = build(_config(int(state["version"]), sets))
    _load_state(parts, str(out / state["sharded"]), state["scheduler"], int(state["version"]))
    return parts, state


def _step(parts: Any, entry: dict) -> None:
    """One recorded update applied to ``parts``: the learner's step, its schedule's step within it, as in the run."""
    from scale.rollouts.trajectory import Rollout, Trajectory

    rollouts = [Rollout(Trajectory(r["prompt_ids"], r["token_ids"], r["action_mask"], r["log_probs"],
                                   r["finish_reason"], r["version"], r["num_tool_calls"]), None, r["reward"],
                        r["group_id"], "") for r in entry["rollouts"]]
    parts.learner.step(rollouts)


def _distance(a: dict, b: dict) -> float:
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def _weights(parts: Any) -> dict:
    return {k: v.detach().clone() for k, v in parts.learner.model.state_dict().items()}


def _replay_windows(chain: list[dict], snapshots: list[dict], sets: tuple[str, ...]) -> dict:
    """Replay each window between two recorded states on the chain (a snapshot or the final checkpoint) at most
    :data:`REPLAY_WINDOW` updates apart, in one process.

    Each window starts from the exact recorded state (its digest checked against the chain), so the replay's
    noise is that of :data:`REPLAY_WINDOW` updates whatever the run's length. The noise is measured the way the run
    differs from the replay, by reduction order: the same window replayed with each batch's gradient summed over two
    microbatches (the two ranks' shards) instead of at once. The window's replay must land on the end snapshot
    within :data:`REPLAY_NOISE_FACTOR` times that noise (:data:`REPLAY_TOLERANCE_FLOOR` at least), and miss it by
    ten times the tolerance with its last update that has a gradient left out, or applied twice."""
    from scale.learner.digest import state_digest
    from scale.run.build import build

    at = {0: chain[0]["before"] if chain else None, **{e["update"]: e["after"] for e in chain}}
    on_chain = {s["update"]: s for s in snapshots if at.get(s["update"]) == s["digest"]}
    ends = {u: [e for e in sorted(on_chain) if u < e <= u + REPLAY_WINDOW] for u in sorted(on_chain)}
    windows = [(u, ends[u][0]) for u in sorted(on_chain) if ends[u]]
    if not windows:
        return {"replay_windows": 0, "replay_matches": False, "replay_sensitive": False}
    parts, target = build(_config(len(chain), sets)), build(_config(len(chain), sets))
    rows, exact = [], True
    for start, end in windows:
        first, last = on_chain[start], on_chain[end]
        _load_state(parts, first["path"], first["scheduler"], start)
        _load_state(target, last["path"], last["scheduler"], end)
        exact &= state_digest(parts.model, parts.optimizer, parts.learner.scheduler, start) == first["digest"]
        exact &= state_digest(target.model, target.optimizer, target.learner.scheduler, end) == last["digest"]
        rows.append({"start": start, "end": end, **_replay_window(parts, chain[start:end], _weights(target))})
    tolerance = max(r["tolerance"] for r in rows)
    return {"replay_windows": len(rows), "replay_window_updates": REPLAY_WINDOW, "replay_snapshots_exact": exact,
            "replay_max_abs_diff": max(r["mismatch"] for r in rows),
            "replay_rounding_noise": max(r["noise"] for r in rows), "replay_tolerance": tolerance,
            "replay_last_update_lost_diff": min(r["lost"] for r in rows),
            "replay_last_update_repeated_diff": min(r["repeated"] for r in rows),
            "replay_matches": exact and all(r["mismatch"] <= r["tolerance"] for r in rows),
            "replay_sensitive": all(min(r["lost"], r["repeated"]) > 10 * r["tolerance"] for r in rows),
            "replay_window_rows": rows}


def _replay_window(parts: Any, entries: list[dict], target: dict) -> dict:
    """One window (see :func:`_replay_windows`) from the state in ``parts``, which it leaves unchanged."""
    start = SimpleNamespace(learner=parts.learner)  # the learner holds its optimizer and schedule
    mixed = [i for i, e in enumerate(entries) if len({r["reward"] for r in e["rollouts"]}) > 1]
    k = mixed[-1] if mixed else len(entries) - 1  # the last update with a gradient (mixed rewards)

    def replay(window: list[dict], state: Any, microbatch: int | None = None) -> Any:
        state = copy.deepcopy(state)
        state.learner.microbatch_size = microbatch
        for entry in window:
            _step(state, entry)
        return state

    prefix = replay(entries[:k], start)
    replayed = _weights(replay(entries[k:], prefix))
    lost = _distance(_weights(replay(entries[k + 1:], prefix)), target)
    repeated = _distance(_weights(replay(entries[k:k + 1] + entries[k:], prefix)), target)
    halves = replay(entries, start, microbatch=max(len(entries[0]["rollouts"]) // 2, 1))
    noise = _distance(_weights(halves), replayed)
    mismatch = _distance(replayed, target)
    return {"probe_update": entries[k]["update"], "mismatch": mismatch, "noise": noise,
            "tolerance": max(REPLAY_TOLERANCE_FLOOR, REPLAY_NOISE_FACTOR * noise), "lost": lost, "repeated": repeated}


def _full_replay(chain: list[dict], snapshots: list[dict], checkpointed: Any, sets: tuple[str, ...]) -> dict:
    """The whole-run replay the soak used before its windows (for comparison, not a check): the chain's batches
    applied to the warmed-up weights in one process, with a fresh optimizer; its tolerance ten times the distance
    to the same replay from weights one ulp away. Adam makes the tiny model's training chaotic over hundreds of
    updates, so this loses its power on long soaks (docs/performance.md, "Chaos soak")."""
    import torch

    from scale.run.build import build

    initial = next(s for s in snapshots if s["update"] == 0 and s["digest"] == chain[0]["before"])
    start = build(_config(len(chain), sets))
    _load_state(start, initial["path"], initial["scheduler"], 0)
    base = {k: v.detach().clone() for k, v in start.model.state_dict().items()}
    target = {k: v.detach().clone() for k, v in checkpointed.state_dict().items()}

    def replay(weights: dict, entries: list[dict]) -> dict:
        parts = build(_config(len(chain), sets))  # a fresh optimizer and schedule
        parts.model.load_state_dict(weights)
        for entry in entries:
            _step(parts, entry)
        return _weights(parts)

    replayed = replay(base, chain)
    nudged = {name: torch.nextafter(v, torch.full_like(v, math.inf)) if v.is_floating_point() else v
              for name, v in base.items()}
    noise = _distance(replay(nudged, chain), replayed)
    tolerance = max(1e-9, REPLAY_NOISE_FACTOR * noise)
    mismatch = _distance(replayed, target)
    return {"max_abs_diff": mismatch, "rounding_noise": noise, "tolerance": tolerance, "matches": mismatch <= tolerance}


def _metrics_ok(out: Path, updates: int) -> dict:
    jsonl = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    with open(out / "metrics.csv", newline="") as file:
        table = list(csv.DictReader(file))
    expected = list(range(updates + 1))
    ok = [r["update"] for r in jsonl] == expected and [int(float(r["update"])) for r in table] == expected
    json.loads((out / "summary.json").read_text())
    return {"metrics_parse": ok, "metrics_rows": len(jsonl)}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "worker":
        return worker(Path(argv[1]), argv[3:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="run directory (replaced); required unless --markdown")
    parser.add_argument("--seconds", type=float, default=600.0, help="fault window after the first RL update")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--gap", type=float, nargs=2, default=(15.0, 45.0), help="seconds between faults (uniform)")
    parser.add_argument("--placement", choices=list(PLACEMENT_SETS), default="ray",
                        help="ray (the soak); threads: a dry run without Ray and without engine kills")
    parser.add_argument("--markdown", type=Path, default=None, help="print the table of a saved chaos_report.json")
    parser.add_argument("--full-replay", action="store_true",
                        help="also replay the whole run from the warmed-up weights (the check before the windows; "
                             "for comparison, slow on long soaks, not part of the verdict)")
    parser.add_argument("--recheck", action="store_true",
                        help="check the finished soak in --out again (its chaos_report.json rewritten) without running")
    args = parser.parse_args(argv)
    if args.markdown is not None:
        print(markdown(json.loads(args.markdown.read_text())))
        return 0
    if args.out is None:
        parser.error("--out is required (unless --markdown)")
    if args.recheck:
        report = json.loads((args.out / "chaos_report.json").read_text())
        sets = (*SETS, *PLACEMENT_SETS[report.get("placement", "ray")])
        report["checks"] = check(args.out, report["checks"].get("updates") or _checkpoint_version(args.out),
                                 sets, args.full_replay)
        (args.out / "chaos_report.json").write_text(json.dumps(report, indent=2) + "\n")
    else:
        report = soak(args.out, args.seconds, args.seed, tuple(args.gap), args.placement, args.full_replay)
    print(json.dumps(report, indent=2))
    print(markdown(report))
    return 0 if report["checks"].get("passed") else 1


if __name__ == "__main__":
    sys.exit(main())
