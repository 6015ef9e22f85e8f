"""Open the built book in headless Chromium and check what a reader would see.

* The home page loads, with the book's title and a link to every chapter.
* Each chapter page (notebooks/) loads, every image on it has loaded (figures and graph
  drawings), it has at least one figure, and an "Open in Colab" launch button.
* Each lab page has the Colab launch button too.
* At 1400 px, on every chapter and lab page (with every fold opened), no code line, output line
  or table is wider than its container, so nothing is cut off or hidden behind a scrollbar.
* At 1400 px and at a phone's 390 px (``WIDTHS``), on every chapter, lab and book page, nothing
  makes the page scroll sideways: no element (a heading, a long word, a figure) reaches past the
  viewport's right edge unless a box that scrolls on its own holds it (code blocks, wide
  tables and, on a phone, figures may scroll inside their own box).
* At both widths, the text of every figure renders at ``MIN_TEXT_PX`` CSS pixels or more
  (``figure_text_px``): a figure scaled down to fit its column scales its text down with it.
  How large a figure's text is drawn is read from the figure itself:

  - an SVG (Graphviz drawings, inline or as an image): the smallest ``font-size`` of its text,
    in its user units, times the rendered width over the ``viewBox`` width;
  - a PNG drawn by Matplotlib: the smallest font size in points (``MPL_MIN_FONT_PT``, the
    smallest the course's figures use, or the PNG's own ``min-font-pt`` text chunk where the
    figure records it), times the PNG's resolution (its ``pHYs`` chunk, dots per inch) over 72
    points per inch gives its pixels in the PNG; times the rendered width over the PNG's width
    gives CSS pixels on the page;
  - any other raster image is reported as not checked.
* Torch source addresses printed in outputs are links (``_static/torch_links.js`` makes them).
* The page's Chinese text (glossary, route names) renders with a CJK font, not as boxes.

    python tools/check_html.py _build/html
    python tools/check_html.py _build/html notebooks/04_tensor labs/04_tensor_lab  # those only
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path
from urllib.parse import unquote, urlparse

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tools.course import colab_url  # noqa: E402

OPEN_FOLDS = """
document.querySelectorAll('details').forEach(d => { d.open = true; });
document.querySelectorAll('.toggle-hidden').forEach(e => e.classList.remove('toggle-hidden'));
"""

#: Elements wider than their box: code and output blocks (pre), and tables, whose right edge
#: passes the right edge of the article. Reports what overflows and the first words of it.
OVERFLOWS = """
const article = document.querySelector('article') || document.body;
const right = article.getBoundingClientRect().right;
const out = [];
for (const el of article.querySelectorAll('pre, table')) {
  const box = el.getBoundingClientRect();
  if (box.width === 0) continue;
  const wide = el.tagName === 'PRE' ? el.scrollWidth > el.clientWidth + 2
                                    : box.right > right + 2 || el.scrollWidth > el.clientWidth + 2;
  const parent = el.parentElement;
  const clipped = el.tagName === 'TABLE' && parent && parent.scrollWidth > parent.clientWidth + 2;
  if (wide || clipped) {
    const line = (el.innerText || '').split('\\n').sort((a, b) => b.length - a.length)[0] || '';
    out.push(el.tagName.toLowerCase() + ' ' + Math.round(el.scrollWidth) + ' px in ' +
             Math.round(el.clientWidth) + ' px: ' + line.slice(0, 80));
  }
}
return out;
"""

#: The viewports every page is checked at: a desktop window and a phone (CSS pixels).
WIDTHS = {"1400 px": (1400, 1000, False), "390 px": (390, 844, True)}

#: The smallest text a figure may render, in CSS pixels: below about 9 px, labels and numbers
#: in a plot or a diagram cannot be read without zooming.
MIN_TEXT_PX = 9.0

#: The smallest font size, in points, in the course's Matplotlib figures (tick labels and
#: legends are 8 pt; the default is 10), assumed for a PNG that does not record its own.
MPL_MIN_FONT_PT = 8.0

#: Elements that reach past the right edge of the viewport without a box that scrolls (or clips)
#: them: what makes a page scroll sideways. Only the innermost of nested culprits is reported.
SIDEWAYS = """
const vw = document.documentElement.clientWidth;
const scrolls = (el) => {
  for (let a = el.parentElement; a && a !== document.body; a = a.parentElement) {
    const ox = getComputedStyle(a).overflowX;
    if (ox === 'auto' || ox === 'scroll' || ox === 'hidden' || ox === 'clip') return true;
  }
  return false;
};
const out = [];
const main = document.querySelector('main') || document.body;
for (const el of main.querySelectorAll('*')) {
  const box = el.getBoundingClientRect();
  // An element's own box may fit while its content runs past it (a heading of one long word):
  // the content's extent is its scroll width.
  const own = getComputedStyle(el).overflowX;  // a box that scrolls its own content fits
  const boxed = own === 'auto' || own === 'scroll' || own === 'hidden' || own === 'clip';
  const right = boxed ? box.right : box.left + Math.max(box.width, el.scrollWidth);
  if (box.width === 0 || right <= vw + 1 || scrolls(el)) continue;
  // A drawer the theme keeps hidden off screen (the phone's sidebars) is not what a reader sees.
  if (!el.checkVisibility({visibilityProperty: true, opacityProperty: true})) continue;
  // Keep the innermost: an ancestor reaches as far only because of this element.
  for (let i = out.length - 1; i >= 0; i--) if (out[i].el.contains(el)) out.splice(i, 1);
  const what = el.tagName.toLowerCase() + (el.className && el.className.baseVal === undefined
      ? '.' + String(el.className).trim().split(/\\s+/)[0] : '');
  out.push({el, text: what + ' reaches ' + Math.round(right) + ' px: ' +
            (el.innerText || el.getAttribute('src') || '').trim().split('\\n')[0].slice(0, 70)});
}
return [document.documentElement.scrollWidth, vw, out.slice(0, 6).map(o => o.text)];
"""

#: Every figure on the page: images with their rendered and natural widths, and inline SVG
#: drawings with the smallest rendered size of their text (font size times the scale to screen).
FIGURES = """
const out = [];
for (const img of document.querySelectorAll('article img')) {
  const w = img.getBoundingClientRect().width;
  if (w > 0) out.push(['img', img.currentSrc || img.src, w, img.naturalWidth]);
}
for (const svg of document.querySelectorAll('article svg')) {
  if (svg.getBoundingClientRect().width === 0) continue;
  let least = Infinity;
  for (const t of svg.querySelectorAll('text')) {
    const m = t.getScreenCTM();
    if (!m || !t.textContent.trim()) continue;
    least = Math.min(least, parseFloat(getComputedStyle(t).fontSize) * Math.hypot(m.a, m.b));
  }
  if (least < Infinity) out.push(['svg', (svg.textContent || '').trim().slice(0, 40), least, 0]);
}
return out;
"""


def png_info(data: bytes) -> tuple[int, float | None, dict[str, str]]:
    """A PNG's width in pixels, its resolution in dots per inch (``pHYs``; ``None`` if absent)
    and its text chunks."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    width, dpi, text, i = struct.unpack(">I", data[16:20])[0], None, {}, 8
    while i + 8 <= len(data):
        (n,), kind = struct.unpack(">I", data[i : i + 4]), data[i + 4 : i + 8]
        body = data[i + 8 : i + 8 + n]
        if kind == b"pHYs" and body[8] == 1:  # unit 1: pixels per metre
            dpi = struct.unpack(">I", body[:4])[0] * 0.0254
        elif kind == b"tEXt":
            key, _, value = body.partition(b"\0")
            text[key.decode("latin-1")] = value.decode("latin-1")
        elif kind == b"IEND":
            break
        i += 12 + n
    return width, dpi, text


