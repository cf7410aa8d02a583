"""``flashsim conformance``: every adapter's loss under :func:`~flashsim.testing.check_loss`, written as a page.

The rows are flashsim's own registry losses first, then every variant of every framework adapter
(:mod:`flashsim.testing.adapters`); a framework that is not installed is listed as not run. Each row is
judged by what it declares (:mod:`flashsim.testing.declared`), and where its framework documents a
departure from an invariant, by that documentation (the cell reads ``documented``). For every failure the
page gives its class (reachable, outside the pipeline, documented: :mod:`flashsim.testing.causes`), the
line that causes it and the line that shows its class, what it means for a user, the shrunk
counterexample and the one command that reruns that cell (``flashsim conformance --row KEY --invariant
NAME``). Every row draws from its own seed (the CRC-32 of its key), so a cell's result does not depend on
what ran before it. Framework rows run once more with float32 inputs, the dtype their pipelines feed,
on the invariants where float32 arithmetic can change the verdict (:data:`FLOAT32_INVARIANTS`).
"""

from __future__ import annotations

import datetime
import importlib
import re
import shlex
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from flashsim.losses import LOSSES
from flashsim.testing.adapters import FRAMEWORKS, FrameworkMissing, installed_version, row_key, variants
from flashsim.testing.causes import CAUSES, SEVERITIES, Cause, cause_of, classify, locate
from flashsim.testing.check import check_loss
from flashsim.testing.paste import counterexample_code
from flashsim.testing.report import InvariantResult, LossReport


@dataclass(frozen=True)
class RegistryRow:
    """A :data:`flashsim.losses.LOSSES` row with what it declares (the registry's own rows open the table)."""

    name: str
    algorithm: str
    aggregation: str
    estimator: str

    @property
    def report_name(self) -> str:
        return f"flashsim: {self.name}"

    @property
    def key(self) -> str:
        return row_key("flashsim", self.name)

    def __call__(self, log_probs, behavior_log_probs, rewards, action_mask, group_ids=None, **options):
        return LOSSES[self.name](log_probs, behavior_log_probs, rewards, action_mask, group_ids, **options)


REGISTRY_ROWS = (
    RegistryRow("flash_reinforce", "flash_reinforce", "sample_mean", "batch_mean"),
    RegistryRow("grpo", "grpo", "token_mean", "group_mean_std"),
    RegistryRow("dr_grpo", "grpo", "seq_mean_token_sum_norm", "group_mean"),
    RegistryRow("ppo_clip", "grpo", "sample_mean", "batch_mean"),
)


FLOAT32_INVARIANTS = ("on_policy_gradient", "constant_rewards", "batch_advantages", "shards")
"""The invariants a row is also run on with float32 inputs: those that compare values a float32 pipeline must
still get right to its own rounding (a constant group's advantages, a sum over shards). ``precision`` is bf16
against float64 in any case; ``advantage_baseline`` is left out because float32 itself cannot keep it (rewards
1e-5 apart shifted by 0.5 lose their difference's low bits before any loss code runs); the others test
structure that does not depend on the dtype."""


@dataclass(frozen=True)
class Row:
    framework: str
    version: str | None
    variant: str
    declared: str
    report: LossReport | None
    note: str = ""
    key: str = ""
    """``flashsim conformance --row KEY``."""
    float32: LossReport | None = None
    """:data:`FLOAT32_INVARIANTS` with float32 inputs (framework and registry rows alike)."""


def seed_of(key: str) -> int:
    """The row's own seed: the CRC-32 of its key."""
    return zlib.crc32(key.encode())


def candidates(frameworks: Sequence[str] = tuple(FRAMEWORKS)) -> list:
    """Every row's loss (a registry row or an adapter) in table order: flashsim's registry rows, then each
    framework's ``variants()`` (one entry per row: a new variant is a new row)."""
    rows = list(REGISTRY_ROWS)
    for framework in frameworks:
        rows += variants(framework)
    return rows


