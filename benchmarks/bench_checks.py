"""Benchmark the checker on this machine (not a test: it prints figures).

For each lab asked for, it reports:

* the end-to-end wall time of ``proflab check LAB`` on the untouched exercise,
  on the reference solution and on any alternative fix given with ``--also``
  (a real subprocess each time);
* the speed-up each passing version reaches, and the paired rounds the checker
  needed to call it: median, min–max and the interquartile range over the
  repeats; and how many verdicts were wrong or inconclusive;
* the profiler's overhead: the mean step time of the original with the
  profiler recording every timed step, against the same steps unprofiled,
  measured in alternating fresh subprocesses.

Everything runs in a temporary copy of the labs, so the benchmark never
touches your runs/ or progress. Usage:

    python benchmarks/bench_checks.py --labs 1 --repeats 5
    python benchmarks/bench_checks.py --labs 3 --repeats 3 \
        --also tests/learner_files/lab3_compile.py tests/learner_files/lab3_mix.py
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

REPO = Path(__file__).resolve().parents[1]


def proflab(root: Path, *args: str) -> tuple[float, int, dict | None]:
    env = {**os.environ, "PROFLAB_ROOT": str(root)}
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "proflab", *args], cwd=root, env=env,
                          capture_output=True, text=True)
    wall = time.perf_counter() - started
    data = json.loads(proc.stdout) if "--json" in args and proc.stdout.strip() else None
    return wall, proc.returncode, data


def spread(values: list[float]) -> str:
    from proflab.measuring import stats

    return (f"median {stats.median(values):.2f}, min–max {min(values):.2f}–{max(values):.2f}, "
            f"IQR {stats.quantile(values, 0.25):.2f}–{stats.quantile(values, 0.75):.2f}")


def overhead(lab, file: Path, repeats: int) -> dict[str, list[float]]:
    from proflab.running import execute

    plain, profiled = [], []
    for i in range(repeats):
        for mode in (("window", "timed") if i % 2 == 0 else ("timed", "window")):
            outcome = execute.run(lab, file, f"overhead-{mode}", profile_mode=mode,
                                  steps={"profile_steps": 0})
            if not outcome.ok:
                raise SystemExit(f"overhead run failed: {outcome.result}")
            (plain if mode == "window" else profiled).append(outcome.mean_step_s)
    return {"plain": plain, "profiled": profiled, "device": outcome.result["device"]}


def figures_device(report: dict | None) -> str:
    return (report or {}).get("device", "cpu")


def verdict(report: dict | None, code: int) -> str:
    """A check's verdict, and for a failed one the check that failed it: "failed (evidence)"."""
    if not report:
        return f"exit {code}"
    failed = [c["name"] for c in report.get("checks", []) if c.get("status") == "failed"]
    return report["verdict"] + (f" ({failed[0]})" if report["verdict"] == "failed" and failed else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--labs", nargs="+", default=["1"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--json-out", help="also write the raw figures here")
    parser.add_argument("--also", nargs="*", default=[], metavar="FILE",
                        help="alternative fixes that must pass too, checked with --file each repeat")
    parser.add_argument("--overhead-only", action="store_true", help="measure only the profiler's overhead")
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="proflab-bench-"))

    root.chmod(0o755)  # the sandbox runs as nobody when the kit runs as root
    shutil.copytree(REPO / "labs", root / "labs", ignore=shutil.ignore_patterns("__pycache__"))
    os.environ["PROFLAB_ROOT"] = str(root)
    from proflab import labs
    from proflab.measuring import stats

    proflab(root, "data")
    print(f"# proflab checker benchmark — {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC")
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"torch {torch.__version__}, {gpu}\n")
    figures = {}
    for name in args.labs:
        lab = labs.resolve(name)
        # Versions that must pass: the reference solution, then any --also file (an alternative fix).
        passing = {"solution": lab.solution, **{Path(f).stem: Path(f).resolve() for f in args.also}}
        ex_walls, verdicts = [], []
        walls = {v: [] for v in passing}
        speedups = {v: [] for v in passing}
        rounds = {v: [] for v in passing}
        noises = []
        peaks: dict[str, list[float]] = {"original": [], "learner": []}  # a lab graded on memory, MB
        evidence_seen: list[str] = []
        report = None
        for i in range(0 if args.overhead_only else args.repeats):
            wall, code, report = proflab(root, "check", name, "--json", "--device", args.device)
            ex_walls.append(wall)
            verdicts.append(("exercise", verdict(report, code)))
            line = [f"exercise {verdicts[-1][1]}"]
            for version, file in passing.items():
                wall, code, report = proflab(root, "check", name, "--file", str(file), "--json",
                                             "--device", args.device)
                walls[version].append(wall)
                verdicts.append((version, verdict(report, code)))
                if report and report.get("comparison"):
                    speedups[version].append(report["comparison"]["speedup"])
                    rounds[version].append(report["comparison"]["rounds"])
                    if version == "solution":
                        noises.append(report["comparison"]["noise"])
                        for which in peaks if report.get("memory") else ():
                            peaks[which] += report["memory"][which]
                if version == "solution" and report and report.get("evidence"):
                    ev = report["evidence"]
                    evidence_seen.append(f"{ev['original']['value']:g} → {ev['learner']['value']:g} {ev['unit']}")
                shown = (f" (peak {1 / speedups[version][-1]:.0%})" if lab.leaner else
                         f" ({speedups[version][-1]:.2f}×)") if speedups[version] else ""
                line.append(f"{version} {verdicts[-1][1]}{shown}")
            print(f"  lab {lab.number} repeat {i + 1}/{args.repeats}: " + ", ".join(line), flush=True)
        over = {which: overhead(lab, file, args.repeats)
                for which, file in (("original", lab.original), ("solution", lab.solution))}
        figures[lab.name] = {"exercise_check_s": ex_walls, "check_s": walls, "speedup": speedups, "rounds": rounds,
                             "noise": noises, "verdicts": verdicts, "overhead": over,
                             "device": over["original"]["device"]}
        wrong = sum(1 for who, v in verdicts if (who == "exercise") == (v == "passed") or v.split()[0] not in ("passed", "failed"))
        print(f"\n## Lab {lab.number} · {lab.title} ({figures[lab.name]['device']}, {args.repeats} repeats)\n")
        print("| figure | value |\n|---|---|")
        if ex_walls:
            print(f"| `proflab check {name}` (untouched exercise), wall s | {spread(ex_walls)} |")
        for version in passing:
            if walls[version]:
                print(f"| `proflab check {name} --file {passing[version].name}`, wall s | {spread(walls[version])} |")
            if speedups[version] and lab.leaner:
                print(f"| {version} peak, share of the original's | "
                      f"{spread([1 / x for x in speedups[version]])} |")
                print(f"| {version}: paired rounds measured | {spread(rounds[version])} |")
            elif speedups[version]:
                print(f"| {version} speed-up, × | {spread(speedups[version])} |")
                print(f"| {version}: paired rounds measured | {spread(rounds[version])} |")
        if peaks["original"]:
            print(f"| peak memory of a run (outside, RSS), original, MB | {spread(peaks['original'])} |")
            print(f"| peak memory of a run (outside, RSS), solution, MB | {spread(peaks['learner'])} |")
            print(f"| limit on {figures_device(report)} | at most {lab.peak_share(figures_device(report)):.0%} "
                  "of the original's peak |")
        if noises:
            print(f"| noise reported for the solution (MAD/median) | median ±{stats.median(noises):.1%} |")
        if evidence_seen:
            print(f"| evidence ({lab.evidence.label}), original → solution | {'; '.join(sorted(set(evidence_seen)))} |")
            if not lab.leaner:
                print(f"| threshold on {figures_device(report)} | {lab.threshold(figures_device(report)):g}× |")
        if verdicts:
            print(f"| wrong or inconclusive verdicts | {wrong} of {len(verdicts)} |")
        for which, o in over.items():
            ratio = [p / q for p, q in zip(o["profiled"], o["plain"])]
            print(f"| {which} step, unprofiled, ms | {spread([1000 * t for t in o['plain']])} |")
            print(f"| {which} step, every step profiled, ms | {spread([1000 * t for t in o['profiled']])} |")
            print(f"| {which}: profiler overhead, profiled / unprofiled | {spread(ratio)} |")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(figures, indent=2))
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
