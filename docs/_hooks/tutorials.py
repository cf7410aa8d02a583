"""MkDocs hook: serve ``tutorials/*.ipynb`` (which live outside ``docs/``) as ``tutorials/<name>/`` pages.

The notebooks stay where the README and CI expect them; this adds them to the site's files before
mkdocs-jupyter converts (and executes) them, so the site always renders the committed notebooks.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[2]


@event_priority(100)  # before mkdocs-jupyter's on_files claims the .ipynb files
def on_files(files, config):
    for notebook in sorted((ROOT / "tutorials").glob("*.ipynb")):
        files.append(File(f"tutorials/{notebook.name}", str(ROOT), config["site_dir"], config["use_directory_urls"]))
    return files
