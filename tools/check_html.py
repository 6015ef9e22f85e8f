"""Open the built book in headless Chromium and check what a reader would see.

* The home page loads, with the book's title and a link to every chapter.
* Each chapter page (notebooks/) loads, every image on it has loaded (figures and graph
  drawings), it has at least one figure, and an "Open in Colab" launch button.
* Each lab page has the Colab launch button too.
* At 1400 px, on every chapter and lab page (with every fold opened), no code line, output line
  or table is wider than its container, so nothing is cut off or hidden behind a scrollbar.
* The page's Chinese text (glossary, route names) renders with a CJK font, not as boxes.

    python tools/check_html.py _build/html
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

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


def main(root: str) -> int:
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
            for page in chapters + labs:
                driver.get(page.as_uri())
                # Wait for the page itself (its article and header buttons), not just navigation.
                WebDriverWait(driver, 30).until(
                    lambda d: (
                        d.execute_script("return document.readyState") == "complete"
                        and d.find_elements(By.CSS_SELECTOR, "article")
                        and d.find_elements(
                            By.CSS_SELECTOR, ".bd-header-article a, .bd-header-article button"
                        )
                    )
                )
                want = colab_url(f"{page.parent.name}/{page.stem}.ipynb")
                hrefs = [
                    a.get_attribute("href")
                    for a in driver.find_elements(By.CSS_SELECTOR, "a[href*='colab']")
                ]
                if want not in hrefs:
                    problems.append(
                        f"{page.name}: no Open-in-Colab launch button to {want} (found {hrefs})"
                    )
                driver.execute_script(OPEN_FOLDS)
                overflows = driver.execute_script(OVERFLOWS)
                problems += [f"{page.parent.name}/{page.name}: overflows: {o}" for o in overflows]
                if page in labs:
                    report.append(
                        f"{page.parent.name}/{page.name}: Colab button, nothing overflows"
                    )
                    continue
                images = driver.execute_script(IMAGES_LOADED)
                broken = [src for src, ok in images if not ok]
                problems += [f"{page.name}: image did not load: {src}" for src in broken]
                if not images:
                    problems.append(f"{page.name}: no figures or graph images on the page")
                report.append(
                    f"notebooks/{page.name}: {len(images)} images loaded, Colab button, "
                    "nothing overflows"
                )
        finally:
            driver.quit()
    print("\n".join(report))
    if problems:
        print("\n".join(problems))
        return 1
    print(f"browser check: {len(chapters)} chapter pages and {len(labs)} lab pages OK")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "_build/html"))
