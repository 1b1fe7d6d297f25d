"""The documentation site builds strictly, and loads nothing from the internet."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# A <script src=...> or <link ... href=...> that points off the site:
# http://, https:// or protocol-relative //.
EXTERNAL_SOURCE = re.compile(
    r"""<(?:script\b[^>]*?\bsrc|link\b[^>]*?\bhref)\s*=\s*["']?\s*(?:https?:)?//""",
    re.IGNORECASE,
)


def test_docs_build_strict_and_offline(tmp_path):
    site = tmp_path / "site"
    # The theme prints an end-of-life notice on every build; it is not about
    # these pages, so it is switched off to keep the output to real warnings.
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{output}"
    warnings = [line for line in output.splitlines() if "WARNING" in line]
    assert not warnings, "mkdocs printed warnings:\n" + "\n".join(warnings)

    assert (site / "index.html").is_file()
    assert (site / "labs" / "01-dataloader" / "index.html").is_file()

    pages = sorted(site.rglob("*.html"))
    assert pages
    for page in pages:
        html = page.read_text(encoding="utf-8")
        where = page.relative_to(site)
        assert "fonts.googleapis.com" not in html, f"{where} loads Google Fonts"
        external = [m.group(0) for m in EXTERNAL_SOURCE.finditer(html)]
        assert not external, f"{where} loads from the internet: {external}"


PLUGIN_VIEW = re.compile(r"PyTorch Profiler\s*›|Operator view|Trace view|Memory view|Distributed view")


def test_no_plugin_view_is_pointed_at_without_saying_it_needs_the_internet():
    """The profiler plugin's own views never finish loading offline: wherever the kit names one, the same
    paragraph (or manifest line, or docstring) says so."""
    files = [*REPO.glob("labs/*/lab.toml"), *REPO.glob("src/proflab/**/*.py"), *REPO.glob("docs/**/*.md")]
    silent = []
    for path in files:
        for paragraph in re.split(r"\n\s*\n", path.read_text(encoding="utf-8")):
            if PLUGIN_VIEW.search(paragraph) and "internet" not in paragraph:
                silent.append(f"{path.relative_to(REPO)}: {PLUGIN_VIEW.search(paragraph).group(0)!r} in "
                              f"{paragraph.strip()[:120]!r}")
    assert not silent, "\n".join(silent)


def test_every_lab_page_says_which_time_decides_as_its_manifest_does():
    """A lab's [timing] says per device whether its step's time is the clock or the run's CPU time; its page
    says so, and why, where it explains what the checker measures (page_rules.time_rule, which validate-lab
    applies too)."""
    from proflab import labs
    from proflab.authoring import page_rules

    for lab in labs.discover():
        if not lab.docs or lab.gating is not None:
            continue
        page = (REPO / "docs" / lab.docs).read_text(encoding="utf-8")
        assert "**Which time counts.**" in page, lab.docs
        assert page_rules.time_rule(lab, page) == [], lab.docs
