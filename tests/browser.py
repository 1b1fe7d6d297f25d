"""Drive a real, headless Chromium through TensorBoard, with no network, and take screenshots.

Used two ways:

* by ``tests/test_browser.py``, which asserts that each page rendered;
* as the one command that regenerates the docs' screenshots from real runs:

      python tests/browser.py --out docs/assets/screenshots

  It grades lab 1's reference fix in a scratch copy of the kit, serves the
  runs with ``proflab``'s TensorBoard, and saves one PNG per view.

It needs Debian's ``chromium`` and ``chromium-driver`` (``tests/run.sh``
installs them) and the ``selenium`` package.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
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


def chrome(width: int = 1400, height: int = 900):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
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


def timeline(driver, base: str, out: Path) -> Path:
    """The kit's "Trace timeline" tab: the profiler's trace viewer, offline."""
    from selenium.webdriver.common.by import By

    driver.get(f"{base}/#proflab_timeline")
    deadline = time.monotonic() + 90
    steps = ""
    while time.monotonic() < deadline:
        frames = driver.find_elements(By.TAG_NAME, "iframe")
        if frames:
            driver.switch_to.frame(frames[0])
            steps = driver.execute_script("return document.body ? (document.body.dataset.steps || '') : ''")
            driver.switch_to.default_content()
            if steps:
                break
        time.sleep(1)
    assert steps and int(steps) > 0, "the timeline never showed the trace's ProfilerStep# events"
    time.sleep(2)
    path = out / "tensorboard-trace-timeline.png"
    driver.save_screenshot(str(path))
    return path


def tensorboard_screenshots(base: str, out: Path) -> list[Path]:
    """The views that work offline, each asserted to have rendered.

    The profiler plugin's own pages are not among them: its Overview and
    Operator charts load Google Charts, and its Trace view loads a
    web-components polyfill from cdnjs.cloudflare.com, so offline they never
    finish loading. Their data is checked through the plugin's HTTP API, and
    the kit's Trace timeline tab shows the same trace viewer offline.
    """
    out.mkdir(parents=True, exist_ok=True)
    driver = chrome()
    try:
        return [
            dashboard(driver, base, "scalars", ("step_time_ms", "01-dataloader/original"), out),
            dashboard(driver, base, "text", ("checker_report", "The starved DataLoader", "Faster"), out),
            dashboard(driver, base, "images", ("where_the_time_went", "step_times"), out),
            timeline(driver, base, out),
        ]
    finally:
        driver.quit()


def main() -> None:
    parser = argparse.ArgumentParser(description="Regenerate the docs' TensorBoard screenshots from real runs.")
    parser.add_argument("--out", default=str(REPO / "docs" / "assets" / "screenshots"))
    args = parser.parse_args()
    if not available():
        raise SystemExit("needs Debian's chromium and chromium-driver, and selenium (see tests/run.sh)")
    root = Path(tempfile.mkdtemp(prefix="proflab-shots-"))
    shutil.copytree(REPO / "labs", root / "labs", ignore=shutil.ignore_patterns("__pycache__"))
    env = {**os.environ, "PROFLAB_ROOT": str(root)}
    print("Grading lab 1's reference fix (about a minute)…", flush=True)
    subprocess.run([sys.executable, "-m", "proflab", "check", "1", "--file",
                    str(root / "labs" / "01_dataloader" / "solution.py")], cwd=root, env=env, check=False,
                   stdout=subprocess.DEVNULL)
    os.environ["PROFLAB_ROOT"] = str(root)
    sys.path.insert(0, str(REPO / "src"))
    from proflab import tensorboard
    from test_tensorboard import free_port

    port = free_port()
    proc = tensorboard.start(root / "runs", port=port)
    try:
        for path in tensorboard_screenshots(f"http://127.0.0.1:{port}", Path(args.out)):
            print(f"wrote {path}")
    finally:
        tensorboard.stop(proc)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
