"""The Gradescope autograder, timed as Gradescope runs it: how long setup.sh and a submission take.

It writes the bundle (``proflab autograder gradescope --labs …``), builds its
image in a container made like Gradescope's (``tests/container.py``: a root of
its own, no kit installed, ``setup.sh`` as root), then runs ``run_autograder``
``--repeat`` times on a submission of every lab's reference fix, each in a
fresh container, on a quiet machine, and once more beside a CPU hog (one
process spinning on a core, as a neighbour on a shared machine would). It
reports the time per submission (median, min–max), each lab's check time and
verdicts, and how long ``proflab grade --merge`` takes to read 200 of the
results.json files back into one class table.

Usage:

    python benchmarks/bench_autograder.py --labs 1 2 3 4 --repeat 3

Here setup.sh takes torch from pip's own index (``--torch-index pypi``: this
machine's copy of it); on Gradescope the bundle takes torch's CPU wheels.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from container import Image  # noqa: E402


def spin(stop) -> None:
    while not stop.is_set():
        pass


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.0f} s ({min(values):.0f}–{max(values):.0f} s)"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--labs", nargs="+", default=["1", "2", "3", "4"])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=None, help="the results file (default: benchmarks/results/DATE-cpu-"
                    "Ncore-autograder.md)")
    args = ap.parse_args()
    from proflab import labs

    graded = sorted((labs.resolve(n) for n in args.labs), key=lambda lab: lab.number)
    work = Path(tempfile.mkdtemp(prefix="bench-autograder-"))
    bundle = work / "autograder.zip"
    subprocess.run([sys.executable, "-m", "proflab", "autograder", "gradescope", "--labs", *args.labs, "--out",
                    str(bundle), "--torch-index", "pypi"], cwd=REPO, check=True, capture_output=True)
    image = Image(work / "image")
    proc, setup_s = image.build(bundle)
    if proc.returncode != 0:
        print(proc.stdout[-3000:], proc.stderr[-3000:])
        return 1
    print(f"setup.sh: {setup_s:.0f} s", flush=True)
    files = {f"{lab.number}.py": lab.solution.read_bytes() for lab in graded}
    who = {"users": [{"email": "bench@example.edu"}]}
    quiet, runs = [], []
    for i in range(args.repeat):
        run = image.run(work / f"c{i}", files, who)
        assert run.results is not None, run.proc.stderr[-3000:]
        quiet.append(run.seconds)
        runs.append(("quiet", run))
        print(f"quiet run {i + 1}: {run.seconds:.0f} s, score {run.results['score']}", flush=True)
        if i == 0:
            print(run.results["output"], "\n", run.results["tests"][-1], flush=True)
    stop = multiprocessing.Event()
    hog = multiprocessing.Process(target=spin, args=(stop,), daemon=True)
    hog.start()
    try:
        run = image.run(work / "hog", files, who)
    finally:
        stop.set()
        hog.join()
    runs.append(("beside a CPU hog", run))
    print(f"beside a hog: {run.seconds:.0f} s, score {run.results['score']}", flush=True)

    merge_s = []
    export = work / "export"
    for k in range(200):
        one = json.loads(json.dumps(runs[0][1].results))
        one["extra_data"]["learner"] = f"learner{k:03d}@example.edu"
        (export / f"submission_{k}" / "results").mkdir(parents=True)
        (export / f"submission_{k}" / "results" / "results.json").write_text(json.dumps(one))
    for _ in range(3):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "proflab", "grade", "--merge", str(export), "--format", "json",
                        "--out", str(work / "class.json")], cwd=REPO, check=True, capture_output=True)
        merge_s.append(time.perf_counter() - started)

    when = datetime.now(timezone.utc)
    cores = os.cpu_count()
    lines = [f"# The Gradescope autograder, timed in a container made like Gradescope's ({when:%Y-%m-%d})", "",
             f"Machine: {platform.processor() or platform.machine()}, {cores} cores, Python "
             f"{platform.python_version()}; CPU only. Command: `python benchmarks/bench_autograder.py --labs "
             f"{' '.join(args.labs)} --repeat {args.repeat}`. torch from this machine's pip index "
             "(`--torch-index pypi`).", "",
             f"- setup.sh (venv, torch, the kit, the labs' data): {setup_s:.0f} s",
             f"- a submission of labs {' '.join(args.labs)} (every lab's reference fix), quiet, "
             f"{args.repeat} runs: {spread(quiet)} each",
             f"- the same submission beside a CPU hog: {runs[-1][1].seconds:.0f} s",
             f"- `proflab grade --merge` of 200 results.json files: {statistics.median(merge_s):.1f} s "
             f"(median of 3; {min(merge_s):.1f}–{max(merge_s):.1f} s)", "",
             "| run | lab | verdict | speed-up | check |", "|---|---|---|---|---|"]
    for name, run in runs:
        for rec in run.results["extra_data"]["records"]:
            r = rec["report"]
            speed = (r.get("comparison") or {}).get("speedup")
            lines.append(f"| {name} | {r['number']} | {r['verdict']} | "
                         f"{f'{speed:.2f}×' if speed else '–'} | {r['duration_s']:.0f} s |")
    out = Path(args.out) if args.out else REPO / "benchmarks" / "results" / \
        f"{when:%Y-%m-%d}-cpu-{cores}core-autograder.md"
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(out.read_text())
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
