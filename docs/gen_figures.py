"""Write every figure the course pages quote, from real runs of the labs: ``docs/figures/``.

    python docs/gen_figures.py            # every lab (a few minutes on a quiet 2-core machine)
    python docs/gen_figures.py --lab 6    # one lab (repeatable: --lab 5 --lab 6); the others are kept
    python docs/gen_figures.py --page instructor   # the instructor guide's outputs only (a few minutes)
    python docs/gen_figures.py --page own-model    # "Profile your own model": proflab profile on a script

For each lab it runs the kit's own commands, on the CPU, in a scratch copy of the kit (its own ``labs/``,
``runs/`` and progress, the data of this checkout), so that your runs and progress are left alone:

    proflab run N                                  the untouched exercise (a copy of the original)
    proflab run N --version solution               the reference fix
    proflab check N                                the untouched exercise, graded (it fails)
    proflab check N --file labs/NN_*/solution.py   the reference fix, graded (it passes)

and lab 1 once more with ``--profile-memory``. Lab 7, whose exercise is a gate's settings, runs its page's
``proflab gate`` commands instead (``LAB7_RUNS``: lab 7's copy of lab 1's fix against lab 1's original, the
copy broken on purpose against lab 1's fix, the fix against itself with the exercise's settings), then
``proflab check 7`` on the exercise and on ``labs/07_gate/solution.toml``. What each command printed is written as it printed it,
``docs/figures/labN/<what>.txt`` (the pages include these files whole, or a part of them, with
pymdownx.snippets: ``--8<-- "lab6/run-exercise.txt"``), and the figures read from it are written to
``docs/figures/figures.json``, by name (``lab6.run-exercise.op.c10d::allreduce_.calls``), beside a
description of the machine they came from. The pages quote single figures as ``{{ name }}``, which the
hook ``docs/figures_hook.py`` replaces when the site is built (an unknown name fails the build), and
``tests/test_page_figures.py`` fails when a page quotes a figure that is neither.

Figures measured while the machine is busy are noisy: the file records the load average before and after.
The script is not part of the site (``exclude_docs`` in ``mkdocs.yml``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "docs" / "figures"
FIGURES = OUT / "figures.json"
PROFLAB = [sys.executable, "-m", "proflab"]
WIDTH = "150"  # the terminal the outputs are printed for (a code block scrolls sideways beyond)

# What is run for every lab, and what for some labs only: (name, arguments after the lab).
RUNS = [
    ("run-exercise", ["run", "{lab}"]),
    ("run-solution", ["run", "{lab}", "--version", "solution"]),
    ("check-exercise", ["check", "{lab}"]),
    ("check-solution", ["check", "{lab}", "--file", "{solution}"]),
]
EXTRA = {1: [("run-exercise-memory", ["run", "{lab}", "--profile-memory"])]}

# Lines of the kit's progress that are not part of what a command reports.
NOT_OUTPUT = re.compile(r"^(waiting for a turn|Profiling |Running |Checking |Measuring )")


def machine() -> dict:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    model = model or platform.processor() or platform.machine()
    import torch

    try:
        memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        memory_gib = 0.0
    return {"cpu": model, "cores": os.cpu_count(), "memory_gib": round(memory_gib),
            "torch": torch.__version__.split("+")[0], "python": platform.python_version(),
            "gpu": "none used (every run on the CPU, --device cpu)"}


def today() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d")


def describe(m: dict, when: str) -> str:
    """The machine in one line, as the pages name it."""
    return (f"{m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, no GPU used; torch {m['torch']}, "
            f"Python {m['python']}; {when}")


def scratch_kit(where: Path) -> Path:
    """A copy of the kit's labs, with its untouched exercises (copies of the originals), over this checkout's data."""
    root = where / "kit"
    shutil.copytree(REPO / "labs", root / "labs", ignore=shutil.ignore_patterns("__pycache__"))
    for lab in (root / "labs").iterdir():
        if (lab / "original.py").is_file() and (lab / "exercise.py").is_file():
            shutil.copyfile(lab / "original.py", lab / "exercise.py")
    (root / "data").symlink_to(REPO / "data")
    return root


def command(root: Path, lab: int, args: list[str]) -> tuple[str, int, float]:
    folder = next((root / "labs").glob(f"{lab:02d}_*"))
    args = [a.format(lab=lab, solution=f"labs/{folder.name}/solution.py") for a in args]
    env = {**os.environ, "PROFLAB_ROOT": str(root), "COLUMNS": WIDTH, "NO_COLOR": "1", "TERM": "dumb",
           "PYTHONPATH": str(REPO / "src")}
    start = time.monotonic()
    proc = subprocess.run([*PROFLAB, *args, "--device", "cpu"], cwd=root, env=env, capture_output=True,
                          text=True, timeout=1800)
    took = time.monotonic() - start
    lines = [line.rstrip() for line in (proc.stdout + proc.stderr).splitlines() if not NOT_OUTPUT.match(line)]
    text = "\n".join(lines).strip("\n") + "\n"
    text = text.replace(str(root) + "/", "")
    return text, proc.returncode, took


# --- figures read from what the commands printed ----------------------------------------------------------

COLUMNS = {"Self CPU %": "self_pct", "Self CPU": "self", "CPU total %": "total_pct", "CPU total": "total",
           "CPU time avg": "avg", "CPU Mem": "mem", "Self CPU Mem": "self_mem", "# of Calls": "calls"}


def table(text: str) -> tuple[list[str], list[dict]]:
    """The key_averages() table in a command's output: its columns and its rows, as printed."""
    lines = text.splitlines()
    rules = [i for i, line in enumerate(lines) if re.fullmatch(r"-{20,}(\s+-+)+\s*", line)]
    if len(rules) < 3:
        return [], []
    header = [c for c in re.split(r"\s{2,}", lines[rules[0] + 1].strip())]
    rows = []
    for line in lines[rules[1] + 1:rules[2]]:
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) == len(header):
            rows.append(dict(zip(header, cells)))
    return header, rows


