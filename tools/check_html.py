"""Open the built book in headless Chromium and check what a reader would see.

* The home page loads, with the book's title and a link to every chapter.
* Each chapter page (notebooks/) loads, every image on it has loaded (figures and graph
  drawings), it has at least one figure, and an "Open in Colab" launch button.
* Each lab page has the Colab launch button too.

    python tools/check_html.py _build/html
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tools.course import colab_url  # noqa: E402

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
        f"--user-data-dir={profile}",
    ):
        opts.add_argument(flag)
    driver = shutil.which("chromedriver") or "/usr/bin/chromedriver"
    return webdriver.Chrome(service=Service(driver), options=opts)


def main(root: str) -> int:
    html = Path(root).resolve()
    problems, report = [], []
    chapters = sorted(p for p in (html / "notebooks").glob("*.html"))
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
                    report.append(f"{page.parent.name}/{page.name}: Colab button")
                    continue
                images = driver.execute_script(IMAGES_LOADED)
                broken = [src for src, ok in images if not ok]
                problems += [f"{page.name}: image did not load: {src}" for src in broken]
                if not images:
                    problems.append(f"{page.name}: no figures or graph images on the page")
                report.append(f"notebooks/{page.name}: {len(images)} images loaded, Colab button")
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
