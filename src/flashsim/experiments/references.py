"""References from hand-written prose to the committed stores, resolved when a page is rendered.

A discussion (``results/discussion/*.md``) explains mechanisms and caveats; every measured value, interval, factor,
p, verdict word or count of seeds in it is a reference, written between double braces and replaced by the value the
committed stores hold when the page is rendered, so a rerun or a corrected store cannot leave a stale number behind::

    {{ full:C3 times }}                      the primary's factor with its interval: 1.02× [0.98, 1.06]
    {{ quick:C3@chain_lag0 verdict }}        a setting's verdict: negligible (exploratory, Holm p 0.069 ...)
    {{ quick:C9#tool_calls:flash/positive_only difference 2 }}   a comparison by metric (and arms), 2 digits
    {{ transformer:C2collapse@tool30_lag2 collapsed:token_gate }}   a collapse count: 3/30
    {{ transformer:C2#acceptance_rate percent:sequence_gate }}      an arm's mean in an untested metric: 89 %
    {{ transformer:C9#tool_calls_start range:grpo 2 }}             per-seed lowest–highest after the warm-up: 0.20–0.24
    {{ article:token_mean_length }}          the article's words, from its committed table (``article.json``)
    {{ c1-tuned:sentence ../ }}              C1 tuned's generated sentence, linked from a page one folder down
    {{ c1-tuned:transformer ../ }}           the same for its tiny-transformer part (confirmatory and exploratory)

A reference is ``PAGE:CLAIM[@SETTING][#METRIC[:ARM/BASELINE]] FIELD [DIGITS]`` (a capitalised FIELD, ``Verdict``,
renders with a capital, to open a sentence). ``PAGE`` is a results page's
family (:data:`flashsim.experiments.pages.PAGES`: ``quick``, ``full``, ``transformer``, ``follow-ups``), so one page
may quote another's store; without ``@SETTING`` the claim's headline setting, without ``#METRIC`` its primary
comparison. The fields (:data:`FIELDS`) say what is rendered; a verdict of an exploratory result always renders with
"exploratory" and its Holm p, and a primary's verdict is its final one after Holm over its page's family. A field the
store does not hold, an unknown page, claim, setting or metric raises ``ValueError`` naming the reference: the page
is not rendered with a hole in it.

The article's table (:func:`article_table`) holds each number and phrase of the article that a page quotes, with the
section and sentence where it stands; readings of it that the article does not state (the 2× of C1, the 1.57× of
C3) are listed apart with the label a page must print beside them ("flashsim's reading of the 2×").
"""

from __future__ import annotations

import csv
import functools
import json
import math
import re
from collections.abc import Mapping
from pathlib import Path

from scipy import stats

from flashsim.experiments.analysis import fmt, fmt_p
from flashsim.experiments.pages import PAGES, page_of
from flashsim.experiments.summaries import finalized_collapse, load_family
from flashsim.experiments.verdict import holm, with_holm
from flashsim.losses import DEFAULT_DELTA

ARTICLE = Path(__file__).with_name("article.json")
"""The committed table of the article's numbers and phrases (see the module docstring)."""

REFERENCE = re.compile(r"\{\{\s*(?P<body>[^{}]+?)\s*\}\}")
TARGET = re.compile(r"(?P<page>[\w-]+):(?P<claim>C\d\w*)(?:@(?P<setting>[\w.]+))?"
                    r"(?:#(?P<metric>\w+)(?::(?P<arm>\w+)/(?P<baseline>\w+))?)?")

