"""The documentation site builds in strict mode, renders offline, and shows the README's set-up commands.

Needs the docs extra (``pip install -e ".[docs]"``); skipped without it. Strict mode turns every
warning into an error: a broken link, a nav entry without a page, a docstring that names a parameter
the signature lacks, a notebook that does not convert.

The build here does not execute the notebooks (``FLASHSIM_SITE_EXECUTE=false``):
``tests/test_tutorials.py`` runs each one already, and executing all six again took about 2.5 of CI's
minutes. A real ``mkdocs build`` executes them (``mkdocs.yml``). The site is built once per test run
and shared by the pytest-xdist workers.

Offline: no page loads a script, stylesheet, font or image from another host (an HTML-level check that
runs wherever the site builds), and where Chromium is installed (``apt-get install chromium``), a
headless Chromium that can reach no host but the local server typesets every formula.
"""

from __future__ import annotations

import fcntl
import functools
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Pages with formulas: arithmatex's \( \) and \[ \] on Concepts, the notebooks' $ $ in a tutorial.
MATH_PAGES = ("concepts", "tutorials/01_losses")


@pytest.fixture(scope="session")
def site(tmp_path_factory):
    """The built site's folder; one build for all xdist workers, behind a file lock."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocs_jupyter")
    pytest.importorskip("mkdocstrings")
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = tmp_path_factory.getbasetemp().parent  # this run's folder, the same for every worker
    else:
        shared = tmp_path_factory.mktemp("docs")
    site_dir, log = shared / "docs-site", shared / "docs-site.json"
    with open(shared / "docs-site.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not log.exists():
            env = {**os.environ, "FLASHSIM_SITE_EXECUTE": "false", "NO_MKDOCS_2_WARNING": "1"}
            result = subprocess.run(
                [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site_dir)],
                cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
            )
            log.write_text(json.dumps({"returncode": result.returncode, "stderr": result.stderr[-4000:]}))
    build = json.loads(log.read_text())
    assert build["returncode"] == 0, build["stderr"]
    return site_dir


class _Page(HTMLParser):
    """What a page makes the browser fetch, its <pre><code> blocks, and its text outside code and math."""

    SKIPPED = {"script", "style", "pre", "code", "textarea", "mjx-container"}

    def __init__(self, html: str):
        super().__init__()
        self.fetches: list[tuple[str, str]] = []  # (tag, URL)
        self.styles: list[str] = []
        self.code_blocks: list[str] = []
        self.math_errors = 0
        self._text: list[str] = []
        self._open: list[str] = []
        self._code: list[str] | None = None
        self.feed(html)
        self.text = "".join(self._text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("src") is not None:
            self.fetches.append((tag, attrs["src"]))
        if tag == "link" and attrs.get("href") is not None and attrs.get("rel") not in ("canonical", "alternate"):
            self.fetches.append((tag, attrs["href"]))
        if tag == "object" and attrs.get("data") is not None:
            self.fetches.append((tag, attrs["data"]))
        if tag == "mjx-merror":
            self.math_errors += 1
        if tag == "code" and "pre" in self._open:
            self._code = []
        if tag in self.SKIPPED:
            self._open.append(tag)

    def handle_endtag(self, tag):
        if tag == "code" and self._code is not None:
            self.code_blocks.append("".join(self._code))
            self._code = None
        if tag in self._open:
            del self._open[len(self._open) - 1 - self._open[::-1].index(tag) :]

    def handle_data(self, data):
        if self._open and self._open[-1] == "style":
            self.styles.append(data)
        if self._code is not None:
            self._code.append(data)
        if not self._open:
            self._text.append(data)


def _remote(url: str) -> bool:
    parts = urlsplit(url.strip())
    return bool(parts.netloc) or parts.scheme in ("http", "https")


def _css_remote_urls(css: str) -> list[str]:
    urls = re.findall(r"""url\(\s*['"]?([^'")\s]+)""", css) + re.findall(r"""@import\s+['"]([^'"]+)""", css)
    return [url for url in urls if _remote(url)]


@pytest.mark.slow
def test_the_site_builds_strictly_with_a_page_for_every_tutorial(site):
    for notebook in sorted((ROOT / "tutorials").glob("*.ipynb")):
        page = (site / "tutorials" / notebook.stem / "index.html").read_text()
        code_cells = sum(cell["cell_type"] == "code" for cell in json.loads(notebook.read_text())["cells"])
        assert page.count('class="jp-Cell jp-CodeCell') >= code_cells > 0, f"{notebook.name}: code cells missing"
    assert "flash_reinforce_loss" in (site / "api" / "losses" / "index.html").read_text()


@pytest.mark.slow
def test_no_page_loads_anything_from_another_host_and_everything_it_loads_is_in_the_site(site):
    remote, missing = [], []
    pages = sorted(site.rglob("*.html"))
    for path in pages:
        name = path.relative_to(site).as_posix()
        html = path.read_text(encoding="utf-8")
        page = _Page(html)
        for tag, url in page.fetches:
            if _remote(url):
                remote.append(f"{name}: <{tag}> {url}")
            elif url:  # mkdocs-jupyter leaves its MathJax 2 slot as src="", which fetches nothing
                local = urlsplit(url).path
                target = (site / local.lstrip("/")) if local.startswith("/") else (path.parent / local)
                if not (target.is_file() or (target / "index.html").is_file()):
                    missing.append(f"{name}: <{tag}> {url}")
        remote += [f"{name}: <style> {url}" for style in page.styles for url in _css_remote_urls(style)]
        # A notebook with a Mermaid diagram makes mkdocs-jupyter's inline script import Mermaid from a CDN.
        assert not re.search(r'class="[^"]*\bjp-Mermaid\b', html), f"{name}: a Mermaid diagram (loaded from a CDN)"
    for path in sorted(site.rglob("*.css")):
        remote += [f"{path.relative_to(site)}: {url}" for url in _css_remote_urls(path.read_text(encoding="utf-8"))]
    assert len(pages) > 20
    assert not remote, "loaded from another host:\n" + "\n".join(remote)
    assert not missing, "not in the site:\n" + "\n".join(missing)
    # Every page loads the MathJax component from the site; what it fetches at run time is there too.
    mathjax = site / "javascripts" / "mathjax"
    for name in MATH_PAGES:
        assert "javascripts/mathjax/tex-mml-chtml.js" in (site / name / "index.html").read_text(encoding="utf-8")
    assert (mathjax / "input" / "tex" / "extensions" / "ams.js").is_file()
    assert len(list((mathjax / "output" / "chtml" / "fonts" / "woff-v2").glob("*.woff"))) > 20


@pytest.mark.slow
def test_getting_started_shows_the_readme_set_up_commands_verbatim(site):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    heading = re.search(r"^## Set up \((.+)\)$", readme, re.MULTILINE)
    assert heading is not None, "README.md: no '## Set up (...)' section"
    block = readme[heading.end() :].split("```bash\n", 1)[1].split("\n```", 1)[0]
    commands = [line for line in block.splitlines() if not line.startswith("#")]  # the docs-blocks marker aside
    assert len(commands) == 2 and "lock-cpu.txt" in commands[0], commands
    page = _Page((site / "index.html").read_text(encoding="utf-8"))
    shown = [line for code in page.code_blocks for line in code.splitlines()]
    for command in commands:
        assert command in shown, f"Getting started lacks the README's command {command!r}"
    assert heading[1][1:] in page.text  # "two commands, on a fresh machine with Python 3.11"
    assert "≥ 3.10" not in page.text


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def _chromium() -> str | None:
    return next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)


