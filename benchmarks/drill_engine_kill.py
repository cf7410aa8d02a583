"""Hand drill of issue 21: SIGKILL Ray engine actors of a running ``python -m scale train`` from outside.

Starts the tiny preset with two Ray engine actors for 150 updates, waits for update 90, SIGKILLs one actor
(``one``) or every actor (``all``) by PID, then reports when replacement actor processes appear and how
the run ends. Extra arguments go to ``python -m scale train`` (e.g. ``--loop.max-restarts 0`` for a fleet
that cannot come back, which must exit 3 with the resume command). Run from the repository root::

    python benchmarks/drill_engine_kill.py runs/drill_one one
    python benchmarks/drill_engine_kill.py runs/drill_all all
    python benchmarks/drill_engine_kill.py runs/drill_dead all --loop.max-restarts 0

Figures and what they mean: docs/performance.md, "scale: engine failures".
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from scale.testing import engine_actor_pids

ROOT = Path(__file__).resolve().parents[1]


def rows(out: Path) -> list[dict]:
    path = out / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def main(out: Path, which: str, extra: list[str]) -> None:
    command = [sys.executable, "-m", "scale", "train", "--config", "scale/configs/tiny_cpu.yaml", "--loop.placement",
               "ray", "--loop.num-workers", "2", "--train.updates", "150", "--out", str(out), "--set",
               "log.progress=false", *extra]
    print(" ".join(command), flush=True)
    started = time.monotonic()
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f"{out.name}.out", "w") as log:
        process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        while not any(row["update"] >= 90 for row in rows(out)):
            if process.poll() is not None:
                raise SystemExit(f"the run ended (exit {process.returncode}) before update 90")
            time.sleep(0.2)
        pids = engine_actor_pids(process.pid)
        victims = pids if which == "all" else pids[:1]
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        print(f"killed {victims} of {pids} at update {max(row['update'] for row in rows(out))}", flush=True)
        seen = set(pids)
        while process.poll() is None:
            new = set(engine_actor_pids(process.pid)) - seen
            if new:
                print(f"new actor process {sorted(new)} {time.monotonic() - killed:.1f} s after the kill", flush=True)
                seen |= new
            time.sleep(0.5)
    updates = [row["update"] for row in rows(out)]
    now = time.monotonic()
    print(f"exit {process.returncode} {now - killed:.1f} s after the kill, {now - started:.0f} s in all; "
          f"{len(updates)} rows, each update once: {len(updates) == len(set(updates))}", flush=True)


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[2] not in ("one", "all"):
        raise SystemExit(__doc__)
    main(Path(sys.argv[1]), sys.argv[2], sys.argv[3:])