def find_row(key: str, frameworks: Sequence[str] = tuple(FRAMEWORKS)):
    """The loss of the row called ``key`` (its key, or ``framework:variant`` as the table spells it)."""
    rows = candidates(frameworks)
    for row in rows:
        if key in (row.key, f"{getattr(row, 'framework', 'flashsim').lower()}:{getattr(row, 'variant', '')}"):
            return row
    raise ValueError(f"--row {key!r} is not a row; valid: {', '.join(row.key for row in rows)}")


def check_row(loss, *, max_examples: int, invariants: Sequence[str] | None = None,
              dtype: torch.dtype = torch.float64) -> LossReport:
    """``check_loss`` of one row with its own seed (the page's cell and ``--row`` give the same result)."""
    names = invariants
    if dtype == torch.float32:
        names = [name for name in (invariants or FLOAT32_INVARIANTS) if name in FLOAT32_INVARIANTS]
    return check_loss(loss, max_examples=max_examples, invariants=names, seed=seed_of(loss.key), dtype=dtype)


def run_rows(frameworks: Sequence[str] = tuple(FRAMEWORKS), *, max_examples: int = 40, float32: bool = True,
             progress: Callable[[str], None] = lambda line: None) -> list[Row]:
    """Every registry row and every variant of every framework in ``frameworks`` (uninstalled ones: not run)."""
    rows = []
    for loss in candidates(frameworks):
        framework = getattr(loss, "framework", "flashsim")
        distribution = getattr(loss, "distribution", "flashsim")
        variant = getattr(loss, "variant", getattr(loss, "name", ""))
        version = installed_version(distribution)
        if version is None:
            rows.append(Row(framework, None, variant, "", None, f"not run: {distribution} is not installed", loss.key))
            continue
        try:
            report = check_row(loss, max_examples=max_examples)
            low = check_row(loss, max_examples=max_examples, dtype=torch.float32) if float32 else None
        except FrameworkMissing as error:
            rows.append(Row(framework, version, variant, "", None, f"not run: {error}", loss.key))
            continue
        rows.append(Row(framework, version, variant, report.declared, report, key=loss.key, float32=low))
        failing = len(report.failures) + (len(low.failures) if low else 0)
        progress(f"{framework} {variant}: {failing} failure(s)")
    return rows


@dataclass(frozen=True)
class Finding:
    """One failing (or documented) cell: the row, the result, the dtype it ran at, its recorded cause."""

    row: Row
    result: InvariantResult
    dtype: str
    cause: Cause | None

    @property
    def severity(self) -> str:
        """The cause's class, checked against the cell's dtype and size (:func:`~flashsim.testing.causes.classify`);
        a failure without a recorded cause counts as reachable until one is recorded."""
        if self.cause is None:
            return "reachable"
        return classify(self.cause, self.dtype, error_of(self.result.message) if self.result.failed else None)

    @property
    def command(self) -> str:
        dtype = " --dtype float32" if self.dtype == "float32" else ""
        return f"flashsim conformance --row {shlex.quote(self.row.key)} --invariant {self.result.name}{dtype}"


def findings(rows: Sequence[Row]) -> list[Finding]:
    """Every failing or documented cell, float64 first then float32 per row."""
    found = []
    for row in rows:
        for dtype, report in (("float64", row.report), ("float32", row.float32)):
            for result in report.results if report else ():
                if result.status in ("FAILS", "documented"):
                    cause = cause_of(row.framework, result.name, row.variant, dtype)
                    found.append(Finding(row, result, dtype, cause))
    return found


def error_of(message: str) -> float | None:
    """The failure's size, ``max |got − expected|`` in an invariant's message (None: not a size, e.g. non-finite)."""
    found = re.search(r"= ([0-9.e+-]+) >", message)
    return float(found.group(1)) if found else None


def _error(message: str) -> str:
    found = re.search(r"= ([0-9.e+-]+) >", message)
    if found:
        return found.group(1)
    return "non-finite" if "non-finite" in message else "error"


MARKS = {"reachable": "✗ **{name}** reachable", "outside": "○ {name} *outside the pipeline*",
         "documented": "≈ {name} *documented*"}
