"""Set the repository the course is published from, everywhere it appears, in one step.

The URL has one home, ``repository.url`` in ``_config.yml``; the book's launch and repository
buttons read it there, and ``tools/make_labs.py`` writes it into every lab's Colab badge and
every set-up cell (which installs the course with ``pip install git+<URL>``). This sets it and
regenerates them:

    make publish-url URL=https://github.com/ORG/REPO [BRANCH=main]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tools.course import ROOT  # noqa: E402

GITHUB = re.compile(r"^https://github\.com/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")


def set_repository(text: str, url: str, branch: str | None) -> str:
    """``_config.yml``'s text with ``repository: url:`` (and ``branch:``) replaced, comments kept."""
    block = re.search(r"(?m)^repository:\n((?:[ \t]+.*\n)+)", text)
    if not block:
        raise ValueError("_config.yml has no 'repository:' block")
    body = re.sub(r"(?m)^(\s+url:\s*).*$", lambda m: m.group(1) + url, block.group(1), count=1)
    if branch:
        body = re.sub(r"(?m)^(\s+branch:\s*).*$", lambda m: m.group(1) + branch, body, count=1)
    return text[: block.start(1)] + body + text[block.end(1) :]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("url", help="https://github.com/ORG/REPO (Colab opens GitHub URLs)")
    parser.add_argument("--branch", help="the branch Colab badges open (default: unchanged)")
    args = parser.parse_args()
    url = args.url.rstrip("/").removesuffix(".git")
    if not GITHUB.match(url):
        print(f"{args.url!r} is not https://github.com/ORG/REPO: Colab badges need a GitHub URL")
        return 2
    config = ROOT / "_config.yml"
    config.write_text(set_repository(config.read_text(), url, args.branch))
    subprocess.run([sys.executable, str(ROOT / "tools/make_labs.py")], check=True)
    print(
        f"repository.url is now {url}: Colab badges and set-up cells regenerated. Commit "
        "_config.yml, notebooks/, solutions/ and labs/, push, and open one lab's badge: its "
        "set-up cell must install the course from there (the repository must be public)."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
