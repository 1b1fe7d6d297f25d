"""How often the checker is wrong on a busy machine, and the smallest speed-up it can see.

Two measurements, both real ``proflab check`` runs in a temporary copy of the
labs (your runs/ and progress are never touched):

* ``--verdicts``: with a process hogging one core beside it (a busy loop, as
  a second program on a shared laptop or a CI runner would), every lab's
  reference fix and untouched exercise are checked ``--repeats`` times each.
  A verdict is wrong when the fix does not pass or the exercise does; an
  "inconclusive" is counted apart (it is not a wrong verdict, but a cost).
* ``--resolution``: a calibration workload (a fixed number of matrix
  products per step) against versions that do a known fraction less work,
  so their true speed-up is known: 1.05x, 1.10x, 1.20x... Each is checked
  ``--repeats`` times against a threshold of 1.0x; the resolution is the
  smallest speed-up that passed every time (and never failed or came out
  inconclusive).
* ``--steps``: for each lab's original and reference fix, ``--repeats`` runs
  of its timed steps; the step-to-step noise within a run against the
  run-to-run noise of its mean step, and how many timed steps are enough
  (``steps_needed``).

Usage:

    python benchmarks/bench_noise.py --verdicts --labs 1 2 3 4 --repeats 10
    python benchmarks/bench_noise.py --resolution --repeats 10
    python benchmarks/bench_noise.py --steps --no-hog --labs 0 1 2 3 4 --repeats 6
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
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from bench_checks import proflab  # this folder is on sys.path when the script runs

REPO = Path(__file__).resolve().parents[1]

CALIBRATION_ORIGINAL = '''"""Calibration: each step multiplies matrices a fixed number of times."""
import torch


def pipeline(cfg):
    a = torch.randn(128, 128)
    step = 0
    while True:
        for _ in range(cfg.products):
            b = a @ a
        yield {"step": torch.tensor(float(step))}
        step += 1
'''

CALIBRATION_FASTER = '''"""Calibration: the same steps, with {speedup}x less work in each."""
import torch

SPEEDUP = {speedup}


def pipeline(cfg):
    a = torch.randn(128, 128)
    step = 0
    while True:
        for _ in range(round(cfg.products / SPEEDUP)):
            b = a @ a
        yield {{"step": torch.tensor(float(step))}}
        step += 1
'''


def hog(stop) -> None:
    """A busy loop on one core, until told to stop."""
    x = 0
    while not stop.is_set():
        x = (x * 31 + 7) % 1000003


@contextmanager
def one_core_hogged(enabled: bool = True):
    """A busy loop on one core for as long as the block runs (none when not ``enabled``)."""
    stop = multiprocessing.Event()
    hogger = multiprocessing.Process(target=hog, args=(stop,), daemon=True) if enabled else None
    if hogger:
        hogger.start()
    try:
        yield
    finally:
        stop.set()
        if hogger:
            hogger.join(timeout=5)


def calibration_lab(root: Path) -> None:
    import hashlib

    folder = root / "labs" / "95_resolution"
    folder.mkdir(parents=True)
    (folder / "original.py").write_text(CALIBRATION_ORIGINAL)
    (folder / "exercise.py").write_text(CALIBRATION_ORIGINAL)
    (folder / "solution.py").write_text(CALIBRATION_ORIGINAL)
    digest = hashlib.sha256(CALIBRATION_ORIGINAL.encode()).hexdigest()
    (folder / "lab.toml").write_text(f'''format = 1
number = 95
name = "resolution"
title = "Resolution: a known amount of work per step"
summary = "Matrix products."
[files]
original_sha256 = "{digest}"
[workload]
batch_size = 1
warmup_steps = 2
timed_steps = 20
profile_steps = 2
rounds = 2
timeout_s = 120
threads = 1
[workload.params]
products = 200
[results.step]
what = "the step number"
exact = true
[evidence]
metric = "op_count"
label = "operators per step"
unit = "ops"
max_vs_original = 1.0
where = "the trace"
[speedup]
cpu = 1.0
cuda = 1.0
''')


def steps_needed(lab_names: list[str], repeats: int) -> dict:
    """Per lab and version: the step-to-step noise within a run, the run-to-run noise of a run's mean
    step beyond it, and the timed steps beyond which more steps barely narrow the verdict's interval.

    A round's ratio varies with both: var(log mean) = b² + w²/n, for n timed steps with step-to-step
    spread w and run-to-run spread b. Once w²/n is below b²/4, more steps add under 12% to the
    round's spread: n ≥ 4 w² / b² is enough, and a longer run only makes the check slower.
    """
    import math

    from proflab.running import execute, forkserver
    from proflab import labs
    from proflab.measuring import stats

    rows, figures = [], {}
    with forkserver.session():
        for name in lab_names:
            lab = labs.resolve(name)
            for version, file in (("original", lab.original), ("solution", lab.solution)):
                runs = [execute.run(lab, file, version, checking=True, workdir=lab.folder,
                                    steps={"profile_steps": 0}) for _ in range(repeats)]
                runs = [r for r in runs if r.ok]
                if len(runs) < 3:
                    continue
                logs = [[math.log(t) for t in r.result["step_times"]] for r in runs]
                n = len(logs[0])
                within = stats.median([math.sqrt(sum((x - sum(l) / n) ** 2 for x in l) / (n - 1)) for l in logs])
                means = [sum(l) / n for l in logs]
                m = sum(means) / len(means)
                total = sum((x - m) ** 2 for x in means) / (len(means) - 1)
                between = math.sqrt(max(total - within ** 2 / n, 0.0))
                needed = math.ceil(4 * within ** 2 / between ** 2) if between > 0 else n
                rows.append((lab, version, n, within, between, needed,
                             stats.median([r.result["mean_step_s"] for r in runs])))
                figures[f"{lab.number} {version}"] = {"timed_steps": n, "within": within, "between": between,
                                                      "needed": needed}
    print("\n| lab | version | mean step | step-to-step (w) | run-to-run (b) | timed steps: has, enough |"
          "\n|---|---|---|---|---|---|")
    for lab, version, n, w, b, needed, step in rows:
        print(f"| {lab.number} · {lab.name} | {version} | {step * 1000:.1f} ms | ±{w:.1%} | ±{b:.1%} | "
              f"{n}, {needed} |", flush=True)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--verdicts", action="store_true")
    parser.add_argument("--resolution", action="store_true")
    parser.add_argument("--steps", action="store_true",
                        help="how many timed steps each lab needs: step-to-step against run-to-run noise")
    parser.add_argument("--labs", nargs="+", default=["1", "2", "3", "4"])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--speedups", nargs="+", type=float, default=[1.05, 1.10, 1.15, 1.20, 1.30])
    parser.add_argument("--no-hog", action="store_true", help="measure on a quiet machine")
    parser.add_argument("--json-out")
    args = parser.parse_args()
    if not (args.verdicts or args.resolution or args.steps):
        parser.error("say what to measure: --verdicts, --resolution, --steps")

    root = Path(tempfile.mkdtemp(prefix="proflab-noise-"))

    root.chmod(0o755)  # the sandbox runs as nobody when the kit runs as root
    shutil.copytree(REPO / "labs", root / "labs", ignore=shutil.ignore_patterns("__pycache__"))
    calibration_lab(root)
    os.environ["PROFLAB_ROOT"] = str(root)
    subprocess.run([sys.executable, "-m", "proflab", "data"], cwd=root, capture_output=True)
    from proflab import labs

    stop = multiprocessing.Event()
    hogger = None if args.no_hog else multiprocessing.Process(target=hog, args=(stop,), daemon=True)
    if hogger:
        hogger.start()
    load = "quiet machine" if args.no_hog else "one core hogged by a busy loop"
    print(f"# proflab checker under noise — {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC")
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; {load}\n",
          flush=True)
    figures: dict = {}
    try:
        if args.verdicts:
            rows = []
            for name in args.labs:
                lab = labs.resolve(name)
                tally = {"fix": {"passed": 0, "failed": 0, "inconclusive": 0, "error": 0},
                         "exercise": {"passed": 0, "failed": 0, "inconclusive": 0, "error": 0}}
                walls, speedups, rounds = [], [], []
                for i in range(args.repeats):
                    for who, extra in (("fix", ["--file", str(lab.solution)]), ("exercise", [])):
                        wall, code, report = proflab(root, "check", name, *extra, "--json")
                        verdict = report["verdict"] if report else "error"
                        tally[who][verdict if verdict in tally[who] else "error"] += 1
                        walls.append(wall)
                        if who == "fix" and report and report.get("comparison"):
                            speedups.append(report["comparison"]["speedup"])
                            rounds.append(report["comparison"]["rounds"])
                    print(f"  lab {lab.number} repeat {i + 1}/{args.repeats}: fix {tally['fix']}, "
                          f"exercise {tally['exercise']}", flush=True)
                wrong = tally["fix"]["failed"] + tally["fix"]["error"] + tally["exercise"]["passed"]
                rows.append((lab, tally, wrong, sum(walls) / len(walls), sorted(speedups), rounds))
                figures[lab.name] = {"tally": tally, "wrong": wrong, "fix_speedups": speedups, "fix_rounds": rounds}
            print("\n| lab | fix passed | fix failed | fix inconclusive | exercise failed | exercise passed "
                  "| wrong verdicts | fix speed-up, median (min–max) | fix rounds (max) | mean check, s |"
                  "\n|---|---|---|---|---|---|---|---|---|---|")
            for lab, t, wrong, wall, ups, rnds in rows:
                spread = (f"{ups[len(ups) // 2]:.2f}× ({ups[0]:.2f}–{ups[-1]:.2f})" if ups else "–")
                print(f"| {lab.number} · {lab.name} | {t['fix']['passed']} | {t['fix']['failed']} | "
                      f"{t['fix']['inconclusive']} | {t['exercise']['failed']} | {t['exercise']['passed']} | "
                      f"{wrong} of {2 * args.repeats} | {spread} | {max(rnds, default=0)} | {wall:.0f} |")
        if args.steps:
            figures["steps"] = steps_needed(args.labs, args.repeats)
        if args.resolution:
            print("\n| true speed-up | passed | failed | inconclusive | measured (median) | rounds (max) | "
                  "check, s: median (max) |\n|---|---|---|---|---|---|---|")
            resolution = None
            for s in args.speedups:
                file = root / f"faster_{s:.2f}.py"
                file.write_text(CALIBRATION_FASTER.format(speedup=s))
                counts = {"passed": 0, "failed": 0, "inconclusive": 0, "error": 0}
                measured, rounds, walls = [], [], []
                for _ in range(args.repeats):
                    wall, code, report = proflab(root, "check", "resolution", "--file", str(file), "--json")
                    verdict = report["verdict"] if report else "error"
                    counts[verdict if verdict in counts else "error"] += 1
                    walls.append(wall)
                    if report and report.get("comparison"):
                        measured.append(report["comparison"]["speedup"])
                        rounds.append(report["comparison"]["rounds"])
                measured.sort()
                mid = measured[len(measured) // 2] if measured else float("nan")
                print(f"| {s:.2f}× | {counts['passed']} | {counts['failed']} | {counts['inconclusive']} | "
                      f"{mid:.3f}× | {max(rounds, default=0)} | {sorted(walls)[len(walls) // 2]:.1f} "
                      f"({max(walls):.1f}) |", flush=True)
                figures[f"resolution_{s:.2f}"] = {"counts": counts, "measured": measured}
                if resolution is None and counts["passed"] == args.repeats:
                    resolution = s
            print(f"\nResolution: the smallest speed-up passed in all {args.repeats} checks: "
                  f"{f'{resolution:.2f}×' if resolution else 'none of those tried'}")
    finally:
        stop.set()
        if hogger:
            hogger.join(timeout=5)
        shutil.rmtree(root, ignore_errors=True)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
