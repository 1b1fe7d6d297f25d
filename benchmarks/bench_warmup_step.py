"""The profiler's warm-up step against a traced step, in CPU, for every sound fix of the labs whose figure is
CPU time, and for the attempt that works out the traced steps' results there (the margin of
``evidence.warmup_step_did_no_more``).

    python benchmarks/bench_warmup_step.py [--labs 2 3 4 8] [--out results/FILE.md]

Each file is checked once, as ``proflab check`` checks it; the table gives the original's and the file's
warm-up and traced step (ms of CPU, from the first round's runs), what the file's warm-up step may use,
and the verdict.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def files(labs_: list[int]) -> list[tuple[str, Path, str]]:
    from proflab import labs
    from proflab.authoring import expectations

    found = []
    for n in labs_:
        lab = labs.resolve(str(n))
        found.append((str(n), lab.solution, "the reference"))
        found += [(str(n), row.file, "a sound fix") for row in expectations.of_lab(n)
                  if row.check == "passed" and row.file.is_file()]
    found.append(("8", ROOT / "tests" / "cheats" / "lab8_decoy_while_profiled.py", "an attempt (must fail)"))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--labs", type=int, nargs="+", default=[2, 3, 4, 8])
    parser.add_argument("--out", type=Path, help="write the table there too (Markdown)")
    args = parser.parse_args()
    from proflab import cli, labs
    from proflab.grading import checks
    from proflab.reporting import report
    from proflab.running import forkserver

    ms = lambda v: " / ".join(f"{x * 1000:.1f}" for x in v) if v else "–"  # noqa: E731
    lines = ["| lab | file | what | original: warm-up / traced | file: warm-up / traced | allowed | verdict |",
             "|---|---|---|---|---|---|---|"]
    with forkserver.session():
        for number, file, what in files(args.labs):
            lab = labs.resolve(number)
            made = json.loads(report.to_json(checks.check(lab, file, label=cli._label(lab, file))))
            w = made.get("warmup") or {}
            lines.append(f"| {number} | {file.name} | {what} | {ms(w.get('original_s'))} | {ms(w.get('learner_s'))} "
                         f"| {w.get('allowed_s', 0) * 1000:.1f} | {made.get('verdict')} |")
            print(lines[-1], flush=True)
    head = (f"# The profiler's warm-up step against a traced step (ms of CPU)\n\n"
            f"{datetime.date.today()}, {platform.node()}, {platform.processor() or platform.machine()}; "
            f"`python benchmarks/bench_warmup_step.py --labs {' '.join(map(str, args.labs))}`\n\n")
    if args.out:
        args.out.write_text(head + "\n".join(lines) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
