"""How often ``proflab gate`` raises a false alarm, and the smallest slowdown it always catches.

Both are real ``proflab gate`` runs in a temporary copy of the labs (your
runs/ are never touched), with one core hogged by a busy loop beside them (a
second program on a shared laptop, or a CI runner's neighbour):

* ``--false-alarms``: a candidate gated against an identical copy of itself,
  ``--repeats`` times, at ``--max-slowdown`` (default 1.10): ``--candidate
  lab1``, lab 1's fix (``--lab 1``: eight DataLoader workers on two cores, a
  noisy step), or ``steady``, a calibration step of matrix products on one
  thread, as a project's model step would be. Exit 1 is a false alarm; exit 4
  (too noisy to call) is counted apart: not a wrong verdict, but a pull
  request held up.
* ``--resolution``: a calibration workload (a fixed number of 128×128 matrix
  products per step) against candidates that do a known factor more of them
  (1.05×, 1.10×, ... slower), gated with ``--max-slowdown`` just above 1
  (1.001): the resolution is the smallest slowdown called a regression in
  every one of ``--repeats`` gates. A pass would be a wrong verdict.

Usage:

    python benchmarks/bench_gate.py --false-alarms --repeats 10 --candidate steady
    python benchmarks/bench_gate.py --false-alarms --repeats 10 --candidate lab1 --max-slowdown 1.3
    python benchmarks/bench_gate.py --resolution --repeats 5 --slowdowns 1.05 1.10 1.20 1.30
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from bench_checks import spread  # this folder is on sys.path when the script runs
from bench_busy import hogs
from bench_noise import CALIBRATION_ORIGINAL

REPO = Path(__file__).resolve().parents[1]

SLOWER = CALIBRATION_ORIGINAL.replace("range(cfg.products)", "range(round(cfg.products * SLOWDOWN))")

SETTINGS = """[tool.proflab.gate]
file = "candidate.py"
baseline = "baseline.py"
warmup_steps = 2
timed_steps = 20
profile_steps = 2
threads = 1
[tool.proflab.gate.params]
products = 200
"""


def gate(cwd: Path, *args: str) -> tuple[int, dict, float]:
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "proflab", "gate", *args, "--json"], cwd=cwd,
                          capture_output=True, text=True)
    took = time.perf_counter() - started
    try:
        return proc.returncode, json.loads(proc.stdout), took
    except json.JSONDecodeError:
        return proc.returncode, {"error": proc.stderr[-500:]}, took


def _row(code: int, report: dict, took: float) -> str:
    s = report.get("slowdown") or {}
    rounds = (report.get("comparison") or {}).get("rounds", 0)
    changed = ", ".join(f"{c['name']} {c['status']}" for c in report.get("changes") or []) or "nothing"
    return (f"exit {code}: {s.get('median', 0):.3f}× ({s.get('low', 0):.3f}–{s.get('high', 0):.3f}), "
            f"{rounds} rounds, {took:.0f} s, {report.get('figure', 'wall_time')}; what changed: {changed}")


def false_alarms(root: Path, repeats: int, max_slowdown: float, candidate: str) -> dict:
    """``candidate`` "lab1": lab 1's fix (8 DataLoader workers: a noisy step on 2 cores) against its copy;
    "steady": the calibration step (matrix products, one thread) against its copy, as a project gates it."""
    if candidate == "lab1":
        lab = root / "labs" / "01_dataloader"
        shutil.copyfile(lab / "solution.py", lab / "same.py")
        cwd, args, what = root, [str(lab / "solution.py"), "--baseline", str(lab / "same.py"), "--lab", "1"], \
            "lab 1's fix against its copy"
    else:
        cwd = root / "steady"
        cwd.mkdir()
        (cwd / "pyproject.toml").write_text(SETTINGS)
        (cwd / "baseline.py").write_text(CALIBRATION_ORIGINAL)
        (cwd / "candidate.py").write_text(CALIBRATION_ORIGINAL)
        args, what = [], "a steady step (matrix products) against its copy"
    codes, slowdowns, rounds, times, listed = [], [], [], [], []
    for i in range(repeats):
        code, report, took = gate(cwd, *args, "--max-slowdown", str(max_slowdown))
        print(f"  identical {i + 1}/{repeats}: {_row(code, report, took)}", flush=True)
        codes.append(code)
        listed.append(len(report.get("changes") or []))
        slowdowns.append((report.get("slowdown") or {}).get("median", 0.0))
        rounds.append((report.get("comparison") or {}).get("rounds", 0))
        times.append(took)
    print(f"\n| candidate | gates | no regression (0) | false alarm (1) | too noisy (4) | slowdown | rounds | "
          f"time |\n|---|---|---|---|---|---|---|---|\n| {what}, max_slowdown "
          f"{max_slowdown:g} | {repeats} | {codes.count(0)} | {codes.count(1)} | {codes.count(4)} | "
          f"{spread(slowdowns)} | {spread(rounds)} | {spread(times)} s |", flush=True)
    print(f"\n'What changed' listed something for {sum(1 for n in listed if n)} of {repeats} identical pairs",
          flush=True)
    return {"candidate": candidate, "max_slowdown": max_slowdown, "codes": codes, "slowdowns": slowdowns,
            "rounds": rounds, "times": times, "changes_listed": listed}


def resolution(root: Path, repeats: int, slowdowns: list[float], limit: float = 1.001) -> dict:
    project = root / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text(SETTINGS)
    (project / "baseline.py").write_text(CALIBRATION_ORIGINAL)
    found: dict[str, list] = {}
    print("\n| true slowdown | regression (1) | no regression (0) | too noisy (4) | measured (median) |\n"
          "|---|---|---|---|---|", flush=True)
    lines = []
    for slowdown in slowdowns:
        (project / "candidate.py").write_text(SLOWER.replace("SLOWDOWN", repr(slowdown)))
        codes, measured = [], []
        for i in range(repeats):
            code, report, took = gate(project, "--max-slowdown", str(limit))
            print(f"  {slowdown:.2f}× {i + 1}/{repeats}: {_row(code, report, took)}", flush=True)
            codes.append(code)
            measured.append((report.get("slowdown") or {}).get("median", 0.0))
        found[f"{slowdown:g}"] = {"codes": codes, "measured": measured}
        lines.append(f"| {slowdown:.2f}× | {codes.count(1)} | {codes.count(0)} | {codes.count(4)} | "
                     f"{sorted(measured)[len(measured) // 2]:.3f}× |")
        print(lines[-1], flush=True)
    caught = [float(k) for k, v in found.items() if v["codes"].count(1) == repeats]
    print("\n" + "\n".join(lines))
    print(f"\nResolution: the smallest slowdown called a regression in all {repeats} gates: "
          f"{min(caught):.2f}×" if caught else "\nNo slowdown was caught every time.")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--false-alarms", action="store_true")
    parser.add_argument("--resolution", action="store_true")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--max-slowdown", type=float, default=1.10)
    parser.add_argument("--candidate", choices=("lab1", "steady"), default="lab1",
                        help="with --false-alarms: what is gated against its copy")
    parser.add_argument("--slowdowns", nargs="+", type=float, default=[1.05, 1.10, 1.20, 1.30])
    parser.add_argument("--hogs", type=int, default=1, help="busy loops beside the gates (0: a quiet machine)")
    parser.add_argument("--measure", choices=("wall_time", "cpu_time"), help="the steady step's gate setting")
    parser.add_argument("--resolution-limit", type=float, default=1.001,
                        help="with --resolution: the max_slowdown the slower candidates are gated at")
    parser.add_argument("--json-out")
    args = parser.parse_args()
    if not (args.false_alarms or args.resolution):
        parser.error("say what to measure: --false-alarms, --resolution")
    root = Path(tempfile.mkdtemp(prefix="proflab-gate-"))
    root.chmod(0o755)  # the sandbox runs as nobody when the kit runs as root
    shutil.copytree(REPO / "labs", root / "labs", ignore=shutil.ignore_patterns("__pycache__"))
    os.environ["PROFLAB_ROOT"] = str(root)
    subprocess.run([sys.executable, "-m", "proflab", "data"], cwd=root, capture_output=True)
    load = "quiet machine" if not args.hogs else f"{args.hogs} busy loop(s) beside"
    global SETTINGS
    if args.measure:
        SETTINGS = SETTINGS.replace("threads = 1\n", f'threads = 1\nmeasure = "{args.measure}"\n')
    print(f"# proflab gate under noise — {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC")
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; {load}\n",
          flush=True)
    figures = {}
    try:
        with hogs(args.hogs):
            if args.false_alarms:
                figures["false_alarms"] = false_alarms(root, args.repeats, args.max_slowdown, args.candidate)
            if args.resolution:
                figures["resolution"] = resolution(root, args.repeats, args.slowdowns, args.resolution_limit)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
