"""Sentences that attribute something to the article, checked against the article's text (``../shared/seeds/``) and
its committed table of numbers and phrases (``flashsim/experiments/article.json``).

A sentence attributes when the article or paper does something in it, in any verb ("the paper says", "finds",
"notes", "reported", "the article also shows"), when it names the article's setting, appendix, GRPO or baseline or
one of its numbers ("the article's 1.57×"), quotes it (``article: ...``), goes "according to" it, or cites it with a
year. Each such sentence must carry the article's own words in quotes or a number of the article, every quoted span
must be in the article's text, and every number of the attributing clause, in any notation (``128K``, ``45.3%``,
``3.75×``, ``4,000``), must stand in the article as that quantity: a row of the committed table holds its value, and
the clause names that row's quantity. A reading of the article that it does not state (the 2× of C1, the 1.57× of
C3, C7's pre-registered 2×) is attributed only with its label beside it ("flashsim's reading"); a setting the article
does not give says "flashsim's choice" or "the reference implementation's".

The article must be there: :data:`SEEDS` is ``../shared/seeds/`` beside the checkout (as CI has it), and the tests
that use it fail, not skip, where it is missing.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from flashsim.experiments.references import article_table
from tests.wording import hand_written_texts, sentences

SEEDS = next((parent / "shared" / "seeds" for parent in Path(__file__).resolve().parents
              if (parent / "shared" / "seeds").is_dir()), None)
"""The article's text: ``../shared/seeds/`` beside the checkout or above it (None where it is not there)."""
MISSING = ("the article's text is missing: put it at ../shared/seeds/*.txt beside the checkout (CI has it there); "
           "the attribution checks do not run without it")
ATTRIBUTION = re.compile(
    r"\b(?:the|this|its) (?:article|paper)(?: (?:also|itself|explicitly|only|never|even))? "
    r"(?!is\b|was\b|has\b|does\b|claims?\b(?= C\d))(?:\w+s|\w+ed|gave|wrote|said|set|put|made|found|shows?)\b"
    r"|\b(?:the|this|its) (?:article|paper)(?:'s|’s) (?:(?:setting|appendix|grpo|baseline|formula|recipe|numbers?|"
    r"headline|words)\b|(?!side\b|direction\b)(?:[\w-]+ ){0,3}\d)"
    r"|\baccording to (?:the|this) (?:article|paper)\b|\(nvidia, \d{4}\)|\barticle: ",
    re.I)
QUOTED = re.compile(r'"([^"]{3,}?)"|“([^”]{3,}?)”')
NUMBER = re.compile(r"(?<![\w.\-−/])(?P<digits>\d+(?:,\d{3})*(?:\.\d+)?)(?:\s?(?P<scale>[KM])\b)?"
                    r"(?P<mark>\s?%|\s?×|x\b)?(?![\w.]*\d)")
"""A number standing alone in any notation (``128K``, ``45.3%``, ``3.75×``, ``4,000``), not part of a name such as
Qwen2.5-Math-1.5B or a section number's "3."."""
OWN_CHOICE = ("flashsim's choice", "reference implementation", "not the article", "does not give", "gives no",
              "flashsim's reading", "flashsim's pre-registered", "not in the article", "the article leaves",
              "this package's choice")
QUANTITY_WORDS = re.compile(r"[a-z][a-z0-9]{3,}")


def normalize(text: str) -> str:
    return " ".join(text.replace("’", "'").replace("‘", "'").replace("“", '"').replace("”", '"').lower().split())


def seed_text(seeds: Path | None = SEEDS) -> str:
    """The article's text, normalized; ``ValueError`` where it is missing (the checks never pass without it)."""
    if seeds is None or not any(seeds.glob("*.txt")):
        raise ValueError(MISSING)
    return normalize("\n".join(path.read_text() for path in sorted(seeds.glob("*.txt"))))


def value_of(match: re.Match) -> float:
    """A :data:`NUMBER` match's value: ``128K`` is 128000, ``45.3%`` is 45.3, ``3.75×`` is 3.75."""
    value = float(match["digits"].replace(",", ""))
    return value * {"K": 1e3, "M": 1e6}.get(match["scale"] or "", 1)


