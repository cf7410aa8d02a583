"""MkDocs hook: the Getting-started page shows the README's set-up commands, taken from the README.

``docs/index.md`` holds a marker line where the README's ``## Set up (...)`` section goes: the words in
the heading's parentheses (the machine and Python version) and the ``bash`` block under it. The two
cannot differ, and a README whose set-up section is no longer found fails the build.
"""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.exceptions import PluginError

README = Path(__file__).resolve().parents[2] / "README.md"
MARKER = "<!-- the README's set-up commands -->"
SET_UP = re.compile(
    r"^## Set up \((?P<conditions>[^)\n]+)\)\n+```bash\n(?P<commands>.*?)\n```$", re.MULTILINE | re.DOTALL
)


def set_up_section(readme: str) -> str:
    """The README's set-up conditions and commands, as markdown for the Getting-started page."""
    match = SET_UP.search(readme)
    if match is None:
        raise PluginError("README.md: no '## Set up (...)' heading followed by a ```bash block of commands")
    conditions = match["conditions"]
    return f"{conditions[0].upper()}{conditions[1:]}:\n\n```bash\n{match['commands']}\n```"


def on_page_markdown(markdown, page, config, files):
    if page.file.src_uri != "index.md":
        return markdown
    if MARKER not in markdown:
        raise PluginError(f"docs/index.md: the line {MARKER!r} (where the README's set-up commands go) is missing")
    return markdown.replace(MARKER, set_up_section(README.read_text(encoding="utf-8")))
