"""How long the Trace timeline tab takes to draw each lab's trace, in a real headless Chromium.

A learner opens TensorBoard's "Trace timeline" tab after a run or a check and waits for the timeline.
For each lab in labs/ this opens one trace of that lab in the tab, as a learner would meet it for the
first time (the server has not read it yet, the viewer page is loaded afresh), and times it from the
moment the tab's page starts loading to the moment its timeline is drawn: the trace read and sent by
the server, the trace viewer loaded, the trace imported, and the tracks painted on their canvas.

The traces are the ones the suite makes anyway: the original's trace of each lab's reference check
(``conftest``'s fixtures, ``report["traces"]``), lab 0's from its own check, lab 7's from its gate
(both looked for under the session's temporary folder). Run on their own, labs 0 and 7 make theirs.

Budget: ``BUDGET_S`` (3 s), held to the median of three tries, from the start of the tab's page to a
drawn timeline. On the 2-core machine, shared with other test runs (load average 2 to 5), the slowest
lab's trace (lab 2's original: 62,000 events in 3 steps, 25 MB of JSON) draws in 0.9 to 1.5 s (median
of three) and every other lab's in 0.4 to 1.2 s: the budget is twice the slowest, for a CI machine
busier still. The tab as it was took 3.3 to 3.5 s (median, load average 2) to 6.1 s (load average 5 to 7) on
lab 2's trace: the server parsed the whole file before sending it, and the viewer's progress dialog
waited for the browser to be idle between its stages.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import time
from pathlib import Path

import pytest

import browser
from conftest import Kit, explain, kit_labs, sharing_data
from proflab.viewing import tensorboard
from test_tensorboard import free_port

if not browser.available():
    if os.environ.get("CI"):
        raise RuntimeError("CI needs Debian's chromium, chromium-driver and selenium: see tests/run.sh")
    pytest.skip("Debian's chromium and chromium-driver are not installed (tests/run.sh installs them)",
                allow_module_level=True)

BUDGET_S = 3.0
TRIES = 3  # the median of three is held to the budget
GIVE_UP_S = 90.0  # one try that never draws

SLUGS = {lab.number: lab.slug for lab in kit_labs()}  # every lab in labs/

# In the tab's frame: the time since its page started loading (performance.now()) once the trace of
# `run` is loaded and its tracks are painted (a canvas with enough coloured pixels), else null; or the
# page's own error line.
DRAWN = """
const run = arguments[0], origin = arguments[1];
if (performance.timeOrigin === origin || !document.body) return null;
const status = document.getElementById('status');
const said = status ? status.textContent : '';
if (said.startsWith('cannot')) return {error: said};
if (document.body.dataset.loaded !== run) return null;
const canvases = [];
const walk = (n) => { if (n.tagName === 'CANVAS') canvases.push(n); if (n.shadowRoot) walk(n.shadowRoot);
                      for (const c of n.children || []) walk(c); };
walk(document.documentElement);
let painted = 0;
for (const c of canvases) {
  if (!c.width || !c.height) continue;
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  for (let i = 0; i < d.length; i += 4 * 5)
    if (d[i + 3] > 0 && (d[i] < 230 || d[i + 1] < 230 || d[i + 2] < 230)) painted++;
}
if (painted < 500) return null;
const fetched = (name) => { const e = performance.getEntriesByType('resource').find((r) => r.name.includes(name));
                            return e ? Math.round(e.responseEnd) : null; };
return {ms: performance.now(), painted, status: said, trace_ms: fetched('/trace?'),
        viewer_ms: fetched('trace_viewer_full.html'), phases: document.body.dataset.timings || ''};
"""


def _found(base: Path, pattern: str) -> Path | None:
    """The largest trace under the session's temporary folder that matches ``pattern`` (another test's)."""
    found = [p for p in base.glob(pattern) if p.is_file()]
    return max(found, key=lambda p: p.stat().st_size) if found else None


def _lab0_trace(kit: Kit, base: Path, tmp_path_factory) -> Path:
    found = _found(base, "lab0*/runs/00-profiler/*/*.pt.trace.json*")
    if found:
        return found
    own = sharing_data(tmp_path_factory.mktemp("timeline-lab0"), kit)  # run on its own: lab 0's reference
    proc = own.run("run", "0", "--version", "solution")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = _found(own.root, "runs/00-profiler/*/*.pt.trace.json*")
    assert found, f"lab 0's reference wrote no trace:\n{proc.stdout}"
    return found


def _lab7_trace(kit: Kit, base: Path, tmp_path_factory) -> Path:
    found = _found(base, "lab7*/runs/07-gate/*/*/*.pt.trace.json*")
    if found:
        return found
    own = sharing_data(tmp_path_factory.mktemp("timeline-lab7"), kit)  # run on its own: lab 7's reference gate
    code, report = own.check_json("7", "--file", str(own.root / "labs" / "07_gate" / "solution.toml"))
    found = _found(own.root, "runs/07-gate/*/*/*.pt.trace.json*")
    assert found, f"lab 7's reference gate wrote no trace: {explain(report)}"
    return found


def _original_trace(number: int, outcome: tuple[int, dict]) -> Path:
    _, report = outcome
    trace = report.get("traces", {}).get("original")
    assert trace and Path(trace).is_file(), f"lab {number}'s reference check kept no trace of the original: " \
                                            f"{explain(report)}"
    return Path(trace)


def lab_trace(number: int, request, kit: Kit, tmp_path_factory) -> Path:
    """Lab ``number``'s trace, from the session's fixtures or another test's kit (made here if none)."""
    base = Path(tmp_path_factory.getbasetemp())
    lab = next(lab for lab in kit_labs() if lab.number == number)
    if lab.profiling is not None:  # the learner's own profile: lab 0's
        return _lab0_trace(kit, base, tmp_path_factory)
    if lab.gating is not None:  # a gate's runs: lab 7's
        return _lab7_trace(kit, base, tmp_path_factory)
    if number == 1:
        return _original_trace(number, request.getfixturevalue("solution_check"))
    return _original_trace(number, request.getfixturevalue("reference_check")(number))