FIELDS = {
    "verdict": "the verdict; a primary's final one after Holm, an exploratory one with 'exploratory' and its Holm p",
    "rule": "a primary's outcome by the rule, before Holm over its page's family (for a sentence that says so)",
    "difference": "the mean difference (arm − baseline) with its sign and 95 % interval",
    "-difference": "the same difference negated (baseline − arm), for a sentence that names the baseline first",
    "point": "the mean difference alone, with its sign (for a sentence that gives its interval elsewhere or not at "
             "all)",
    "magnitude": "the difference's size without its sign (its interval turned with it), for a sentence that says "
                 "which arm is ahead in words",
    "ratio": "the factor with its 95 % interval",
    "times": "the factor with a × and its 95 % interval",
    "factor": "the factor alone, with a ×",
    "effect": "the comparison's smallest effect at the setting, in the metric's units (a relative one resolved on the "
              "baseline's mean: 5 % of it), without its ±",
    "p": "the test's p before Holm",
    "holm": "the Holm-adjusted p",
    "pairs": "the number of complete seed pairs",
    "ahead": "in how many of the seed pairs the arm is ahead in the comparison's direction ('k of n')",
    "mean:ARM": "an arm's mean with its 95 % interval at the setting, in the reference's metric (#METRIC: any "
                "metric means.csv holds, compared or not) or the primary's; DIGITS 0 writes thousands with commas",
    "value:ARM": "the same mean alone, without its interval",
    "percent:ARM": "the same mean as a percentage ('98 %'; DIGITS decimals, 0 unless given), for a fraction such as "
                   "the share of trajectories the gate admits",
    "drift:ARM": "an arm's mean drift at the setting in units of δ ('0.37 δ'; DIGITS decimals, 2 unless given): "
                 "`sequence_kl` over flashsim's δ, or where a store holds no sequence KL its own `drift` metric, "
                 "already in δ (the transformer's)",
    "reached:ARM[:BOUND]": "in how many seeds an arm's threshold metric (#METRIC) has a value, i.e. the run reached "
                           "the level ('6 of 20'), or with BOUND a value of at most BOUND (reached within a budget); "
                           "from per_seed.csv",
    "largest:ARM": "the largest value of an arm's metric (#METRIC) over its seeds at the setting: one run's worst "
                   "fall, say (from per_seed.csv; DIGITS decimals, 3 unless given)",
    "probe:ARM:UPDATE:COLUMN": "a gradient probe's mean with its 95 % interval: the column of probes.md (e.g. "
                               "`cosine_of_mean`) for the arm at the update (DIGITS decimals, 2 unless given)",
    "quoted": "the number the comparison quotes, as its design writes it (another system's speed-up, which the "
              "article's table does not hold; the sentence names the source)",
    "-ahead": "in how many of the seed pairs the baseline is ahead of the arm ('k of n')",
    "spread": "the lowest and highest per-seed difference (arm − baseline) over the complete pairs, signed ('−0.012 "
              "to +0.238')",
    "-spread": "the same per-seed differences negated (baseline − arm)",
    "range:ARM": "the lowest and highest per-seed value of an arm at the setting ('0.834–0.923'), in the comparison's "
                 "metric or in #METRIC",
    "lowest:ARM": "the lowest per-seed value of an arm (a metric as for range:ARM)",
    "lowest-seed:ARM": "the seed that has it",
    "run:ARM/SEED": "one run's value: the arm's at seed SEED (a metric as for range:ARM)",
    "same:ARM/OTHER": "in how many seeds two arms' runs give the same value of #METRIC at the setting, neither "
                      "reaching a threshold counting as the same ('20 of 20'; from per_seed.csv)",
    "collapsed:ARM": "a collapse test's count of collapsed runs of an arm ('k/n'; @SETTING the setting)",
    "seeds:ARM": "a collapse test's collapsed seeds of an arm at the setting ('102, 113, 126'; 'none')",
    "fisher": "a collapse test's Fisher p at the setting (the confirmatory arm's, ':ARM' for another's)",
    "needed": "a collapse test's smallest count of collapsed runs that would have decided the setting (Holm over its "
              "settings, the others and the baseline's count as they are) with its Fisher p: '6/30 (p 0.012 before "
              "Holm)' (the confirmatory arm's, ':ARM' for another's)",
}
"""Every field a reference may ask for, and what it renders. A per-seed field (``range``, ``lowest``, ``run``) reads
``per_seed.csv``; there a metric ``X_start`` the store does not hold as a column is ``X`` − ``X_change`` (the value
after the warm-up, where the store holds the final value and the change since)."""


