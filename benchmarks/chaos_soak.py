"""Chaos soak (issue 41): an asynchronous ``scale`` run survives random SIGKILLs and loses or repeats nothing.

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

- **the ledger**: each rank 0 of each attempt records, per update, the trajectories it trained on (ids and
  tokens), the policy version each was sampled at, and hashes of the weights before and after the step
  (:class:`LedgerSource`, a wrapper of the run's own rollout source). The chain of hashes from the final
  checkpoint's weights back to the warmed-up ones is the history the checkpoint holds: updates 1..N each once,
  every trajectory in it at most once, each sampled at a version older than its update;
- **a replay**: one process applies that history's batches to the warmed-up weights with a fresh optimizer and
  must land on the checkpoint's weights within :data:`REPLAY_NOISE_FACTOR` times the replay's own rounding noise
  (the same replay from warmed-up weights moved by one ulp); the same replay with the last update left out or
  applied twice misses them by more than ten times that tolerance (so a lost or repeated update would be seen);
- **the metrics files** parse (``metrics.jsonl`` and ``metrics.csv``), one row per update 0..N.

It reports the faults injected, the recoveries and the time each fault cost (the stall from the kill until
the run writes an update past the one it had reached, and that stall less one median update interval)::

    nice -n 5 python benchmarks/chaos_soak.py --out runs/chaos --seconds 600
    python benchmarks/chaos_soak.py --out runs/chaos12 --seconds 12 --gap 4 6 --seed 1  # CI (test_chaos_soak.py)

Figures: docs/performance.md, "scale: chaos soak".
"""

from __future__ import annotations

import argparse
import copy
import csv
import hashlib
import json
import math
import os
import random
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from benchmarks.chaos_report import KINDS, markdown  # noqa: E402
from tests.ray_env import hermetic_ray_environment  # noqa: E402
from tests.scale.fleet_drill import command_line, descendants, environment  # noqa: E402

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
"""The replay may miss the checkpoint by at most this many times its own rounding noise (below). The run sums each
gradient over 2 FSDP ranks and the replay in one process, so they round differently, and Adam on a tiny model
amplifies one-ulp differences over hundreds of updates (measured: 3e-10 after 150 updates, 8e-6 after 335), while
a lost or repeated update moves some weight by ~1e-3. A fixed tolerance is too tight for long soaks or too loose
for short ones; the noise is measured in each soak instead."""
REPLAY_TOLERANCE_FLOOR = 1e-9
"""The tolerance where the measured noise is below it (float64)."""
ATTEMPT = "CHAOS_SOAK_ATTEMPT"
LEDGER = "ledger"
RECOVERY_WAIT_S = 300.0
"""After the fault window, how long the soak waits for the last faults' recoveries (to time them)."""
MAX_FAILED_STARTS = 5
"""Attempts in a row that train nothing before the soak gives up (Ray's node start can time out under load)."""
STOP_BOUND_S = 240.0
"""A run whose learner rank was killed must have exited by then (torchrun stops the other rank)."""


# ----------------------------------------------------------------------------- worker side (every rank)


def weights_hash(weights: Any) -> str:
    """SHA-256 of a model's (or a state dict's) tensors, keys sorted."""
    state = weights.state_dict() if hasattr(weights, "state_dict") else weights
    digest = hashlib.sha256()
    for key in sorted(state):
        digest.update(key.encode())
        digest.update(state[key].detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


class LedgerSource:
    """Rank 0's rollout source, recording each update's batch and weight hashes in ``ledger/``."""

    def __init__(self, source: Any, folder: Path, attempt: int, weights: Any, version: int) -> None:
        from flashsim.io import save_checkpoint

        self.source, self.folder, self.attempt, self.batch = source, folder, attempt, None
        self.last_hash = weights_hash(weights)
        folder.mkdir(parents=True, exist_ok=True)
        if version == 0:  # the warmed-up weights every history starts from
            state = weights.state_dict() if hasattr(weights, "state_dict") else weights
            save_checkpoint(folder / f"initial-{self.last_hash[:16]}.pt",
                            {"hash": self.last_hash, "weights": {k: v.detach().clone() for k, v in state.items()}})

    def next_batch(self, num_trajectories: int) -> tuple[list, dict]:
        rollouts, info = self.source.next_batch(num_trajectories)
        self.batch = rollouts
        return rollouts, info

    def publish(self, weights: Any, version: int) -> None:
        from flashsim.io import save_checkpoint

        after = weights_hash(weights)
        if self.batch is not None:
            entry = {"attempt": self.attempt, "update": int(version), "before": self.last_hash, "after": after,
                     "time": time.time(), "rollouts": [_plain(r) for r in self.batch]}
            save_checkpoint(self.folder / f"a{self.attempt:03d}-u{version:07d}.pt", entry)
            self.batch = None
        self.last_hash = after
        self.source.publish(weights, version)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.source, name)


