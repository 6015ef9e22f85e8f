"""`make publish-url` sets the repository in _config.yml, its one home, keeping the file's
comments, and refuses a URL Colab cannot open (issue 32)."""

from __future__ import annotations

import subprocess
import sys

import yaml

from tools.course import ROOT
from tools.publish_url import set_repository


def test_sets_url_and_branch_and_keeps_everything_else():
    text = (ROOT / "_config.yml").read_text()
    new = set_repository(text, "https://github.com/someone/course", "dev")
    assert yaml.safe_load(new)["repository"] == {
        **yaml.safe_load(text)["repository"],
        "url": "https://github.com/someone/course",
        "branch": "dev",
    }
    changed = [a for a, b in zip(text.splitlines(), new.splitlines()) if a != b]
    assert len(changed) == 2 and len(text.splitlines()) == len(new.splitlines())


def test_refuses_a_url_that_is_not_a_github_repository():
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools/publish_url.py"), "https://gitlab.com/a/b"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "Colab badges need a GitHub URL" in done.stdout