@functools.lru_cache(maxsize=1)
def article_table() -> dict:
    """The article's table: ``{"quotes": [...], "readings": [...]}`` (each row with an ``id``)."""
    return json.loads(ARTICLE.read_text())


def article_entry(key: str) -> Mapping:
    """The row ``key`` of the article's table (a quote or a reading)."""
    table = article_table()
    for row in (*table["quotes"], *table["readings"]):
        if row["id"] == key:
            return row
    raise ValueError(f"article reference: no row {key!r} in {ARTICLE.name}")


def article_text(key: str) -> str:
    """How a page writes row ``key``: a quote as the article words it, a reading with its label (``render``)."""
    row = article_entry(key)
    return row["quote"] if "quote" in row else row["render"]


class Stores:
    """The committed stores of every results page under ``root`` (the checkout: ``root/docs/...``)."""

    def __init__(self, root: Path | str):
        self.root = Path(root)
        self._summaries: dict[tuple[str, str], dict] = {}

    def stores(self, family: str) -> Path:
        return self.root / page_of(family).path.replace("results.md", "results")

    def summary(self, family: str, claim: str) -> dict:
        """The claim's summary as the page prints it: primaries finalized with Holm over the page's family (read once
        per :class:`Stores`: the stores do not change while a page renders)."""
        if (family, claim) not in self._summaries:
            self._summaries[family, claim] = self._summary(family, claim)
        return self._summaries[family, claim]

    def _summary(self, family: str, claim: str) -> dict:
        page, stores = page_of(family), self.stores(family)
        if claim in page.claims:
            return next(s for s in load_family(stores, page.claims, family) if s["claim"] == claim)
        if claim in dict(page.experiments):
            return finalized_collapse(self._json(stores / claim / "summary.json"), self.fisher(family, claim))
        raise ValueError(f"reference: page {family!r} has no claim {claim!r}")

    def c1_tuned_sentence(self, prefix: str = "", part: str = "sentence") -> str:
        """C1 tuned's generated sentence (``docs/c1-tuned/results/results_sentence.txt``; ``part`` ``transformer``:
        ``transformer_sentence.txt``), its link from a page ``prefix`` deeper than ``docs/`` (``../`` from the
        full-budget page)."""
        name = {"sentence": "results_sentence.txt", "transformer": "transformer_sentence.txt"}[part]
        path = self.root / "docs" / "c1-tuned" / "results" / name
        if not path.exists():
            raise ValueError(f"reference: no committed store {path}")
        return path.read_text().strip().replace("](c1-tuned/results.md", f"]({prefix}c1-tuned/results.md")

    def fisher(self, family: str, claim: str) -> dict:
        return self._json(self.stores(family) / claim / "fisher.json")

    def rows(self, family: str, claim: str, name: str) -> list[dict]:
        with open(self.stores(family) / claim / name, newline="") as file:
            return list(csv.DictReader(file))

    @staticmethod
    def _json(path: Path) -> dict:
        if not path.exists():
            raise ValueError(f"reference: no committed store {path}")
        return json.loads(path.read_text())


def render_references(text: str, stores: Stores) -> str:
    """``text`` with every ``{{ ... }}`` reference replaced by what the committed stores hold."""
    return REFERENCE.sub(lambda match: resolve(match["body"], stores), text)


