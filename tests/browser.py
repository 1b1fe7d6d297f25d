"""Drive a real, headless Chromium through TensorBoard, with no network, and take screenshots.

Used two ways:

* by ``tests/test_browser.py``, which asserts that each page rendered;
* as the one command that regenerates the docs' screenshots from real runs:

      python tests/browser.py --out docs/assets/screenshots

  It grades lab 1's reference fix in a scratch copy of the kit, serves the
  runs with ``proflab``'s TensorBoard, and saves one PNG per view.

* for the docs site itself, by ``tests/test_site_browser.py``, and as the
  command that regenerates the site's screenshots (``site-*.png``):

      python tests/browser.py --site

  It builds the site with ``mkdocs build --strict``, serves it with a plain
  ``python -m http.server`` on 127.0.0.1, and walks it: home, a lab page,
  the search, the CPU/CUDA tabs.

It needs Debian's ``chromium`` and ``chromium-driver`` (``tests/run.sh``
installs them) and the ``selenium`` package.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
REPO = Path(__file__).resolve().parents[1]

# Every text node of the page, inside shadow roots too (TensorBoard's dashboards are web components).
DEEP_TEXT = """
const out = [];
const walk = (n) => {
  if (n.nodeType === Node.TEXT_NODE) out.push(n.textContent);
  if (n.shadowRoot) walk(n.shadowRoot);
  for (const c of n.childNodes) walk(c);
};
walk(document.body);
return out.join(' ');
"""


def available() -> bool:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return False
    return CHROMIUM.exists() and CHROMEDRIVER.exists()


def chrome(width: int = 1400, height: int = 900, offline: bool = False):
    """Headless Chromium; ``offline``: no host but this machine resolves, as in a room with no network."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    if offline:
        options.add_argument("--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1, EXCLUDE localhost")
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-quic", "--no-first-run", "--hide-scrollbars", f"--window-size={width},{height}",
                 f"--user-data-dir={tempfile.mkdtemp(prefix='chromium-')}"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)


def deep_text(driver) -> str:
    return driver.execute_script(DEEP_TEXT)


