"""Verdicts on a busy machine: several checks at once, and checks beside CPU hogs (not a test: it prints figures).

Every check is a real ``proflab check --json`` in a temporary copy of the
labs (your runs/ and progress are never touched), with a slot folder of its
own, so nothing else on the machine takes turns with it:

* ``--together R``: four checks started at the same moment, two reference
  fixes and two untouched exercises of four different labs, the labs taken
  in turn (0 to 6, a rotation per repeat), ``R`` times. A verdict is wrong
  when a fix does not pass or an exercise does; inconclusive is counted
  apart. Each check's wall time is given with the time it waited for turns.
* ``--alone``: one check of every lab's reference fix after another,
  beside ``--hogs N`` busy loops (0: a quiet machine), and lab 1's
  ``--lab1-repeats`` more times (the lab contention moves most).

``--kit SRC`` runs the checks with another checkout's ``src`` and its labs
(the kit as it was), so that both are measured side by side on the same
machine. Usage:

    python benchmarks/bench_busy.py --together 5
    python benchmarks/bench_busy.py --alone --hogs 2 --lab1-repeats 4
    python benchmarks/bench_busy.py --alone --hogs 0 --kit ../old/src
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LABS = ["0", "1", "2", "3", "4", "5", "6"]


def _spin(stop) -> None:
    x = 0
    while not stop.is_set():
        x = (x * 31 + 7) % 1000003


@contextmanager
def hogs(count: int):
    """``count`` busy loops, each a process of its own, for as long as the block runs."""
    stop = multiprocessing.Event()
    procs = [multiprocessing.Process(target=_spin, args=(stop,), daemon=True) for _ in range(count)]
    for p in procs:
        p.start()
    try:
        yield
    finally:
        stop.set()
        for p in procs:
            p.join(timeout=5)


def kit_copy(checkout: Path) -> Path:
    """A temporary copy of the labs of ``checkout`` (the kit measured: its manifests are its own)."""
    root = Path(tempfile.mkdtemp(prefix="proflab-busy-"))
    root.chmod(0o755)  # the sandbox runs as nobody when the kit runs as root
    shutil.copytree(checkout / "labs", root / "labs", ignore=shutil.ignore_patterns("__pycache__"))
    return root


def start(root: Path, env: dict, lab: str, fix: bool) -> subprocess.Popen:
    from proflab import labs

    args = ["check", lab, "--json"] + (["--file", str(labs.resolve(lab).solution)] if fix else [])
    return subprocess.Popen([sys.executable, "-m", "proflab", *args], cwd=root, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen, started: float, lab: str, fix: bool) -> dict:
    out, err = proc.communicate()
    took = time.perf_counter() - started
    try:
        report = json.loads(out)
    except json.JSONDecodeError:
        report = {"verdict": f"exit {proc.returncode}", "error": err[-300:]}
    verdict = report.get("verdict", "?")
    wrong = verdict in ("passed", "failed") and (verdict == "passed") != fix
    cmp = report.get("comparison") or {}
    return {"lab": lab, "version": "fix" if fix else "exercise", "verdict": verdict, "wrong": wrong,
            "wall_s": round(took, 1), "waited_s": round(report.get("waited_s", 0.0), 1),
            "speedup": cmp.get("speedup"), "ci": [cmp.get("ci_low"), cmp.get("ci_high")],
            "rounds": cmp.get("rounds"), "figure": report.get("figure", "wall_time"),
            "said_wait": "waiting for a turn" in err, "error": report.get("error", "")[:200]}


def line(r: dict) -> str:
    fig = ""
    if r["speedup"]:
        lo, hi = r["ci"]
        fig = f" {r['speedup']:.2f}× ({lo:.2f}–{hi:.2f}, {r['rounds']} rounds, {r['figure']})"
    return (f"lab {r['lab']} {r['version']}: {r['verdict']}{' WRONG' if r['wrong'] else ''}{fig}, "
            f"{r['wall_s']:.0f} s of which {r['waited_s']:.0f} s waiting"
            + (f" — {r['error']}" if r["error"] and r["verdict"] not in ("passed", "failed") else ""))


def together(root: Path, env: dict, repeats: int) -> list[dict]:
    results = []
    for i in range(repeats):
        labs_now = [LABS[(2 * i + k) % len(LABS)] for k in range(4)]
        plan = [(labs_now[0], True), (labs_now[1], True), (labs_now[2], False), (labs_now[3], False)]
        started = time.perf_counter()
        procs = [(start(root, env, lab, fix), lab, fix) for lab, fix in plan]
        for proc, lab, fix in procs:
            r = finish(proc, started, lab, fix)
            results.append(r)
            print(f"  together {i + 1}/{repeats}: {line(r)}", flush=True)
    return results


def alone(root: Path, env: dict, hog_count: int, lab1_repeats: int) -> list[dict]:
    results = []
    with hogs(hog_count):
        for lab in LABS + ["1"] * lab1_repeats:
            started = time.perf_counter()
            r = finish(start(root, env, lab, True), started, lab, True)
            results.append(r)
            print(f"  beside {hog_count} hogs: {line(r)}", flush=True)
    return results


def summary(title: str, results: list[dict]) -> None:
    wrong = sum(r["wrong"] for r in results)
    unclear = sum(r["verdict"] == "inconclusive" for r in results)
    other = sum(r["verdict"] not in ("passed", "failed", "inconclusive") for r in results)
    print(f"\n| {title} | checks | wrong | inconclusive | error | wall s (median, max) | waited s (max) |")
    print("|---|---|---|---|---|---|---|")
    walls = sorted(r["wall_s"] for r in results)
    print(f"| | {len(results)} | {wrong} | {unclear} | {other} | {walls[len(walls) // 2]:.0f}, {walls[-1]:.0f} | "
          f"{max(r['waited_s'] for r in results):.0f} |\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--together", type=int, default=0, metavar="R", help="four checks at once, R times")
    parser.add_argument("--alone", action="store_true", help="every lab's fix, one check at a time")
    parser.add_argument("--hogs", type=int, default=2)
    parser.add_argument("--lab1-repeats", type=int, default=0)
    parser.add_argument("--kit", help="the src folder of the kit to measure (default: this checkout's)")
    parser.add_argument("--json-out")
    args = parser.parse_args()
    src = Path(args.kit).resolve() if args.kit else REPO / "src"
    sys.path.insert(0, str(src))
    root = kit_copy(src.parent)
    os.environ["PROFLAB_ROOT"] = str(root)
    slots = Path(tempfile.mkdtemp(prefix="proflab-busy-slots-"))
    env = {**os.environ, "PROFLAB_ROOT": str(root), "PROFLAB_SLOTS": str(slots), "PYTHONPATH": str(src)}
    subprocess.run([sys.executable, "-m", "proflab", "data"], cwd=root, env=env, capture_output=True)
    import torch

    print(f"# proflab on a busy machine — {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC")
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"torch {torch.__version__}; kit: {src}\n")
    figures = {}
    try:
        if args.together:
            figures["together"] = together(root, env, args.together)
            summary(f"four checks at once, {args.together} times", figures["together"])
        if args.alone:
            figures["alone"] = alone(root, env, args.hogs, args.lab1_repeats)
            summary(f"one check at a time beside {args.hogs} CPU hogs", figures["alone"])
    finally:
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(slots, ignore_errors=True)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