def number(cell: str) -> float:
    return float(re.match(r"-?[\d.]+", cell.replace(",", "")).group(0))


def ms(cell: str) -> float:
    """A time cell of the table (``1.492s``, ``158.223ms``, ``46.174us``) in milliseconds."""
    value, unit = re.fullmatch(r"(-?[\d.]+)\s*(s|ms|us|µs)", cell).groups()
    return float(value) * {"s": 1000.0, "ms": 1.0, "us": 0.001, "µs": 0.001}[unit]


def duration(value_ms: float) -> str:
    """A time as the pages write it."""
    if value_ms >= 1000:
        return f"{value_ms / 1000:.2f} s"
    if value_ms >= 1:
        return f"{value_ms:.1f} ms"
    return f"{value_ms * 1000:.1f} µs"


def read_run(text: str, lab, active: int) -> dict[str, str]:
    f: dict[str, str] = {}
    header, rows = table(text)
    for i, row in enumerate(rows):
        name = row["Name"]
        for title, key in COLUMNS.items():
            if title in row:
                f[f"op.{name}.{key}"] = row[title]
        if "# of Calls" in row and active:
            calls = int(number(row["# of Calls"]))
            f[f"op.{name}.calls_per_step"] = f"{calls / active:g}"
        if "CPU time avg" in row:
            f[f"op.{name}.avg_ms"] = duration(ms(row["CPU time avg"]))
        if "Self CPU" in row and active:
            f[f"op.{name}.self_per_step"] = duration(ms(row["Self CPU"]) / active)
        if i < 3:
            f[f"row{i + 1}.name"] = name
            for title, key in COLUMNS.items():
                if title in row:
                    f[f"row{i + 1}.{key}"] = row[title]
    if rows:
        f["rows"] = str(len(rows))
    if m := re.search(r"^Self CPU time total: (\S+)", text, re.M):
        f["self_total"] = m.group(1)
        if active:
            f["self_total_per_step"] = duration(ms(m.group(1)) / active)
    if m := re.search(r"^Step time over (\d+) timed steps: median ([\d.]+) ms, half of the steps within "
                      r"([\d.]+)–([\d.]+) ms \(mean ([\d.]+) ms\)", text, re.M):
        f["timed_steps"], f["step_ms"], f["step_q1_ms"], f["step_q3_ms"], f["step_mean_ms"] = m.groups()
    if m := re.search(r"CPU time of the run's processes and threads \(from /proc\): ([\d.]+) ms per step", text):
        f["cpu_ms"] = m.group(1)
    if m := re.search(r"^Trace: \S+ \(([\d.]+ MB)\)", text, re.M):
        f["trace_size"] = m.group(1)
    for m in re.finditer(r"^Trace of rank (\d+): \S+ \(([\d.]+ MB)\)", text, re.M):
        f[f"rank{m.group(1)}.trace_size"] = m.group(2)
    for m in re.finditer(r"^Rank (\d+), per profiled step: (\d+) all-reduce calls per step, ([\d.]+) MB per step; "
                         r"communication ([\d.]+) ms of ([\d.]+) ms \((\d+)%\)", text, re.M):
        r = f"rank{m.group(1)}"
        (f[f"{r}.allreduce_calls"], f[f"{r}.allreduce_mb"], f[f"{r}.comm_ms"], f[f"{r}.comm_step_ms"],
         f[f"{r}.comm_pct"]) = m.groups()[1:]
    if m := re.search(r"^Memory left allocated per profiled step: ([\d.]+) MB per step kept on (\w+)(.*?)\s*\(the curve",
                      text, re.M):
        f["kept_mb_per_step"], f["kept_device"] = m.group(1), m.group(2)
        if n := re.search(r"allocated since the profiler started: ([\d.]+) → ([\d.]+) MB over the (\d+) steps", m.group(3)):
            f["kept_from_mb"], f["kept_to_mb"], f["kept_steps"] = n.groups()
    if m := re.search(r"^Memory left allocated per profiled step: (.*?)\s*\(the curve", text, re.M):
        f["kept"] = m.group(1)
    if m := re.search(r"^Peak memory of the run, read from outside it \((.*)\): (\d+) MB", text, re.M):
        f["peak_how"], f["peak_mb"] = m.groups()
    if m := re.search(r"^Host reads per profiled step: (.*?)\s*\(every row", text, re.M):
        f["host_reads"] = m.group(1)
    if m := re.search(r"^Lab \d+ · .* on (\w+) \(torch ([^,]+), (\d+) threads\)", text, re.M):
        f["device"], f["torch"], f["threads"] = m.groups()
    return f


