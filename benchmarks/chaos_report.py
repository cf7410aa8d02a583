"""The chaos soak's report as docs/performance.md shows it (``python benchmarks/chaos_soak.py --markdown
chaos_report.json``): one row per fault, then a sentence made from the numbers."""

from __future__ import annotations

KINDS = ("engine", "learner", "group")
"""The faults the soak injects (benchmarks/chaos_soak.py): an engine actor, a learner rank, the whole job."""


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
              f"{_full_replay(c)} Verdict: {verdict}."]
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


def _full_replay(c: dict) -> str:
    """The whole-run replay (``--full-replay``), if it ran: for comparison, not part of the verdict."""
    f = c.get("full_replay")
    if not f:
        return ""
    return (f" Whole-run replay from the warmed-up weights (the former check, not part of the verdict): "
            f"max diff {f['max_abs_diff']:.1e}, tolerance {f['tolerance']:.1e} from a one-ulp nudge "
            f"({f['rounding_noise']:.1e}): {'would pass' if f['matches'] else 'would fail'}.")
