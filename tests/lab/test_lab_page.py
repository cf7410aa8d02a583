"""The lab page in a real browser: moving the lag control redraws the committed data's series and says so.

The page (``docs/lab.md`` with ``docs/lab/``) is built on its own into a one-page site (mkdocs with the
site's theme, a second or two), served from 127.0.0.1 and opened in headless Chromium — Debian's
``chromium``, driven by Playwright's Python package — where every request to another host is refused
and recorded. It is opened from ``file://`` too, as a built site opened from disk.

CI installs Chromium (``.ci/run``) and sets ``FLASHSIM_REQUIRE_BROWSER=1``, which turns a missing browser
into a failure; elsewhere the test is skipped without one.
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import threading
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from flashsim.lab import read_data

ROOT = Path(__file__).resolve().parents[2]
DATA = read_data(ROOT / "docs" / "lab" / "data.js")
CHROMIUM = next(filter(None, map(shutil.which, ("chromium", "chromium-browser"))), None)
REQUIRED = os.environ.get("FLASHSIM_REQUIRE_BROWSER") == "1"


def _need(what: str, ok: bool) -> None:
    if not ok:
        message = f"the lab page test needs {what}"
        pytest.fail(message + " (FLASHSIM_REQUIRE_BROWSER=1)") if REQUIRED else pytest.skip(message)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The lab page built alone with the site's theme (links to other pages are left dangling, so not strict)."""
    _need("mkdocs (the docs extra)", shutil.which("mkdocs") is not None or _importable("mkdocs"))
    from mkdocs.commands.build import build
    from mkdocs.config import load_config

    folder = tmp_path_factory.mktemp("lab-site")
    (folder / "docs").mkdir()
    shutil.copy(ROOT / "docs" / "lab.md", folder / "docs" / "lab.md")
    shutil.copytree(ROOT / "docs" / "lab", folder / "docs" / "lab")
    (folder / "mkdocs.yml").write_text(
        "site_name: lab\ndocs_dir: docs\nsite_dir: site\ntheme:\n  name: material\n  font: false\nplugins: []\n"
        "nav:\n  - lab.md\n"
    )
    os.environ.setdefault("NO_MKDOCS_2_WARNING", "1")
    build(load_config(str(folder / "mkdocs.yml")))
    return folder / "site"


def _importable(name: str) -> bool:
    try:
        __import__(name)
    except ImportError:
        return False
    return True


@pytest.fixture(scope="module")
def browser():
    _need("Chromium (apt-get install chromium)", CHROMIUM is not None)
    _need("playwright (the docs extra)", _importable("playwright"))
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield chromium
        chromium.close()


def _to_fixed(value: float, digits: int) -> str:
    """JavaScript's ``value.toFixed(digits)``: the exact binary value rounded, ties away from zero."""
    return str(Decimal(value).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP))


def _key(page, algorithm: str) -> str:
    """The data key the page's controls select for ``algorithm`` (δ = none of a gated loss is ``no_gate``)."""
    env, delta, design = (page.input_value(f"#lab-{name}") for name in ("env", "delta", "design"))
    lag = DATA["axes"]["lag"][int(page.input_value("#lab-lag"))]
    if algorithm in DATA["axes"]["gated"] and delta == "none":
        algorithm = "no_gate"
    elif algorithm not in DATA["axes"]["gated"]:
        delta = "none"
    return "|".join((env, algorithm, delta, str(lag), design))


def _plotted(page, chart: str, side: str) -> tuple[list, str]:
    line = page.locator(f"#lab-{chart} path.lab-line[data-series={side}]")
    return __import__("json").loads(line.get_attribute("data-y")), line.get_attribute("d")


@pytest.mark.slow  # a browser process and a one-page mkdocs build
def test_moving_the_lag_redraws_the_committed_series_and_the_sentence_says_what_changed(site, browser):
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    origin = f"http://127.0.0.1:{server.server_port}"
    remote, errors = [], []
    page = browser.new_page(viewport={"width": 850, "height": 1200})

    def guard(route):
        parts = urlsplit(route.request.url)
        if parts.scheme in ("http", "https", "ws", "wss") and f"{parts.scheme}://{parts.netloc}" != origin:
            remote.append(route.request.url)
            return route.abort()
        return route.continue_()

    page.route("**/*", guard)
    page.on("pageerror", lambda error: errors.append(str(error)))
    try:
        page.goto(f"{origin}/lab/")
        page.wait_for_selector("#lab-success path.lab-line[data-series=a]")
        a, b = page.input_value("#lab-a"), page.input_value("#lab-b")
        before = {side: DATA["series"][_key(page, algorithm)] for side, algorithm in (("a", a), ("b", b))}
        assert _plotted(page, "success", "a")[0] == before["a"]["success"]["mean"]
        old_path = _plotted(page, "success", "a")[1]

        page.focus("#lab-lag")
        page.keyboard.press("End")  # the slider to its last position, the largest lag
        lag = DATA["axes"]["lag"][-1]
        assert page.text_content("#lab-lag-value") == f"L = {lag}"
        for side, algorithm in (("a", a), ("b", b)):
            now = DATA["series"][_key(page, algorithm)]
            assert f"|{lag}|" in _key(page, algorithm)
            assert _plotted(page, "success", side)[0] == now["success"]["mean"]
            assert _plotted(page, "acceptance", side)[0] == now["acceptance"]
            cosine = _to_fixed(now["quality"]["cosine"], 3)
            assert page.text_content(f"#flashsim-lab tr[data-series={side}] td:nth-child(2)") == cosine
        assert _plotted(page, "success", "a")[1] != old_path
        sentence = page.text_content("#lab-sentence")
        assert sentence.startswith(f"Lag L {DATA['axes']['lag'][0]} → {lag}: ")
        now_a = DATA["series"][_key(page, a)]
        success_now, success_then = (_to_fixed(s["success"]["mean"][-1], 2) for s in (now_a, before["a"]))
        assert f"ends at exact success {success_now}" in sentence
        if success_now != success_then:
            assert f"{success_now} (was {success_then})" in sentence

        first, second = DATA["axes"]["delta"][:2]
        page.select_option("#lab-delta", second)
        assert page.text_content("#lab-sentence").startswith(f"δ {first} → {second}: ")  # δ, not Δ
        assert _plotted(page, "success", "a")[0] == DATA["series"][_key(page, a)]["success"]["mean"]

        page.goto((site / "lab" / "index.html").as_uri())  # the built site opened as files
        page.wait_for_selector("#lab-success path.lab-line[data-series=a]")
        assert _plotted(page, "success", "a")[0] == before["a"]["success"]["mean"]
    finally:
        page.close()
        server.shutdown()
        server.server_close()
    assert not errors, errors
    assert not remote, f"requested from the network: {remote}"


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass
