"""Benchmark lab 0's overheads on this machine (not a test: it prints figures).

Lab 0 grades what the learner's own profiler costs. This measures, in
alternating fresh subprocesses run as the checker runs them (every step
counted with the profiler's cost inside it; what runs after the last step, such as
printing the table, is not), the time per step of:

* the unprofiled original (the exercise as handed out),
* the reference solution (a window of three labelled steps),
* heavy.py (every step profiled, with shapes, memory and stacks, one trace),

and reports each one's overhead against the original, per round and as the
median with its spread, with the size of the trace each writes; then the
wall time of ``proflab check profiler`` on the reference and on the untouched
exercise. Everything runs in a temporary copy of the labs. Usage:

    python benchmarks/bench_lab0.py --rounds 5 --md-out benchmarks/results/DATE-cpu-lab0.md
"""

from __future__ import annotations

import argparse
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
VERSIONS = ("original", "solution", "heavy")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--md-out", help="also write the results as Markdown to this file")
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="bench-lab0-"))

    root.chmod(0o755)  # the sandbox runs as nobody when the kit runs as root
    shutil.copytree(REPO / "labs", root / "labs")
    os.environ["PROFLAB_ROOT"] = str(root)
    from proflab.grading import checks
    from proflab.running import execute
    from proflab import labs
    from proflab.measuring import stats

    lab = labs.resolve("0", labs.discover(root / "labs"))
    per_step: dict[str, list[float]] = {v: [] for v in VERSIONS}
    sizes: dict[str, list[float]] = {v: [] for v in VERSIONS}
    for round_no in range(args.rounds):
        order = VERSIONS if round_no % 2 == 0 else tuple(reversed(VERSIONS))
        for version in order:
            folder = root / "traces" / f"{version}-{round_no}"
            outcome = execute.run(lab, lab.folder / f"{version}.py", version, device=args.device,
                                  trace_dir=folder, timeout_s=600)
            if not outcome.ok:
                print(f"{version}: {outcome.status}: {outcome.result.get('message')}", file=sys.stderr)
                return 1
            per_step[version].append(checks.counted_step_s(outcome, float("inf")))
            sizes[version].append(sum(p.stat().st_size for p in folder.glob("*")) / 1e6)
            print(f"round {round_no + 1}: {version}: {per_step[version][-1] * 1000:.1f} ms per step, "
                  f"trace {sizes[version][-1]:.1f} MB", file=sys.stderr)

    def overheads(version: str) -> list[float]:
        return [v / o - 1 for v, o in zip(per_step[version], per_step["original"])]

    def spread(values: list[float], fmt: str) -> str:
        return (f"median {fmt.format(stats.median(values))}, min–max {fmt.format(min(values))} to "
                f"{fmt.format(max(values))}")

    walls = {}
    for name, extra in (("reference", ["--file", str(root / "labs" / lab.folder.name / "solution.py")]),
                        ("untouched exercise", [])):
        started = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "proflab", "check", "0", *extra, "--device", args.device],
                              cwd=root, capture_output=True, text=True)
        walls[name] = (time.perf_counter() - started, proc.returncode)

    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"# Lab 0 overheads, {stamp}", "",
             f"Machine: {platform.platform()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
             f"device {args.device}; {args.rounds} rounds, versions alternating in fresh processes, every step "
             "counted as the checker counts it (the profiler's cost inside the steps; what runs after the last "
             "step, the table or heavy.py's export, is not).", "",
             "| version | time per step (ms) | overhead vs the original | trace |", "|---|---|---|---|"]
    for version in VERSIONS:
        over = "–" if version == "original" else spread(overheads(version), "{:+.0%}")
        size = "none" if version == "original" else f"{stats.median(sizes[version]):.1f} MB"
        lines.append(f"| {version} | {spread([t * 1000 for t in per_step[version]], '{:.1f}')} | {over} | {size} |")
    lines += ["", f"The lab's limit: at most {lab.overhead['cpu']:+.0%} on cpu, {lab.overhead.get('cuda', 0):+.0%} "
              "on cuda.", "", "| `proflab check profiler` on | wall time | exit code |", "|---|---|---|"]
    lines += [f"| {name} | {wall:.0f} s | {code} |" for name, (wall, code) in walls.items()]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.md_out:
        Path(args.md_out).write_text(text)
    shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
