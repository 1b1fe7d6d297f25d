"""The docs site in a real headless Chromium, offline: built strictly, served by a plain HTTP server.

The site is built with ``mkdocs build --strict`` into the test's temporary
folder and served by ``python -m http.server`` on a free port of 127.0.0.1;
the walk itself is ``browser.site_screenshots``. Screenshots go to the test's
temporary folder; ``python tests/browser.py --site`` regenerates the
``docs/assets/screenshots/site-*.png`` files. In CI (``CI`` set) a missing
browser is a failure, not a skip: ``tests/run.sh`` installs Debian's chromium.
"""

from __future__ import annotations

import os
import re
import urllib.request
from pathlib import Path

import pytest

import browser

REPO = Path(__file__).resolve().parents[1]

if not browser.available():
    if os.environ.get("CI"):
        raise RuntimeError("CI needs Debian's chromium, chromium-driver and selenium: see tests/run.sh")
    pytest.skip("Debian's chromium and chromium-driver are not installed (tests/run.sh installs them)",
                allow_module_level=True)


@pytest.fixture(scope="module")
def walk(tmp_path_factory):
    """Build, serve and walk the site once; the tests below read what the walk saw."""
    work = tmp_path_factory.mktemp("site")
    browser.build_site(work / "site")
    log = work / "requests.log"
    with browser.serve_static(work / "site", log) as base:
        seen = browser.site_screenshots(base, work / "shots")
        statuses = {path: urllib.request.urlopen(f"{base}/{path}").status  # noqa: S310 - 127.0.0.1 only
                    for _, path, _ in seen["labs_map"] if path}
    return {"base": base, "seen": seen, "requests": log.read_text(encoding="utf-8"), "lab_links": statuses}


def test_home_page_shows_the_title_and_the_labs_map(walk):
    seen = walk["seen"]
    assert seen["title"].startswith("proflab"), seen["title"]
    assert seen["h1"] == "proflab"
    rows = seen["labs_map"]
    assert rows, "no table under 'The labs'"
    linked = {href for _, href, _ in rows if href}
    pages = {f"labs/{p.stem}/" for p in (REPO / "docs" / "labs").glob("*.md")}
    assert linked == pages, f"the labs map links {sorted(linked)}, the lab pages are {sorted(pages)}"
    assert [number for number, _, _ in rows] == [str(n) for n in range(0, len(rows))]
    assert all(status == 200 for status in walk["lab_links"].values()), walk["lab_links"]


def test_lab_page_shows_its_screenshots(walk):
    images = dict(walk["seen"]["lab_images"])
    timeline = next((src for src in images if src.endswith("tensorboard-trace-timeline.png")), None)
    assert timeline, f"no Trace timeline screenshot on lab 1's page: {sorted(images)}"
    broken = [src for src, width in images.items() if not width]
    assert not broken, f"images that did not load: {broken}"


def test_every_code_block_has_a_working_copy_button(walk):
    seen = walk["seen"]
    assert seen["code_blocks"] >= 5  # the page's commands (what is for after a pass is the debrief's, not here)
    assert seen["copy_buttons"] == seen["code_blocks"]
    assert seen["copied"] == "Copied to clipboard"


def test_search_finds_the_dataloader(walk):
    seen = walk["seen"]
    assert re.fullmatch(r"\d+ matching documents?", seen["search_meta"]), seen["search_meta"]
    assert any("labs/01-dataloader/" in href for href in seen["search_results"]), seen["search_results"]


def test_cpu_and_cuda_tabs_switch(walk):
    seen = walk["seen"]
    assert seen["tab_labels"] == ["CPU", "CUDA"]
    assert "self_device_time_total" in seen["tab_shown"]
    assert "self_cpu_memory_usage" not in seen["tab_shown"]  # the CPU tab's table is hidden


def test_nothing_loaded_from_elsewhere_and_nothing_missing(walk):
    base = walk["base"]
    resources = walk["seen"]["resources"]
    assert resources, "the pages loaded no resources at all"
    outside = [url for url in resources if not url.startswith(base + "/")]
    assert not outside, f"loaded from outside the site: {outside}"
    missing = [line for line in walk["requests"].splitlines() if re.search(r'" (404|5\d\d) ', line)]
    assert not missing, "requests that failed:\n" + "\n".join(missing)


def test_screenshots_were_taken(walk):
    shots = walk["seen"]["shots"]
    assert sorted(p.name for p in shots) == sorted(browser.SITE_SHOTS)
    for shot in shots:
        data = shot.read_bytes()
        assert data.startswith(b"\x89PNG") and len(data) > 10_000, f"{shot.name} looks empty"