def read_check(text: str) -> dict[str, str]:
    f: dict[str, str] = {}
    names = {"It runs": "runs", "Same work, same results": "same", "The bottleneck is gone": "evidence",
             "Faster": "faster", "Leaner": "leaner", "Low overhead": "overhead", "Your own profile": "profile"}
    current = None
    for line in text.splitlines():
        if m := re.match(r"^([✓✗–?!])\s(.+?)\s{2,}(.*)$", line):
            current = names.get(m.group(2).strip())
            if current:
                f[f"{current}.mark"], f[f"{current}.says"] = m.group(1), m.group(3).strip()
        elif current and (m := re.match(r"^\s+(expected|measured|look at)\s{2,}(.*)$", line)):
            f[f"{current}.{m.group(1).replace(' ', '_')}"] = m.group(2).strip()
        if m := re.match(r"^(PASSED|FAILED|NOT GRADED|INCONCLUSIVE)\b.*? in (\d+) s", line):
            f["verdict"], f["took_s"] = m.groups()
    says = f.get("faster.says", "")
    if m := re.search(r"([\d.]+)× (?:faster than the original\b|the original's (?:speed|CPU time|step time)?)", says):
        f["speedup"] = m.group(1)
    if m := re.search(r"(?:95% interval|rounds) ([\d.]+)–([\d.]+)×", says):
        f["speedup_low"], f["speedup_high"] = m.groups()
    if m := re.search(r"paired rounds \((.+)\)$", says):  # how the report quotes its uncertainty
        f["spread"] = m.group(1)
    if m := re.search(r"over (\d+) paired rounds", says):
        f["rounds"] = m.group(1)
    leaner = f.get("leaner.says", "")
    if m := re.search(r"peak is (\d+)% of the original's", leaner):
        f["peak_pct"] = m.group(1)
    return f


# --- labs 3 and 4: figures their pages need beyond the table and the checks' lines --------------------------

LAB3_LABELS = ("layer_norm", "attention", "mlp", "backward", "sgd_step")


def read_labels(text: str, root: Path) -> dict[str, str]:
    """Lab 3: each record_function label of the run's trace, per profiled step: its calls, its total
    (inclusive) and self (exclusive) time, and the outermost ``aten::`` operators run inside it."""
    from proflab.measuring import evidence

    m = re.search(r"^Trace: (\S+\.json\S*) \(", text, re.M)
    if not m:
        return {}
    trace = evidence.load(root / m.group(1))
    steps = len(trace.steps)
    inside = trace.within_steps(lambda e: e.cat in ("cpu_op", "user_annotation"))
    f: dict[str, str] = {}
    for label in LAB3_LABELS:
        ranges = [e for e in inside if e.name == label]  # a record_function range: a cpu_op in the trace
        if not ranges or not steps:
            continue
        total = self_time = 0.0
        ops = 0
        for r in ranges:
            within = [e for e in inside if e is not r and e.tid == r.tid and r.ts <= e.ts and e.end <= r.end]
            children = evidence._outermost(within)
            total += r.dur
            self_time += r.dur - sum(c.dur for c in children)
            ops += sum(1 for c in evidence._outermost([e for e in within if e.name.startswith("aten::")]))
        key = f"label.{label}"
        f[f"{key}.calls_per_step"] = f"{len(ranges) / steps:g}"
        f[f"{key}.total_per_step"] = duration(total / 1000 / steps)
        f[f"{key}.self_per_step"] = duration(self_time / 1000 / steps)
        f[f"{key}.aten_ops_per_step"] = f"{ops / steps:g}"
    return f


def read_lab3_4(name: str, text: str, root: Path) -> dict[str, str]:
    """Labs 3, 4 and 8: the check's figures before and after, the host reads, the labels' times (lab 3)."""
    f: dict[str, str] = {}
    if m := re.search(r"([\d.]+)× faster than the original over", text):
        f["speedup"] = m.group(1)
    if m := re.search(r"mean step in CPU time ([\d.]+) ms → ([\d.]+) ms", text):
        f["cpu_ms_original"], f["cpu_ms_yours"] = m.groups()
    if m := re.search(r"^✓ The bottleneck is gone\s.*?: ([\d.]+) (.+?) → ([\d.]+) \2\s*$", text, re.M):
        f["evidence.original"], f["evidence.unit"], f["evidence.yours"] = m.groups()
    if m := re.search(r"^✗ The bottleneck is gone\s.*? is still ([\d.]+) ", text, re.M):
        f["evidence.original"] = f["evidence.yours"] = m.group(1)
    if m := re.search(r"^Host reads per profiled step, outside data loading: ([\d.]+) \((.*?)\)\s", text, re.M):
        f["host_reads"], f["host_reads_by_call"] = m.groups()
    if name == "run-exercise" and "Lab 3 " in text:
        f.update(read_labels(text, root))
    return f


# --- labs 1 and 2: figures their pages need beyond the table and the checks' lines -------------------------