@pytest.mark.slow
@pytest.mark.skipif(_chromium() is None, reason="needs Chromium (apt-get install chromium)")
def test_chromium_with_no_network_typesets_every_formula(site, tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        for name in MATH_PAGES:
            result = subprocess.run(
                [
                    _chromium(), "--headless", "--no-sandbox", "--disable-gpu",
                    f"--user-data-dir={tmp_path / 'profile'}",
                    # Every host name fails to resolve except the local server's address: the site is offline.
                    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
                    "--virtual-time-budget=20000",  # let MathJax load its extensions and typeset
                    "--dump-dom", f"http://127.0.0.1:{server.server_port}/{name}/",
                ],
                capture_output=True, text=True, timeout=180,
            )
            assert result.returncode == 0, result.stderr[-2000:]
            formulas = (site / name / "index.html").read_text(encoding="utf-8").count('class="arithmatex"')
            rendered = _Page(result.stdout)
            typeset = result.stdout.count("<mjx-container")
            assert typeset >= max(formulas, 1), f"{name}: {typeset} formulas typeset, {formulas} in arithmatex spans"
            assert rendered.math_errors == 0, f"{name}: {rendered.math_errors} formulas MathJax could not parse"
            raw = re.findall(r".{0,40}(?:\\\(|\\\[|\$).{0,40}", rendered.text)
            assert not raw, f"{name}: raw TeX left on the page: {raw[:3]}"
            if name.startswith("tutorials/"):  # exercise solutions start collapsed (docs/javascripts/solutions.js)
                cells = json.loads((ROOT / f"{name}.ipynb").read_text())["cells"]
                solutions = sum("solution" in cell.get("metadata", {}).get("tags", []) for cell in cells)
                collapsed = result.stdout.count('<details class="solution">')
                assert solutions and collapsed == solutions, f"{name}: {collapsed} of {solutions} solutions collapsed"
    finally:
        server.shutdown()
        server.server_close()