def resolve(body: str, stores: Stores) -> str:
    """One reference's rendered text (see the module docstring for the syntax)."""
    words = body.split()
    if words[0].startswith("article:"):
        return article_text(words[0].split(":", 1)[1])
    if words[0] in ("c1-tuned:sentence", "c1-tuned:transformer"):
        return stores.c1_tuned_sentence(words[1] if len(words) > 1 else "", words[0].split(":")[1])
    target = TARGET.fullmatch(words[0])
    if target is None or len(words) not in (2, 3):
        raise ValueError(f"reference {{{{ {body} }}}}: expected PAGE:CLAIM[@SETTING][#METRIC[:ARM/BASELINE]] FIELD "
                         "[DIGITS]")
    if target["page"] not in {page.family for page in PAGES}:
        raise ValueError(f"reference {{{{ {body} }}}}: page must be one of {', '.join(p.family for p in PAGES)}")
    digits = int(words[2]) if len(words) == 3 else None
    field = words[1]
    try:
        text = _field(stores, target, field[0].lower() + field[1:], digits)
    except (KeyError, StopIteration, TypeError, AttributeError, IndexError, ValueError) as error:
        raise ValueError(f"reference {{{{ {body} }}}}: the store holds no such value ({error!r})") from error
    return text[0].upper() + text[1:] if field[0].isupper() else text


def _field(stores: Stores, target: re.Match, field: str, digits: int | None) -> str:
    family, claim = target["page"], target["claim"]
    name, _, argument = field.partition(":")
    if name in ("collapsed", "fisher", "seeds", "needed"):
        return _collapse(stores.fisher(family, claim), target["setting"], name, argument)
    summary = stores.summary(family, claim)
    setting = target["setting"] or summary["headline"]
    if name in ("mean", "value", "percent", "drift", "reached", "largest", "probe", *SEED_FIELDS):
        if setting not in {knob["name"] for knob in summary["knob"]}:
            raise KeyError(setting)
        if name in SEED_FIELDS:
            metric = target["metric"] or summary["comparisons"][0]["metric"]
            return _seed_field(stores.rows(family, claim, "per_seed.csv"), setting, metric, name, argument, digits)
        return _arm_field(stores, target, summary, setting, name, argument, digits)
    comparison = _comparison(summary, target)
    result = comparison["by_knob"][setting]
    primary = comparison is summary["comparisons"][0] and setting == summary["headline"]
    if primary:
        result = {**result, **summary["primary"]}
    if name == "verdict":
        return _verdict(result, primary)
    if name == "rule":
        if not primary:
            raise KeyError("rule: only a primary has an outcome before its page's Holm")
        return result["rule_verdict"]
    if name in ("difference", "-difference"):
        return _signed(result["difference"], -1 if name.startswith("-") else 1, 3 if digits is None else digits)
    if name == "point":
        return _signed(result["difference"], 1, 3 if digits is None else digits).split(" [")[0]
    if name == "magnitude":
        difference = result["difference"]
        return _signed(difference, -1 if difference["mean"] < 0 else 1, 3 if digits is None else digits).lstrip("+")
    if name in ("ratio", "times"):
        ratio, mark = result["ratio"], "×" if name == "times" else ""
        if ratio.get("mean") is None or not math.isfinite(ratio["mean"]):
            raise KeyError("ratio")
        places = 2 if digits is None else digits
        return f"{fmt(ratio['mean'], places)}{mark} [{fmt(ratio['low'], places)}, {fmt(ratio['high'], places)}]"
    if name == "factor":
        if result.get("factor") is None or not math.isfinite(result["factor"]):
            raise KeyError("factor")
        return f"{fmt(result['factor'], 2 if digits is None else digits)}×"
    if name in ("p", "holm"):
        return fmt_p(result["p" if name == "p" else "p_holm"])
    if name == "effect":
        return _number(result["effect"], 3 if digits is None else digits)
    if name == "pairs":
        return str(result["pairs"])
    if name in ("ahead", "-ahead"):
        pairs = _pairs(stores.rows(family, claim, "per_seed.csv"), comparison, setting)
        better = (lambda a, b: a > b) if comparison["direction"] == "greater" else (lambda a, b: a < b)
        wins = sum(better(*pair) if name == "ahead" else better(*pair[::-1]) for pair in pairs)
        return f"{wins} of {len(pairs)}"
    if name in ("spread", "-spread"):
        sign = -1 if name.startswith("-") else 1
        differences = [sign * (arm - baseline) for arm, baseline in
                       _pairs(stores.rows(family, claim, "per_seed.csv"), comparison, setting)]
        if not differences:
            raise KeyError("pairs")
        places = 3 if digits is None else digits
        return " to ".join(_sign(fmt(value, places), value) for value in (min(differences), max(differences)))
    if name == "quoted":
        if not comparison.get("paper") or comparison.get("source") in (None, "none"):
            raise KeyError("quoted")
        return comparison["paper"]
    raise ValueError(f"reference field must be one of {', '.join(FIELDS)}; got {field!r}")


