"""Sentences that attribute something to the article, checked against the article's text (``../shared/seeds/``).

A sentence attributes when it says what the article or paper says, reports, uses, sets or gives, names its setting,
appendix, GRPO or baseline, quotes it (``article: ...``) or cites it with a year. Each such sentence must carry the
article's own words in quotes or a number of the article, and every quoted span in it must be in the article's
text; a setting the article does not give says "flashsim's choice" or "the reference implementation's" instead.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.wording import hand_written_texts, sentences

SEEDS = next((parent / "shared" / "seeds" for parent in Path(__file__).resolve().parents
              if (parent / "shared" / "seeds").is_dir()), None)
"""The article's text: ``../shared/seeds/`` beside the checkout or above it (None where it is not there)."""
ATTRIBUTION = re.compile(
    r"\b(?:the|this|its) (?:article|paper) (?:says|said|reports?|reported|uses|used|sets|set|gives|gave|writes|wrote|"
    r"calls|called|describes|claims)\b|\b(?:the|this|its) (?:article|paper)(?:'s|’s) (?:setting|appendix|grpo|"
    r"baseline)\b|\(nvidia, \d{4}\)|\barticle: ",
    re.I)
QUOTED = re.compile(r'"([^"]{3,}?)"|“([^”]{3,}?)”')
NUMBER = re.compile(r"(?<![\w.-])\d+(?:[.,]\d+)*(?!\w)")
"""A number standing alone (not part of a model's name such as Qwen2.5-Math-1.5B)."""
OWN_CHOICE = ("flashsim's choice", "reference implementation", "not the article", "does not give", "gives no")


def normalize(text: str) -> str:
    return " ".join(text.replace("’", "'").replace("‘", "'").replace("“", '"').replace("”", '"').lower().split())


def seed_text(seeds: Path | None = SEEDS) -> str:
    return normalize("\n".join(path.read_text() for path in sorted(seeds.glob("*.txt"))))


def attribution_problems(root: Path | str, seeds: Path | None = SEEDS) -> list[str]:
    """``path: «sentence» — why`` for every attributing sentence without the article's words or number."""
    article = seed_text(seeds)
    return [problem for path, text in hand_written_texts(Path(root)).items()
            for problem in text_attribution_problems(path, text, article)]


def text_attribution_problems(path: str, text: str, article: str) -> list[str]:
    """The attribution problems of one page's ``text`` against the article's normalized text."""
    numbers = set(NUMBER.findall(article))
    problems = []
    for sentence in sentences(text):
        if not ATTRIBUTION.search(sentence):
            continue
        quotes = [a or b for a, b in QUOTED.findall(sentence)]
        missing = [q for q in quotes if normalize(q) not in article]
        unknown = [n for n in NUMBER.findall(_attributed_part(sentence)) if n not in numbers]
        if missing:
            problems.append(f"{path}: «{sentence}» — not in the article: {missing}")
        elif any(mark in sentence.lower() for mark in OWN_CHOICE):
            continue
        elif not quotes and not any(n in numbers for n in NUMBER.findall(sentence)):
            problems.append(f"{path}: «{sentence}» — attributed with neither the article's words nor its numbers")
        elif unknown:
            problems.append(f"{path}: «{sentence}» — numbers the article does not give: {unknown}")
    return problems


def _attributed_part(sentence: str) -> str:
    """The clause that attributes: from the attribution to the next ';' or ')' or sentence end (quotes dropped)."""
    match = ATTRIBUTION.search(sentence)
    rest = QUOTED.sub("", sentence[match.start():])
    return re.split(r"[;)]|, (?:ours|here|flashsim|this toy|on the toy)", rest, maxsplit=1)[0]