ARMS = ("token-mean", "sample-mean", "grpo", "flashreinforce", "positive-only", "signed", "token-local",
        "sequence-level", "fresh batch", "minibatches")
"""What a number of the article can be of: a clause that gives a number to one of these must give it to the one the
article's sentence gives it to."""


def _arms(text: str) -> set[str]:
    return {arm for arm in ARMS if arm in text.lower()}


def article_quantities() -> list[tuple[float, set[str], set[str]]]:
    """Per row of the article's table that holds a number: its value, the words naming its quantity, and the arms its
    sentence names."""
    rows = []
    for row in article_table()["quotes"]:
        if "value" in row:
            words = set(QUANTITY_WORDS.findall((row["quantity"] + " " + row["quote"]).lower()))
            rows.append((float(row["value"]), words, _arms(row["sentence"])))
    return rows


def readings() -> list[tuple[float, str]]:
    """The readings of the article that it does not state: (value, the label a page prints beside it)."""
    return [(float(row["value"]), row["reading"]) for row in article_table()["readings"]]


def attribution_problems(root: Path | str, seeds: Path | None = SEEDS) -> list[str]:
    """``path: «sentence» — why`` for every attributing sentence without the article's words or number."""
    article = seed_text(seeds)
    return [problem for path, text in hand_written_texts(Path(root)).items()
            for problem in text_attribution_problems(path, text, article)]


def text_attribution_problems(path: str, text: str, article: str) -> list[str]:
    """The attribution problems of one page's ``text`` against the article's normalized text."""
    problems = []
    for sentence in sentences(text):
        why = _problem(sentence, article)
        if why:
            problems.append(f"{path}: «{sentence}» — {why}")
    return problems


ABSENCE = re.compile(r"\b(?:article|paper)(?:'s)? (?:also |itself )?\w+ (?:no|none|not)\b", re.I)
"""A statement of what the article does not give ("the article offers no explanation"): nothing to quote."""


def _problem(sentence: str, article: str) -> str:
    if not ATTRIBUTION.search(sentence) or ABSENCE.search(sentence[ATTRIBUTION.search(sentence).start():]):
        return ""
    quotes = [a or b for a, b in QUOTED.findall(sentence)]
    missing = [q for q in quotes if normalize(q) not in article]
    if missing:
        return f"not in the article: {missing}"
    lower = sentence.lower()
    clause = _attributed_part(sentence)
    unlabelled = [m.group().strip() for m in NUMBER.finditer(clause) if _reading(m, clause)]
    if unlabelled and not any(label in lower for label in ("flashsim's reading", "flashsim's pre-registered")):
        return f"a reading the article does not state, without its label ('flashsim's reading'): {unlabelled}"
    if any(mark in lower for mark in OWN_CHOICE):
        return ""
    stated = [m for m in NUMBER.finditer(clause) if _stated(m, clause)]
    unknown = [m.group().strip() for m in NUMBER.finditer(clause) if not _stated(m, clause) and not _reading(m, clause)]
    if not quotes and not stated:
        return "attributed with neither the article's words nor its numbers"
    if unknown:
        return f"numbers the article does not give as that quantity: {unknown}"
    return ""


def _stated(match: re.Match, clause: str) -> bool:
    """Whether the number stands in the article as the quantity the clause names (a row of the table)."""
    value, words, arms = value_of(match), set(QUANTITY_WORDS.findall(clause.lower())), _arms(clause)
    return any(math.isclose(value, row_value, rel_tol=1e-9) and (row_words & words)
               and (not row_arms or not arms or bool(row_arms & arms))
               for row_value, row_words, row_arms in article_quantities())


def _reading(match: re.Match, clause: str) -> bool:
    """Whether the number is one of the article's readings (a factor with ×) and not a number it states."""
    return bool(match["mark"] and "×" in match["mark"]) and any(
        math.isclose(value_of(match), value, rel_tol=5e-3) for value, _ in readings()) and not _stated(match, clause)


def _attributed_part(sentence: str) -> str:
    """The clause that attributes: from the attribution to the next ';' or ')' or sentence end (quotes dropped)."""
    match = ATTRIBUTION.search(sentence)
    rest = QUOTED.sub("", sentence[match.start():])
    return re.split(r"[;)]|, (?:ours|here|flashsim|this toy|on the toy)", rest, maxsplit=1)[0]