def _arm_field(stores: Stores, target: re.Match, summary: Mapping, setting: str, name: str, argument: str,
               digits: int | None) -> str:
    """A field of one arm (its mean, share, drift, seeds that reached a level, largest value, a probe): read from the
    claim's committed means.csv, per_seed.csv or probes.md, in any metric they hold, compared or not."""
    family, claim = target["page"], target["claim"]
    if name in ("mean", "value", "percent", "drift"):
        rows = {r["metric"]: r for r in stores.rows(family, claim, "means.csv")
                if (r["knob"], r["arm"]) == (setting, argument)}
        # drift: the toy's sequence KL over flashsim's δ, or a store's own `drift` (the transformer's, already in δ)
        metric = ("sequence_kl" if "sequence_kl" in rows else "drift") if name == "drift" else (
            target["metric"] or summary["comparisons"][0]["metric"])
        row = rows[metric]
        mean = float(row["mean"])
        if not math.isfinite(mean):
            raise KeyError(f"mean of {argument} in {metric} at {setting}")
        if name == "percent":
            return f"{100 * mean:.{0 if digits is None else digits}f} %"
        if name == "drift":
            in_delta = mean / DEFAULT_DELTA if metric == "sequence_kl" else mean
            return f"{in_delta:.{2 if digits is None else digits}f} δ"
        places = 3 if digits is None else digits
        if name == "value":
            return _number(mean, places)
        return f"{_number(mean, places)} [{_number(float(row['low']), places)}, {_number(float(row['high']), places)}]"
    if name == "largest":
        metric = target["metric"] or summary["comparisons"][0]["metric"]
        values = [float(row[metric]) for row in stores.rows(family, claim, "per_seed.csv")
                  if (row["setting"], row["arm"]) == (setting, argument) and row[metric]]
        if not values or not all(math.isfinite(v) for v in values):
            raise KeyError(f"{metric} of {argument} at {setting}")
        return _number(max(values), 3 if digits is None else digits)
    if name == "reached":
        arm, _, bound = argument.partition(":")
        metric = target["metric"] or summary["comparisons"][0]["metric"]
        values = [row[metric] for row in stores.rows(family, claim, "per_seed.csv")
                  if (row["setting"], row["arm"]) == (setting, arm)]
        if not values:
            raise KeyError(f"{arm} at {setting}")
        reached = [float(v) for v in values if v and math.isfinite(float(v))]
        if bound:
            reached = [v for v in reached if v <= float(bound)]
        return f"{len(reached)} of {len(values)}"
    return _probe(stores, family, claim, summary, argument, 2 if digits is None else digits)


def _number(value: float, digits: int) -> str:
    """A value as a page writes it: with ``digits`` decimals, a whole number with thousands commas (``4,808``)."""
    return f"{value:,.0f}" if digits == 0 else fmt(value, digits)


def _probe(stores: Stores, family: str, claim: str, summary: Mapping, argument: str, digits: int) -> str:
    """One cell of the claim's probe table (``probes.md``: a row per arm label and update, ``mean [low, high]``)."""
    arm, update, column = argument.split(":")
    label = next(a["label"] for a in summary["arms"] if a["name"] == arm)
    path = stores.stores(family) / claim / "probes.md"
    if not path.exists():
        raise KeyError(f"no committed probe table {path}")
    lines = [[cell.strip() for cell in line.strip().strip("|").split("|")]
             for line in path.read_text().splitlines() if line.startswith("|")]
    header, rows = lines[0], lines[2:]
    cell = next(row for row in rows if row[0] == label and row[1] == update)[header.index(column)]
    mean, low, high = (float(x) for x in re.fullmatch(r"(\S+) \[(\S+), (\S+)\]", cell).groups())
    return f"{fmt(mean, digits)} [{fmt(low, digits)}, {fmt(high, digits)}]"


