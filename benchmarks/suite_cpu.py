"""Where the test suite's CPU goes, counted system-wide: every process the run starts, Ray's included.

``/usr/bin/time python -m pytest`` counts only the processes its tree waits for. Ray's daemons and workers, and
processes orphaned by a test's SIGKILL, are reaped by someone else, so it reported 1.5 cores busy on a machine
whose two cores were in fact busy the whole run. This script runs the test command while it reads ``/proc`` every
``--interval`` seconds: each process's CPU seconds (user + system), its command line, and the test that started
it (``$PYTEST_CURRENT_TEST`` in its environment, which pytest sets while a test runs and every child inherits;
Ray's workers and daemons inherit it from the process that started their cluster). It prints the run's wall
time, the cores busy machine-wide, the CPU seconds by test module and by kind of process, and writes them as
JSON. A process that lives less than one interval, and the last interval of each process, are not seen: the
machine-wide figure (``/proc/stat``) is the whole truth, the per-process table a lower bound.

Usage (from the repository root, on an otherwise idle machine)::

    python benchmarks/suite_cpu.py --out suite_cpu.json -- -q --durations=10
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

KINDS = (  # (kind, a substring of the command line), first match wins
    ("Ray worker (engine actors)", "default_worker.py"),
    ("Ray daemon", "/ray/"),
    ("notebook kernel", "ipykernel"),
    ("torchrun launcher", "torch.distributed.run"),
    ("python -m scale", "-m scale"),
    ("chaos soak worker", "chaos_soak.py"),
    ("multiprocessing child", "multiprocessing"),
    ("flashsim CLI", "-m flashsim"),
)


def kind(command: str) -> str:
    """The kind of process ``command`` is: a row of :data:`KINDS`, else ``other``."""
    return next((name for name, part in KINDS if part in command), "other")


def machine_busy() -> tuple[int, int]:
    """(busy, total) clock ticks of all cores since boot, from ``/proc/stat``."""
    with open("/proc/stat") as stat:
        ticks = [int(x) for x in stat.readline().split()[1:]]
    idle = ticks[3] + ticks[4]  # idle and iowait
    return sum(ticks) - idle, sum(ticks)


def cpu_reading(pid: str) -> tuple[tuple[str, int], float, int] | None:
    """``((pid, start tick), CPU seconds, parent pid)`` of a live process, or None when it is gone. The start tick
    tells a process from a later one that got the same pid."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None
    return (pid, int(fields[19])), (int(fields[11]) + int(fields[12])) / CLOCK_TICKS, int(fields[1])  # utime + stime


def describe(pid: str) -> dict | None:
    """A process's command line and the test that started it (read once: neither changes after the start)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            command = cmdline.read().replace(b"\0", b" ").decode(errors="replace").strip()
        with open(f"/proc/{pid}/environ", "rb") as environ:
            test = next((item.split(b"=", 1)[1].decode(errors="replace") for item in environ.read().split(b"\0")
                         if item.startswith(b"PYTEST_CURRENT_TEST=")), None)
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return {"command": command[:300], "test": test}


def live_pids() -> list[str]:
    return [pid for pid in os.listdir("/proc") if pid.isdigit()]


class ProcessWatch(threading.Thread):
    """Reads every process's CPU in ``/proc`` each ``interval`` seconds until :meth:`stop`; keeps the last
    reading of each, with its command line and test from the first."""

    def __init__(self, interval: float) -> None:
        super().__init__(daemon=True)
        self.interval, self.seen, self._stopped = interval, {}, threading.Event()
        self.before = {reading[0] for pid in live_pids() if (reading := cpu_reading(pid))}  # not the suite's

    def run(self) -> None:
        while not self._stopped.is_set():
            for pid in live_pids():
                reading = cpu_reading(pid)
                if reading is None or reading[0] in self.before:
                    continue
                key, cpu, ppid = reading
                if key not in self.seen:
                    if (about := describe(pid)) is None:
                        continue
                    self.seen[key] = {"ppid": ppid, **about}
                self.seen[key]["cpu_s"] = cpu
            self._stopped.wait(self.interval)

    def stop(self) -> None:
        self._stopped.set()
        self.join()


def summarize(processes: list[dict], pytest_pid: int) -> dict:
    """CPU seconds by test module and by kind of process; ``processes`` as :class:`ProcessWatch` keeps them."""
    workers = {p["pid"] for p in processes if p["ppid"] == pytest_pid}
    by_module, by_kind = defaultdict(float), defaultdict(lambda: [0, 0.0])
    for p in processes:
        role = ("pytest (collection, scheduling)" if p["pid"] == pytest_pid
                else "pytest worker (in-process tests)" if p["pid"] in workers else None)
        row = by_kind[role or kind(p["command"])]
        row[0] += 1
        row[1] += p["cpu_s"]
        if role is None:
            by_module[p["test"].split("::")[0] if p["test"] else "(no test: session set-up)"] += p["cpu_s"]
    return {"by_module": dict(sorted(by_module.items(), key=lambda kv: -kv[1])),
            "by_kind": {k: {"processes": n, "cpu_s": s} for k, (n, s) in sorted(by_kind.items(),
                                                                                key=lambda kv: -kv[1][1])}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("suite_cpu.json"), help="where the JSON goes")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between two readings of /proc")
    parser.add_argument("pytest_args", nargs="*", help="arguments for pytest (after --)")
    args = parser.parse_args(argv)
    if args.interval <= 0:
        parser.error(f"--interval must be positive; got {args.interval}")

    watch = ProcessWatch(args.interval)
    busy0, total0 = machine_busy()
    started = time.monotonic()
    watch.start()
    suite = subprocess.Popen([sys.executable, "-m", "pytest", *args.pytest_args])
    _, status, usage = os.wait4(suite.pid, 0)
    wall = time.monotonic() - started
    watch.stop()
    busy1, total1 = machine_busy()

    processes = [{"pid": int(pid), **record} for (pid, _), record in watch.seen.items()]
    cores = os.cpu_count() or 1
    report = {
        "command": ["python", "-m", "pytest", *args.pytest_args], "exit": os.waitstatus_to_exitcode(status),
        "wall_s": wall, "cores": cores,
        "machine_cpu_s": (busy1 - busy0) / CLOCK_TICKS,
        "machine_busy_cores": cores * (busy1 - busy0) / max(total1 - total0, 1),
        "reaped_tree_cpu_s": usage.ru_utime + usage.ru_stime,  # what /usr/bin/time would report
        "processes_seen": len(processes), "seen_cpu_s": sum(p["cpu_s"] for p in processes),
        **summarize(processes, suite.pid),
    }
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"\nwall {wall:.0f} s; machine {report['machine_cpu_s']:.0f} CPU-s ({report['machine_busy_cores']:.2f} of "
          f"{cores} cores busy); the reaped tree {report['reaped_tree_cpu_s']:.0f} CPU-s; {len(processes)} processes "
          f"seen, {report['seen_cpu_s']:.0f} CPU-s")
    print("\nCPU-s by kind of process:")
    for name, row in report["by_kind"].items():
        print(f"  {row['cpu_s']:7.1f}  {row['processes']:4d}  {name}")
    print("\nCPU-s by test module (processes a test started, their descendants and clusters):")
    for module, seconds in list(report["by_module"].items())[:20]:
        print(f"  {seconds:7.1f}  {module}")
    print(f"\n{args.out}")
    return report["exit"]


if __name__ == "__main__":
    sys.exit(main())