"""How a cell of each class reads in the table: its own sign (✗ reachable, ○ outside the pipeline, ≈ documented),
so the classes part at a glance and not only by typeface."""

LABELS = {"reachable": "✗ **reachable**", "outside": "○ *outside the pipeline*", "documented": "≈ *documented*"}
"""A class's name with its sign, as the headline and the list of causes write it."""

LEGEND = ("Marks: ✗ **reachable** (the framework's own pipeline feeds the inputs that trigger it), ○ *outside the "
          "pipeline* (it needs inputs the pipeline never feeds), ≈ *documented* (the framework says it does this), "
          "✓ holds.")


def _summary(row: Row, dtype: str) -> str:
    """The cell of ``row``'s ``dtype`` column: each failing or documented invariant with its class's mark."""
    report = row.report if dtype == "float64" else row.float32
    if report is None:
        return "–"
    marked = [MARKS[cell.severity].format(name=f"`{cell.result.name}`") + f" {_error(cell.result.message)}"
              if cell.result.failed else MARKS["documented"].format(name=f"`{cell.result.name}`")
              for cell in findings([row]) if cell.dtype == dtype]
    held = sum(result.status == "holds" for result in report.results)
    return "; ".join([*marked, f"✓ {held} hold"]) if marked else f"✓ all {held} hold"


def _short_declared(declared: str) -> str:
    return declared.replace("aggregation ", "").replace("estimator ", "")


def headline(rows: Sequence[Row]) -> tuple[list[str], dict[str, dict[str, list[Finding]]]]:
    """Causes counted by class (a cause shared by many rows counts once), and the findings of each cause by class."""
    found = findings(rows)
    by_class: dict[str, dict[str, list[Finding]]] = {severity: {} for severity in SEVERITIES}
    for cell in found:
        title = cell.cause.title if cell.cause else f"not located: {cell.row.framework} {cell.result.name}"
        by_class[cell.severity].setdefault(title, []).append(cell)
    counts = ", ".join(f"{len(titles)} {LABELS[severity]}" for severity, titles in by_class.items())
    total = sum(len(titles) for titles in by_class.values())
    reachable = [members[0].cause for members in by_class["reachable"].values()]
    drafted = sum(bool(cause and cause.draft) for cause in reachable)
    ran = sum(r.report is not None for r in rows)
    lines = [f"**{plural(total, 'cause')}**: {counts} ({plural(len(found), 'cell')} of {plural(ran, 'row')} "
             f"{'shows' if len(found) == 1 else 'show'} {'it' if total == 1 else 'them'}). "
             f"{drafts_sentence(len(reachable), drafted)}", "", LEGEND, ""]
    return lines, by_class


