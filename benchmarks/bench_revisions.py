"""Benchmark the checker at two revisions of the kit, side by side (not a test: it prints figures).

For each lab, file (``--files``: the reference solution, the untouched
exercise) and repeat, ``proflab check LAB --file FILE.py`` runs once
with the kit as it was at ``--base`` (a git revision, taken into a scratch
worktree) and once with the kit of this checkout, in alternating order, each
in a scratch copy of its own labs with shared data, so that slow drifts in
the machine's load hit both alike. It prints, per lab and revision, the wall
time of a check (median and min–max), the speed-up the checker measured, its
rounds, and the verdicts. Usage:

    python benchmarks/bench_revisions.py --base 1f41d07 --labs 1 2 3 4 --repeats 3
    python benchmarks/bench_revisions.py --base 1f41d07 --labs 0 1 2 3 4 --files solution exercise
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


def check(src: Path, root: Path, lab: str, file: Path) -> tuple[float, dict]:
    env = {**os.environ, "PROFLAB_ROOT": str(root), "PYTHONPATH": str(src)}
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "proflab", "check", lab, "--file", str(file), "--json"],
                          cwd=root, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    try:
        return wall, json.loads(proc.stdout)
    except ValueError:
        return wall, {"verdict": f"no report (exit {proc.returncode})"}


def kit_copy(source: Path, data: Path) -> Path:
    root = Path(tempfile.mkdtemp(prefix="proflab-rev-"))
    root.chmod(0o755)  # the sandbox runs as nobody when the kit runs as root
    shutil.copytree(source / "labs", root / "labs", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "data").symlink_to(data)
    return root


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="the git revision to compare this checkout with")
    parser.add_argument("--labs", nargs="+", default=["1", "2", "3", "4"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--files", nargs="+", default=["solution"],
                        help="which of each lab's files to check: solution, exercise (the untouched one)")
    parser.add_argument("--json-out")
    args = parser.parse_args()

    from proflab import labs, paths
    from proflab.measuring import stats

    scratch = Path(tempfile.mkdtemp(prefix="proflab-base-"))

    scratch.chmod(0o755)  # the sandbox runs as nobody when the kit runs as root
    base = scratch / "base"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(base), args.base],
                   check=True, capture_output=True)
    data = paths.data_dir().resolve()
    kits = {"base": (base / "src", kit_copy(base, data), base), "this": (REPO / "src", kit_copy(REPO, data), REPO)}
    figures: dict = {}
    print(f"# proflab check at two revisions — {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC")
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"base {args.base}, this checkout at {subprocess.run(['git', '-C', str(REPO), 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True).stdout.strip()}\n",
          flush=True)
    try:
        for rep in range(args.repeats):
            for lab_name in args.labs:
                lab = labs.resolve(lab_name, labs.discover(REPO / "labs"))
                order = ("base", "this") if rep % 2 == 0 else ("this", "base")
                for name in args.files:
                    for which in order:
                        src, root, tree = kits[which]
                        folder = next((root / "labs").glob(f"{lab.number:02d}_*"))
                        wall, report = check(src, root, str(lab.number), folder / f"{name}.py")
                        row = figures.setdefault(f"{lab.number} {name}", {}).setdefault(which, [])
                        row.append({"wall_s": wall, "verdict": report.get("verdict"),
                                    "speedup": (report.get("comparison") or {}).get("speedup"),
                                    "rounds": (report.get("comparison") or {}).get("rounds")})
                        print(f"  repeat {rep + 1}, lab {lab.number} {name}, {which}: {report.get('verdict')} "
                              f"in {wall:.1f} s", flush=True)
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(base)], capture_output=True)
        for _, root, _ in kits.values():
            shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)

    print("\n| lab, file | revision | check wall, s: median (min–max) | speed-up: median (min–max) | rounds | verdicts |")
    print("|---|---|---|---|---|---|")
    for lab_number, by_rev in figures.items():
        for which in ("base", "this"):
            rows = by_rev.get(which, [])
            if not rows:
                continue
            walls = [r["wall_s"] for r in rows]
            ups = [r["speedup"] for r in rows if r["speedup"]]
            verdicts = ", ".join(sorted({str(r["verdict"]) for r in rows}))
            up = f"{stats.median(ups):.2f}× ({min(ups):.2f}–{max(ups):.2f})" if ups else "—"
            label = args.base if which == "base" else "this checkout"
            print(f"| {lab_number} | {label} | {stats.median(walls):.1f} ({min(walls):.1f}–{max(walls):.1f}) | {up} | "
                  f"{', '.join(str(r['rounds']) for r in rows)} | {verdicts} |")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