SEED_FIELDS = ("range", "lowest", "lowest-seed", "run", "same")
"""The fields that read an arm's runs (``same``: two arms'), seed by seed, from ``per_seed.csv``."""


def _seed_field(rows: list[dict], setting: str, metric: str, name: str, argument: str, digits: int | None) -> str:
    """A field of one arm's runs (the lowest–highest, the lowest and its seed, one run's value, the seeds where it
    equals another arm's) in ``metric``."""
    places = 3 if digits is None else digits
    arm, _, after = argument.partition("/")  # after the slash: run's seed, or same's other arm
    values = _per_seed(rows, setting, arm, metric)
    if name == "same":
        other = _per_seed(rows, setting, after, metric)
        seeds = values.keys() & other.keys()
        same = sum(values[s] == other[s] or math.isnan(values[s]) and math.isnan(other[s]) for s in seeds)
        return f"{same} of {len(seeds)}"
    if name == "run":
        return _minus(fmt(values[after], places))
    finite = {s: v for s, v in values.items() if math.isfinite(v)}
    if not finite:
        raise KeyError(f"{arm} has no finite {metric}")
    lowest = min(finite, key=finite.get)
    if name == "lowest":
        return _minus(fmt(finite[lowest], places))
    if name == "lowest-seed":
        return lowest
    low, high = min(finite.values()), max(finite.values())
    return f"{_minus(fmt(low, places))}–{_minus(fmt(high, places))}"


def _per_seed(rows: list[dict], setting: str, arm: str, metric: str) -> dict[str, float]:
    """An arm's per-seed values of ``metric`` at ``setting`` (NaN where a run has none); ``X_start`` is ``X`` −
    ``X_change`` where the store holds no such column."""
    values = {}
    for row in rows:
        if (row["setting"], row["arm"]) != (setting, arm):
            continue
        if metric in row:
            values[row["seed"]] = float(row[metric]) if row[metric] else math.nan
        elif metric.endswith("_start") and {metric[:-6], metric[:-6] + "_change"} <= row.keys():
            final, change = row[metric[:-6]], row[metric[:-6] + "_change"]
            values[row["seed"]] = float(final) - float(change) if final and change else math.nan
        else:
            raise KeyError(metric)
    if not values:
        raise KeyError(f"{arm} at {setting}")
    return values


def _sign(text: str, value: float) -> str:
    """``text`` (a formatted ``value``) with a + before a positive value and a minus sign for a negative one."""
    return ("+" if value > 0 else "") + _minus(text)


def _minus(text: str) -> str:
    """``text`` with the typographic minus sign (an exponent's hyphen kept: ``1e-05``)."""
    return re.sub(r"(?<!e)-", "−", text)


def _comparison(summary: Mapping, target: re.Match) -> Mapping:
    if target["metric"] is None:
        return summary["comparisons"][0]
    return next(c for c in summary["comparisons"] if c["metric"] == target["metric"] and (
        target["arm"] is None or (c["arm"], c["baseline"]) == (target["arm"], target["baseline"])))


def _verdict(result: Mapping, primary: bool) -> str:
    """A primary's final verdict; an exploratory result's verdict after Holm over its settings, labelled, with the
    rule's outcome beside it where Holm undid the decision (an exploratory word is never quoted bare)."""
    if primary and not result.get("exploratory_reason"):
        return result["verdict"]
    holm_p = fmt_p(result.get("p_holm"))
    after = with_holm(result["verdict"], result.get("p_holm", float("nan")))
    if after != result["verdict"]:
        return f"{after} after Holm ({result['verdict']} before it; exploratory, Holm p {holm_p})"
    return f"{result['verdict']} (exploratory, Holm p {holm_p})"