def svg_min_font(data: bytes) -> tuple[float, float] | None:
    """The smallest font size of an SVG's text in its user units, and its ``viewBox`` width;
    ``None`` when it has no text (a drawing whose text is paths is not checked)."""
    root = ET.fromstring(data)
    sizes = []
    for el in root.iter():
        if el.tag.rsplit("}", 1)[-1] != "text" or not "".join(el.itertext()).strip():
            continue
        size = el.get("font-size") or re.search(r"font-size:\s*([\d.]+)", el.get("style", ""))
        size = size.group(1) if isinstance(size, re.Match) else size
        if size:
            sizes.append(float(re.match(r"[\d.]+", size).group()))
    box = (root.get("viewBox") or "").replace(",", " ").split()
    if not sizes or len(box) != 4:
        return None
    return min(sizes), float(box[2])


def figure_text_px(path: Path, rendered: float) -> float | None:
    """The smallest text of the figure in ``path``, in CSS pixels, when it is ``rendered`` px
    wide; ``None`` for a figure whose text size cannot be told (see the module's docstring)."""
    data = path.read_bytes()
    if path.suffix == ".svg":
        found = svg_min_font(data)
        return None if found is None else found[0] * rendered / found[1]
    if data[:4] == b"\x89PNG":
        width, dpi, text = png_info(data)
        if "Matplotlib" not in text.get("Software", "") or not dpi:
            return None
        pt = float(text.get("min-font-pt", MPL_MIN_FONT_PT))
        return pt * dpi / 72 * rendered / width
    return None


