"""The documentation site builds in strict mode, every tutorial converted to a page.

Needs the docs extra (``pip install -e ".[docs]"``); skipped without it. Strict mode turns every
warning into an error: a broken link, a nav entry without a page, a docstring that names a parameter
the signature lacks, a notebook that does not convert.

The build here does not execute the notebooks (``FLASHSIM_SITE_EXECUTE=false``):
``tests/test_tutorials.py`` runs each one already, and executing all six again took about 2.5 of CI's
minutes. A real ``mkdocs build`` executes them (``mkdocs.yml``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_site_builds_strictly_with_a_page_for_every_tutorial(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocs_jupyter")
    pytest.importorskip("mkdocstrings")
    env = {**os.environ, "FLASHSIM_SITE_EXECUTE": "false", "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    site = tmp_path / "site"
    for notebook in sorted((ROOT / "tutorials").glob("*.ipynb")):
        page = (site / "tutorials" / notebook.stem / "index.html").read_text()
        code_cells = sum(cell["cell_type"] == "code" for cell in json.loads(notebook.read_text())["cells"])
        assert page.count('class="jp-Cell jp-CodeCell') >= code_cells > 0, f"{notebook.name}: code cells missing"
    assert "flash_reinforce_loss" in (site / "api" / "losses" / "index.html").read_text()