def read_lab1_2(name: str, text: str) -> dict[str, str]:
    """Labs 1 and 2: the DataLoader's row of the table (its name is cut), the check's evidence before and after
    and the share of the step it measured, and the parts of the check's ``measured`` line under *Faster*."""
    f: dict[str, str] = {}
    for row in table(text)[1]:
        if row["Name"].startswith("enumerate(DataLoader)#"):
            for title, key in COLUMNS.items():
                if title in row:
                    f[f"dataloader.{key}"] = row[title]
            f["dataloader.avg_ms"] = duration(ms(row["CPU time avg"]))
            f["dataloader.children"] = duration(ms(row["CPU total"]) - ms(row["Self CPU"]))
            break
    if m := re.search(r"^✓ The bottleneck is gone\s.*?: ([\d.]+) (.+?) → ([\d.]+) \2\s*$", text, re.M):
        f["evidence.original"], f["evidence.unit"], f["evidence.yours"] = m.groups()
    elif m := re.search(r"^✗ The bottleneck is gone\s.*? is still ([\d.]+) (\S+)", text, re.M):
        f["evidence.original"] = f["evidence.yours"] = m.group(1)
        f["evidence.unit"] = m.group(2)
    flat = re.sub(r"\s*\n\s+", " ", text)  # the checks' lines, wrapped to the terminal's width, joined
    if m := re.search(r"^✓ Faster\s+([\d.]+)× faster than the original", text, re.M):
        f["speedup"] = m.group(1)
    if m := re.search(r"measured\s+[\d.]+ \w+: (\d+%) of\s+each\s+step\s+\(([\d.]+ ms) of ([\d.]+ ms)\)\s+"
                      r"\(original: (\d+%) of\s+each\s+step \(([\d.]+ ms) of ([\d.]+ ms)\)", flat):
        (f["evidence.share"], f["evidence.wait"], f["evidence.step"], f["evidence.original_share"],
         f["evidence.original_wait"], f["evidence.original_step"]) = m.groups()
    if m := re.search(r"measured\s+[\d.]+ \w+: (\d+) indexing ops per step \((.*?)\) \(original: (\d+) indexing", flat):
        f["evidence.ops"], f["evidence.ops_by_name"], f["evidence.original_ops"] = m.groups()
    if m := re.search(r"mean step(?: in CPU time)? ([\d.]+ ms) → ([\d.]+ ms); median ([\d.]+ ms) → ([\d.]+ ms), "
                      r"p95 ([\d.]+ ms) → ([\d.]+ ms); rounds ([\d.]+)–([\d.]+)×, noise ±(\d+)%", flat):
        (f["mean_original"], f["mean_yours"], f["median_original"], f["median_yours"], f["p95_original"],
         f["p95_yours"], f["rounds_low"], f["rounds_high"], f["noise_pct"]) = m.groups()
    return f


# --- lab 7 (a gate lab): the page's gate commands and the check, on the lab's own copy of lab 1's fix ----------

# What lab 7's page runs, in this order: (name, arguments). "{broken}" runs with the lab's pipeline.py broken on
# purpose (its DataLoader's workers taken away, as the page tells the learner to), then put back.
LAB7_RUNS = [
    ("gate-improvement", ["gate", "labs/07_gate/pipeline.py", "--baseline", "labs/01_dataloader/original.py",
                          "--lab", "1"]),
    ("gate-regression", ["gate", "labs/07_gate/pipeline.py", "--baseline", "labs/01_dataloader/solution.py",
                         "--lab", "1", "{broken}"]),
    ("gate-exercise", ["gate", "labs/07_gate/pipeline.py", "--baseline", "labs/07_gate/pipeline.py", "--config",
                       "labs/07_gate/exercise.toml"]),
    ("check-exercise", ["check", "{lab}"]),
    ("check-solution", ["check", "{lab}", "--file", "labs/07_gate/solution.toml"]),
]


def break_pipeline(source: str) -> str:
    """Lab 7's pipeline.py with its fix undone as the page says: no workers, and without the options that need them."""
    broken = re.sub(r"num_workers=\d+", "num_workers=0", source)
    broken = re.sub(r"(?m)^\s*(?:persistent_workers|prefetch_factor)=.*\n", "", broken)
    assert broken != source and "num_workers=0" in broken
    return broken


_TOLD = r"([\d.]+)× the fix's step time \(95% interval ([\d.]+)–([\d.]+)×, (\d+) rounds\)"


def read_gate(text: str) -> dict[str, str]:
    """A gate's report (``proflab gate``) or a gate lab's check (``proflab check 7``): its verdict, slowdown,
    interval, rounds, noise, and the cause it names, with the before and after of that cause."""
    f: dict[str, str] = {}
    flat = re.sub(r"\s*\n\s+", " ", text)  # the checks' lines, wrapped to the terminal's width, joined
    if m := re.search(r"^(NO REGRESSION|REGRESSION|INCONCLUSIVE|NOT GATED)\b.*? · exit (\d+) · (\d+) s", text, re.M):
        f["verdict"], f["gate_exit"], f["took_s"] = m.groups()
    if m := re.search(r"^(PASSED|FAILED|NOT GRADED|INCONCLUSIVE)\b.*? in (\d+) s", text, re.M):
        f["verdict"], f["took_s"] = m.groups()
    if m := re.search(r"(an improvement|no regression): ([\d.]+)× (faster|slower|as fast)", flat):
        f["kind"], f["change"] = m.group(1), m.group(2)
    if m := re.search(r"regression: ([\d.]+)× the baseline's step time, more than the ([\d.]+)× allowed", flat):
        f["kind"], f["slowdown"], f["limit"] = "regression", m.group(1), m.group(2)
    if m := re.search(r"too noisy to call: ([\d.]+)× over (\d+) rounds", flat):
        f["kind"], f["slowdown"], f["rounds"] = "too noisy to call", m.group(1), m.group(2)
    if m := re.search(r"over (\d+) paired rounds \(((?:95% interval|rounds) ([\d.]+)–([\d.]+)×[^()]*)\)", flat):
        f["rounds"], f["spread"], f["low"], f["high"] = m.groups()
    elif m := re.search(r"the 95% interval ([\d.]+)–([\d.]+)× straddles the ([\d.]+)× limit", flat):
        f["low"], f["high"], f["limit"] = m.groups()
    if m := re.search(r"([\d.]+)× the baseline's step time \(mean step", flat):
        f["slowdown"] = m.group(1)
    if m := re.search(r"noise ±(\d+%)", flat):
        f["noise"] = m.group(1)
    # why: the part of the step that moved most, then the operator (``gate.describe``), quoted as said
    if m := re.search(r"because the step's (.+?) went from ([\d.]+ \S+) to ([\d.]+ \S+) per step", flat):
        f["part"], f["part_before"], f["part_after"] = m.groups()
    if m := re.search(r"(?:because |; of the operators, )(`[^`]+` (?:went from|is new|is gone)[^()]*\([^)]*\))", flat):
        f["operator"] = m.group(1)
    for which, pattern in (("unchanged", r"no regression on the unchanged fix: "),
                           ("unchanged", r"your gate could not call the unchanged fix: "),
                           ("unchanged", r"a false alarm: your gate calls the unchanged fix a regression \("),
                           ("regression", r"regression caught: the fix undone is "),
                           ("regression", r"your gate let the fix undone through: ")):
        if m := re.search(pattern + _TOLD, flat):
            (f[f"{which}.slowdown"], f[f"{which}.low"], f[f"{which}.high"], f[f"{which}.rounds"]) = m.groups()
    if m := re.search(r"^Traces: (\S+)/ \(runs: ([^)]*)\)", text, re.M):
        f["traces"], f["trace_runs"] = m.groups()
    return f