def _plain(rollout: Any) -> dict:
    t = rollout.trajectory
    return {"group_id": int(rollout.group_id), "reward": float(rollout.reward), "version": int(t.version),
            "prompt_ids": list(t.prompt_ids), "token_ids": list(t.token_ids), "action_mask": list(t.action_mask),
            "log_probs": [float(x) for x in t.log_probs], "finish_reason": t.finish_reason,
            "num_tool_calls": int(t.num_tool_calls)}


def worker(ledger: Path, argv: list[str]) -> int:
    """One torchrun rank: ``python -m scale train`` with rank 0's source wrapped in a :class:`LedgerSource`."""
    import scale.run.trainer as trainer
    from scale.run.cli import main

    build_source, attempt = trainer.build_source, int(os.environ.get(ATTEMPT, "0"))

    def ledgered(config: Any, parts: Any, weights: Any) -> LedgerSource:
        return LedgerSource(build_source(config, parts, weights), ledger, attempt, weights, parts.learner.version)

    trainer.build_source = ledgered
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


def _free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def _checkpoint_version(out: Path) -> int | None:
    import torch

    path = out / "checkpoint" / "state.pt"
    return int(torch.load(path, weights_only=True)["version"]) if path.exists() else None


_TOKENS: dict[str, str] = {}


def ray_environment(ray_tmp: str) -> dict[str, str]:
    """The environment of this soak's cluster and of its attempts (:func:`tests.ray_env.hermetic_ray_environment`):
    the cluster's temp dir, no ``RAY_ADDRESS``, and one authentication token per cluster, so that every attempt
    presents the token its cluster was started with."""
    return hermetic_ray_environment(ray_tmp, _TOKENS.setdefault(ray_tmp, secrets.token_hex(32)))


