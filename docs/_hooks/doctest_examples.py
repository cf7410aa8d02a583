"""Griffe extension: render a docstring's bare doctest (``>>>`` lines) as an Examples section, and
Sphinx cross-reference roles (``:func:`x```) as plain code.

flashsim's docstrings end with a seeded doctest (STYLE rule 19) without a Google ``Examples:``
header; markdown would read the ``>>>`` lines as nested block quotes. This moves everything from the
first ``>>>`` line under an ``Examples:`` header, which mkdocstrings renders as a code block. The
source docstrings (and the doctests that CI runs) are unchanged.
"""

from __future__ import annotations

import re

import griffe

SPHINX_ROLE = re.compile(r":(?:func|class|mod|meth|data|attr|exc):`~?([^`]+)`")


class DoctestExamples(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        docstring = obj.docstring
        if docstring is None:
            return
        docstring.value = SPHINX_ROLE.sub(r"`\1`", docstring.value)
        if ">>>" not in docstring.value:
            return
        lines = docstring.value.split("\n")
        starts = [i for i, line in enumerate(lines) if line.startswith(">>>")]
        if not starts or any(line.strip() in ("Examples:", "Example:") for line in lines[: starts[0]]):
            return
        first = starts[0]
        block = [("    " + line) if line.strip() else "" for line in lines[first:]]
        docstring.value = "\n".join([*lines[:first], "Examples:", *block])