def wait_for_text(driver, *needles: str, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        text = deep_text(driver)
        if all(n in text for n in needles):
            return text
        time.sleep(0.5)
    raise AssertionError(f"page never showed {needles!r}; it showed: {text[:500]!r}")


def dashboard(driver, base: str, name: str, needles: tuple[str, ...], out: Path, settle: float = 3.0) -> Path:
    """Open one TensorBoard dashboard (``#scalars``, ``#text``, ``#images``) and screenshot it."""
    driver.get(f"{base}/#{name}")
    wait_for_text(driver, *needles)
    time.sleep(settle)  # let charts finish drawing
    path = out / f"tensorboard-{name}.png"
    driver.save_screenshot(str(path))
    return path


def timeline(driver, base: str, out: Path, name: str = "tensorboard-trace-timeline.png", run: str = "") -> Path:
    """The kit's "Trace timeline" tab: the profiler's trace viewer, offline (the run it opens first, or
    ``run``, chosen in its Run list as a learner would)."""
    driver.get(f"{base}/#proflab_timeline")
    frame = plugin_frame(driver, "proflab_timeline")
    deadline = time.monotonic() + 90
    steps = ""
    while time.monotonic() < deadline:
        driver.switch_to.frame(frame)
        if run:
            driver.execute_script(
                "const s = document.getElementById('run'); const run = arguments[0];"
                "if (s && s.options.length && s.value !== run && [...s.options].some(o => o.value === run)) {"
                "  s.value = run; s.dispatchEvent(new Event('change')); }", run)
        loaded = driver.execute_script("return document.body ? (document.body.dataset.loaded || '') : ''")
        steps = driver.execute_script("return document.body ? (document.body.dataset.steps || '') : ''")
        driver.switch_to.default_content()
        if steps and (not run or loaded == run):
            break
        time.sleep(1)
    assert steps and int(steps) > 0, "the timeline never showed the trace's ProfilerStep# events"
    time.sleep(2)
    path = out / name
    driver.save_screenshot(str(path))
    return path


def plugin_frame(driver, plugin: str, timeout: float = 90.0):
    """The iframe of one plugin's tab (TensorBoard keeps the frames of tabs opened before, hidden)."""
    from selenium.webdriver.common.by import By

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for frame in driver.find_elements(By.TAG_NAME, "iframe"):
            if plugin in (frame.get_attribute("src") or ""):
                return frame
        time.sleep(0.5)
    raise AssertionError(f"TensorBoard never opened the {plugin} tab's frame")


PROFILE_VIEW = """
const [view, run, before, after] = arguments;
const pick = (id, value) => { const s = document.getElementById(id);
  if (value && s.value !== value) { s.value = value; s.dispatchEvent(new Event('change')); } };
pick('run', run); pick('before', before); pick('after', after);
document.querySelector(`#views button[data-view="${view}"]`).click();
"""


def profile_view(driver, base: str, out: Path, view: str, run: str | None = None, before: str | None = None,
                 after: str | None = None, name: str | None = None) -> Path:
    """The kit's Profile tab inside TensorBoard, on ``view`` (and the runs asked for), once it has drawn."""
    driver.get(f"{base}/#proflab_profile")
    driver.switch_to.frame(plugin_frame(driver, "proflab_profile"))
    try:
        wait_until(driver, "return document.body && document.body.dataset.view", "the Profile tab", timeout=90)
        driver.execute_script(PROFILE_VIEW, view, run, before, after)
        wait_until(driver, "return document.body.dataset.view === arguments[0] && "
                           "(!arguments[1] || document.body.dataset.loaded === arguments[1])",
                   f"the Profile tab's {view} view", view, run, timeout=90)
        if view == "memory":
            wait_until(driver, "const i = document.querySelector('#memory-chart img');"
                               "return !i || (i.complete && i.naturalWidth)", "the memory chart")
    finally:
        driver.switch_to.default_content()
    time.sleep(1)
    path = out / (name or f"tensorboard-profile-{view}.png")
    driver.save_screenshot(str(path))
    return path


def tensorboard_screenshots(base: str, out: Path, memory_run: str | None = None) -> list[Path]:
    """The views that work offline, each asserted to have rendered.

    The profiler plugin's own pages are not among them: its Overview and
    Operator charts load Google Charts from the internet, and its Trace view
    loads a web-components polyfill from cdnjs.cloudflare.com, so offline they
    never finish loading. Their data is checked through the plugin's HTTP
    API; the kit's Profile and Trace timeline tabs show the same offline.
    ``memory_run``: a run profiled with profile_memory, for the Memory view.
    """
    out.mkdir(parents=True, exist_ok=True)
    driver = chrome()
    try:
        return [
            dashboard(driver, base, "scalars", ("step_time_ms/01-dataloader", "01-dataloader/original"), out),
            dashboard(driver, base, "text", ("checker_report", "The starved DataLoader", "Faster"), out),
            dashboard(driver, base, "images", ("where_the_time_went", "step_times"), out),
            timeline(driver, base, out),
            profile_view(driver, base, out, "overview", run="01-dataloader/original"),
            profile_view(driver, base, out, "operators", run="01-dataloader/original"),
            profile_view(driver, base, out, "diff", before="01-dataloader/original", after="01-dataloader/reference"),
        ] + ([profile_view(driver, base, out, "memory", run=memory_run)] if memory_run else [])
    finally:
        driver.quit()


# --- the docs site ---------------------------------------------------------------

SITE_SHOTS = ["site-home.png", "site-lab.png", "site-search.png", "site-tabs.png"]

# The labs map of the home page: one row per lab, [number, link or null, the lab's cell].
LABS_MAP = """
const heading = document.getElementById('the-labs');
let node = heading && heading.nextElementSibling;
while (node && !(node.tagName === 'TABLE' || node.querySelector('table'))) node = node.nextElementSibling;
if (!node) return null;
const table = node.tagName === 'TABLE' ? node : node.querySelector('table');
return [...table.querySelectorAll('tbody tr')].map((row) => {
  const cells = row.querySelectorAll('td');
  const link = cells[1].querySelector('a');
  return [cells[0].textContent.trim(), link ? link.getAttribute('href') : null, cells[1].textContent.trim()];
});
"""

RESOURCES = "return performance.getEntriesByType('resource').map((e) => e.name)"


def build_site(dest: Path) -> str:
    """``mkdocs build --strict`` of the checkout into ``dest``; returns what mkdocs printed."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # the theme's end-of-life notice, not about these pages
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(dest)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    output = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise RuntimeError(f"mkdocs build --strict failed:\n{output}")
    return output


@contextmanager
def serve_static(folder: Path, log: Path):
    """Serve ``folder`` with ``python -m http.server`` on a free port of 127.0.0.1; yield its base URL.

    The server's request log (one line per request, with its status) goes to ``log``.
    """
    with open(log, "w", encoding="utf-8") as requests:
        proc = subprocess.Popen([sys.executable, "-u", "-m", "http.server", "0", "--bind", "127.0.0.1",
                                 "--directory", str(folder)], stdout=subprocess.PIPE, stderr=requests, text=True)
        try:
            first = proc.stdout.readline()  # "Serving HTTP on 127.0.0.1 port 41234 (...)"
            port = re.search(r"port (\d+)", first)
            if not port:
                raise RuntimeError(f"python -m http.server did not start: {first!r}")
            yield f"http://127.0.0.1:{port.group(1)}"
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def wait_until(driver, script: str, what: str, *args, timeout: float = 30.0):
    """Run ``script`` until it returns something truthy; return that."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = driver.execute_script(script, *args)
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"{what}: still not the case after {timeout:.0f} s on {driver.current_url}")


