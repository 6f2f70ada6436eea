"""The book builds without warnings and every page works and reads well in a real browser, offline.

1. `jupyter-book build . -W -n --keep-going --all` from the repository root must succeed and print no
   warning (`--all` so that pages unchanged since an earlier build are checked too).
2. Every page listed in `_toc.yml` is opened in headless Debian Chromium (Playwright, served from
   127.0.0.1) at desktop width (1280 × 900) and phone width (390 × 844), and must:
   - make no request that fails or leaves the local server (no CDN, no remote image), log no console error
     and throw no uncaught exception; every image loads;
   - have its math typeset by the vendored MathJax without TeX errors; at desktop width no display
     equation is wider than the text column (split it over aligned lines), and at any width an equation,
     code block, output or table wider than its box sits in a scroll box whose scroll bar is drawn
     (not an overlay that shows nothing);
   - show no test marker (`NBVAL_...`, `nbval-...`): cells are tagged, never commented;
   - show every figure at ≥ 75 % of its stored size at desktop width (its text stays ≥ 9 px);
   - have widgets that respond to their controls or none (the book shows a note and the static figure),
     and no output that takes room but shows nothing (hidden progress bars);
   - open its navigation with the header button and reach another chapter through a link in it (both
     widths), and at phone width open the page's contents with its header button;
   - break no WCAG 2.1 level A or AA rule that axe-core (vendored: tests/vendor/axe-core, `make axe-js`) checks,
     at both widths, except those listed in AXE_EXCEPTIONS with the reason the theme cannot be fixed.
3. Every image of every page has alt text that says what it shows: not empty, not a file name or hash (what
   MyST-NB writes when a cell gives none); a chapter's figure has alt text written from its data
   (capsule_lab.figures.descriptions.check_alt_text) and a numbered caption ("Fig. 3 ...").
   A screenshot of every page's first screen at both widths is saved under `_build/screenshots/` (a build
   artifact for a person to look at); CAPSULE_LAB_SCREENSHOTS=<dir> saves full-page screenshots there instead
   (they cost 1-4 s a page, a third of these tests' time, so only when asked for).

Run with `pytest -m book` (part of `make test`). Needs /usr/bin/chromium (`make chromium`).
"""

from __future__ import annotations

