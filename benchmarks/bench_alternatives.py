"""Every sound fix of a lab, checked side by side: is the lab's threshold set from the lesson?

A lab's threshold must pass every reasonable way of removing its bottleneck,
not only the reference fix. This checks, for each lab asked for, the reference
solution and every sound alternative the tests grade as passing (the rows of
``tests/learner_files/README.md`` whose expected verdict is **passes**),
``--repeats`` times each, in turn (repeat 1 of every version, then repeat 2...),
with ``proflab check LAB --file F --json`` in a temporary copy of the labs, and
prints one table per lab:

* each version's figure: the speed-up (a lab graded on speed), the share of the
  original's peak (lab 5) or the profiler's overhead (lab 0), as the checker
  measured it: the median over repeats, and min–max;
* its verdicts, and the lower end of its 95% interval (median over repeats);
* the lab's threshold, and how far below the slowest version it sits, against
  the checker's resolution on this machine (1.30×: the smallest speed-up over a
  threshold it passed in every check, ``results/2026-11-30-cpu-2core-resolution.md``).

Usage:

    python benchmarks/bench_alternatives.py --labs 0 1 2 3 4 5 6 --repeats 3
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
LEARNER_FILES = REPO / "tests" / "learner_files"
from proflab.authoring.validate import RESOLUTION  # noqa: E402 - results/2026-11-30-cpu-2core-resolution.md


def sound_files(number: int) -> list[Path]:
    """The learner files of lab ``number`` the tests expect to pass, from the files' README table."""
    from proflab.authoring import expectations

    return expectations.sound(number)


def check(root: Path, lab: str, file: Path) -> tuple[float, dict | None]:
    env = {**os.environ, "PROFLAB_ROOT": str(root)}
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "proflab", "check", lab, "--file", str(file), "--json"],
                          cwd=root, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    try:
        return wall, json.loads(proc.stdout)
    except json.JSONDecodeError:
        return wall, None


def figure(lab, report: dict) -> tuple[float | None, float | None]:
    """(the version's figure, the end of its 95% interval nearest the threshold): a speed-up (×), a share
    of the original's peak (lab 5) or an overhead (lab 0), as fractions where they are shares."""
    cmp = report.get("comparison") or {}
    speedup, low, high = cmp.get("speedup"), cmp.get("ci_low"), cmp.get("ci_high")
    if not speedup:
        return None, None
    if lab.leaner:
        return 1 / speedup, (1 / low if low else None)
    if lab.overhead:
        return 1 / speedup - 1, (1 / low - 1 if low else None)
    return speedup, low


def shown(lab, value: float | None) -> str:
    if value is None:
        return "–"
    if lab.leaner:
        return f"{value:.0%}"
    if lab.overhead:
        return f"{value:+.0%}"
    return f"{value:.2f}×"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--labs", nargs="+", default=["2"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json-out", help="also write the raw figures here")
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="proflab-alternatives-"))

    root.chmod(0o755)  # the sandbox runs as nobody when the kit runs as root
    shutil.copytree(REPO / "labs", root / "labs", ignore=shutil.ignore_patterns("__pycache__"))
    os.environ["PROFLAB_ROOT"] = str(root)
    from proflab import labs
    from proflab.measuring import stats

    subprocess.run([sys.executable, "-m", "proflab", "data"], cwd=root, capture_output=True,
                   env={**os.environ, "PROFLAB_ROOT": str(root)})
    import torch

    print(f"# Sound fixes, side by side — {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC")
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"torch {torch.__version__}, {torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU'}")
    print(f"Command: `python benchmarks/bench_alternatives.py --labs {' '.join(args.labs)} "
          f"--repeats {args.repeats}`\n")
    raw = {}
    for name in args.labs:
        lab = labs.resolve(name)
        versions = {"solution.py (reference)": lab.solution, **{f.name: f for f in sound_files(lab.number)}}
        results: dict[str, list[tuple[float, dict | None]]] = {v: [] for v in versions}
        for i in range(args.repeats):
            for version, file in versions.items():
                results[version].append(check(root, name, file))
                wall, report = results[version][-1]
                value, _ = figure(lab, report or {})
                print(f"  lab {lab.number} repeat {i + 1}/{args.repeats}: {version} "
                      f"{(report or {}).get('verdict', 'no report')} {shown(lab, value)} ({wall:.0f} s)",
                      file=sys.stderr, flush=True)
        device = next((r.get("device") for runs in results.values() for _, r in runs if r), "cpu")
        kind = ("peak, share of the original's" if lab.leaner else
                "profiler overhead" if lab.overhead else "speed-up")
        print(f"## Lab {lab.number} · {lab.title} ({device}, {args.repeats} checks each)\n")
        print(f"| version | {kind}: median (min–max) | nearest end of the 95% interval, median | verdicts "
              "| check, s |")
        print("|---|---|---|---|---|")
        medians = {}
        for version, runs in results.items():
            values = [v for v in (figure(lab, r or {})[0] for _, r in runs) if v is not None]
            ends = [e for e in (figure(lab, r or {})[1] for _, r in runs) if e is not None]
            verdicts = [(r or {}).get("verdict", "no report") for _, r in runs]
            tally = ", ".join(f"{verdicts.count(v)} {v}" for v in sorted(set(verdicts)))
            medians[version] = stats.median(values) if values else None
            spread = f"{shown(lab, medians[version])} ({shown(lab, min(values))}–{shown(lab, max(values))})" \
                if values else "–"
            print(f"| `{Path(versions[version]).name}`{' (reference)' if 'reference' in version else ''} | "
                  f"{spread} | {shown(lab, stats.median(ends)) if ends else '–'} | {tally} | "
                  f"{stats.median([w for w, _ in runs]):.0f} |")
        known = [m for m in medians.values() if m is not None]
        if lab.leaner:
            limit = lab.peak_share(device)
            worst = max(known) if known else None
            print(f"\nLimit on {device}: at most {limit:.0%} of the original's peak; the largest share among "
                  f"the sound fixes: {shown(lab, worst)}" + (f" ({limit / worst:.2f}× below the limit)" if worst else ""))
        elif lab.overhead:
            limit = lab.overhead.get(device)
            worst = max(known) if known else None
            print(f"\nLimit on {device}: at most {limit:+.0%} overhead; the largest among the sound profiles: "
                  f"{shown(lab, worst)}")
        else:
            threshold = lab.threshold(device)
            slowest = min(known) if known else None
            margin = slowest / threshold if slowest else None
            print(f"\nThreshold on {device}: {threshold:g}×; the slowest sound fix: {shown(lab, slowest)}, "
                  f"{margin:.2f}× above it (the checker's resolution here: {RESOLUTION:.2f}×: "
                  f"{'clear' if margin and margin >= RESOLUTION else 'close: said on the lab page'})"
                  if slowest else f"\nThreshold on {device}: {threshold:g}×; no sound fix measured")
        print()
        raw[lab.name] = {v: [r for _, r in runs] for v, runs in results.items()}
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(raw, indent=1, default=str))
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