def figure_problems(driver, page: str, width: str) -> tuple[list[str], int, int]:
    """Figures on the open page whose text renders under ``MIN_TEXT_PX``; and how many figures
    were checked and how many could not be."""
    problems, checked, unchecked = [], 0, 0
    for kind, src, size, _natural in driver.execute_script(FIGURES):
        if kind == "svg":
            px, name = size, f"inline SVG '{src}'"
        else:
            url = urlparse(src)
            path = Path(unquote(url.path))
            if url.scheme != "file" or not path.is_file():
                unchecked += 1
                continue
            px, name = figure_text_px(path, size), path.name
        if px is None:
            unchecked += 1
            continue
        checked += 1
        if px < MIN_TEXT_PX:
            problems.append(
                f"{page} at {width}: figure {name}: its smallest text renders at {px:.1f} px "
                f"(under {MIN_TEXT_PX:g} px)"
            )
    return problems, checked, unchecked


def viewport(driver, width: int, height: int, mobile: bool) -> None:
    """Make the page's viewport ``width`` CSS pixels wide (a phone's, with ``mobile``)."""
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile},
    )


#: Output blocks that print torch source addresses but hold no link (_static/torch_links.js
#: turns them into links to github.com/pytorch/pytorch at the pinned tag).
UNLINKED_SOURCES = """
return Array.from(document.querySelectorAll('article div.cell_output pre'))
  .filter(pre => pre.textContent.includes('pytorch/pytorch/blob/') &&
                 !pre.querySelector('a.torch-source'))
  .map(pre => pre.textContent.trim().split('\\n')[0].slice(0, 80));
"""

IMAGES_LOADED = """
return Array.from(document.querySelectorAll('article img')).map(
  img => [img.getAttribute('src'), img.complete && img.naturalWidth > 0]);
"""


def browser(profile: str) -> webdriver.Chrome:
    opts = webdriver.ChromeOptions()
    opts.binary_location = (
        shutil.which("chromium") or shutil.which("chromium-browser") or "/usr/bin/chromium"
    )
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--disable-quic",
        "--window-size=1400,1000",
        f"--user-data-dir={profile}",
    ):
        opts.add_argument(flag)
    driver = shutil.which("chromedriver") or "/usr/bin/chromedriver"
    return webdriver.Chrome(service=Service(driver), options=opts)


#: A page that must fail both phone checks: a heading of one long word, and a drawing whose
#: 10-unit text is shown at 390/1000 of its size. Run first, so a check that can no longer
#: fail (a selector that matches nothing, a theme change) is seen.
MUST_FAIL = (
    "<!doctype html><html><head><meta name='viewport' content='width=device-width'></head>"
    "<body><main><article><h2>" + "Wide" * 60 + "</h2>"
    "<svg viewBox='0 0 1000 100' style='width:100%'><text y='50' font-size='10'>tiny</text>"
    "</svg></article></main></body></html>"
)


def checks_can_fail(driver) -> list[str]:
    """What the phone checks failed to see on :data:`MUST_FAIL` (empty: both can fail)."""
    from urllib.parse import quote

    viewport(driver, *WIDTHS["390 px"])
    driver.get("data:text/html," + quote(MUST_FAIL))
    missed = []
    if not any(c.startswith("h2") for c in driver.execute_script(SIDEWAYS)[2]):
        missed.append("a heading wider than a phone")
    if not figure_problems(driver, "self-test", "390 px")[0]:
        missed.append("a figure with 4 px text")
    return missed


