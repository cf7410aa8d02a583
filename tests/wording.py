"""What the pages' hand-written sentences say about the claims, checked against the committed verdicts.

:func:`verdict_word_problems` reads every hand-written page of a checkout (``README.md``, ``docs/**/*.md`` except the
generated results pages, whose hand-written parts are the ``results/discussion/*.md`` files it reads instead, and the
tutorials' markdown cells), splits it into sentences, and reports each sentence that uses a verdict word
(:data:`VERDICT_WORDS`) of a claim whose committed final verdict differs, or of no pre-registered primary at all
without saying "exploratory" in the same sentence. The committed verdicts are computed from the checkout's own
``summary.json`` and ``fisher.json`` files (:mod:`flashsim.experiments.summaries`: Holm over each page's family).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from flashsim.experiments.pages import PAGES
from flashsim.experiments.references import Stores, render_references
from flashsim.experiments.summaries import finalized_collapse, load_family

DECIDED = {"supported", "not supported", "negligible", "smaller than claimed"}
UNDECIDED = {"inconclusive", "no difference shown"}
VERDICT_WORDS = (
    ("not supported", {"not supported"}), ("smaller than claimed", {"smaller than claimed"}),
    ("not decided", UNDECIDED), ("undecided", UNDECIDED), ("inconclusive", UNDECIDED),
    ("no difference shown", UNDECIDED), ("supported", {"supported"}), ("negligible", {"negligible"}),
    ("decided", DECIDED),
    ("confirmed", {"supported"}), ("confirms", {"supported"}), ("confirm", {"supported"}),
    ("replicated", {"supported"}), ("replicates", {"supported"}), ("holds up", {"supported"}),
    ("beats", DECIDED), ("beat", DECIDED), ("outperforms", DECIDED), ("outperformed", DECIDED),
    ("recovers", set()), ("reverses", {"not supported"}), ("never collapses", set()), ("nothing collapses", set()),
    ("never abandons", set()), ("abandons the tool", set()), ("did not recur", set()),
)
"""Verdict words, in any wording (the rule's own, "confirmed", "beats" ...), and the committed verdicts each may be used
of; an empty set: of no primary (a mechanism or a universal that no test decided), so only in a sentence that says
"exploratory"."""
OUTCOME_VERB = re.compile(
    r"\b(?:C[1-9]\w*|the toys?|the full budget|this run|the transformer|the replication)\b[^.;:]{0,40}?"
    r"\b(?P<verb>shows|showed|finds|found|holds|held|supports|supported|establishes|established|proves|proved)\b"
    r"(?! (?:no|not|nothing|neither)\b)")
"""A claim's outcome said with a verb ("C3 shows ...", "the full budget finds ..."): only of a claim whose committed
verdict decided something (not inconclusive), unless the sentence says "exploratory"."""
NEGATION = re.compile(r"\b(?:not|no|never|neither|nor|nothing|cannot|does not|did not)\b")

CLAIM = re.compile(r"\b(C[1-9](?:collapse|size|mech)?)\b")
FAMILY_WORDS = {"quick": ("quick", "the toys", "toy page"),
                "full": ("full budget", "full-budget", "the toys", "toy page"),
                "transformer": ("transformer",), "follow-ups": ("follow-up", "at the claimed size")}
RESULT_CONTEXT = ("grpo", "flashreinforce", "gate", "positive-only", "signed", "sample-mean", "token-mean", "tool",
                  "lag", "verdict", "rollouts", "toys", "transformer", "the paper", "the article", "replication")
"""Outside the results pages a sentence that names no claim is checked only when it speaks of these."""
OUTCOMES = ("supported", "not supported", "negligible", "inconclusive", "smaller than claimed", "at the ceiling")
HYPOTHETICAL = ("whether", "predict", "collapses when", "under the rule")
"""Questions, predictions and statements of the rule itself, not of a result."""
HISTORY = ("earlier run", "issue 19's rule", "would have been", "was *", "was **", "were *", "old page")
"""A sentence that reports a verdict of an earlier run or rule (not committed here) is history, not checked."""


def committed_verdicts(root: Path) -> dict[str, dict[str, tuple[str, str]]]:
    """``{family: {claim: (final verdict, rule's verdict before Holm)}}`` from the checkout's stores."""
    verdicts: dict[str, dict[str, tuple[str, str]]] = {}
    for page in PAGES:
        stores = root / page.path.replace("results.md", "results")
        if not stores.exists():
            continue
        family = verdicts.setdefault(page.family, {})
        for summary in load_family(stores, page.claims, page.family):
            family[summary["claim"]] = (summary["primary"]["verdict"], summary["primary"]["rule_verdict"])
        for claim, _ in page.experiments:
            if not (stores / claim / "fisher.json").exists():
                continue
            fisher = json.loads((stores / claim / "fisher.json").read_text())
            primary = finalized_collapse(json.loads((stores / claim / "summary.json").read_text()), fisher)["primary"]
            before = primary["verdict"] if "fisher" in primary else primary["rule_verdict"]
            family[claim] = (primary["verdict"], before)
    return verdicts


def hand_written_texts(root: Path) -> dict[str, str]:
    """``{path: text}`` of every hand-written page: README, docs (not the generated pages; the discussions with their
    references rendered), tutorials' markdown."""
    texts = {"README.md": (root / "README.md").read_text()}
    stores = Stores(root)
    for path in sorted((root / "docs").rglob("*.md")):
        text = path.read_text()
        if path.parent.name == "discussion":
            text = render_references(text, stores)  # as the page prints it: references to the stores resolved
        if path.parent.parent.name == "results" and path.parent.name != "discussion":
            continue  # a claim's generated table.md or probes.md
        if "<!-- Generated by flashsim." not in text:  # write_report's pages, C1 tuned's (c1_tuned_page)
            texts[str(path.relative_to(root))] = text
    for path in sorted((root / "tutorials").glob("*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        texts[str(path.relative_to(root))] = "\n\n".join(
            "".join(cell["source"]) for cell in cells if cell["cell_type"] == "markdown")
    return texts


def sentences(text: str) -> list[str]:
    """Prose sentences: code blocks dropped, each list item and table row on its own, split at sentence ends."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    out, caption = [], ""
    for block in re.split(r"\n\s*\n|\n(?=\s*(?:[-*] |\d+\. |\|))", text):
        block = " ".join(block.split())
        if block.startswith("|"):  # a table row: exploratory where its caption or header says so
            caption += " " + block if "---" not in block and "exploratory" in block.lower() else ""
            out.append(block + (" (exploratory)" if "exploratory" in caption.lower() else ""))
            continue
        caption = block
        out += [s for s in re.split(r"(?<=[.!?;])\s+(?=[A-Z*(\[_`])", block) if s]
    return out


def page_family(path: str) -> str | None:
    for page in PAGES:
        if path.startswith(page.path.replace("results.md", "results/")):
            return page.family
    return None


def verdict_word_problems(root: Path | str) -> list[str]:
    """``path: «sentence» — why`` for every sentence that uses a verdict word wrongly (see the module)."""
    root = Path(root)
    verdicts, settings = committed_verdicts(root), committed_settings(root)
    return [problem for path, text in hand_written_texts(root).items()
            for problem in text_problems(path, text, verdicts, settings)]


def text_problems(path: str, text: str, verdicts: dict, settings: dict | None = None) -> list[str]:
    """The problems of one page's ``text`` at ``path`` (relative to the checkout) against ``verdicts`` (and, to
    tell a setting-level verdict from the claim's, ``settings``: :func:`committed_settings`)."""
    home = page_family(path)
    default = Path(path).stem if home and CLAIM.fullmatch(Path(path).stem) else None
    problems = []
    for sentence in sentences(text):
        why = _sentence_problem(sentence, home, default, verdicts, settings)
        if why:
            problems.append(f"{path}: «{sentence}» — {why}")
    return problems


ALIASES = {"[C1 at the claimed size]": "[C1size]", "C1 at the claimed size": "C1size"}
"""Names of the follow-up designs as the pages write them."""


def _clause(text: str, at: int) -> str:
    """The clause of ``text`` around position ``at`` (between ; , : — and ' and ')."""
    bounds = [0, *[m.end() for m in re.finditer(r"[;,:—]| and ", text)], len(text)]
    start = max(b for b in bounds if b <= at)
    stop = min(b for b in bounds if b > at)
    return text[start:stop]


OUTCOME_WORDS = {"confirmed", "confirms", "confirm", "replicated", "replicates", "holds up", "beats", "beat",
                 "outperforms", "outperformed"}


def _segment(sentence: str, at: int) -> str:
    """The part of ``sentence`` around ``at`` between semicolons: where a setting the word speaks of is named."""
    start = sentence.rfind(";", 0, at) + 1
    stop = sentence.find(";", at)
    return sentence[start:stop if stop >= 0 else len(sentence)]


def _negated(text: str, at: int) -> bool:
    """Whether a negation stands just before position ``at`` ("not replicated", "does not beat")."""
    return bool(NEGATION.search(text[max(0, at - 12):at]))


def _non_headline_setting(sentence: str, claim: str, home: str | None, settings: dict) -> str:
    """The setting of ``claim`` other than its headline that ``sentence`` names ("L = 0", "σ = 0"), or ''."""
    for family in [home] if home in settings else list(settings):
        headline, labels = settings[family].get(claim, ("", {}))
        parts = set(labels.get(headline, "").split(", "))
        for name, label in labels.items():
            for part in label.split(", "):
                setting = re.search(r"[^\s,]+\s*=\s*[^\s,]+", part)
                if name == headline or part in parts or setting is None:
                    continue
                part = setting.group()
                value = re.escape(part).replace(r"\ ", r"\s*")
                if re.search(value.removesuffix(r"\.0") + r"(?:\.0)?(?![\d.])", sentence):
                    return part
    return ""


def committed_settings(root: Path) -> dict[str, dict[str, tuple[str, dict[str, str]]]]:
    """``{family: {claim: (headline setting, {setting: label})}}`` from the checkout's stores."""
    settings: dict[str, dict[str, tuple[str, dict[str, str]]]] = {}
    for page in PAGES:
        stores = root / page.path.replace("results.md", "results")
        for claim in page.claims:
            if (stores / claim / "summary.json").exists():
                summary = json.loads((stores / claim / "summary.json").read_text())
                settings.setdefault(page.family, {})[claim] = (
                    summary["headline"], {knob["name"]: knob["label"] for knob in summary["knob"]})
    return settings


def _sentence_problem(sentence: str, home: str | None, default: str | None, verdicts: dict,
                      settings: dict | None = None) -> str:
    settings = settings or {}
    lower = sentence.lower()
    if "exploratory" in lower or any(mark in lower for mark in (*HISTORY, *HYPOTHETICAL)):
        return ""
    if sum(bool(re.search(rf"(?<!not )\b{o}\b", lower)) for o in OUTCOMES) >= 3:
        return ""  # the rule's definition, listing the outcomes
    used, rest = [], lower
    for match in OUTCOME_VERB.finditer(lower):
        if not _negated(lower, match.start("verb")) and not lower[:match.start()].endswith("what "):
            used.append((match["verb"], DECIDED, _clause(lower, match.start("verb")),
                         _segment(sentence, match.start("verb"))))
    for word, allowed in VERDICT_WORDS:
        for match in re.finditer(rf"\b{re.escape(word)}\b", rest):
            clause = _clause(rest, match.start())
            if word in OUTCOME_WORDS and (_negated(rest, match.start()) or re.search(r"article|paper", clause)):
                continue  # "not replicated" decides nothing; the article's own result is an attribution
            used.append((word, allowed, clause, _segment(sentence, match.start())))
        rest = re.sub(rf"\b{re.escape(word)}\b", lambda m: "_" * len(m.group()), rest)
    if not used:
        return ""
    for alias, claim in ALIASES.items():
        sentence = sentence.replace(alias, claim)
    claims = list(dict.fromkeys(CLAIM.findall(sentence))) or ([default] if default else [])
    if not claims:
        used = [use for use in used if use[0] not in OUTCOME_WORDS | {"reverses"}]  # of a claim only when one is named
        if not used or home is None and not any(word in lower for word in RESULT_CONTEXT):
            return ""
        return f"verdict word {used[0][0]!r} of no named pre-registered primary (say 'exploratory' or name the claim)"
    named = [family for family, words in FAMILY_WORDS.items() if any(w in lower for w in words)]
    before_holm = "before holm" in lower or "rule's outcome" in lower
    for word, _, _, segment in used:
        for claim in claims:
            setting = _non_headline_setting(segment, claim, home, settings)
            if setting:
                return (f"{word!r} of {claim} at {setting}, a setting other than the headline, whose verdict is "
                        "exploratory: say 'exploratory' (a reference to its verdict renders it so)")
    for word, allowed, clause, _ in used:
        here = [family for family, words in FAMILY_WORDS.items() if any(w in clause for w in words)]
        families = here or named or ([home] if home else list(verdicts))
        found = set()
        for claim in claims:
            where = [f for f in families if claim in verdicts.get(f, {})] or [
                f for f in verdicts if claim in verdicts[f]]
            found |= {v for f in where for v in (verdicts[f][claim] if before_holm else verdicts[f][claim][:1])}
        if not found:
            return f"{word!r} of {', '.join(claims)}, which no page decides"
        if not allowed or not (found & allowed if before_holm else found <= allowed):
            return f"{word!r} of {', '.join(claims)}, whose committed verdict is {', '.join(sorted(found))}"
    return ""