def site_screenshots(base: str, out: Path) -> dict:
    """Walk the docs site served at ``base``, save ``SITE_SHOTS`` into ``out``, and report what was seen.

    Each step waits for its page to have rendered (the walk fails if it never
    does); the caller asserts on the report.
    """
    from selenium.webdriver import ActionChains
    from selenium.webdriver.common.by import By

    out.mkdir(parents=True, exist_ok=True)
    seen: dict = {"resources": set(), "shots": []}
    driver = chrome()

    def shot(name: str) -> None:
        time.sleep(0.5)  # let transitions finish
        driver.save_screenshot(str(out / name))
        seen["shots"].append(out / name)

    def leave() -> None:
        seen["resources"].update(driver.execute_script(RESOURCES))

    def scroll_to(element) -> None:  # its top just under the sticky header
        driver.execute_script("window.scrollTo(0, arguments[0].getBoundingClientRect().top + window.scrollY - 72)",
                              element)

    try:
        # Home: the title and the labs map.
        driver.get(f"{base}/")
        wait_until(driver, "return document.readyState === 'complete' && document.querySelector('h1')", "home loaded")
        seen["title"] = driver.title
        seen["h1"] = driver.find_element(By.TAG_NAME, "h1").text
        seen["labs_map"] = driver.execute_script(LABS_MAP)
        scroll_to(driver.find_element(By.ID, "the-labs"))
        shot("site-home.png")
        driver.execute_script("window.scrollTo(0, 0)")

        # Search, from the home page.
        box = driver.find_element(By.CSS_SELECTOR, "input.md-search__input")
        box.click()
        box.send_keys("DataLoader")
        wait_until(driver, "return document.querySelectorAll('.md-search-result__item').length", "search results")
        seen["search_meta"] = driver.find_element(By.CSS_SELECTOR, ".md-search-result__meta").text
        seen["search_results"] = driver.execute_script(
            "return [...document.querySelectorAll('.md-search-result__item > a')].map((a) => a.getAttribute('href'))")
        shot("site-search.png")
        leave()

        # Lab 1: its screenshots loaded, and a copy button on every code block.
        driver.get(f"{base}/labs/01-dataloader/")
        wait_until(driver, "return [...document.images].every((i) => i.complete)", "images loaded")
        seen["lab_images"] = driver.execute_script(
            "return [...document.querySelectorAll('article img')].map((i) => [i.getAttribute('src'), i.naturalWidth])")
        image = driver.find_element(By.CSS_SELECTOR, "article img[src$='tensorboard-trace-timeline.png']")
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", image)
        shot("site-lab.png")
        seen["code_blocks"] = driver.execute_script("return document.querySelectorAll('article pre').length")
        seen["copy_buttons"] = wait_until(
            driver, "const n = document.querySelectorAll('article pre button.md-code__button').length;"
                    "return n === document.querySelectorAll('article pre').length && n", "copy buttons")
        button = next(b for b in driver.find_elements(By.CSS_SELECTOR, "article pre button.md-code__button")
                      if b.is_displayed())
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", button)
        ActionChains(driver).move_to_element(button).pause(0.3).click().perform()
        seen["copied"] = wait_until(
            driver, "const d = document.querySelector('.md-dialog--active'); return d && d.textContent.trim()",
            "the copy button's confirmation")
        leave()

        # Reading a profile: the CPU/CUDA tabs switch.
        driver.get(f"{base}/reading-a-profile/")
        wait_until(driver, "return document.querySelector('.tabbed-labels label')", "content tabs")
        heading = driver.find_element(By.ID, "sorting-the-table")
        scroll_to(heading)
        tabs = heading.find_element(By.XPATH, "following::div[contains(@class, 'tabbed-set')][1]")
        labels = tabs.find_elements(By.CSS_SELECTOR, ".tabbed-labels label")
        seen["tab_labels"] = [label.text for label in labels]
        next(label for label in labels if label.text == "CUDA").click()
        seen["tab_shown"] = wait_until(
            driver, "const b = [...arguments[0].querySelectorAll('.tabbed-block')].filter((b) => b.offsetParent);"
                    "return b.length === 1 && b[0].textContent", "the CUDA tab", tabs)
        shot("site-tabs.png")
        leave()
    finally:
        driver.quit()
    seen["resources"] = sorted(seen["resources"])
    return seen