# What the tab shows before the first lab's trace is in: a step of a trace, so that TensorBoard lists the tab.
PLACEHOLDER = {"traceEvents": [
    {"ph": "M", "name": "process_name", "pid": 1, "tid": 1, "args": {"name": "python"}},
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 1000},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 100, "dur": 500}]}


class Tab:
    """One runs folder, served by one TensorBoard, and Chromium on its Trace timeline tab (started here,
    before any test, so that no test's leftovers check counts them as its own)."""

    def __init__(self, logdir: Path):
        self.logdir, self.proc, self.driver = logdir, None, None
        first = logdir / "00-start" / "here" / "host.1.pt.trace.json"
        first.parent.mkdir(parents=True)
        first.write_text(json.dumps(PLACEHOLDER))
        port = free_port()
        self.proc = tensorboard.start(logdir, port=port)
        try:
            self.driver = browser.chrome(offline=True)
            self.driver.get(f"http://127.0.0.1:{port}/#proflab_timeline")
            self.driver.switch_to.frame(browser.plugin_frame(self.driver, "proflab_timeline"))
            browser.wait_until(self.driver, "return document.body && document.body.dataset.loaded",
                               "the tab's first run", timeout=120)
        except BaseException:
            self.close()
            raise

    def place(self, number: int, source: Path) -> Path:
        """A copy of ``source`` in the runs folder, as ``<lab-slug>/<version>/``."""
        copy = self.logdir / SLUGS[number] / source.parent.name / source.name
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, copy)
        return copy

    def close(self):
        if self.driver is not None:
            self.driver.quit()
        if self.proc is not None:
            tensorboard.stop(self.proc)


@pytest.fixture(scope="module")
def tab(tmp_path_factory):
    opened = Tab(tmp_path_factory.mktemp("timeline-runs"))
    try:
        yield opened
    finally:
        opened.close()


def time_to_drawn(driver, trace: Path, run: str) -> dict:
    """Open ``run`` afresh in the tab's frame (a trace the server has not read: its file touched) and
    wait until its timeline is drawn; returns what ``DRAWN`` saw, with ``s`` the seconds it took."""
    os.utime(trace)  # a newer file: the server reads it again, as on a first view
    origin = driver.execute_script("return performance.timeOrigin")
    driver.execute_script("location.replace('index.html?run=' + encodeURIComponent(arguments[0]))", run)
    deadline = time.monotonic() + GIVE_UP_S
    while time.monotonic() < deadline:
        try:
            seen = driver.execute_script(DRAWN, run, origin)
        except Exception:  # the frame between two documents
            seen = None
        if seen and "error" in seen:
            pytest.fail(f"the tab could not show {run}: {seen['error']}")
        if seen:
            return {**seen, "s": seen["ms"] / 1000}
        time.sleep(0.1)
    return {"s": GIVE_UP_S, "status": "never drawn"}


@pytest.mark.parametrize("number", sorted(SLUGS))
def test_the_trace_timeline_draws_each_labs_trace_within_its_budget(tab, request, kit, tmp_path_factory, number):
    trace = tab.place(number, lab_trace(number, request, kit, tmp_path_factory))
    driver = tab.driver
    run = trace.parent.relative_to(tab.logdir).as_posix()
    tries = [time_to_drawn(driver, trace, run) for _ in range(TRIES)]
    median = statistics.median(t["s"] for t in tries)
    mb = trace.stat().st_size / 2**20
    shown = "; ".join(f"{t['s']:.2f} s (trace in at {t.get('trace_ms')} ms, viewer at {t.get('viewer_ms')} ms"
                      f"{', ' + t['phases'] if t.get('phases') else ''})" for t in tries)
    print(f"lab {number}, {run} ({mb:.1f} MB): drawn in {median:.2f} s (median): {shown}; "
          f"{tries[-1].get('status')}")
    assert median <= BUDGET_S, (f"lab {number}'s trace ({run}, {mb:.1f} MB) took {median:.1f} s to draw in the "
                                f"Trace timeline tab, over its {BUDGET_S:.0f} s budget: {shown}")