def lab_gate(root: Path, number: int, values: dict[str, str], runs_meta: dict[str, dict]) -> None:
    """Lab 7: the page's gate commands and ``proflab check 7`` on the exercise and on the reference settings, in
    the scratch kit; each output to ``docs/figures/lab7/<name>.txt``, its figures as ``lab7.<name>.*``."""
    folder = OUT / f"lab{number}"
    folder.mkdir(parents=True, exist_ok=True)
    for old_file in folder.glob("*.txt"):
        old_file.unlink()
    pipeline = next((root / "labs").glob(f"{number:02d}_*")) / "pipeline.py"
    fixed = pipeline.read_text(encoding="utf-8")
    for name, cmd in LAB7_RUNS:
        broken = "{broken}" in cmd
        cmd = [a for a in cmd if a != "{broken}"]
        print(f"lab {number}: proflab {' '.join(cmd).format(lab=number)}{' (pipeline.py broken)' if broken else ''} …",
              file=sys.stderr, flush=True)
        try:
            if broken:
                pipeline.write_text(break_pipeline(fixed), encoding="utf-8")
            text, code, took = command(root, number, cmd)
        finally:
            pipeline.write_text(fixed, encoding="utf-8")  # put back, as `git checkout -- …` does for the learner
        (folder / f"{name}.txt").write_text(text, encoding="utf-8")
        for key, value in read_gate(text).items():
            values[f"lab{number}.{name}.{key}"] = value
        values[f"lab{number}.{name}.exit"] = str(code)
        runs_meta[f"lab{number}/{name}"] = {"exit": code, "seconds": round(took, 1)}
        print(f"  exit {code}, {took:.0f} s", file=sys.stderr, flush=True)
    values[f"lab{number}.machine"] = describe(machine(), today())


def made_by(chosen, every_lab: bool):
    """Which keys of figures.json a run of this script for the labs ``chosen`` replaces: theirs, and the
    kit-wide ones (the machine, whether it was quiet) only in a run of every lab."""
    made = tuple(f"lab{n}{sep}" for n in chosen for sep in "./")
    return lambda k: k.startswith(made) or (every_lab and (k == "machine" or k.startswith("machine.")))


def write_figures(mine, values: dict[str, str], runs_meta: dict[str, dict], meta: dict | None = None) -> None:
    """Write figures.json, merged: read it again now (another run of this script, for other labs, may have
    written it meanwhile) and replace only the keys this run made (``mine(key)``, values and runs), keeping the
    rest. ``meta`` (the machine of this run) replaces the file's; without it the file's is kept."""
    latest = json.loads(FIGURES.read_text(encoding="utf-8")) if FIGURES.is_file() else {}
    merged_values = {k: v for k, v in latest.get("values", {}).items() if not mine(k)}
    merged_values.update({k: v for k, v in values.items() if mine(k)})
    merged_runs = {k: v for k, v in latest.get("runs", {}).items() if not mine(k)}
    merged_runs.update({k: v for k, v in runs_meta.items() if mine(k)})
    if meta is None:
        meta = latest.get("machine", {})
    else:
        meta = {**meta, "labs": sorted({int(m.group(1)) for k in merged_runs if (m := re.match(r"lab(\d+)/", k))})}
    tmp = FIGURES.with_name(FIGURES.name + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"machine": meta, "runs": dict(sorted(merged_runs.items())),
                               "values": dict(sorted(merged_values.items()))}, indent=1, ensure_ascii=False) + "\n",
                   encoding="utf-8")
    os.replace(tmp, FIGURES)


# --- the instructor guide (--page instructor): a class graded, a file the audit refuses -----------------------

CALIBRATION = REPO / "tests" / "calibration"
CAL_SLEEP = "time.sleep(cfg.step_ms / 1000)"