def load(driver, page: Path) -> None:
    """Open ``page`` and wait for the page itself (its article and header buttons)."""
    driver.get(page.as_uri())
    WebDriverWait(driver, 30).until(
        lambda d: (
            d.execute_script("return document.readyState") == "complete"
            and d.find_elements(By.CSS_SELECTOR, "article")
            and d.find_elements(By.CSS_SELECTOR, ".bd-header-article a, .bd-header-article button")
        )
    )


def main(root: str, only: list[str] | None = None) -> int:
    """Check the book built in ``root``; ``only``: just these pages (``notebooks/04_tensor``)."""
    html = Path(root).resolve()
    problems, report = [], []
    chapters = sorted(p for p in (html / "notebooks").glob("*.html"))
    cjk_fonts = subprocess.run(
        ["fc-list", ":lang=zh", "family"], capture_output=True, text=True
    ).stdout.strip()
    if not cjk_fonts:
        print("no CJK font installed: Chinese text would render as boxes (make chromium)")
        return 1
    labs = sorted((html / "labs").glob("*.html"))
    books = sorted((html / "book").glob("*.html"))
    if not chapters:
        print(f"no chapter pages under {html}/notebooks: build the book first (make book)")
        return 1
    with tempfile.TemporaryDirectory() as profile:
        driver = browser(profile)
        try:
            driver.get((html / "index.html").as_uri())
            # index.html is a redirect to the root page: wait until the real page has its sidebar.
            WebDriverWait(driver, 20).until(lambda d: d.find_elements(By.CSS_SELECTOR, "nav a"))
            title = driver.title
            links = {
                a.get_attribute("href") for a in driver.find_elements(By.CSS_SELECTOR, "nav a")
            }
            for page in chapters:
                if not any(link and link.endswith(f"notebooks/{page.name}") for link in links):
                    problems.append(f"home page has no link to {page.name}")
            report.append(f"home page: '{title}', {len(links)} navigation links")
            missed = checks_can_fail(driver)
            if missed:
                problems.append("the phone checks did not see: " + ", ".join(missed))
            report.append("self-test: the phone checks see a wide heading and 4 px figure text")
            for page in chapters + labs + books:
                if only and not any(page.as_posix().endswith(f"{o}.html") for o in only):
                    continue
                name = f"{page.parent.name}/{page.name}"
                notes = []
                for width, (w, h, mobile) in WIDTHS.items():
                    viewport(driver, w, h, mobile)
                    load(driver, page)
                    driver.execute_script(OPEN_FOLDS)
                    scroll_width, vw, culprits = driver.execute_script(SIDEWAYS)
                    if scroll_width > vw + 1 or culprits:
                        problems.append(
                            f"{name} at {width}: the page scrolls sideways ({scroll_width} px "
                            f"in {vw} px): " + ("; ".join(culprits) or "no single element")
                        )
                    found, checked, unchecked = figure_problems(driver, name, width)
                    problems += found
                    notes.append(f"{width}: {checked} figures' text checked, {unchecked} not")
                    if width != "1400 px":
                        continue
                    problems += [
                        f"{name}: torch source printed without links: {o}"
                        for o in driver.execute_script(UNLINKED_SOURCES)
                    ]
                    overflows = driver.execute_script(OVERFLOWS)
                    problems += [f"{name}: overflows: {o}" for o in overflows]
                    if page in books:
                        continue
                    want = colab_url(f"{page.parent.name}/{page.stem}.ipynb")
                    hrefs = [
                        a.get_attribute("href")
                        for a in driver.find_elements(By.CSS_SELECTOR, "a[href*='colab']")
                    ]
                    if want not in hrefs:
                        problems.append(
                            f"{page.name}: no Open-in-Colab launch button to {want} (found {hrefs})"
                        )
                    if page in labs:
                        continue
                    images = driver.execute_script(IMAGES_LOADED)
                    broken = [src for src, ok in images if not ok]
                    problems += [f"{page.name}: image did not load: {src}" for src in broken]
                    if not images:
                        problems.append(f"{page.name}: no figures or graph images on the page")
                    notes.append(f"{len(images)} images loaded")
                report.append(f"{name}: " + "; ".join(notes))
        finally:
            driver.quit()
    print("\n".join(report))
    if problems:
        print("\n".join(problems))
        return 1
    print(
        f"browser check: {len(chapters)} chapter, {len(labs)} lab and {len(books)} book pages "
        f"OK at {' and '.join(WIDTHS)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "_build/html", sys.argv[2:]))