def plural(count: int, noun: str) -> str:
    """``count`` and ``noun``, with an s unless ``count`` is 1."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def drafts_sentence(reachable: int, drafted: int) -> str:
    """The headline's sentence on how many of the ``reachable`` causes have a drafted upstream issue (``drafted``),
    in agreement with both counts."""
    upstream = ("a drafted upstream issue with a reproducer that runs the framework's own code ([upstream reports]"
                "(upstream/README.md))")
    rest = reachable - drafted
    if reachable == 0:
        return "No cause is reachable."
    if reachable == 1:
        return (f"The reachable cause has {upstream}." if drafted else
                "The reachable cause has no drafted upstream issue; its section says why.")
    if drafted == reachable:
        return f"All {reachable} reachable causes have {upstream}."
    if drafted == 0:
        return f"None of the {reachable} reachable causes has a drafted upstream issue; each section says why."
    others = "the other one says under its section why it has none" if rest == 1 else \
        f"each of the other {rest} says under its section why it has none"
    return f"Of the {reachable} reachable causes, {drafted} {'has' if drafted == 1 else 'have'} {upstream}; {others}."


def _by_class(by_class: dict[str, dict[str, list[Finding]]]) -> list[str]:
    """Every cause under its class, with the rows that show it."""
    lines = ["## Causes by class", ""]
    for severity in SEVERITIES:
        for title, members in by_class[severity].items():
            where = ", ".join(sorted({f"{c.row.framework} {c.row.variant}" + (" (float32)" if c.dtype == "float32"
                                                                              else "") for c in members}))
            lines.append(f"- {LABELS[severity]}: [{title}](#{_anchor(title)}): {where}")
    return [*lines, ""]


def _anchor(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")


def render(rows: Sequence[Row], *, max_examples: int, command: str) -> str:
    """The markdown page: headline, one line per row, then one section per cause with every cell it explains."""
    counts, by_class = headline(rows)
    lines = [
        "# Conformance: the field's GRPO and FlashREINFORCE losses under `check-loss`",
        "",
        f"Generated by `{command}` on {datetime.date.today().isoformat()} ({max_examples} hypothesis examples "
        "per invariant, each row from its own seed). Do not edit by hand: regenerate it. How each framework is "
        "installed and called, and which invariants test the adapter rather than the framework: [Verify anyone's "
        "loss](verify.md#the-frameworks-adapters). Under every failure, `rerun` gives the command that reruns that "
        "cell alone: it prints the cell's class, cause and minimal counterexample and, for a framework's row, "
        "Python that raises the failure's `AssertionError` when pasted, without flashsim (the framework's own "
        "calls, one per call the check makes, and the check's comparison with its tolerance).",
        "",
        *counts,
        "Each row is judged against the aggregation and advantage estimator it *declares* (the framework's "
        "documentation of that variant). Where a framework documents a departure from an invariant (verl's "
        "singleton groups, TRL's bnpo normalisation) the row is checked against the documented behaviour and the "
        "cell reads *documented*; every other failure is a departure from the row's own declaration, not a "
        "difference of convention. The float64 column runs every invariant with float64 inputs (`precision`: "
        "bf16 against float64); the float32 column reruns "
        + ", ".join(f"`{name}`" for name in FLOAT32_INVARIANTS)
        + " with float32 inputs, the dtype the frameworks' pipelines feed.",
        "",
        "| row | declared | float64 | float32 |",
        "|---|---|---|---|",
    ]
    for row in rows:
        head = f"| {' '.join(filter(None, (row.framework, row.version)))} · {row.variant} |"
        if row.report is None:
            lines.append(f"{head} {row.note} | | |")
            continue
        lines.append(f"{head} {_short_declared(row.declared)} | {_summary(row, 'float64')} | "
                     f"{_summary(row, 'float32')} |")
    lines += ["", *_by_class(by_class)]
    lines += _sections(rows)
    lines += ["## Pipeline steps the adapters leave out", "",
              "Each adapter runs the framework's loss and advantage code; these are the steps of the framework's "
              "default pipeline around them that it does not run, and why leaving them out cannot change a verdict "
              "(it can only change a class, and the class says so).", ""]
    for framework in FRAMEWORKS:
        module = importlib.import_module(f"flashsim.testing.adapters.{framework}")
        lines += [f"- {variants(framework)[0].framework}, {step}: {why}."
                  for step, why in getattr(module, "LEFT_OUT", {}).items()]
    lines += ["", "## Variants without a row", ""]
    for framework in FRAMEWORKS:
        module = importlib.import_module(f"flashsim.testing.adapters.{framework}")
        lines += [f"- {variants(framework)[0].framework} {names}: {why}."
                  for names, why in getattr(module, "NOT_IN_TABLE", {}).items()]
    lines.append("")
    not_run = [row for row in rows if row.report is None]
    if not_run:
        lines += ["## Not run", ""] + [f"- {row.framework} {row.variant}: {row.note}" for row in not_run] + [""]
    return "\n".join(lines).rstrip() + "\n"


def _sections(rows: Sequence[Row]) -> list[str]:
    """One section per cause (reachable first), each cell under it with its command and counterexample."""
    found = findings(rows)
    lines = ["", f"## Causes ({len(found)} cells)", ""]
    if not found:
        return [*lines, "None.", ""]
    order = {severity: index for index, severity in enumerate(SEVERITIES)}
    titles: dict[str, list[Finding]] = {}
    for cell in sorted(found, key=lambda c: order[c.severity]):
        titles.setdefault(cell.cause.title if cell.cause else f"not located: {cell.row.framework} "
                          f"{cell.result.name}", []).append(cell)
    for title, members in titles.items():
        cause = members[0].cause
        lines += [f"### {title}", "", f"**Class:** {LABELS[members[0].severity]}", ""]
        if cause:
            lines += [f"**Evidence:** `{locate(cause.evidence)}`: {cause.evidence.note}.", "",
                      f"**For users:** {cause.meaning}", ""]
            if cause.draft:
                lines += [f"**Upstream:** drafted issue [{cause.draft}](upstream/{cause.draft}).", ""]
            elif cause.no_draft:
                lines += [f"**Upstream:** no drafted issue: {cause.no_draft}", ""]
        for cell in members:
            where = locate(cell.cause.line) if cell.cause else "not located yet"
            dtype = " · float32" if cell.dtype == "float32" else ""
            lines += [f"**{cell.row.framework} {cell.row.version} · {cell.row.variant} · `{cell.result.name}`"
                      f"{dtype}**: cause `{where.strip('`')}`; rerun `{cell.command}`", ""]
            if cell.result.failed:
                lines += ["```text", cell.result.message, "minimal counterexample:", cell.result.counterexample,
                          "```", ""]
            else:
                lines += [f"Holds as documented: {cell.result.message}.", ""]
    return lines


def show_cell(loss, invariant: str | None, *, max_examples: int, dtype: torch.dtype) -> tuple[str, bool]:
    """What ``flashsim conformance --row KEY [--invariant NAME]`` prints (each result of the row, or the one
    cell, with its class, cause and counterexample), and whether any of them fails."""
    report = check_row(loss, max_examples=max_examples, invariants=[invariant] if invariant else None, dtype=dtype)
    framework = getattr(loss, "framework", "flashsim")
    variant = getattr(loss, "variant", getattr(loss, "name", ""))
    lines = [f"{framework} {variant} ({_short_declared(report.declared)}), {str(dtype).removeprefix('torch.')} "
             f"inputs, seed {seed_of(loss.key)}, {max_examples} examples:"]
    for result in report.results:
        lines.append(f"\n{result.name}: {result.status}")
        if result.status not in ("FAILS", "documented"):
            lines.append(f"  {result.message}" if result.message else "")
            continue
        name = str(dtype).removeprefix("torch.")
        cause = cause_of(framework, result.name, variant, name)
        if cause:
            severity = classify(cause, name, error_of(result.message) if result.failed else None)
            lines += [f"class: {SEVERITIES[severity]} ({locate(cause.evidence)}: {cause.evidence.note})",
                      f"cause: {locate(cause.line)}: {cause.meaning}"]
        lines.append(result.message)
        if result.failed:
            lines += ["minimal counterexample:", result.counterexample]
            code = counterexample_code(loss, result, dtype)
            if code:
                lines += [f"the counterexample as {framework}'s own code, with the check that fails (paste it into "
                          f"python; it raises AssertionError):", code, "(end of the code)"]
    return "\n".join(line for line in lines if line != ""), not report.passed


def uncaused(rows: Sequence[Row]) -> list[str]:
    """Failures with no :data:`~flashsim.testing.causes.CAUSES` entry (a page with any is incomplete)."""
    return [f"{cell.row.framework} {cell.row.variant} {cell.result.name} ({cell.dtype})" for cell in findings(rows)
            if cell.cause is None]


__all__ = ["CAUSES", "FLOAT32_INVARIANTS", "REGISTRY_ROWS", "Finding", "RegistryRow", "Row", "candidates", "cause_of",
           "check_row", "drafts_sentence", "find_row", "findings", "headline", "locate", "plural", "render",
           "run_rows", "seed_of", "show_cell", "uncaused"]
