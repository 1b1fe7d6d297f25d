"""What lending torch.compile's precompiled header to each sandbox saves a run (not a test: it prints figures).

Every sandboxed run has an empty /tmp of its own, where Inductor would build
its precompiled header (``cpp_prefix.h``) again before the first C++ kernel;
the kit builds it once (``proflab.running.compile_headers``) and binds it into
each sandbox, read-only. This times sandboxed runs of a file that compiles
(by default the tests' lab-3 torch.compile fix), as a check's later rounds run
it (unprofiled), alternately with the header lent and without, each from a
fork server of its own, and reports the wall time of each run, the medians
and their spread. It needs the sandbox engine. Usage:

    python benchmarks/bench_compile_headers.py --rounds 5 --md-out benchmarks/results/DATE-cpu-compile-headers.md
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--lab", default="3")
    parser.add_argument("--file", default=str(REPO / "tests" / "learner_files" / "lab3_compile.py"))
    parser.add_argument("--md-out", help="also write the results as Markdown to this file")
    args = parser.parse_args()

    from proflab import labs
    from proflab.measuring import stats
    from proflab.running import compile_headers, execute, forkserver, sandbox

    if sandbox.in_use() is None:
        print(f"runs are not sandboxed here ({sandbox.engine().why}): nothing to measure")
        return 2
    lab, file = labs.resolve(args.lab), Path(args.file).resolve()
    started = time.perf_counter()
    fresh = not sandbox.compile_headers()
    compile_headers.prepare()
    built_s = time.perf_counter() - started
    headers = sandbox.compile_headers()
    if not headers:
        print("the header could not be built here")
        return 1
    size_mb = sum(h.stat().st_size for h in headers) / 1e6
    walls: dict[str, list[float]] = {"lent": [], "not lent": []}
    lent, prepare = sandbox.compile_headers, compile_headers.prepare
    with forkserver.session():
        for round_no in range(args.rounds):
            order = ("lent", "not lent") if round_no % 2 == 0 else ("not lent", "lent")
            for how in order:
                if how == "not lent":  # as before: no header to lend, none built
                    sandbox.compile_headers, compile_headers.prepare = (lambda folder=None: []), (lambda: False)
                try:  # a server of its own for each (its sandbox is made with the header, or without)
                    outcome = execute.run(lab, file, how, device="cpu", timeout_s=600, steps={"profile_steps": 0},
                                          role=f"{file}#{how}#{round_no}")
                finally:
                    sandbox.compile_headers, compile_headers.prepare = lent, prepare
                    forkserver.retire(f"{file}#{how}#{round_no}")
                if not outcome.ok:
                    print(f"{how}: the run failed: {outcome.result.get('message', outcome.status)}")
                    return 1
                walls[how].append(outcome.wall_s)
                print(f"round {round_no + 1}: {how:8} {outcome.wall_s:6.1f} s", flush=True)

    lines = [f"# torch.compile's precompiled header, lent to each sandbox — {datetime.now(timezone.utc):%Y-%m-%d}",
             "",
             f"Machine: {platform.machine()}, {_cores()} cores, Python {platform.python_version()}; "
             f"`python benchmarks/bench_compile_headers.py --rounds {args.rounds}`, file "
             f"`{file.relative_to(REPO) if file.is_relative_to(REPO) else file}` (lab {lab.number}), sandboxed "
             "runs as a check's later rounds run it (unprofiled), each from a fork server of its own, alternating.",
             "",
             f"The header: {len(headers)} files, {size_mb:.0f} MB, "
             + (f"built in {built_s:.1f} s (once per virtual environment and torch)." if fresh else
                "built before this run."),
             "",
             "| run | " + " | ".join(f"round {n + 1}" for n in range(args.rounds)) + " | median | spread |",
             "|---|" + "---|" * (args.rounds + 2)]
    for how, values in walls.items():
        lines.append(f"| header {how} | " + " | ".join(f"{v:.1f} s" for v in values)
                     + f" | {stats.median(values):.1f} s | {min(values):.1f}–{max(values):.1f} s |")
    saved = stats.median(walls["not lent"]) - stats.median(walls["lent"])
    lines += ["", f"Saved per run: {saved:.1f} s (medians)."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.md_out:
        Path(args.md_out).write_text(text, encoding="utf-8")
    return 0


def _cores() -> int:
    import os

    return len(os.sched_getaffinity(0))


if __name__ == "__main__":
    sys.exit(main())