def _calibration_class() -> dict[str, str]:
    """The guide's class of five on the calibration lab (its steps sleep ``step_ms``): alice 1.6× faster, bob
    10% slower, carol's file does not parse, dave yields other values, erin's runs alternate 1.45× and 1.0×."""
    original = (CALIBRATION / "original.py").read_text(encoding="utf-8")
    assert CAL_SLEEP in original

    def variant(speedup: float) -> str:
        return original.replace(CAL_SLEEP, f"time.sleep(cfg.step_ms / 1000 / {speedup})")

    return {
        "alice/90.py": variant(1.6), "alice/notes.py": "x = 1\n", "bob/calibration.py": variant(1 / 1.1),
        "carol/90_calibration.py": "def pipeline(cfg:\n    yield {}\n",
        "dave__90.py": original.replace("* step}", "* (step + 1)}"),
        "erin/90.py": (CALIBRATION / "scheduled.py").read_text(encoding="utf-8"),
        "README.md": "# the class\n",
    }


def _shorten_submission(s: dict) -> dict:
    keys = ("learner", "lab", "number", "title", "file", "verdict", "exit_code", "score", "max_score", "speedup",
            "peak_share", "threshold", "device", "error", "duration_s")
    out = {k: s[k] for k in keys if k in s}
    checks = s.get("checks", [])
    out["checks"] = [checks[0], "…", checks[-1]] if len(checks) > 2 else checks
    for k in ("comparison", "timings"):
        if k in s:
            out[k] = {n: v for n, v in s[k].items() if n != "stopped"} if k == "comparison" else s[k]
    out["…"] = "…"
    return out


def _junit_excerpt(xml: str, learners: tuple[str, ...]) -> str:
    """The suites of ``learners``; every suite after the first keeps its failing test case alone."""
    parts = []
    for i, learner in enumerate(learners):
        m = re.search(rf'^\s*<testsuite name="{learner}".*?</testsuite>', xml, re.M | re.S)
        suite = textwrap.dedent(m.group(0).strip("\n"))
        if i:
            lines = suite.splitlines()
            keep = [n for n, line in enumerate(lines) if "<error" in line or "<failure" in line]
            start = max(n for n, line in enumerate(lines[:keep[0]]) if "<testcase" in line)
            end = next(n for n in range(keep[0], len(lines)) if "</testcase>" in lines[n])
            suite = "\n".join([lines[0], "  …", *lines[start:end + 1], lines[-1]])
        parts.append(suite)
    return "\n".join(parts) + "\n"


def _gradescope_excerpt(record: dict) -> dict:
    tests = record.get("tests", [])
    out = {k: v for k, v in record.items() if k not in ("tests", "extra_data")}
    out["tests"] = [tests[0], "…", tests[-1]] if len(tests) > 2 else tests
    order = ["score", "execution_time", "output", "output_format", "visibility", "stdout_visibility", "tests",
             "leaderboard"]
    out = {k: out[k] for k in order if k in out} | {k: v for k, v in out.items() if k not in order}
    if "extra_data" in record:
        out["extra_data"] = {"proflab": record["extra_data"].get("proflab"),
                             "submissions": ["… the comparison and timings of each lab …"]}
    return out


def page_instructor() -> int:
    """Write docs/figures/instructor/: the class graded (the summary, bob's JSON record, bob's and erin's JUnit
    suites, a learner's Gradescope results) and the source audit refusing a file; figures as ``lab90.*``."""
    sys.path.insert(0, str(REPO / "src"))
    folder = OUT / "instructor"
    folder.mkdir(parents=True, exist_ok=True)
    old = json.loads(FIGURES.read_text()) if FIGURES.is_file() else {}
    values = {k: v for k, v in old.get("values", {}).items() if not k.startswith("lab90.")}
    runs_meta = {k: v for k, v in old.get("runs", {}).items() if not k.startswith("instructor/")}
    subprocess.run([*PROFLAB, "data"], cwd=REPO, check=True, capture_output=True,
                   env={**os.environ, "PYTHONPATH": str(REPO / "src")})

    def run(root: Path, args: list[str], env: dict | None = None) -> tuple[str, int, float]:
        start = time.monotonic()
        proc = subprocess.run([*PROFLAB, *args], cwd=root, capture_output=True, text=True, timeout=1800,
                              env={**os.environ, "PROFLAB_ROOT": str(root), "COLUMNS": WIDTH, "NO_COLOR": "1",
                                   "TERM": "dumb", "PYTHONPATH": str(REPO / "src"), **(env or {})})
        lines = [line.rstrip() for line in (proc.stdout + proc.stderr).splitlines() if not NOT_OUTPUT.match(line)]
        text = ("\n".join(lines).strip("\n") + "\n").replace(str(root) + "/", "")
        return text, proc.returncode, time.monotonic() - start

    def write(name: str, text: str, code: int, took: float) -> None:
        (folder / f"{name}.txt").write_text(text, encoding="utf-8")
        runs_meta[f"instructor/{name}"] = {"exit": code, "seconds": round(took, 1)}
        values[f"lab90.{name}.exit"] = str(code)

    with tempfile.TemporaryDirectory(prefix="proflab-figures-") as tmp:
        root = scratch_kit(Path(tmp))
        lab = root / "labs" / "90_calibration"
        shutil.copytree(CALIBRATION, lab, ignore=shutil.ignore_patterns("__pycache__"))
        manifest = lab / "lab.toml"
        manifest.write_text(re.sub(r"(?m)^max_rounds = \d+$", "max_rounds = 3", manifest.read_text()), encoding="utf-8")
        for name, text in _calibration_class().items():
            (root / "class" / name).parent.mkdir(parents=True, exist_ok=True)
            (root / "class" / name).write_text(text, encoding="utf-8")
        env = {"PROFLAB_CAL_SPEEDUPS": "1.45,1.0", "PROFLAB_CAL_COUNTER": str(root / "erin-runs"),
               "PROFLAB_SANDBOX_SHARED": str(root)}
        print("instructor: proflab grade class …", file=sys.stderr, flush=True)
        text, code, took = run(root, ["grade", "class", "--device", "cpu", "--format", "junit", "--out",
                                      "out/report.xml", "--json-out", "out/grades.json"], env)
        write("grade", text, code, took)
        record = json.loads((root / "out" / "grades.json").read_text(encoding="utf-8"))
        bob = next(s for s in record["submissions"] if s["learner"] == "bob")
        write("grade-bob-json", json.dumps(_shorten_submission(bob), indent=2, ensure_ascii=False) + "\n", code, took)
        write("grade-not-graded-json", '"not_graded": ' + json.dumps(record.get("not_graded", []), indent=2,
                                                                    ensure_ascii=False) + "\n", code, took)
        xml = (root / "out" / "report.xml").read_text(encoding="utf-8")
        write("grade-junit", _junit_excerpt(xml, ("bob", "erin")), code, took)
        for s in record["submissions"]:
            values[f"lab90.grade.{s['learner']}.speedup"] = f"{s['speedup']:.2f}" if s.get("speedup") else ""
            values[f"lab90.grade.{s['learner']}.score"] = f"{s['score']:g}" if s.get("score") is not None else ""

        print("instructor: proflab grade submission --format gradescope …", file=sys.stderr, flush=True)
        (root / "submission").mkdir()
        (root / "submission" / "90.py").write_text(_calibration_class()["alice/90.py"], encoding="utf-8")
        text, code, took = run(root, ["grade", "submission", "--device", "cpu", "--format", "gradescope",
                                      "--out", "out/results.json"])
        results = json.loads((root / "out" / "results.json").read_text(encoding="utf-8"))
        write("gradescope", json.dumps(_gradescope_excerpt(results), indent=2, ensure_ascii=False) + "\n", code,
              took)

        print("instructor: proflab check 1 --file lab1_env_latency.py …", file=sys.stderr, flush=True)
        shutil.copyfile(REPO / "tests" / "cheats" / "lab1_env_latency.py", root / "lab1_env_latency.py")
        text, code, took = run(root, ["check", "1", "--file", "lab1_env_latency.py", "--device", "cpu"])
        write("audit-refused", text, code, took)
    values["lab90.machine"] = describe(machine(), today())
    write_figures(lambda k: k.startswith(("lab90.", "instructor/")), values, runs_meta)
    print(f"wrote {folder.relative_to(REPO)}/ and the lab90.* figures", file=sys.stderr)
    return 0