def _signed(interval: Mapping, sign: int, digits: int) -> str:
    mean, low, high = sign * interval["mean"], interval["low"], interval["high"]
    if sign < 0:
        low, high = -high, -low
    return _sign(f"{fmt(mean, digits)} [{fmt(low, digits)}, {fmt(high, digits)}]", mean)


def _pairs(rows: list[dict], comparison: Mapping, setting: str) -> list[tuple[float, float]]:
    """The complete seed pairs (arm's value, baseline's value) of the comparison's metric at ``setting``."""
    metric, values = comparison["metric"], {}
    for row in rows:
        if row["setting"] == setting and row["arm"] in (comparison["arm"], comparison["baseline"]) and row[metric]:
            values.setdefault(row["seed"], {})[row["arm"]] = float(row[metric])
    return [(v[comparison["arm"]], v[comparison["baseline"]]) for v in values.values()
            if len(v) == 2 and all(math.isfinite(x) for x in v.values())]


def _collapse(fisher: Mapping, setting: str | None, name: str, arm: str) -> str:
    if setting is None:
        raise ValueError("a collapse reference names its setting: PAGE:CLAIM@SETTING")
    if name in ("collapsed", "seeds"):
        row = fisher["counts"][setting][arm]
        if name == "seeds":
            return ", ".join(str(seed) for seed in row["collapsed"]) or "none"
        return f"{len(row['collapsed'])}/{row['runs']}"
    tests = fisher["tests"]
    test = tests[arm] if arm else next(t for t in tests.values() if t["confirmatory"])
    if name == "needed":
        return _needed(test["by_knob"], setting, fisher["alpha"])
    return fmt_p(test["by_knob"][setting]["p"])


def _needed(by_knob: Mapping, setting: str, alpha: float) -> str:
    """The smallest count of collapsed runs at ``setting`` that Fisher's one-sided test, Holm-adjusted over the
    settings (the other settings' p and the baseline's count as they are), would have decided at ``alpha``."""
    row = by_knob[setting]
    others = [r["p"] for knob, r in by_knob.items() if knob != setting]
    for collapsed in range(row["runs"] + 1):
        table = [[collapsed, row["runs"] - collapsed],
                 [row["baseline_collapsed"], row["baseline_runs"] - row["baseline_collapsed"]]]
        p = float(stats.fisher_exact(table, alternative="greater").pvalue)
        if holm([p, *others])[0] <= alpha:
            return f"{collapsed}/{row['runs']} (p {fmt_p(p)} before Holm)"
    return f"more than {row['runs']}/{row['runs']}"


def numbers_outside_references(text: str) -> list[str]:
    """The result-like numbers ``text`` types itself (outside its references and code): a decimal, an interval, a
    factor or percentage, a p, a count of seeds ("18 of 20"). What a page may type because it is a setting of the
    design, not a result — a learning rate, the smallest effect, a level of the optimum, L = 4, seeds 10–19, a batch
    shape 32 × 4, a claimed size 2× — is not listed (:data:`SETTING_BEFORE`, :data:`SETTING_AFTER`)."""
    text = re.sub(r"`[^`]*`", "", REFERENCE.sub("", text))
    text = re.sub(r"\b[0-9a-f]{7,40}\b", "", text)  # commits
    text = re.sub(r"\b\d+ (?:prompts )?× \d+\b", "", text)  # batch shapes: 32 × 4
    found = []
    for pattern in RESULT_NUMBERS:
        for match in pattern.finditer(text):
            before, after = text[max(0, match.start() - 40):match.start()].lower(), text[match.end():match.end() + 30]
            if SETTING_BEFORE.search(before) or SETTING_AFTER.match(after.lower()) or _a_bound(before, after):
                continue
            found.append(match.group().strip())
    return found


