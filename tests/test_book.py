"""The book builds without warnings and its pages work in a real browser, offline.

1. `jupyter-book build . -W -n --keep-going --all` from the repository root must succeed and print no
   warning (`--all` so that pages unchanged since an earlier build are checked too).
2. Every page listed in `_toc.yml` is opened in headless Debian Chromium (Playwright, served from
   127.0.0.1): no console errors, no uncaught exceptions, every image loads, math is typeset by the
   vendored MathJax, stored ipywidgets render with the vendored widget JS, and no script, style sheet,
   font or data request leaves the local server (no CDN).

Run with `pytest -m book` (part of `make test`). Needs /usr/bin/chromium (`make chromium`).
Set CAPSULE_LAB_SCREENSHOTS=<dir> to save a full-page screenshot of every page.
"""

from __future__ import annotations

import fcntl
import functools
import http.server
import os
import re
import shutil
import subprocess
import sys
import threading
import urllib.parse
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
BUILD_HTML = ROOT / "_build" / "html"
CHROMIUM = Path(os.environ.get("CAPSULE_LAB_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
LOCAL_HOSTS = {"127.0.0.1", "localhost"}
# External images a page may show when online; they are blocked here and not required to load.
# (The "Open in Colab" badge in each notebook's first cell is the standard remote SVG.)
ALLOWED_EXTERNAL_IMAGES = ("https://colab.research.google.com/assets/colab-badge.svg",)
WIDGET_VIEW = 'script[type="application/vnd.jupyter.widget-view+json"]'

pytestmark = [pytest.mark.book, pytest.mark.slow, pytest.mark.xdist_group("book")]


def _jupyter_book() -> list[str]:
    exe = Path(sys.executable).with_name("jupyter-book")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("jupyter-book")
    if found is None:
        pytest.fail("jupyter-book is not installed: run `make setup`")
    return [found]


def toc_pages() -> list[str]:
    """Docnames (paths without suffix, relative to the book root) of every page in _toc.yml."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf8"))
    pages: list[str] = []

    def add(entry: dict) -> None:
        if "file" in entry:
            pages.append(re.sub(r"\.(md|ipynb|rst)$", "", entry["file"]))
        for key in ("parts", "chapters", "sections"):
            for sub in entry.get(key, []) or []:
                add(sub)

    pages.append(re.sub(r"\.(md|ipynb|rst)$", "", toc["root"]))
    add(toc)
    return pages


PAGES = toc_pages()


@pytest.fixture(scope="session")
def built_book() -> Path:
    """Build the book once per session (a lock keeps parallel workers from building at once)."""
    (ROOT / "_build").mkdir(exist_ok=True)
    with open(ROOT / "_build" / ".book-test.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        cmd = _jupyter_book() + ["build", ".", "-W", "-n", "--keep-going", "--all"]
        env = dict(os.environ, PYTHONWARNINGS="ignore", NO_COLOR="1")
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
        fcntl.flock(lock, fcntl.LOCK_UN)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"jupyter-book build failed ({proc.returncode}):\n{output[-6000:]}"
    warnings = [line for line in output.splitlines() if "WARNING" in line]
    assert not warnings, "the book build printed warnings:\n" + "\n".join(warnings)
    for page in PAGES:
        assert (BUILD_HTML / f"{page}.html").is_file(), f"{page}.html was not built"
    return BUILD_HTML


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - signature of the base class
        pass


@pytest.fixture(scope="session")
def server(built_book: Path):
    handler = functools.partial(_QuietHandler, directory=str(built_book))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="session")
def browser():
    if not CHROMIUM.exists():
        message = f"{CHROMIUM} is missing: run `make chromium` (apt-get install chromium)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        yield browser
        browser.close()


def test_build_has_no_cdn_widget_or_math_urls(built_book: Path):
    """The HTML references the vendored widget JS and MathJax, never a CDN copy."""
    cdn = re.compile(r"""<script[^>]+src=["']https?://[^"']*(jsdelivr|unpkg|cdnjs|mathjax|require)""")
    for page in PAGES:
        html = (built_book / f"{page}.html").read_text(encoding="utf8")
        assert not cdn.search(html), f"{page}.html loads a script from a CDN"
    for vendored in ("vendor/require.js", "vendor/html-manager/embed-amd.js", "vendor/mathjax/tex-chtml.js"):
        assert (built_book / "_static" / vendored).is_file(), f"_static/{vendored} missing from the build"


def _is_local(url: str) -> bool:
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme in ("data", "blob", "about", "chrome-error", "javascript"):
        return True
    return parsed.hostname in LOCAL_HOSTS


@pytest.mark.parametrize("page_name", PAGES)
def test_page_renders_offline(browser, server: str, page_name: str):
    context = browser.new_context(viewport={"width": 1280, "height": 900}, service_workers="block")
    page = context.new_page()
    console_errors: list[str] = []
    page_errors: list[str] = []
    external: list[str] = []

    def on_console(msg):
        if msg.type == "error":
            where = (msg.location or {}).get("url", "")
            if where in ALLOWED_EXTERNAL_IMAGES:
                return  # the blocked badge reports "Failed to load resource"
            console_errors.append(f"{msg.text} @ {where}")

    def route(r):
        url = r.request.url
        if _is_local(url):
            r.continue_()
            return
        if not (r.request.resource_type == "image" and url in ALLOWED_EXTERNAL_IMAGES):
            external.append(f"{r.request.resource_type}: {url}")
        r.abort()

    page.on("console", on_console)
    page.on("pageerror", lambda exc: page_errors.append(str(exc)))
    page.route("**/*", route)
    try:
        page.goto(f"{server}/{page_name}.html", wait_until="load", timeout=60_000)

        # Images: force lazy ones to load, then every local image must have decoded pixels.
        page.evaluate("() => document.querySelectorAll('img').forEach(i => { i.loading = 'eager'; })")
        page.wait_for_function(
            "() => Array.from(document.images).every(i => i.complete)", timeout=30_000)
        broken = page.evaluate(
            """allowed => Array.from(document.images)
                   .filter(i => !allowed.includes(i.src) && !(i.complete && i.naturalWidth > 0))
                   .map(i => i.src)""",
            list(ALLOWED_EXTERNAL_IMAGES))
        assert not broken, f"{page_name}: images that did not load: {broken}"

        # Math: typeset by the vendored MathJax, without TeX errors.
        if page.locator(".math").count():
            page.wait_for_function(
                "() => window.MathJax && MathJax.startup && MathJax.startup.promise", timeout=30_000)
            page.evaluate("() => MathJax.startup.promise")
            assert page.locator("mjx-container").count() > 0, f"{page_name}: math was not typeset"
            assert page.locator("mjx-merror").count() == 0, f"{page_name}: MathJax reported a TeX error"

        # Widgets: each stored view is rendered by the html-manager.
        views = page.locator(WIDGET_VIEW).count()
        if views:
            rendered_js = (f"() => Array.from(document.querySelectorAll('{WIDGET_VIEW}'))"
                           ".filter(s => s.parentElement.querySelector('.jupyter-widgets')).length")
            try:
                page.wait_for_function(f"n => ({rendered_js})() === n", arg=views, timeout=30_000)
            except Exception:
                pass  # reported by the assertion below
            rendered = page.evaluate(rendered_js)
            assert rendered == views, f"{page_name}: {views - rendered} of {views} widget views did not render"

        page.wait_for_timeout(300)  # let late console messages arrive
        shots = os.environ.get("CAPSULE_LAB_SCREENSHOTS")
        if shots:
            Path(shots).mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(Path(shots) / f"{page_name.replace('/', '__')}.png"), full_page=True)
    finally:
        context.close()

    assert not external, f"{page_name}: requests left the local server: {external}"
    assert not page_errors, f"{page_name}: uncaught JavaScript errors: {page_errors}"
    assert not console_errors, f"{page_name}: console errors: {console_errors}"
