"""The documentation site builds strictly, and loads nothing from the internet."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from conftest import kit_labs

from proflab.authoring import page_rules
from proflab.reporting import figures

REPO = Path(__file__).resolve().parents[1]

# A <script src=...> or <link ... href=...> that points off the site:
# http://, https:// or protocol-relative //.
EXTERNAL_SOURCE = re.compile(
    r"""<(?:script\b[^>]*?\bsrc|link\b[^>]*?\bhref)\s*=\s*["']?\s*(?:https?:)?//""",
    re.IGNORECASE,
)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    site = tmp_path_factory.mktemp("docs") / "site"
    # The theme prints an end-of-life notice on every build; it is not about
    # these pages, so it is switched off to keep the output to real warnings.
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )
    return site, proc


def test_docs_build_strict_and_offline(built):
    site, proc = built
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


FIGURE = re.compile(r"\d[\d,]*(?:\.\d+)?\s?(?:[a-zA-Zµ×%]+)?")


class _Text(HTMLParser):
    """A page's text as a reader (or a text dump) gets it: every element's, collapsed blocks included."""

    def __init__(self):
        super().__init__()
        self.parts: list[str] = []

    def handle_data(self, data: str) -> None:
        self.parts.append(data)


def _text(html: str) -> str:
    parser = _Text()
    parser.feed(html)
    return " ".join(" ".join(parser.parts).split())


def test_no_page_shows_a_labs_fix_or_the_figures_it_is_graded_on(built):
    """What is for after a pass is not in the site at all (a collapsed block is still in the HTML): no line
    a lab's reference fix adds to its original, and no line of what its reference fix's check or run printed
    (docs/figures/labN/check-solution.txt: the figures the fix is graded on), in any page's text. It is the
    lab's debrief, shown by ``proflab debrief N`` once the lab is passed (tests/test_debrief.py)."""
    site, proc = built
    assert proc.returncode == 0, proc.stdout + proc.stderr
    secrets: dict[str, str] = {}  # what may not be shown -> whose it is
    for lab in kit_labs():
        for line in page_rules.solution_lines(lab):
            secrets[line] = f"lab {lab.number}'s reference fix"
        outputs = figures.figures_file(REPO).parent / f"lab{lab.number}"
        # what the untouched exercise's run and check print as well (the lab's title, the original's figures)
        # is no secret: the pages show it, for the learner to read before changing anything
        shown_before = " ".join(printed.read_text(encoding="utf-8") for printed in outputs.glob("*-exercise.txt"))
        shown_before = " ".join(shown_before.split())
        for printed in sorted(outputs.glob("*-solution.txt")):
            for line in printed.read_text(encoding="utf-8").splitlines():
                line = " ".join(line.split())
                # a line that quotes a figure of the reference fix's own (not only the original's)
                own = [f for f in FIGURE.findall(line) if f not in shown_before]
                if len(line) >= 40 and own:
                    secrets[line] = f"lab {lab.number}'s {printed.name}"
    assert len({whose for whose in secrets.values() if "reference fix" in whose}) == len(kit_labs())
    # and the diagnosis drills' fixes (no page names a drill's bottleneck: docs/drills.md teaches the looking)
    from proflab.authoring.drill_catalogue import CATALOGUE

    for bottleneck in CATALOGUE:
        for _, fixed in bottleneck.fix:
            for line in fixed.splitlines():
                line = " ".join(line.split())
                if len(line) >= page_rules.SHORTEST_LINE and "$" not in line:
                    secrets[line] = f"the {bottleneck.key} drill's fix"
    # the graded figures are there to look for: every lab whose reference fix was checked for the site
    checked = {w.split("'")[0] for w in secrets.values() if w.endswith("check-solution.txt")}
    assert len(checked) >= 8, checked
    shown = []
    for page in sorted(site.rglob("*.html")):
        text = _text(page.read_text(encoding="utf-8"))
        shown += [f"{page.relative_to(site)}: {whose}: {line!r}" for line, whose in secrets.items() if line in text]
    assert not shown, "pages show what is for after a pass:\n" + "\n".join(shown[:40])