def start_cluster(ray_tmp: str, tries: int = 5) -> None:
    """``ray start --head`` with its temp dir in ``ray_tmp`` (where ``--ray-address auto`` finds it)."""
    env = ray_environment(ray_tmp)
    ray = str(Path(sys.executable).with_name("ray"))
    for _ in range(tries):
        done = subprocess.run([ray, "start", "--head", "--port", _free_port(), "--num-cpus", "4",
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
                   "--master-port", _free_port(), str(Path(__file__).resolve()), "worker", str(self.out / LEDGER),
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


def soak(out: Path, seconds: float, seed: int, gap: tuple[float, float], placement: str = "ray") -> dict:
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
        report = _finish(run, faults, arrivals, seconds, seed, ray_tmp, launched)
        report["placement"] = placement
        return report
    finally:
        if run.process.poll() is None:
            run.kill_group()
        _kill_tagged(ray_tmp, None)  # the cluster this soak started (never `ray stop`: it stops every cluster here)
        shutil.rmtree(ray_tmp, ignore_errors=True)


def _finish(run: Run, faults: list, arrivals: list, seconds: float, seed: int, ray_tmp: str, launched: float) -> dict:
    """Stop the soaked run, resume it to a clean finish, check the ledger, the replay and the metrics."""
    out = run.out
    if run.process.poll() is None:
        run.kill_group()
    run.reap()
    version = _checkpoint_version(out)
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
    report["checks"] = check(out, version + 2, run.sets) if code == 0 else {"final_resume": False}
    (out / "chaos_report.json").write_text(json.dumps(report, indent=2) + "\n")
    return report


def _median_interval(arrivals: list, faults: list) -> float:
    """Median seconds between consecutive new updates, away from faults (a fault's stall excluded)."""
    windows = [(f["at"], f["at"] + (f["recovered_s"] or 0.0)) for f in faults]
    gaps = [b[0] - a[0] for a, b in zip(arrivals, arrivals[1:]) if b[1] == a[1] + 1 and b[2] == a[2]
            and not any(lo <= b[0] and a[0] <= hi for lo, hi in windows)]
    return statistics.median(gaps) if gaps else float("nan")


# ----------------------------------------------------------------------------- checks


def _ledger(out: Path) -> tuple[list[dict], dict[str, Any]]:
    from flashsim.io import load_checkpoint

    entries = [load_checkpoint(p) for p in sorted((out / LEDGER).glob("a*-u*.pt"))]
    initials = {}
    for path in (out / LEDGER).glob("initial-*.pt"):
        state = load_checkpoint(path)
        initials[state["hash"]] = state["weights"]
    return entries, initials


def history(entries: list[dict], final_hash: str, final_update: int, initials: dict) -> list[dict]:
    """The updates the final weights hold: the chain of weight hashes from ``final_hash`` back to warmed-up
    weights (the latest attempt's entry where two attempts made the same step). Raises ``ValueError`` where the
    chain breaks (a lost or repeated update leaves weights no recorded step produced)."""
    by_after: dict[tuple[int, str], dict] = {}
    for entry in entries:  # later attempts overwrite earlier ones
        by_after[(entry["update"], entry["after"])] = entry
    chain, current, update = [], final_hash, final_update
    while update > 0:
        entry = by_after.get((update, current))
        if entry is None:
            raise ValueError(f"no recorded update {update} produced the weights {current[:12]}: lost or repeated")
        chain.append(entry)
        current, update = entry["before"], update - 1
    if current not in initials:
        raise ValueError(f"the chain ends at weights {current[:12]} that are not the warmed-up ones")
    return chain[::-1]


def check(out: Path, updates: int, sets: tuple[str, ...] = SETS) -> dict:
    """The ledger, the replay and the metrics checks of the finished run (each a bool, with its numbers)."""
    entries, initials = _ledger(out)
    attempts: dict[int, list[int]] = {}
    for entry in entries:
        attempts.setdefault(entry["attempt"], []).append(entry["update"])
    per_attempt_once = all(u == list(range(u[0], u[0] + len(u))) for u in attempts.values())
    model, _ = _checkpoint_model(out, sets)
    final_hash = weights_hash(model)
    try:
        chain = history(entries, final_hash, updates, initials)
    except ValueError as error:
        return {"chain": False, "chain_error": str(error), "per_attempt_once": per_attempt_once}
    ids = [(r["group_id"], i) for e in chain for i, r in enumerate(e["rollouts"])]
    ids = [(r["group_id"], sum(1 for q in e["rollouts"][:i] if q["group_id"] == r["group_id"]))
           for e in chain for i, r in enumerate(e["rollouts"])]
    stale_ok = all(0 <= r["version"] < e["update"] for e in chain for r in e["rollouts"])
    replay = _replay(chain, initials[chain[0]["before"]], model, sets)
    metrics = _metrics_ok(out, updates)
    checks = {"chain": [e["update"] for e in chain] == list(range(1, updates + 1)), "updates": updates,
              "ledger_entries": len(entries), "discarded_entries": len(entries) - len(chain),
              "per_attempt_once": per_attempt_once, "trajectories": len(ids),
              "each_trajectory_once": len(ids) == len(set(ids)), "sampled_before_update": stale_ok,
              **replay, **metrics}
    checks["passed"] = all(checks[k] for k in ("chain", "per_attempt_once", "each_trajectory_once",
                                               "sampled_before_update", "replay_matches", "replay_sensitive",
                                               "metrics_parse"))
    return checks


def _config(updates: int, sets: tuple[str, ...] = SETS) -> Any:
    from scale.run.config import load_config, resolve_config_path

    return load_config(resolve_config_path("tiny_cpu"), [*sets, f"train.updates={max(updates, 1)}"])


def _checkpoint_model(out: Path, sets: tuple[str, ...]) -> tuple[Any, Any]:
    """The final checkpoint's model, gathered into one process (the FSDP shards resharded by DCP)."""
    import torch

    from scale.learner.sharding import load_sharded
    from scale.run.build import build

    state = torch.load(out / "checkpoint" / "state.pt", weights_only=True)
    parts = build(_config(int(state["version"]), sets))
    load_sharded(str(out / state["sharded"]), parts.model, parts.optimizer)
    return parts.model, parts


def _replay(chain: list[dict], initial: dict, checkpointed: Any, sets: tuple[str, ...]) -> dict:
    """Apply the chain's batches to the warmed-up weights with a fresh optimizer, in one process; and the same
    with the last update that has a gradient (mixed rewards) left out, or applied twice."""
    import torch

    from scale.rollouts.trajectory import Rollout, Trajectory
    from scale.run.build import build

    def step(parts: Any, entry: dict) -> None:
        rollouts = [Rollout(Trajectory(r["prompt_ids"], r["token_ids"], r["action_mask"], r["log_probs"],
                                       r["finish_reason"], r["version"], r["num_tool_calls"]), None, r["reward"],
                            r["group_id"], "") for r in entry["rollouts"]]
        parts.learner.step(rollouts)
        parts.scheduler.step()

    def distance(a: dict, b: dict) -> float:
        return max(float((a[k] - b[k]).abs().max()) for k in a)

    def replay(entries: list[dict], start: dict | None = None, parts: Any = None) -> Any:
        """``entries`` applied to a fresh build from ``start``, or applied on to ``parts`` (a replay so far)."""
        if parts is None:
            parts = build(_config(len(chain), sets))  # a fresh optimizer and schedule
            parts.model.load_state_dict(start)
        for entry in entries:
            step(parts, entry)
        return parts

    def weights(parts: Any) -> dict:
        return parts.learner.model.state_dict()

    target = {k: v.detach().clone() for k, v in checkpointed.state_dict().items()}
    mixed = [i for i, e in enumerate(chain) if len({r["reward"] for r in e["rollouts"]}) > 1]
    k = mixed[-1] if mixed else len(chain) - 1  # the last update with a gradient (mixed rewards)
    # The three replays share their first k updates: replayed once, then copied (learner, model, optimizer and
    # schedule together, so that the copy steps exactly as the original would).
    prefix = replay(chain[:k], initial)
    shared = SimpleNamespace(learner=prefix.learner, scheduler=prefix.scheduler)
    lost = distance(weights(replay(chain[k + 1:], parts=copy.deepcopy(shared))), target)
    repeated = distance(weights(replay(chain[k:k + 1] + chain[k:], parts=copy.deepcopy(shared))), target)
    replayed = weights(replay(chain[k:], parts=shared))
    mismatch = distance(replayed, target)
    # The replay's own rounding noise: the same history from warmed-up weights one ulp away.
    nudged = {name: torch.nextafter(v, torch.full_like(v, math.inf)) if v.is_floating_point() else v
              for name, v in initial.items()}
    noise = distance(weights(replay(chain, nudged)), replayed)
    tolerance = max(REPLAY_TOLERANCE_FLOOR, REPLAY_NOISE_FACTOR * noise)
    return {"replay_probe_update": chain[k]["update"], "replay_max_abs_diff": mismatch,
            "replay_last_update_lost_diff": lost, "replay_last_update_repeated_diff": repeated,
            "replay_rounding_noise": noise, "replay_tolerance": tolerance,
            "replay_matches": mismatch <= tolerance,
            "replay_sensitive": min(lost, repeated) > 10 * tolerance}


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
    args = parser.parse_args(argv)
    if args.markdown is not None:
        print(markdown(json.loads(args.markdown.read_text())))
        return 0
    if args.out is None:
        parser.error("--out is required (unless --markdown)")
    report = soak(args.out, args.seconds, args.seed, tuple(args.gap), args.placement)
    print(json.dumps(report, indent=2))
    print(markdown(report))
    return 0 if report["checks"].get("passed") else 1


if __name__ == "__main__":
    sys.exit(main())
