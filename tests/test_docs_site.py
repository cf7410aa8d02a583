"""The documentation site builds in strict mode, with every tutorial executed at the fast budget.

Needs the docs extra (``pip install -e ".[docs]"``); skipped without it. Strict mode turns every
warning into an error: a broken link, a nav entry without a page, a docstring that names a parameter
the signature lacks, a notebook cell that raises.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_site_builds_strictly_with_every_tutorial_executed(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocs_jupyter")
    pytest.importorskip("mkdocstrings")
    env = {**os.environ, "FLASHSIM_FAST": "1", "NO_MKDOCS_2_WARNING": "1"}
    env.pop("MPLBACKEND", None)
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    site = tmp_path / "site"
    notebooks = sorted(p.stem for p in (ROOT / "tutorials").glob("*.ipynb"))
    for name in notebooks:
        page = (site / "tutorials" / name / "index.html").read_text()
        assert "FLASHSIM_FAST = True" in page, f"tutorial {name} was not executed at build time"
    assert "flash_reinforce_loss" in (site / "api" / "losses" / "index.html").read_text()