import fcntl
import functools
import html.parser
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
SCREENSHOTS = Path(os.environ.get("CAPSULE_LAB_SCREENSHOTS", ROOT / "_build" / "screenshots"))
FULL_PAGE_SCREENSHOTS = bool(os.environ.get("CAPSULE_LAB_SCREENSHOTS"))
CHROMIUM = Path(os.environ.get("CAPSULE_LAB_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
LOCAL_HOSTS = {"127.0.0.1", "localhost"}
# Desktop: a 1280 × 900 window. Phone: 390 × 844 emulated as a touch device, which also gives overlay scroll
# bars (drawn only while scrolling) as on phones and macOS, so an undrawn scroll bar shows as 0 px.
VIEWPORTS = {
    "desktop": {"viewport": {"width": 1280, "height": 900}},
    "phone": {"viewport": {"width": 390, "height": 844}, "is_mobile": True, "has_touch": True},
}
# A figure may be shown at 75 % of its stored size at least (an 800 px figure in a ~620 px column).
MIN_FIGURE_SCALE = 0.75
AXE = ROOT / "tests" / "vendor" / "axe-core" / "axe.min.js"
AXE_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
# Rules that may remain broken on a page, with the reason they cannot be fixed in the theme (none today).
AXE_EXCEPTIONS: dict[str, str] = {}
TEST_MARKER = re.compile(r"NBVAL_[A-Z_]+|nbval-[a-z-]+")

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


class _QuietServer(http.server.ThreadingHTTPServer):
    """A browser that closes a page while a file is still being sent breaks the pipe: not an error of the book."""

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


@pytest.fixture(scope="session")
def server(built_book: Path):
    handler = functools.partial(_QuietHandler, directory=str(built_book))
    httpd = _QuietServer(("127.0.0.1", 0), handler)
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
        # Playwright hides scroll bars by default; the layout checks need them as a reader gets them.
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True,
                                    ignore_default_args=["--hide-scrollbars"])
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


def test_favicon_is_served(server: str):
    """Browsers ask for /favicon.ico whatever the page links; the site answers it (no 404 in the log)."""
    import urllib.request

    with urllib.request.urlopen(f"{server}/favicon.ico", timeout=10) as response:
        assert response.status == 200
        assert response.read(4) == b"\x00\x00\x01\x00", "favicon.ico is not an icon file"


class _Images(html.parser.HTMLParser):
    """Every <img> of a page: its alt text (None when absent), whether it sits in a cell's output, and the
    caption of the <figure> around it."""

    def __init__(self):
        super().__init__()
        self.images: list[dict] = []
        self._stack: list[tuple[str, str]] = []     # (tag, class) of the open elements
        self._figures: list[dict] = []              # images of the open <figure>s, to attach their caption
        self._caption: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "img":
            image = {"src": attrs.get("src", ""), "alt": attrs.get("alt"), "caption": None,
                     "output": any("cell_output" in cls for _, cls in self._stack)}
            self.images.append(image)
            if self._figures:
                self._figures[-1]["images"].append(image)
            return
        if tag in ("br", "hr", "meta", "link", "input", "source", "wbr"):
            return
        self._stack.append((tag, attrs.get("class") or ""))
        if tag == "figure":
            self._figures.append({"images": []})
        elif tag == "figcaption":
            self._caption = []

    def handle_endtag(self, tag):
        while self._stack:
            open_tag, _ = self._stack.pop()
            if open_tag == tag:
                break
        if tag == "figcaption" and self._caption is not None and self._figures:
            text = " ".join("".join(self._caption).split())
            for image in self._figures[-1]["images"]:
                image["caption"] = text
            self._caption = None
        elif tag == "figure" and self._figures:
            self._figures.pop()

    def handle_data(self, data):
        if self._caption is not None:
            self._caption.append(data)


def alt_text_problems(page_html: str) -> list[str]:
    """What is wrong with the alt text and captions of a page's images (see the module's docstring, 3)."""
    from capsule_lab.figures.descriptions import check_alt_text, is_file_name

    parser = _Images()
    parser.feed(page_html)
    problems = []
    for image in parser.images:
        alt, name = image["alt"], image["src"].rsplit("/", 1)[-1]
        if alt is None or not alt.strip():
            problems.append(f"{name}: no alt text")
        elif alt.strip() == image["src"] or alt.strip().endswith(name) or is_file_name(alt):
            problems.append(f"{name}: its alt text is a file name ({alt!r})")
        elif image["output"]:
            try:
                check_alt_text(alt)
            except ValueError as error:
                problems.append(f"{name}: {error}")
            if not image["caption"] or not re.match(r"Fig\. ?\d+", image["caption"]):
                problems.append(f"{name}: a figure without a numbered caption ({image['caption']!r})")
    return problems


def test_alt_text_check_finds_what_myst_nb_writes_without_a_description():
    """The check fails on the alt text MyST-NB writes for a figure without a description (its file path), on an
    empty one, and on a figure without a numbered caption; it passes a described, captioned figure."""
    src = "../_images/c6dc1d7e0d42f4946205b5c5ce467cbfc94efe2831f37da02fd0dad2e2adf42d.png"
    output = '<div class="cell_output docutils container">{}</div>'
    bare = output.format(f'<img alt="{src}" src="{src}" />')
    empty = output.format(f'<img alt="" src="{src}" />')
    alt = "Test accuracy against step time for 12 routers; dynamic routing with r = 3 is the most accurate."
    uncaptioned = output.format(f'<img alt="{alt}" src="{src}" />')
    captioned = output.format(f'<figure><img alt="{alt}" src="{src}" /><figcaption><p><span class="caption-number">'
                              'Fig. 1 </span><span class="caption-text">Accuracy against time</span></p>'
                              '</figcaption></figure>')
    assert alt_text_problems(bare) == [f"{src.rsplit('/', 1)[-1]}: its alt text is a file name ({src!r})"]
    assert alt_text_problems(empty) and "no alt text" in alt_text_problems(empty)[0]
    assert "numbered caption" in alt_text_problems(uncaptioned)[0]
    assert alt_text_problems(captioned) == []
    assert alt_text_problems('<img alt="Open In Colab" src="../_images/colab-badge.svg" />') == []


def test_every_image_has_alt_text_saying_what_it_shows(built_book: Path):
    problems = []
    for page in PAGES:
        problems += [f"{page}: {p}" for p in alt_text_problems((built_book / f"{page}.html").read_text("utf8"))]
    assert not problems, "images without a description:\n  " + "\n  ".join(problems)


def _axe_violations(page) -> list[str]:
    """axe-core's WCAG 2.1 A/AA violations on the page as loaded (rule: count, first elements, help)."""
    page.add_script_tag(path=str(AXE))
    result = page.evaluate("tags => axe.run(document, {runOnly: {type: 'tag', values: tags}, resultTypes: "
                           "['violations']})", AXE_TAGS)
    found = []
    for violation in result["violations"]:
        if violation["id"] in AXE_EXCEPTIONS:
            continue
        targets = ", ".join(" ".join(node["target"]) for node in violation["nodes"][:3])
        found.append(f"accessibility ({violation['impact']}): {violation['id']} on {len(violation['nodes'])} "
                     f"element(s), e.g. {targets}: {violation['help']}")
    return found


def _is_local(url: str) -> bool:
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme in ("data", "blob", "about", "chrome-error", "javascript"):
        return True
    return parsed.hostname in LOCAL_HOSTS


# Elements wider than their box: for each equation, code block, output, table and image in the article,
# its nearest scroll box (itself or an ancestor with overflow-x auto/scroll). Wider content must be in one
# whose scroll bar takes room (is drawn); without one, it must end inside the article column.
_OVERFLOW_JS = r"""
() => {
  const article = document.querySelector('main article') || document.querySelector('article');
  if (!article) return {problems: ['no <article> element'], equations: []};
  const right = article.getBoundingClientRect().right;
  const describe = el => {
    const text = (el.textContent || el.getAttribute('src') || '').replace(/\s+/g, ' ').trim();
    return el.tagName.toLowerCase() + ' "' + text.slice(0, 60) + '"';
  };
  const scrollBox = el => {
    for (let e = el; e && e !== article; e = e.parentElement) {
      const o = getComputedStyle(e).overflowX;
      if (o === 'auto' || o === 'scroll') return e;
    }
    return null;
  };
  const problems = [];
  const equations = [];
  const selector = 'mjx-container[display="true"], pre, table, img';
  for (const el of article.querySelectorAll(selector)) {
    const rect = el.getBoundingClientRect();
    if (rect.width === 0 && rect.height === 0) continue;           // not displayed
    if (el.tagName === 'MJX-CONTAINER') {
      const box = el.parentElement.getBoundingClientRect();
      const eqno = el.parentElement.querySelector('.eqno');
      equations.push({label: eqno ? eqno.textContent.replace('#', '').trim() : describe(el),
                      content: el.scrollWidth, box: Math.round(box.width), fits: el.scrollWidth <= el.clientWidth + 1});
    }
    const box = scrollBox(el);
    if (box) {
      if (box.scrollWidth > box.clientWidth + 1) {
        const cs = getComputedStyle(box);
        const bar = box.offsetHeight - box.clientHeight
                    - parseFloat(cs.borderTopWidth) - parseFloat(cs.borderBottomWidth);
        if (bar < 4) problems.push(describe(el) + ': scrolls sideways without a visible scroll bar');
      }
    } else if (rect.left + el.scrollWidth > right + 1 || rect.right > right + 1) {
      problems.push(describe(el) + ': ' + Math.round(rect.left + el.scrollWidth - right)
                    + ' px wider than the column and not in a scroll box');
    }
  }
  return {problems, equations};
}
"""

# The primary sidebar (site navigation): shown when it lies in the viewport and is visible.
_SIDEBAR_SHOWN_JS = r"""
selector => {
  const s = document.querySelector(selector);
  if (!s) return false;
  const r = s.getBoundingClientRect();
  const cs = getComputedStyle(s);
  return cs.visibility !== 'hidden' && cs.display !== 'none' && r.width > 50 && r.right > 50
         && r.left < window.innerWidth - 50;
}
"""


def _wait_for_state(page, selector: str, shown: bool) -> bool:
    try:
        page.wait_for_function(f"s => ({_SIDEBAR_SHOWN_JS})(s) === {str(shown).lower()}",
                               arg=selector, timeout=3_000)
        return True
    except Exception:
        return False


def _check_navigation(page, width: str, page_name: str) -> list[str]:
    """The header button opens the site navigation, and a link in it leads to another page."""
    problems: list[str] = []
    sidebar = ".bd-sidebar-primary"
    toggle = page.locator("button.primary-toggle:visible, label.primary-toggle:visible").first
    if not toggle.count():
        return ["no visible button opens the navigation"]
    if width == "desktop":
        # Shown beside the page; the button hides it and shows it again.
        if not _wait_for_state(page, sidebar, True):
            problems.append("the navigation is not shown at desktop width")
        toggle.click()
        if not _wait_for_state(page, sidebar, False):
            problems.append("the navigation button does not hide the navigation")
        toggle.click()
    else:
        if not _wait_for_state(page, sidebar, False):
            problems.append("the navigation covers the page at phone width before it is opened")
        toggle.click()
    if not _wait_for_state(page, sidebar, True):
        return problems + [f"the navigation button does not open the navigation ({width})"]
    # A link to another chapter (any other page of the book), clicked like a reader would.
    links = page.locator(f"{sidebar} nav a.reference.internal[href$='.html']:visible")
    hrefs = [links.nth(i).get_attribute("href") for i in range(links.count())]
    others = [i for i, href in enumerate(hrefs)
              if not href.startswith("#") and not href.split("#")[0].endswith(page_name.split("/")[-1] + ".html")]
    if not others:
        return problems + ["the navigation lists no other page"]
    link = links.nth(others[0])
    target = urllib.parse.urljoin(page.url, hrefs[others[0]]).split("#")[0]
    link.click()
    try:
        page.wait_for_url(target, timeout=10_000)
        page.wait_for_load_state("load")
    except Exception:
        problems.append(f"clicking {hrefs[others[0]]!r} in the navigation did not open it ({width})")
    return problems


def _check_contents_button(page) -> list[str]:
    """At phone width the header button for the page's contents opens them (pages with contents)."""
    button = page.locator("button.secondary-toggle:visible, label.secondary-toggle:visible").first
    if not button.count():
        return []
    button.click()
    if not _wait_for_state(page, ".bd-sidebar-secondary", True):
        return ["the page-contents button does not open the page's contents (phone)"]
    page.keyboard.press("Escape")
    page.mouse.click(5, 400)  # close the drawer again by clicking the overlay
    return []


# What a widget shows apart from its controls (the controls redraw themselves even without a kernel).
_WIDGET_CONTENT_JS = r"""
root => {
  const copy = root.cloneNode(true);
  copy.querySelectorAll('.widget-slider, .widget-hslider, .widget-vslider, .widget-dropdown, .widget-select, '
                        + '.widget-toggle-buttons, .widget-button, .widget-checkbox, .widget-text, '
                        + '.widget-readout, .widget-label, input, select, button, label').forEach(e => e.remove());
  return copy.innerHTML;
}
"""


# Outputs that take room but show nothing (a hidden progress bar's box, an empty widget view).
_BLANK_OUTPUTS_JS = r"""
() => Array.from(document.querySelectorAll('div.cell_output > *')).filter(o => {
  const r = o.getBoundingClientRect();
  if (r.height <= 24) return false;
  if ((o.innerText || '').trim()) return false;
  const shown = 'img, svg, canvas, video, iframe, mjx-container, input, select, button, .noUi-handle';
  return !(o.matches(shown) || o.querySelector(shown));
}).map(o => Math.round(o.getBoundingClientRect().height))
"""


def _check_widgets(page) -> list[str]:
    """Every widget with a slider shows something else once the slider moves (no widget at all is fine)."""
    problems: list[str] = []
    widgets = page.locator(".widget-subarea")
    for i in range(widgets.count()):
        widget = widgets.nth(i)
        handles = widget.locator(".noUi-handle, input[type=range]")
        if not handles.count():
            continue
        readout = widget.locator(".widget-readout").first
        before_value = readout.inner_text() if readout.count() else None
        before = widget.evaluate(_WIDGET_CONTENT_JS)
        handles.first.focus()
        page.keyboard.press("ArrowRight")
        page.wait_for_timeout(1_000)
        if readout.count() and readout.inner_text() == before_value:
            page.keyboard.press("ArrowLeft")  # at the end of its range: move the other way
            page.wait_for_timeout(1_000)
        if widget.evaluate(_WIDGET_CONTENT_JS) == before:
            problems.append(f"widget {i}: moving its slider changes nothing it shows "
                            "(no kernel in the static book: show the static figure and a note instead)")
    return problems


@pytest.fixture(scope="module", params=list(VIEWPORTS))
def context(request, browser):
    context = browser.new_context(**VIEWPORTS[request.param], service_workers="block")
    context.width_name = request.param
    yield context
    context.close()


@pytest.mark.parametrize("page_name", PAGES)
def test_page_works_in_browser(context, server: str, page_name: str):
    width = context.width_name
    page = context.new_page()
    console_errors: list[str] = []
    page_errors: list[str] = []
    external: list[str] = []
    failed: list[str] = []
    problems: list[str] = []
    navigating = {"done": False}

    def on_console(msg):
        if msg.type == "error" and not navigating["done"]:
            console_errors.append(f"{msg.text} @ {(msg.location or {}).get('url', '')}")

    def on_response(response):
        if response.status >= 400 and not navigating["done"]:
            failed.append(f"{response.status} {response.url}")

    def on_failed(request):
        if _is_local(request.url) and not navigating["done"]:
            failed.append(f"{request.failure} {request.url}")

    def route(r):
        if _is_local(r.request.url):
            r.continue_()
            return
        external.append(f"{r.request.resource_type}: {r.request.url}")
        r.abort()

    page.on("console", on_console)
    page.on("pageerror", lambda exc: page_errors.append(str(exc)))
    page.on("response", on_response)
    page.on("requestfailed", on_failed)
    page.route("**/*", route)
    try:
        page.goto(f"{server}/{page_name}.html", wait_until="load", timeout=60_000)

        # Images: force lazy ones to load, then every image must have decoded pixels.
        page.evaluate("() => document.querySelectorAll('img').forEach(i => { i.loading = 'eager'; })")
        page.wait_for_function("() => Array.from(document.images).every(i => i.complete)", timeout=30_000)
        broken = page.evaluate(
            "() => Array.from(document.images).filter(i => !(i.naturalWidth > 0)).map(i => i.src)")
        problems += [f"image did not load: {src}" for src in broken]
        if not page.locator("link[rel~='icon']").count():
            problems.append("no favicon link (browsers then ask for /favicon.ico)")

        # Math: typeset by the vendored MathJax, without TeX errors.
        if page.locator(".math").count():
            page.wait_for_function(
                "() => window.MathJax && MathJax.startup && MathJax.startup.promise", timeout=30_000)
            page.evaluate("() => MathJax.startup.promise")
            if not page.locator("mjx-container").count():
                problems.append("math was not typeset")
            if page.locator("mjx-merror").count():
                problems.append("MathJax reported a TeX error")

        page.wait_for_timeout(300)  # late layout (fonts, widgets) and console messages
        layout = page.evaluate(_OVERFLOW_JS)
        problems += layout["problems"]
        page_width = page.evaluate("() => document.documentElement.scrollWidth")
        if page_width > VIEWPORTS[width]["viewport"]["width"] + 1:
            problems.append(f"the page is {page_width} px wide, wider than the window: something does not wrap")
        if width == "desktop":
            problems += [f"equation {eq['label']} is {eq['content']} px wide, the column {eq['box']} px: split it"
                         for eq in layout["equations"] if not eq["fits"]]
            # Figures are drawn for the column (≤ 7.5 in at 100 dpi, text ≥ 8 pt): shrunk further, their
            # text falls below 9 px (CONTRIBUTING.md, "Widgets and figures in the book").
            shrunk = page.evaluate(
                """min => Array.from(document.querySelectorAll('.cell_output img'))
                       .filter(i => i.naturalWidth > 0 && i.clientWidth / i.naturalWidth < min)
                       .map(i => i.naturalWidth + ' px shown at ' + i.clientWidth + ' px')""", MIN_FIGURE_SCALE)
            problems += [f"figure {s}: its text is unreadable; draw it narrower" for s in shrunk]

        problems += _axe_violations(page)
        text = page.evaluate("() => document.body.innerText")
        problems += [f"test marker visible: {m!r}" for m in sorted(set(TEST_MARKER.findall(text)))]
        problems += _check_widgets(page)
        problems += [f"an output {h} px tall shows nothing (a hidden progress bar?)"
                     for h in page.evaluate(_BLANK_OUTPUTS_JS)]

        folder = SCREENSHOTS / width
        folder.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(folder / f"{page_name.replace('/', '__')}.png"), full_page=FULL_PAGE_SCREENSHOTS)

        if width == "phone":
            problems += _check_contents_button(page)
        navigating["done"] = True  # what the next page does is that page's test
        problems += _check_navigation(page, width, page_name)
    finally:
        page.close()

    assert not external, f"{page_name} ({width}): requests left the local server: {external}"
    assert not failed, f"{page_name} ({width}): failed requests: {failed}"
    assert not page_errors, f"{page_name} ({width}): uncaught JavaScript errors: {page_errors}"
    assert not console_errors, f"{page_name} ({width}): console errors: {console_errors}"
    assert not problems, f"{page_name} ({width}):\n  " + "\n  ".join(problems)