def site_main(out: Path) -> None:
    work = Path(tempfile.mkdtemp(prefix="proflab-site-"))
    try:
        print("Building the site (mkdocs build --strict)…", flush=True)
        build_site(work / "site")
        with serve_static(work / "site", work / "requests.log") as base:
            seen = site_screenshots(base, out)
        for path in seen["shots"]:
            print(f"wrote {path}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description="Regenerate the docs' screenshots: TensorBoard's from real runs "
                                                 "(the default), or the docs site's own (--site).")
    parser.add_argument("--out", default=str(REPO / "docs" / "assets" / "screenshots"))
    parser.add_argument("--site", action="store_true",
                        help="build and serve the docs site and save its site-*.png screenshots instead")
    parser.add_argument("--labs", nargs="+", metavar="LAB",
                        help="instead, for each lab: grade its reference fix and save the Trace timeline of "
                             "its original as trace-timeline-NN-name.png")
    args = parser.parse_args()
    if not available():
        raise SystemExit("needs Debian's chromium and chromium-driver, and selenium (see tests/run.sh)")
    if args.site:
        site_main(Path(args.out))
        return
    if args.labs:
        for lab in args.labs:
            lab_timeline(lab, Path(args.out))
        return
    root = Path(tempfile.mkdtemp(prefix="proflab-shots-"))
    shutil.copytree(REPO / "labs", root / "labs", ignore=shutil.ignore_patterns("__pycache__"))
    if (REPO / "data").is_dir():  # the lab data, built once (runs see it read-only)
        (root / "data").symlink_to(REPO / "data")
    env = {**os.environ, "PROFLAB_ROOT": str(root)}
    print("Grading lab 1's reference fix (about half a minute)…", flush=True)
    subprocess.run([sys.executable, "-m", "proflab", "check", "1", "--file",
                    str(root / "labs" / "01_dataloader" / "solution.py")], cwd=root, env=env, check=False,
                   stdout=subprocess.DEVNULL)
    print("Profiling lab 3's original with profile_memory, for the Memory view…", flush=True)
    subprocess.run([sys.executable, "-m", "proflab", "run", "3", "--version", "original", "--profile-memory"],
                   cwd=root, env=env, check=False, stdout=subprocess.DEVNULL)
    os.environ["PROFLAB_ROOT"] = str(root)
    sys.path.insert(0, str(REPO / "src"))
    from proflab.viewing import tensorboard
    from test_tensorboard import free_port

    port = free_port()
    proc = tensorboard.start(root / "runs", port=port)
    try:
        for path in tensorboard_screenshots(f"http://127.0.0.1:{port}", Path(args.out), "03-fusion/original"):
            print(f"wrote {path}")
    finally:
        tensorboard.stop(proc)
        shutil.rmtree(root, ignore_errors=True)


def lab_timeline(lab: str, out: Path) -> None:
    """Grade ``lab``'s reference fix in a scratch kit; screenshot the Trace timeline of its original."""
    root = Path(tempfile.mkdtemp(prefix="proflab-shots-"))
    shutil.copytree(REPO / "labs", root / "labs", ignore=shutil.ignore_patterns("__pycache__"))
    if (REPO / "data").is_dir():
        (root / "data").symlink_to(REPO / "data")
    env = {**os.environ, "PROFLAB_ROOT": str(root)}
    os.environ["PROFLAB_ROOT"] = str(root)
    sys.path.insert(0, str(REPO / "src"))
    from proflab import labs
    from proflab.viewing import tensorboard
    from test_tensorboard import free_port

    found = labs.resolve(lab)
    print(f"Grading lab {found.number}'s reference fix…", flush=True)
    subprocess.run([sys.executable, "-m", "proflab", "check", lab, "--file", str(found.solution)],
                   cwd=root, env=env, check=False, stdout=subprocess.DEVNULL)
    port = free_port()
    proc = tensorboard.start(root / "runs", port=port)
    driver = chrome()
    try:
        out.mkdir(parents=True, exist_ok=True)
        path = timeline(driver, f"http://127.0.0.1:{port}", out, f"trace-timeline-{found.slug}.png",
                        run=f"{found.slug}/original")
        print(f"wrote {path}")
        if found.leaner:  # a lab graded on memory: its original's climb, in Profile › Memory
            path = profile_view(driver, f"http://127.0.0.1:{port}", out, "memory", run=f"{found.slug}/original",
                                name=f"tensorboard-profile-memory-{found.slug}.png")
            print(f"wrote {path}")
    finally:
        driver.quit()
        tensorboard.stop(proc)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