# --- "Profile your own model" (--page own-model): proflab profile on scripts the kit did not write -------------

OWN_SCRIPTS = REPO / "tests" / "own_scripts"
# (name, what `proflab profile` is given): the page walks through the first; the second shows a job's ranks.
OWN_RUNS = [
    ("profile-classify", ["--memory", str(OWN_SCRIPTS / "classify.py"), "--decode-in-loop"]),
    ("profile-ddp", ["--nproc-per-node", "2", str(OWN_SCRIPTS / "ddp.py"), "--accumulate", "4"]),
]


def page_own_model() -> int:
    """Write docs/figures/own-model/: what ``proflab profile`` printed for tests/own_scripts' scripts, run in a
    scratch folder as a learner runs it, and figures read from its ``--json`` as ``own.<run>.*``."""
    folder = OUT / "own-model"
    folder.mkdir(parents=True, exist_ok=True)
    values: dict[str, str] = {}
    runs_meta: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="proflab-figures-") as tmp:
        for name, args in OWN_RUNS:
            print(f"own-model: proflab profile {' '.join(Path(a).name for a in args)} …", file=sys.stderr, flush=True)
            report = Path(tmp) / f"{name}.json"
            start = time.monotonic()
            proc = subprocess.run([*PROFLAB, "profile", "--json", str(report), *args], cwd=tmp, capture_output=True,
                                  text=True, timeout=1800,
                                  env={**os.environ, "COLUMNS": WIDTH, "NO_COLOR": "1", "TERM": "dumb",
                                       "PYTHONPATH": str(REPO / "src")})
            took = time.monotonic() - start
            text = "\n".join(line.rstrip() for line in (proc.stdout + proc.stderr).splitlines()).strip("\n") + "\n"
            text = text.replace(tmp + "/", "").replace(str(OWN_SCRIPTS) + "/", "")
            (folder / f"{name}.txt").write_text(text, encoding="utf-8")
            runs_meta[f"own-model/{name}"] = {"exit": proc.returncode, "seconds": round(took, 1)}
            found = json.loads(report.read_text(encoding="utf-8"))
            key = name.removeprefix("profile-")
            first = found["ranks"][0]
            values[f"own.{key}.steps_run"] = str(found["steps_run"])
            values[f"own.{key}.step_ms"] = f"{first['step_ms']:.1f} ms"
            for label, ms, share in first["parts"]:
                slug = re.sub(r"[^a-z]+", "_", label.lower()).strip("_")
                values[f"own.{key}.part.{slug}.ms"] = f"{ms:.1f} ms"
                values[f"own.{key}.part.{slug}.share"] = f"{share:.0%}"
            for i, f in enumerate(first["findings"], 1):
                values[f"own.{key}.finding{i}"] = f["title"]
                if f["ms"]:
                    values[f"own.{key}.finding{i}.ms"] = f"{f['ms']:.1f} ms"
                    values[f"own.{key}.finding{i}.share"] = f"{f['share']:.0%}"
            values[f"own.{key}.findings"] = str(len(first["findings"]))
            if first["operators"]:
                values[f"own.{key}.top_operator"] = first["operators"][0][0]
    values["own.machine"] = describe(machine(), today())
    write_figures(lambda k: k.startswith(("own.", "own-model/")), values, runs_meta)
    print(f"wrote {folder.relative_to(REPO)}/ and the own.* figures", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lab", type=int, action="append", help="regenerate this lab only (repeatable)")
    parser.add_argument("--page", choices=("instructor", "own-model"), help="regenerate this page's outputs only")
    args = parser.parse_args(argv)
    if args.page == "instructor":
        return page_instructor()
    if args.page == "own-model":
        return page_own_model()
    sys.path.insert(0, str(REPO / "src"))
    from proflab import labs as kit_labs

    discovered = kit_labs.discover()
    every = {lab.number: lab for lab in discovered if lab.gating is None}
    gates = {lab.number: lab for lab in discovered if lab.gating is not None}  # lab 7: its gates and checks
    chosen = sorted(args.lab or {**every, **gates})
    unknown = [n for n in chosen if n not in every and n not in gates]
    if unknown:
        parser.error(f"no such lab: {unknown}")

    old = json.loads(FIGURES.read_text()) if FIGURES.is_file() else {}
    values: dict[str, str] = {k: v for k, v in old.get("values", {}).items()
                              if not any(k.startswith(f"lab{n}.") for n in chosen)}
    runs_meta: dict[str, dict] = {k: v for k, v in old.get("runs", {}).items()
                                  if not any(k.startswith(f"lab{n}/") for n in chosen)}
    subprocess.run([*PROFLAB, "data"], cwd=REPO, check=True, capture_output=True,
                   env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    load_before = os.getloadavg()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="proflab-figures-") as tmp:
        root = scratch_kit(Path(tmp))
        for number in chosen:
            if number in gates:
                lab_gate(root, number, values, runs_meta)
                continue
            lab = every[number]
            folder = OUT / f"lab{number}"
            folder.mkdir(parents=True, exist_ok=True)
            for old_file in folder.glob("*.txt"):
                old_file.unlink()
            active = max(lab.workload.profile_steps - 1, 0)
            if lab.profiling:  # lab 0: the reference's own schedule decides how many steps its table covers
                active = int(re.search(r"active=(\d+)", lab.solution.read_text()).group(1))
            for name, cmd in RUNS + EXTRA.get(number, []):
                print(f"lab {number}: proflab {' '.join(cmd).format(lab=number, solution='solution.py')} …",
                      file=sys.stderr, flush=True)
                text, code, took = command(root, number, cmd)
                (folder / f"{name}.txt").write_text(text, encoding="utf-8")
                read = read_check(text) if name.startswith("check") else read_run(text, lab, active)
                if number in (3, 4, 8):
                    read.update(read_lab3_4(name, text, root))
                if number in (1, 2):
                    read.update(read_lab1_2(name, text))
                for key, value in read.items():
                    values[f"lab{number}.{name}.{key}"] = value
                values[f"lab{number}.{name}.exit"] = str(code)
                runs_meta[f"lab{number}/{name}"] = {"exit": code, "seconds": round(took, 1)}
                print(f"  exit {code}, {took:.0f} s", file=sys.stderr, flush=True)
            values[f"lab{number}.machine"] = describe(machine(), today())
    took = time.monotonic() - started
    when = today()
    m = machine()
    load_after = os.getloadavg()
    # Busy: other work loaded the machine when the runs began (the load after them is theirs: a check keeps the
    # cores busy, so it says nothing of other work).
    busy = load_before[0] > 0.5 * (m["cores"] or 1)
    meta = {
        **m, "date": when,
        "load_average": {"before": [round(x, 2) for x in load_before], "after": [round(x, 2) for x in load_after]},
        "quiet": not busy,
        "note": ("measured while other work loaded the machine (a load average above half its cores when the runs "
                 "began): "
                 "timings are noisier than on a quiet machine; re-run `python docs/gen_figures.py` on a quiet one "
                 "before a release" if busy else "measured on a quiet machine"),
        "last_command": "python docs/gen_figures.py" + "".join(f" --lab {n}" for n in (args.lab or [])),
        "last_took_s": round(took),
    }
    for n in chosen:  # each lab's own word on how its figures were measured
        values[f"lab{n}.measured"] = f"{meta['note']}, load average {meta['load_average']['before'][0]:.2f} before"
    mine = made_by(chosen, every_lab=not args.lab)
    if args.lab:  # one lab's figures: the kit-wide ones (the machine, whether it was quiet) stay as they were
        write_figures(mine, values, runs_meta)
        print(f"wrote lab {', '.join(map(str, chosen))}'s figures in {FIGURES.relative_to(REPO)} and "
              f"docs/figures/lab*/ in {took:.0f} s; the others kept", file=sys.stderr)
        return 0
    values.update({
        "machine.cpu": m["cpu"], "machine.cores": str(m["cores"]), "machine.torch": m["torch"],
        "machine.python": m["python"], "machine.date": when, "machine.memory_gib": str(m["memory_gib"]),
    })
    values["machine"] = describe(m, when)
    write_figures(mine, values, runs_meta, meta)
    print(f"wrote {FIGURES.relative_to(REPO)} and docs/figures/lab*/ in {took:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