# ---------------------------------------------------------------- a chapter as Jupyter shows it
def _chapter_text_checks():
    import importlib.util

    spec = importlib.util.spec_from_file_location("test_chapter_text", ROOT / "tests" / "test_chapter_text.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CHAPTER_NOTEBOOKS = sorted((ROOT / "chapters").glob("*.ipynb"))


@pytest.mark.parametrize("path", CHAPTER_NOTEBOOKS, ids=lambda p: p.name)
def test_chapter_rendered_as_jupyter_shows_no_markup_and_its_links_land(browser, path: Path):
    """The chapter exported by nbconvert (Jupyter's Markdown rendering, no MyST) and opened in Chromium: no raw role,
    directive or label in the text a reader sees; every citation and equation link scrolls to its target in the
    same page; the reference list is there."""
    import nbformat
    from nbconvert import HTMLExporter

    checks = _chapter_text_checks()
    body, _ = HTMLExporter(template_name="basic").from_notebook_node(nbformat.read(path, as_version=4))
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        page.route("**/*", lambda route: route.abort())  # nothing leaves the page: what it shows is in it
        page.set_content(f"<!doctype html><html lang='en'><body>{body}</body></html>")
        text = page.evaluate("""() => Array.from(document.querySelectorAll('.text_cell_render'))
                                      .map(cell => cell.innerText).join('\\n')""")
        assert len(text) > 1000, f"{path.name}: no Markdown cell found in nbconvert's page"
        raw = [f"{kind}: {m.group(0)!r}" for kind, pattern in checks.MYST_CONSTRUCTS.items()
               for m in pattern.finditer(text)]
        assert raw == [], f"{path.name} shows MyST markup in Jupyter: {raw}"
        links = page.evaluate("""() => Array.from(document.querySelectorAll('a[href^="#ref-"], a[href^="#eq-"]'))
                                     .map(a => a.getAttribute('href').slice(1))""")
        assert links, f"{path.name}: no citation or equation link"
        missing = page.evaluate("ids => ids.filter(id => !document.getElementById(id))", sorted(set(links)))
        assert missing == [], f"{path.name}: links to no anchor: {missing}"
        # Follow the last link (the furthest down the list is the hardest to reach): its target comes into view.
        target = links[-1]
        page.evaluate("id => window.scrollTo(0, 0)", target)
        page.locator(f'a[href="#{target}"]').last.click()
        top = page.evaluate("id => document.getElementById(id).getBoundingClientRect().top", target)
        assert -2 <= top < 900, f"{path.name}: following #{target} left it at {top} px"
        listed = page.evaluate("() => document.querySelectorAll('li a[id^=\"ref-\"]').length")
        cited = len({link for link in links if link.startswith("ref-")})
        assert listed == cited, f"{path.name}: {cited} works cited, {listed} in its reference list"
    finally:
        page.close()


def test_the_instructors_class_summary_works_in_the_browser(browser, tmp_path):
    """Issue 48: `capsule-lab gradebook --html` (capsule_lab.grading.notebooks.class_summary) as an instructor opens
    it: every table with its caption and rows, no console error, no WCAG 2.1 A/AA violation, and on a phone's width
    the page itself does not scroll sideways (a wide table scrolls in its own region)."""
    from test_gradebook import class_reports, report

    from capsule_lab.grading.notebooks.class_summary import write_class_summary
    from capsule_lab.grading.notebooks.gradebook import students

    reports = class_reports() + [report(f"sub/s{k}_05_rem.ipynb", "05", earned={"05.class_entropy": 0},
                                        hints={"05.class_entropy": "a key built in base 11 collides"})
                                 for k in range(3)]
    by_student = students(reports)
    page_path = write_class_summary(by_student, {("alice", "05.flip_entropy.reasoning"): 1}, tmp_path / "class.html",
                                    ["01", "05"])
    for width, height in ((1280, 900), (375, 740)):
        context = browser.new_context(viewport={"width": width, "height": height})
        page = context.new_page()
        errors = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(page_path.as_uri())
        captions = page.locator("caption").all_inner_texts()
        assert captions[:2] == ["Chapter 01: the checked tasks (1 graded notebook(s))",
                                "Chapter 05: the checked tasks (6 graded notebook(s))"], captions
        assert "a key built in base 11 collides (3×)" in page.inner_text("main")
        students_rows = page.locator("table").last.locator("tbody tr")
        assert students_rows.count() == 7                                  # alice, bob, carol, dave, s0-s2
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"), width
        assert errors == [] and _axe_violations(page) == [], (width, errors)
        context.close()
