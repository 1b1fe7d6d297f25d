"""The ``proflab`` command: list, run, check, hint, reset, tensorboard, data, quickstart.

Exit codes: 0 success (a check passed), 1 a check failed or a run broke,
2 a usage error, 3 the kit could not grade (an edited original, a broken
machine), 4 too noisy to call (the speed-up's interval straddles the
threshold even after extra rounds), 130 interrupted.

``proflab grade`` exits 0 when it graded the folder, whatever the learners'
verdicts (they are in its output), 2 on a usage error (no such folder,
nothing in it to grade), 3 when the kit could grade no submission at all.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from . import __version__, checks, execute, labs, paths, progress, report, summaries, tensorboard

USAGE_ERROR = 2
out = Console(highlight=False)
err = Console(stderr=True, highlight=False)


class UsageError(Exception):
    pass


# --- helpers -----------------------------------------------------------------

def _lab(name: str) -> labs.Lab:
    try:
        return labs.resolve(name)
    except labs.LabNotFound as e:
        raise UsageError(str(e)) from None
    except labs.ManifestError as e:
        raise UsageError(f"a lab manifest is broken: {e}") from None


def _lab_and_file(target: str, file: str | None, version: str = "exercise") -> tuple[labs.Lab, Path]:
    """``1``, ``dataloader`` or a path to a lab file; ``--file`` overrides the file."""
    as_path = Path(target)
    if target.endswith(".py") or as_path.is_file():
        if not as_path.is_file():
            raise UsageError(f"{target}: no such file")
        lab = labs.find_by_file(as_path)
        if lab is None:
            raise UsageError(f"{target} is not inside a lab folder; name the lab: proflab run LAB --file {target}")
        return lab, as_path.resolve()
    lab = _lab(target)
    if file:
        path = Path(file)
        if not path.is_file():
            raise UsageError(f"{file}: no such file")
        return lab, path.resolve()
    return lab, {"exercise": lab.exercise, "original": lab.original, "solution": lab.solution}[version]


def _audited() -> bool:
    """The source audit is on unless PROFLAB_AUDIT=off in the checker's own environment (the kit's tests
    use it to exercise the checks behind the audit); ``proflab grade`` always audits."""
    return os.environ.get("PROFLAB_AUDIT", "on").lower() != "off"


def _label(lab: labs.Lab, file: Path) -> str:
    """The run name a version gets under runs/<lab>/."""
    file = file.resolve()
    if file == lab.exercise.resolve():
        return "yours"
    if file == lab.solution.resolve():
        return "reference"
    if file == lab.original.resolve():
        return "original"
    stem = "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in file.stem)
    return f"file-{stem}"


@contextmanager
def _status(message: str, enabled: bool = True):
    if not enabled or not err.is_terminal:
        yield lambda text: None
        return
    with err.status(message) as live:
        yield lambda text: live.update(text)


# --- commands ----------------------------------------------------------------

def cmd_list(args) -> int:
    table = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("#", "lab", "title", "status"):
        table.add_column(col)
    style = {progress.PASSED: "green", progress.FAILING: "red", progress.NOT_STARTED: "dim"}
    found = labs.discover()
    if not found:
        raise UsageError(f"no labs found under {paths.labs_dir()}")
    for lab in found:
        status = progress.status(lab.name)
        table.add_row(str(lab.number), lab.name, f"{lab.title}\n[dim]{escape(lab.summary)}[/]",
                      f"[{style[status]}]{status}[/]")
    out.print(table)
    out.print("\n[dim]Start with:[/] proflab run 1   [dim]then[/] proflab check 1")
    return 0


PRINTED_LINES_SHOWN = 10  # the tail of what a profiled lab file printed


def cmd_run(args) -> int:
    lab, file = _lab_and_file(args.lab, args.file, args.version)
    label = _label(lab, file)
    w = lab.workload
    folder = checks.fresh_trace_dir(lab, label)
    with _status(f"Profiling {file.name}: {w.warmup_steps} warm-up, {w.timed_steps} timed, "
                 f"{w.profile_steps} profiled steps…"):
        outcome = execute.run(lab, file, label, device=args.device, trace_dir=folder, table=True,
                              record_shapes=args.record_shapes, profile_memory=args.profile_memory,
                              with_stack=args.with_stack, timeout_s=args.timeout)
    printed = outcome.stdout.rstrip().splitlines()
    if printed:
        hidden = len(printed) - PRINTED_LINES_SHOWN
        out.print("[dim]Your program printed" + (f" ({hidden} earlier lines not shown):[/]" if hidden > 0 else ":[/]"))
        out.print(escape("\n".join(printed[-PRINTED_LINES_SHOWN:])))
    if not outcome.ok:
        check = checks.Check("runs", "It runs", "")
        checks.runtime_failure(check, outcome, lab, args.timeout or w.timeout_s)
        err.print(f"[red]✗[/] {escape(check.rationale)}")
        for line in check.details:
            err.print(f"  [dim]{escape(line)}[/]")
        if check.actual:
            err.print(f"  {escape(check.actual)}")
        if args.verbose and outcome.result.get("traceback"):
            err.print(escape(outcome.result["traceback"]))
        elif outcome.result.get("traceback"):
            err.print("  [dim](--verbose shows the full traceback)[/]")
        return 1
    r = outcome.result
    table = r.get("table") or {}
    out.print(f"[bold]Lab {lab.number} · {escape(lab.title)}[/] — {escape(paths.display(file))} on {r['device']}"
              f" [dim](torch {r['torch']}, {r['threads']} threads)[/]")
    if table:
        out.print(f"\n[dim]prof.key_averages().table(sort_by=\"{table['sort_by']}\") over the profiled steps:[/]")
        out.print(escape(table["text"]), soft_wrap=True)
    times = sorted(r["step_times"])
    out.print(f"Step time over {len(times)} timed steps: mean {r['mean_step_s'] * 1000:.1f} ms, "
              f"median {times[len(times) // 2] * 1000:.1f} ms (profiler off while timing)")
    _summaries(lambda: summaries.write_step_times(lab, label, r["step_times"]))
    progress.remember_run(lab.slug, label)
    if r.get("trace"):
        size = Path(r["trace"]).stat().st_size / 1e6
        out.print(f"Trace: {escape(paths.display(r['trace']))} ({size:.1f} MB)")
        out.print(f"Open it: [bold]proflab tensorboard[/]   [dim](run '{lab.slug}/{label}')[/]")
    return 0


def cmd_check(args) -> int:
    lab, file = _lab_and_file(args.lab, args.file)
    label = _label(lab, file)
    with _status(f"Checking {file.name} against the original…", enabled=True) as update:
        result = checks.check(lab, file, label=label, device=args.device, rounds=args.rounds,
                              timeout_s=args.timeout, on_progress=update, audited=_audited())
    if label == "yours" and result.verdict in (checks.PASSED, checks.FAILED):
        progress.record_check(lab.name, result.verdict == checks.PASSED,
                              (result.comparison or {}).get("speedup"), result.device)
    if not result.error and result.step_times["learner"]:
        with _status("Writing TensorBoard summaries…"):
            _summaries(lambda: summaries.write_check(lab, result))
        progress.remember_run(lab.slug, label)
    if args.json:
        print(report.to_json(result))
    else:
        report.render(result, out, verbose=args.verbose)
    return result.exit_code


def _summaries(write) -> None:
    """Summaries are a view of the verdict; failing to draw them never loses it."""
    try:
        write()
    except Exception as e:  # noqa: BLE001
        err.print(f"[yellow]![/] TensorBoard summaries were not written: {escape(str(e))}")


def cmd_hint(args) -> int:
    lab = _lab(args.lab)
    if not lab.hints:
        out.print(f"Lab {lab.number} has no hints.")
        return 0
    if args.all:
        shown = range(len(lab.hints))
    else:
        shown = [progress.next_hint(lab.name, len(lab.hints))]
    for i in shown:
        out.print(f"[bold]Hint {i + 1}/{len(lab.hints)}[/] · lab {lab.number} ({lab.name})")
        out.print(escape(lab.hints[i]) + "\n")
    if not args.all and shown[0] + 1 < len(lab.hints):
        out.print("[dim]Run it again for the next hint.[/]")
    return 0


def cmd_reset(args) -> int:
    lab = _lab(args.lab)
    if lab.exercise.exists() and lab.exercise.read_bytes() == lab.original.read_bytes():
        out.print(f"{paths.display(lab.exercise)} is already untouched; nothing to do.")
        return 0
    if not lab.original_is_intact():
        raise UsageError(f"{paths.display(lab.original)} was edited too, so it cannot restore the exercise; "
                         f"restore it first (git checkout -- {paths.display(lab.original)})")
    backup = None
    if lab.exercise.exists():
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S-%f")
        backup = paths.state_dir() / "backups" / lab.slug / f"{lab.exercise.stem}-{stamp}.py"
        backup.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(lab.exercise, backup)
    from .atomic import write_text

    write_text(lab.exercise, lab.original.read_text(encoding="utf-8"))
    out.print(f"Restored {paths.display(lab.exercise)} to the original.")
    if backup:
        out.print(f"Your version is kept in {paths.display(backup)}")
    return 0


def cmd_tensorboard(args) -> int:
    logdir = Path(args.logdir) if args.logdir else paths.runs_dir()
    with _status("Starting TensorBoard…"):
        try:
            proc = tensorboard.start(logdir, host=args.host, port=args.port)
        except tensorboard.ServerError as e:
            err.print(f"[red]✗[/] {escape(str(e))}")
            return 1
    out.print(f"TensorBoard is serving {escape(paths.display(logdir))} at [bold]{tensorboard.url(args.host, args.port)}[/]")
    for line in _what_to_open(logdir):
        out.print(line)
    out.print("[dim]Press Ctrl-C to stop.[/]")
    try:
        proc.wait()
    except KeyboardInterrupt:
        pass
    finally:
        tensorboard.stop(proc)
    out.print("TensorBoard stopped.")
    return 0


def _what_to_open(logdir: Path) -> list[str]:
    """Point at the run the learner just made, and at what to compare it with."""
    last = progress.last_run()
    if last and (logdir / last["lab"] / last["run"]).is_dir():
        run = f"{last['lab']}/{last['run']}"
    else:
        traces = sorted(logdir.glob("*/*/*.pt.trace.json*"), key=lambda p: p.stat().st_mtime)
        if not traces:
            return ["[dim]No runs yet: `proflab run 1` writes the first one.[/]"]
        run = f"{traces[-1].parent.parent.name}/{traces[-1].parent.name}"
    original = f"{run.split('/')[0]}/original"
    lines = [f"Open first: the [bold]Trace timeline[/] tab, run [bold]{escape(run)}[/]"]
    if run != original and (logdir / original).is_dir():
        lines.append(f"  then the same tab on run [bold]{escape(original)}[/] to compare")
    lines.append(f"  Scalars › {summaries.STEP_TIME} · Text › {summaries.REPORT} · Images › {summaries.WHERE}")
    lines.append("  [dim]All of these work offline. The PyTorch Profiler tab's charts and Trace view "
                 "need the internet.[/]")
    return lines


def cmd_data(args) -> int:
    from .labkit import prepare_all

    with _status("Preparing lab data…"):
        done = prepare_all(paths.data_dir())
    for line in done:
        out.print(line)
    return 0


def cmd_grade(args) -> int:
    from . import grade, grade_formats

    try:
        known = labs.discover()
        only = labs.resolve(args.lab, known) if args.lab else None
        found = grade.find(Path(args.folder), only, known)
        refused = grade_formats.refusal(args.format, found, args.folder, (args.out, args.json_out))
        if refused:
            raise UsageError(refused)
        with _status("Preparing lab data…"):
            grade.prepare_data(found)
    except (labs.ManifestError, grade.KitError) as e:
        broken = "a lab manifest is broken: " if isinstance(e, labs.ManifestError) else ""
        err.print(f"[red]proflab:[/] cannot grade: {broken}{escape(str(e))}")
        return 3
    except (labs.LabNotFound, grade.GradeError) as e:
        raise UsageError(str(e)) from None
    with _status(f"Grading {len(found.submissions)} submissions, one at a time…") as update:
        shown = grade_formats.Progress(err, update, verbose=args.verbose)
        result = grade.grade(found, device=args.device, rounds=args.rounds, timeout_s=args.timeout,
                             on_start=shown.start, on_progress=shown.step, on_done=shown.done)
    failed = grade_formats.write(args.format, result, args.out, args.json_out)
    err.print(grade_formats.summary(result, *(p if p not in failed else None for p in (args.out, args.json_out))))
    if not found.submissions:
        raise UsageError(f"nothing to grade in {args.folder}: no file there names a lab")
    if failed:
        raise UsageError("; ".join(failed.values()))
    return 0 if result.graded_any else 3


def cmd_quickstart(args) -> int:
    lab = _lab("1")
    out.print(f"[bold]proflab {__version__}[/] · profiling lab 1's slow pipeline and its reference fix.\n")
    cmd_data(args)
    args.lab, args.file = "1", str(lab.solution)
    code = cmd_check(args)
    out.print(f"\nNext: [bold]proflab list[/], then [bold]proflab run 1[/] and [bold]proflab check 1[/] "
              f"on your own fix in {escape(paths.display(lab.exercise))}.")
    return code


# --- parser ------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="proflab", description="Learn torch.profiler by fixing slow pipelines.")
    p.add_argument("--version", action="version", version=f"proflab {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    def device(sp):
        sp.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"),
                        help="where the pipeline runs (default: cuda if available, else cpu)")
        sp.add_argument("--timeout", type=float, default=None, metavar="S",
                        help="time limit per run in seconds (default: the lab's)")
        sp.add_argument("--verbose", action="store_true", help="show full tracebacks and program output")

    sp = sub.add_parser("list", help="the labs and your progress")
    sp.set_defaults(func=cmd_list)

    sp = sub.add_parser("run", help="profile a lab's pipeline and write a TensorBoard trace")
    sp.add_argument("lab", help="lab number or name (1, dataloader), or a lab file's path")
    sp.add_argument("--file", help="profile this file instead of the lab's exercise")
    sp.add_argument("--version", default="exercise", choices=("exercise", "original", "solution"),
                    help="which of the lab's files to profile (default: exercise)")
    sp.add_argument("--record-shapes", action="store_true", help="record input shapes (bigger trace)")
    sp.add_argument("--profile-memory", action="store_true", help="record memory allocations (bigger trace)")
    sp.add_argument("--with-stack", action="store_true", help="record Python stacks (much bigger trace)")
    device(sp)
    sp.set_defaults(func=cmd_run)

    sp = sub.add_parser("check", help="grade your fix against the original")
    sp.add_argument("lab", help="lab number or name")
    sp.add_argument("--file", help="grade this file instead of the lab's exercise")
    sp.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    sp.add_argument("--rounds", type=int, default=None, help="paired rounds of runs (default: the lab's)")
    device(sp)
    sp.set_defaults(func=cmd_check)

    sp = sub.add_parser("hint", help="show the next hint for a lab")
    sp.add_argument("lab")
    sp.add_argument("--all", action="store_true", help="show every hint")
    sp.set_defaults(func=cmd_hint)

    sp = sub.add_parser("reset", help="restore a lab's exercise (your version is backed up)")
    sp.add_argument("lab")
    sp.set_defaults(func=cmd_reset)

    sp = sub.add_parser("tensorboard", help="serve the runs folder in TensorBoard")
    sp.add_argument("--port", type=int, default=6006)
    sp.add_argument("--host", default="127.0.0.1")
    sp.add_argument("--logdir", help="folder to serve (default: runs/)")
    sp.set_defaults(func=cmd_tensorboard)

    sp = sub.add_parser("data", help="prepare every lab's data under data/")
    sp.set_defaults(func=cmd_data)

    sp = sub.add_parser("grade", help="grade a folder of submissions, one at a time (JSON, JUnit XML, Gradescope)")
    sp.add_argument("folder", metavar="FOLDER",
                    help="one file per learner and lab: FOLDER/alice/1.py, FOLDER/alice__1.py, or FOLDER/1.py "
                         "for one learner")
    sp.add_argument("--format", default="json", choices=("json", "junit", "gradescope"),
                    help="what to write: the full JSON record, JUnit XML for CI, or Gradescope's results.json "
                         "(default: json)")
    sp.add_argument("--out", metavar="PATH", help="write it to this file (default: stdout)")
    sp.add_argument("--json-out", metavar="PATH", help="also write the full JSON record to this file")
    sp.add_argument("--lab", help="grade only this lab's files; then exercise.py is this lab's too")
    sp.add_argument("--rounds", type=int, default=None, help="paired rounds of runs (default: the lab's)")
    device(sp)
    sp.set_defaults(func=cmd_grade)

    sp = sub.add_parser("quickstart", help="prepare data, then profile and grade lab 1's reference fix")
    device(sp)
    sp.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    sp.add_argument("--rounds", type=int, default=None, help=argparse.SUPPRESS)
    sp.set_defaults(func=cmd_quickstart, file=None)
    return p


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return USAGE_ERROR
    signal.signal(signal.SIGTERM, _interrupt)  # a kill stops children as cleanly as Ctrl-C does
    try:
        return args.func(args)
    except UsageError as e:
        err.print(f"[red]proflab:[/] {escape(str(e))}")
        return USAGE_ERROR
    except KeyboardInterrupt:
        err.print("\nInterrupted.")
        return 130


if __name__ == "__main__":
    sys.exit(main())