SETTING_BEFORE = re.compile(r"(?:\blr(?: [≤≥<>])?|learning rate|smallest effect(?: of)?|[σδεLHGBm] [=≤≥<>]|seeds?|"
                            r"grid|threshold|claimed size|pre-registered(?: at)?|error rate|"
                            r"design gives [\d.]+,? against|level|grid [\d.–]+ was extended to|"
                            r"(?:pre-registered|collapse) drop|"
                            r"calculator(?: is)? wrong on|model alone reaches|lr ∈ \{(?:[\d.]+, )*|the design gives|"
                            r"predicted(?: an?)?(?: factor| gain)?(?: near| of about| about| of)?(?: [+−]?[\d.]+ to)?)"
                            r"\s*(?:±|of )?\s*[+]?(?:[\d.]+\s*–\s*)?$")
"""Words just before a number that make it a setting of the design (``lr 0.03``, ``the smallest effect of 0.01``,
``lr ∈ {0.03, 0.1}``, ``pre-registered at 50 %``, a prediction the design wrote before its run: ``predicted a factor
near 1.3``, ``predicted +0.005 to +0.02``, a property of the task ``the design gives 0.70``), also as the second end
of a range (``the design gives 0.70 against 0.54–0.58``; "against" alone makes nothing a setting: in ``0.396 against
0.344`` both are results); the collapse test's ``collapse drop of 0.05``, the claims' task's ``calculator
wrong on 30 %`` and the pilot rule's ``the model alone reaches 0.2``."""


def _a_bound(before: str, after: str) -> bool:
    """``within`` a design's bound: the rule's ε (``within 0.01 of 0``, ``within 0.01 of the optimum``) or its
    smallest effect (``within ±0.01``); ``within 0.02 of GRPO`` is a result."""
    if re.search(r"\bwithin ±\s*$", before):
        return True
    return bool(re.search(r"\bwithin\s*$", before) and re.match(r"\s*of (?:0\b(?![.,]\d)|the optimum)", after))


SETTING_AFTER = re.compile(r"\s*(?:(?:and \d+(?:\.\d+)? )?of (?:the|its) optimum|nats? of entropy|"
                           r"×?\s*\(?(?:flashsim's|pre-registered))")
"""Words just after a number that make it a setting (``0.9 of the optimum``, ``0.6 and 0.7 of the optimum``,
``2× (flashsim's pre-registered)``)."""


RESULT_NUMBERS = (
    re.compile(r"(?<![\w.=≈])[−-]?\d+\.\d+(?![\w])(?!\.\d)(?!e-)"),  # a decimal: 0.41, −0.011, one ending a sentence
    re.compile(r"\[\s*[−+-]?[\d.,]+\s*,\s*[−+-]?[\d.,]+\s*\]"),  # an interval
    re.compile(r"(?<![\w.])[−+-]\d[\d,]*(?![\w.,]*\d)"),  # a signed count: −552
    re.compile(r"(?<![\w.])\d[\d.,]*\s?[×%]"),  # a factor or a percentage: 1.09×, 36 %
    re.compile(r"\bp\s*[=<>≤]\s*\d"),  # a p
    re.compile(r"(?<![\d.])\b\d+ (?:of|out of) (?:the )?\d+\b"),  # a count of seeds: 18 of 20 (not "0.01 of 0")
    re.compile(r"\b\d+/\d+\b"),  # a count of runs: 3/30
    re.compile(r"\b(?:all|none of the|both of the) \d+ (?:[\w-]+ )?(?:seeds|runs|pairs)\b", re.IGNORECASE),  # all 20
)
"""What counts as a typed result number in a discussion (:func:`numbers_outside_references`)."""


def checkout_root(report: Path | str, family: str = "") -> Path:
    """The checkout that holds ``report``, a results page of ``family`` (its path under the checkout is the page's
    :data:`~flashsim.experiments.pages.PAGES` path); a page of no family resolves against its own folder's parent."""
    report = Path(report)
    if family and family in {page.family for page in PAGES}:
        depth = len(Path(page_of(family).path).parts)
        return report.resolve().parents[depth - 1]
    return report.resolve().parent.parent
