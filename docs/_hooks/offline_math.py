"""MkDocs hook: serve MathJax from the site itself, so formulas render without the internet.

MathJax 3 comes from the ``django-static-mathjax`` package of the ``docs`` extra, which ships MathJax's
release files as package data under the import name ``mathjax`` and depends on nothing (Django included).
This adds to the site, under ``javascripts/mathjax/``, the component that ``mkdocs.yml`` loads
(``tex-mml-chtml.js``) and the folders it fetches from at run time, relative to its own address: TeX
extensions (``input/``), the CommonHTML fonts (``output/chtml/``) and the menu's accessibility parts
(``ui/``, ``a11y/``, ``sre/``). MathJax's other combined components and its SVG output are left out.
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File

SITE_FOLDER = "javascripts/mathjax"
COMPONENT = "tex-mml-chtml.js"
LOADED_AT_RUN_TIME = ("input/", "output/chtml/", "ui/", "a11y/", "sre/")


def _release() -> Path:
    try:
        return Path(str(importlib.resources.files("mathjax") / "static" / "mathjax" / "es5"))
    except ModuleNotFoundError as error:
        raise PluginError(
            'MathJax is missing: install the docs extra (pip install -c requirements/lock-cpu.txt -e ".[docs]")'
        ) from error


def on_files(files, config):
    release = _release()
    if not (release / COMPONENT).is_file():
        raise PluginError(f"{release / COMPONENT} does not exist: the installed django-static-mathjax lacks MathJax")
    for path in sorted(release.rglob("*")):
        relative = path.relative_to(release).as_posix()
        if path.is_file() and (relative == COMPONENT or relative.startswith(LOADED_AT_RUN_TIME)):
            files.append(File.generated(config, f"{SITE_FOLDER}/{relative}", abs_src_path=str(path)))
    return files
