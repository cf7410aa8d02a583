"""MkDocs hook: serve ``tutorials/*.ipynb`` (which live outside ``docs/``) as ``tutorials/<name>/`` pages.

The notebooks stay where the README and CI expect them; this adds them to the site's files before
mkdocs-jupyter converts (and executes) them, so the site always renders the committed notebooks.

A notebook links a documentation page by its file, ``../docs/glossary.md#anchor``: the path that opens in
Jupyter, beside ``tutorials/``. On the site that page is ``glossary/``, two levels up from the notebook's page
``tutorials/<name>/``; :func:`on_page_content` rewrites such links, so one link works in both.
"""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[2]
DOCS_LINK = re.compile(r'href="\.\./docs/([\w./-]+?)\.md(#[^"]*)?"')  # href="../docs/glossary.md#cosine"


@event_priority(100)  # before mkdocs-jupyter's on_files claims the .ipynb files
def on_files(files, config):
    for notebook in sorted((ROOT / "tutorials").glob("*.ipynb")):
        files.append(File(f"tutorials/{notebook.name}", str(ROOT), config["site_dir"], config["use_directory_urls"]))
    return files


def docs_links_for_the_site(html: str) -> str:
    """``href="../docs/a/b.md#x"`` (a notebook's link, right in Jupyter) -> ``href="../../a/b/#x"`` (the site's)."""
    return DOCS_LINK.sub(lambda match: f'href="../../{match[1]}/{match[2] or ""}"', html)


def on_page_content(html, page, config, files):
    if page.file.src_uri.startswith("tutorials/") and page.file.src_uri.endswith(".ipynb"):
        return docs_links_for_the_site(html)
    return html
