"""The ``proflab`` command: list, run, profile, check, hint, debrief, drill, reset, tensorboard, data, grade, gate, quickstart;
for authors of labs, new-lab and validate-lab.

Exit codes: 0 success (a check passed), 1 a check failed or a run broke,
2 a usage error, 3 the kit could not do its work (an edited original, a
broken lab manifest, a full disk, a read-only folder: never the learner's
failure), 4 too noisy to call (the speed-up's interval straddles the
threshold even after extra rounds), 130 interrupted (Ctrl-C, SIGTERM, or the
terminal closing).

``proflab grade`` exits 0 when it graded every submission, whatever the
learners' verdicts (they are in its output), 2 on a usage error (no such
folder, nothing in it to grade, outputs inside the class folder), 3 when the
kit could not grade some submission (each is listed as "not graded", with no
points, never 0), 130 when interrupted (the outputs then hold the verdicts
made, marked partial; ``--resume`` grades the rest).
"""

from __future__ import annotations

import argparse
import errno
import math
import os
import signal
import sys
from datetime import datetime
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from . import __version__, errors, labs, outputs, paths, progress
from .grading import checks
from .running import cgroups, sandbox, side_channels, slots
from .reporting import report, summaries
from .viewing import tensorboard
from .commands.common import (KIT_ERROR, USAGE_ERROR, UsageError, _audited, _lab, _lab_and_file, _label, _say,
                              _say_unsandboxed, _status, _summaries, err, out)
from .commands.autograder import cmd_autograder
from .commands.grading import _param, cmd_gate, cmd_grade
from .commands.running import cmd_run
from .commands.profiling import DEFAULT_STEPS, cmd_profile
from .commands.authoring import cmd_new_lab, cmd_validate_lab


# --- helpers -----------------------------------------------------------------


# --- commands ----------------------------------------------------------------

def cmd_list(args) -> int:
    table = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("#", "lab", "title", "status"):
        table.add_column(col)
    style = {progress.PASSED: "green", progress.FAILING: "red", progress.NOT_STARTED: "dim"}
    found, broken = labs.discover_all()
    if not found and not broken:
        raise UsageError(f"no labs found under {paths.labs_dir()}")
    rows = [(lab.number, 0, lab) for lab in found] + [(b.number if b.number is not None else 1 << 30, 1, b)
                                                      for b in broken]
    for _, _, lab in sorted(rows, key=lambda row: row[:2]):
        if isinstance(lab, labs.BrokenLab):
            table.add_row("?" if lab.number is None else str(lab.number), escape(lab.folder.name),
                          f"[red]its manifest is broken:[/]\n[red]{escape(lab.message)}[/]",
                          "[red]broken[/]")
            continue
        status = progress.status(lab.name)
        table.add_row(str(lab.number), lab.name, f"{lab.title}\n[dim]{escape(lab.summary)}[/]",
                      f"[{style[status]}]{status}[/]")
    out.print(table)
    if not found:
        err.print("[red]proflab:[/] no lab's manifest loads; fix the lab.toml files above")
        return 3
    unfinished = [lab for lab in found if progress.status(lab.name) != progress.PASSED]
    if not unfinished:
        out.print("\n[green]Every lab passed.[/] [dim]`proflab reset N` hands a lab's exercise out again "
                  "(your version is backed up); its status stays passed until a check of it fails.[/]")
        return 0
    nxt = unfinished[0].number
    word = "Start with" if len(unfinished) == len(found) else "Next"
    first = f"proflab run {nxt}" if unfinished[0].kind != "gate" else f"proflab hint {nxt}"  # lab 7 runs no pipeline
    out.print(f"\n[dim]{word}:[/] {first}   [dim]then[/] proflab check {nxt}")
    if len(unfinished) < len(found):
        out.print("[dim]A status is your last check of that lab's exercise; `proflab reset` does not change it.[/]")
    return 0


def cmd_check(args) -> int:
    lab, file = _lab_and_file(args.lab, args.file)
    label = _label(lab, file)
    doing = f"Checking {file.name} against the original…"
    if lab.kind == "gate":
        if args.rounds or args.timeout:
            raise UsageError(f"lab {lab.number}'s rounds and time limits are your settings' own: set rounds, "
                             f"max_rounds and budget_s in {file.name}")
        doing = f"Running the gate of lab {lab.gating.lab}'s fix with {file.name}…"
    _say_unsandboxed()
    # One turn at the machine for the check and what it draws after (the summaries' charts are seconds of
    # CPU, which would otherwise run beside the next check's rounds)
    with _status(doing, enabled=True) as update, slots.turn(update) as slot:
        result = checks.check(lab, file, label=label, device=args.device, rounds=args.rounds,
                              timeout_s=args.timeout, on_progress=update, audited=_audited())
        result.waited_s += slot.take_wait()
        if summaries.to_write(lab, result):
            update("Writing TensorBoard summaries…")
            _summaries(lambda: summaries.write_check(lab, result))
    if label == "yours" and result.verdict in (checks.PASSED, checks.FAILED):  # failing to record never loses it
        progress.safely(lambda: progress.record_check(lab.name, result.verdict == checks.PASSED,
                                                      (result.comparison or {}).get("speedup"), result.device),
                        "your progress was not recorded (the verdict below stands)")
    if not result.error and result.step_times["learner"]:
        progress.safely(lambda: progress.remember_run(lab.slug, label),
                        "the run was not remembered for proflab tensorboard")
    if args.json:
        print(report.to_json(result))
    else:
        report.render(result, out, verbose=args.verbose)
        if label == "yours" and result.verdict == checks.PASSED and lab.debrief is not None:
            out.print(f"What the reference fix does, and every sound fix we measured: `proflab debrief {lab.number}`.")
    return result.exit_code



def cmd_hint(args) -> int:
    lab = _lab(args.lab)
    if not lab.hints:
        out.print(f"Lab {lab.number} has no hints.")
        return 0
    if args.all:
        shown = range(len(lab.hints))
        progress.safely(lambda: progress.all_hints_shown(lab.name, len(lab.hints)),
                        "the hints shown were not remembered")
    else:
        shown = [progress.next_hint(lab.name, len(lab.hints))]
    for i in shown:
        last = " (the last)" if i + 1 == len(lab.hints) else ""
        out.print(f"[bold]Hint {i + 1}/{len(lab.hints)}{last}[/] · lab {lab.number} ({lab.name})")
        out.print(escape(lab.hints[i]) + "\n")
    if not args.all and shown[0] + 1 < len(lab.hints):
        out.print("[dim]Run it again for the next hint.[/]")
    elif not args.all:
        out.print(f"[dim]That was the last hint; `proflab hint {lab.number} --all` shows them all. The Profile "
                  f"tab now says what to try in this lab's runs too; the reference fix is "
                  f"{escape(paths.display(lab.solution))}.[/]")
    return 0


def cmd_debrief(args) -> int:
    """A lab's debrief (``reporting.debrief``), once its check has passed here: before, what to do first."""
    lab = _lab(args.lab)
    if lab.debrief is None:
        out.print(f"Lab {lab.number} has no debrief.")
        return 0
    if progress.status(lab.name) != progress.PASSED:
        out.print(f"Lab {lab.number}'s debrief (the reference fix, its check, and every sound fix we measured) "
                  f"opens once your fix passes: `proflab check {lab.number}`. Stuck? `proflab hint {lab.number}` "
                  "gives one hint at a time.")
        return 1
    from rich.markdown import Markdown

    from .reporting import debrief

    try:
        body = debrief.text(lab.debrief)
    except (debrief.Missing, OSError) as e:
        err.print(f"[red]The debrief of lab {lab.number} cannot be shown:[/] {escape(str(e))}")
        return KIT_ERROR
    out.print(Markdown(body, code_theme="ansi_dark"))
    return 0


def cmd_drill(args) -> int:
    """Write this learner's diagnosis drill (``authoring.drills``) into the kit, or say where it is."""
    import getpass

    from .authoring import drills

    who = args.who or os.environ.get("PROFLAB_LEARNER") or getpass.getuser()
    try:
        home = drills.write(who)
    except ValueError as e:
        raise UsageError(str(e)) from None
    except OSError as e:
        err.print(f"[red]The drill cannot be written into the kit:[/] {escape(str(e))}")
        return KIT_ERROR
    lab = labs.load(home)
    out.print(f"[bold]Your drill[/], drawn for {escape(who)}: {escape(paths.display(lab.exercise))} "
              f"(lab {lab.number}, {lab.name})")
    out.print(f"It is slow for one reason. Profile it: `proflab run {lab.name}`, then `proflab tensorboard`. "
              f"Write in its ANSWERS where the time goes and its ms per step, then fix it, and check: "
              f"`proflab check {lab.name}`.")
    return 0


def cmd_reset(args) -> int:
    """Restore the exercise, after a verified backup of the learner's version; exit 3, touching nothing,
    when that backup or the restore cannot be made (a full disk, a read-only folder)."""
    import tempfile

    from . import atomic

    lab = _lab(args.lab)
    exercise, shown = lab.exercise, escape(paths.display(lab.exercise))

    def cannot(message: str) -> int:
        err.print(f"[red]proflab:[/] {message}", soft_wrap=True)
        return 3

    def why(e: OSError) -> str:
        return escape(e.strerror or str(e))

    if exercise.is_dir():
        return cannot(f"{shown} is a folder, not a file, so there is no exercise to restore; it is left as it is: "
                      f"move it away (it may hold your work), then run `proflab reset {lab.number}` again")
    try:
        original = lab.original.read_bytes()
        intact = lab.original_is_intact()
    except OSError as e:
        return cannot(f"cannot read {escape(paths.display(lab.original))}: {why(e)}; nothing was changed")
    try:
        mine = exercise.read_bytes() if exercise.exists() else None
    except OSError as e:
        return cannot(f"cannot read {shown}: {why(e)}; it is left as it is")
    if mine == original:
        out.print(f"{paths.display(exercise)} is already untouched; nothing to do.")
        return 0
    if not intact:
        raise UsageError(f"{paths.display(lab.original)} was edited too, so it cannot restore the exercise; "
                         f"restore it first (git checkout -- {paths.display(lab.original)})")
    try:  # a folder the restore cannot write to: say so before any backup is made
        fd, probe = tempfile.mkstemp(prefix=".proflab-reset-", dir=exercise.parent)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        return cannot(f"cannot restore {shown}: its folder {escape(paths.display(exercise.parent))} is not "
                      f"writable ({why(e)}); your version is left as it is")
    backup = None
    if mine is not None:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S-%f")
        backup = paths.state_dir() / "backups" / lab.slug / f"{exercise.stem}-{stamp}{exercise.suffix}"
        try:
            backup.parent.mkdir(parents=True, exist_ok=True)
            atomic.write_verified(backup, mine, like=exercise)  # read back and compared byte for byte
        except OSError as e:
            return cannot(f"could not back up {shown} to {escape(paths.display(backup))}: {why(e)}; "
                          "nothing was restored, your version is left as it is")
        try:
            changed = exercise.read_bytes() != mine
        except OSError as e:
            return cannot(f"cannot read {shown} again: {why(e)}; nothing was restored (a copy is in "
                          f"{escape(paths.display(backup))})")
        if changed:
            return cannot(f"{shown} changed while it was backed up; nothing was restored (the copy made is in "
                          f"{escape(paths.display(backup))}): run `proflab reset {lab.number}` again")
    try:
        atomic.write_text(exercise, original.decode("utf-8"))
    except OSError as e:
        kept = f" (a copy of it is in {escape(paths.display(backup))})" if backup else ""
        return cannot(f"could not restore {shown}: {why(e)}; your version is left as it is{kept}")
    out.print(f"Restored {paths.display(exercise)} to the original.")
    if backup:
        out.print(f"Your version is kept in {paths.display(backup)}")
    return 0


def cmd_tensorboard(args) -> int:
    """Serve the runs folder until Ctrl-C, SIGTERM or the terminal closing; exit 3 if TensorBoard stops by itself.

    Whatever happens once the server is up, its whole process group is stopped
    before this returns, and nothing here depends on printing succeeding.
    """

    def say(console: Console, text: str, **kwargs) -> None:
        """A line that may have nowhere to go (the terminal was closed): never an error of its own."""
        if console.quiet:
            return
        try:
            console.print(text, **kwargs)
        except (OSError, ValueError, SystemExit):  # rich turns a broken pipe into SystemExit
            console.quiet = True
            try:  # what is still buffered is flushed to /dev/null at exit, not to a dead pipe
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, console.file.fileno())
                os.close(devnull)
            except (OSError, ValueError, AttributeError):
                pass

    logdir = Path(args.logdir) if args.logdir else paths.runs_dir()
    if logdir.exists() and not logdir.is_dir():
        raise UsageError(f"--logdir {paths.display(logdir)} is a file, not a folder: name the folder to serve")
    if args.logdir and not logdir.exists() and not any(p.is_file() for p in logdir.parents):
        raise UsageError(f"--logdir {paths.display(logdir)}: no such folder (name the folder your traces are in, "
                         "or leave --logdir out to serve the kit's runs/)")
    with _status("Starting TensorBoard…"):
        try:
            proc = tensorboard.start(logdir, host=args.host, port=args.port)
        except tensorboard.BadOption as e:
            raise UsageError(str(e)) from None
        except tensorboard.ServerError as e:
            say(err, f"[red]✗[/] {escape(str(e))}")
            return 1
    ended = None
    try:
        say(out, f"TensorBoard is serving {escape(paths.display(logdir))} at "
                 f"[bold]{tensorboard.url(args.host, args.port)}[/]")
        for line in _what_to_open(logdir):
            say(out, line)
        say(out, "[dim]Press Ctrl-C to stop.[/]")
        ended = proc.wait()  # returns only when TensorBoard stops by itself (or is killed from outside)
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM, SIGHUP
        pass
    finally:
        while True:  # the whole group, even when another Ctrl-C arrives as this begins
            try:
                left = tensorboard.stop(proc)
                break
            except KeyboardInterrupt:  # held back during the stop and delivered after it: nothing is left
                continue
    if left:
        say(err, f"[yellow]![/] TensorBoard's processes {', '.join(map(str, left))} could not be killed",
            soft_wrap=True)
    if ended is not None:
        say(err, f"[red]✗[/] TensorBoard stopped unexpectedly: it {tensorboard.how_it_ended(ended)} "
                 f"(its log: {escape(paths.display(tensorboard.log_path()))})", soft_wrap=True)
        return 3  # the kit's failure
    say(out, "TensorBoard stopped.")
    return 0


def _what_to_open(logdir: Path) -> list[str]:
    """Point at the run the learner just made, and at what to compare it with.

    Odd state (a last run without its lab, a progress file of another shape, a
    folder that cannot be read, a trace deleted meanwhile) never stops the
    server: a generic line is shown instead.
    """
    from .viewing import timeline

    tabs = ["  [bold]Trace timeline[/] tab: the same run as a timeline, step by step",
            f"  Scalars › {summaries.STEP_TIME}/<lab> · Text › {summaries.REPORT} · Images › {summaries.WHERE}",
            "  [dim]All of these work offline. The PyTorch Profiler tab's own views load their charts "
            "from the internet: offline they never finish loading.[/]"]
    generic = ["Open first: the [bold]Profile[/] tab (Overview, Operators, Diff, Memory) on your newest run, "
               "then its Diff against the lab's [bold]original[/] run", *tabs]
    try:
        if not os.access(logdir, os.R_OK | os.X_OK):
            return generic
        run = timeline.recommended_run(logdir)
        if run is None:
            if logdir.resolve() != paths.runs_dir().resolve():  # a folder of the learner's own
                return [f"[dim]No traces under {escape(paths.display(logdir))} yet: the tabs list the *.pt.trace.json "
                        "files tensorboard_trace_handler writes, in any sub-folder (proflab profile writes them "
                        "too).[/]"]
            return ["[dim]No runs yet: `proflab run 1` writes the first one.[/]"]
        from .viewing import dashboard

        before, after = dashboard.pair(list(timeline.newest_traces(logdir)), run)  # as the Diff pairs them
        lines = [f"Open first: the [bold]Profile[/] tab (Overview, Operators, Diff, Memory), run [bold]{escape(run)}[/]"]
        if before != after:
            lines.append(f"  then its [bold]Diff[/] view: run [bold]{escape(before)}[/] → {escape(after)}")
        if dashboard.lab_of(run) is None:  # a trace of the learner's own: the checker's Scalars, Text, Images are not
            return lines + [tabs[0], tabs[2]]
        return lines + tabs
    except Exception:  # never worth the server: it is up, say something useful anyway
        return generic


def cmd_data(args) -> int:
    """Every lab's data ready (rebuilt where a folder is incomplete); exit 3 when one cannot be."""
    from .labkit import DataError, prepare_all

    verify = getattr(args, "verify", False)
    with _status("Verifying lab data…" if verify else "Preparing lab data…") as update:
        try:
            done = prepare_all(paths.data_dir(), verify=verify, on_progress=update)
        except DataError as e:
            err.print(f"[red]proflab:[/] {escape(str(e))}")
            return 3
    for item in done:
        if item.ok:
            out.print(escape(item.message), soft_wrap=True)
        else:
            err.print(f"[red]✗[/] {escape(item.message)}", soft_wrap=True)
    return 0 if all(item.ok for item in done) else 3


def cmd_doctor(args) -> int:
    """What this machine gives the kit: the sandbox, torch, the device."""
    engine = sandbox.engine()
    rows = [("sandbox", engine.describe()), ("CPU", cgroups.describe()), ("ranks", side_channels.describe())]
    try:
        import torch

        rows.append(("torch", torch.__version__))
        rows.append(("device", f"cuda ({torch.cuda.get_device_name(0)})" if torch.cuda.is_available() else
                     "cpu (no CUDA device)"))
    except Exception as e:  # noqa: BLE001 - a broken torch is what the doctor is for
        rows.append(("torch", f"cannot be imported: {type(e).__name__}: {e}"))
    rows.append(("cores", str(os.cpu_count())))
    if args.json:
        import json

        print(json.dumps({"sandboxed": engine.ok, "cpu_by_kernel": cgroups.available()[0], **dict(rows)}, indent=2))
    else:
        for name, value in rows:
            out.print(f"[bold]{name:<8}[/] {escape(value)}")
        if not engine.ok:
            out.print("[yellow]Checks run unsandboxed here; `proflab grade` and `proflab gate` need --unsandboxed.[/]")
    return 0 if engine.ok else 1


def cmd_quickstart(args) -> int:
    lab = _lab("1")
    out.print(f"[bold]proflab {__version__}[/] · profiling lab 1's slow pipeline and its reference fix.\n")
    args.verify = False
    if cmd_data(args) != 0:
        return KIT_ERROR  # what is wrong with the data is printed above
    args.lab, args.file = "1", str(lab.solution)
    code = cmd_check(args)
    out.print(f"\nThat was the lab's reference fix, graded to show what a pass looks like. Your turn: "
              f"[bold]proflab list[/] shows every lab; for this one, [bold]proflab run 1[/], then your own fix in "
              f"{escape(paths.display(lab.exercise))} and [bold]proflab check 1[/].")
    return code


# --- parser ------------------------------------------------------------------

def _seconds(text: str) -> float:
    """A time limit: a finite number of seconds above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"'{text}': give a time limit above 0 seconds, like 120")
    return value


def _rounds(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number of rounds") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"'{text}': give 1 round or more")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="proflab", description="Learn torch.profiler by fixing slow pipelines.")
    p.add_argument("--version", action="version", version=f"proflab {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    def device(sp):
        sp.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"),
                        help="where the pipeline runs (default: cuda if available, else cpu)")
        sp.add_argument("--timeout", type=_seconds, default=None, metavar="S",
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

    sp = sub.add_parser("profile", help="profile any training script of your own, without editing it: a window "
                                         "of its steps, the key_averages table, and where the time went")
    sp.add_argument("--steps", default=DEFAULT_STEPS, metavar="FIRST:END",
                    help="the steps to profile, counted from 0 (default: %(default)s, steps 5 to 7; the step "
                         "before is the profiler's warm-up)")
    sp.add_argument("--steps-by", default="auto", choices=("auto", "optimizer", "forward"),
                    help="what ends a step: an optimizer's step(), a call of the model, or auto (the optimizer; "
                         "the model's calls for a script that makes no optimizer step by the first profiled one)")
    sp.add_argument("--memory", "--profile-memory", dest="memory", action="store_true",
                    help="record memory allocations: what each step keeps")
    sp.add_argument("--shapes", "--record-shapes", dest="shapes", action="store_true",
                    help="record the operators' input shapes: the table gets a row per operator and shape")
    sp.add_argument("--stack", "--with-stack", dest="stack", action="store_true",
                    help="record Python stacks: findings name lines of your code (a bigger trace, a slower "
                         "profiled step)")
    sp.add_argument("--out", help="folder for the trace (default: runs/SCRIPT_NAME)")
    sp.add_argument("--json", metavar="PATH", help="also write the diagnosis as JSON (for CI, for a script)")
    sp.add_argument("--nproc-per-node", type=int, default=1, metavar="N",
                    help="run under torchrun with N processes (each rank writes its own trace)")
    sp.add_argument("--timeout", type=_seconds, default=None, help="stop the script after this many seconds")
    sp.add_argument("script", help="the training script, as you would give it to python")
    sp.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")
    sp.set_defaults(func=cmd_profile)

    sp = sub.add_parser("check", help="grade your fix against the original")
    sp.add_argument("lab", help="lab number or name")
    sp.add_argument("--file", help="grade this file instead of the lab's exercise")
    sp.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    sp.add_argument("--rounds", type=_rounds, default=None, help="paired rounds of runs (default: the lab's)")
    device(sp)
    sp.set_defaults(func=cmd_check)

    sp = sub.add_parser("hint", help="show the next hint for a lab")
    sp.add_argument("lab")
    sp.add_argument("--all", action="store_true", help="show every hint")
    sp.set_defaults(func=cmd_hint)

    sp = sub.add_parser("debrief", help="once a lab is passed: its reference fix, its check, the sound fixes "
                                         "measured")
    sp.add_argument("lab", help="lab number or name")
    sp.set_defaults(func=cmd_debrief)

    sp = sub.add_parser("drill", help="a diagnosis drill drawn for you: a slow pipeline only its profile explains")
    sp.add_argument("--as", dest="who", metavar="NAME",
                    help="whose drill (default: $PROFLAB_LEARNER, else your user name); the same name, the same drill")
    sp.set_defaults(func=cmd_drill)

    sp = sub.add_parser("reset", help="restore a lab's exercise (your version is backed up)")
    sp.add_argument("lab")
    sp.set_defaults(func=cmd_reset)

    sp = sub.add_parser("tensorboard", help="serve the runs folder in TensorBoard")
    sp.add_argument("--port", type=tensorboard.port_number, default=6006, help="port to serve on, 1-65535 "
                    "(default: 6006)")
    sp.add_argument("--host", default="127.0.0.1", help="address to serve on: 127.0.0.1 (default, this "
                    "machine only) or 0.0.0.0 (every network interface)")
    sp.add_argument("--logdir", help="folder to serve (default: runs/)")
    sp.set_defaults(func=cmd_tensorboard)

    sp = sub.add_parser("data", help="prepare every lab's data under data/")
    sp.add_argument("--verify", action="store_true",
                    help="also check every file's sha256 against its folder's READY (for a copy of data/ "
                         "from another machine); what is wrong is rebuilt")
    sp.set_defaults(func=cmd_data)

    sp = sub.add_parser("grade", help="grade a folder of submissions, one at a time (JSON, JUnit XML, Gradescope)")
    sp.add_argument("folder", metavar="FOLDER", nargs="?",
                    help="one file per learner and lab: FOLDER/alice/1.py, FOLDER/alice__1.py, or FOLDER/1.py "
                         "for one learner")
    sp.add_argument("--merge", nargs="+", metavar="PATH",
                    help="grade nothing: read what Gradescope or CI graded (results.json files, proflab grade's "
                         "JSON record or JUnit XML, or folders of them) into one class table")
    sp.add_argument("--format", default="json", choices=("json", "junit", "gradescope", "markdown"),
                    help="what to write: the full JSON record, JUnit XML for CI, Gradescope's results.json, or "
                         "Markdown for a CI job's summary (default: json)")
    sp.add_argument("--require-pass", action="store_true",
                    help="exit 1 unless every submission passed (a learner's CI job)")
    sp.add_argument("--out", metavar="PATH", help="write it to this file (default: stdout)")
    sp.add_argument("--json-out", metavar="PATH", help="also write the full JSON record to this file")
    sp.add_argument("--lab", help="grade only this lab's files; then exercise.py is this lab's too")
    again = sp.add_mutually_exclusive_group()
    again.add_argument("--resume", action="store_true",
                       help="finish an interrupted grading: keep the verdicts it made, grade the rest")
    again.add_argument("--restart", action="store_true",
                       help="grade everything again, discarding an interrupted grading's verdicts")
    sp.add_argument("--rounds", type=_rounds, default=None, help="paired rounds of runs (default: the lab's)")
    sp.add_argument("--unsandboxed", action="store_true", help="grade even where runs cannot be sandboxed "
                    "(no bubblewrap, no user namespaces); the records say so")
    device(sp)
    sp.set_defaults(func=cmd_grade)

    sp = sub.add_parser("autograder", help="grade a class on Gradescope, Classroom 50 or GitHub Actions: write "
                        "the autograder.zip, the Classroom 50 autograder or the workflow")
    engines = sp.add_subparsers(dest="engine", metavar="ENGINE", required=True)
    ap = engines.add_parser("gradescope", help="write autograder.zip for a Gradescope programming assignment")
    ap.add_argument("--labs", nargs="+", required=True, metavar="LAB", help="the labs it grades (1 2 3)")
    ap.add_argument("--out", default="autograder.zip", metavar="PATH", help="the zip to write "
                    "(default: autograder.zip)")
    ap.add_argument("--torch-index", default="https://download.pytorch.org/whl/cpu", metavar="URL",
                    help="where setup.sh installs torch from (default: PyTorch's CPU wheels; 'pypi': pip's own "
                         "index)")
    ap.add_argument("--torch-version", metavar="V", help="the torch release setup.sh installs (default: this "
                    "machine's, where the labs' thresholds were set; 'any': pip's choice)")
    ap = engines.add_parser("classroom", help="write the GitHub Actions workflow a learner's repository runs on "
                            "every push, as feedback (GitHub Classroom is discontinued: see classroom50)")
    _pinned_kit(ap)
    ap.add_argument("--out", default=".github/workflows/proflab.yml", metavar="PATH",
                    help="where to write it (default: .github/workflows/proflab.yml)")
    ap.add_argument("--force", action="store_true", help="write over a workflow that exists")
    ap = engines.add_parser("classroom50", help="write the autograder a Classroom 50 assignment runs for each "
                            "submission (its config repository's CLASSROOM/autograders/SLUG/)")
    _pinned_kit(ap)
    ap.add_argument("--slug", default="proflab", help="the assignment's slug, for the steps it prints (default: "
                    "proflab)")
    ap.add_argument("--torch-index", default="https://download.pytorch.org/whl/cpu", metavar="URL",
                    help="where the autograder installs torch from (default: PyTorch's CPU wheels; 'pypi': pip's "
                         "own index)")
    ap.add_argument("--out", default="proflab-classroom50", metavar="DIR", help="the folder to write "
                    "autograder.py, runtime.json and README.md in, none of which may be there already "
                    "(default: proflab-classroom50)")
    ap = engines.add_parser("run", help="what an autograder runs for one submission: grade it, write Gradescope's "
                            "results.json, or Classroom 50's result.json and release-body.md")
    ap.add_argument("--submission", required=True, metavar="DIR", help="the submission's folder")
    ap.add_argument("--results", required=True, metavar="PATH", help="the results.json to write (classroom50: "
                    "the folder for result.json and release-body.md)")
    ap.add_argument("--metadata", metavar="PATH", help="Gradescope's submission_metadata.json (who submitted)")
    ap.add_argument("--format", choices=("gradescope", "classroom50"), default="gradescope",
                    help="whose results to write (default: gradescope)")
    ap.add_argument("--labs", nargs="+", metavar="LAB", help="classroom50: the labs it grades")
    sp.set_defaults(func=cmd_autograder)

    sp = sub.add_parser("gate", help="measure a pipeline against a baseline (a file or a git revision): "
                        "a regression gate for CI")
    sp.add_argument("file", nargs="?", help="the pipeline file (pipeline(cfg) yields once per step); default: "
                    "file in [tool.proflab.gate]")
    against = sp.add_mutually_exclusive_group()
    against.add_argument("--baseline", metavar="FILE", help="measure against this file")
    against.add_argument("--against", metavar="REV", help="measure against the same file at this git revision "
                         "(main, HEAD~1), with the project's tree as it was there")
    sp.add_argument("--lab", help="take the workload, data and result rules from this lab's manifest")
    sp.add_argument("--config", metavar="PATH", help="read [tool.proflab.gate] from this file (default: the "
                    "nearest pyproject.toml)")
    sp.add_argument("--max-slowdown", dest="max_slowdown", type=float, metavar="X",
                    help="the slowdown that fails the gate (default 1.10: 10%% slower)")
    for flag, kind, text in (("--batch-size", int, "cfg.batch_size"), ("--seed", int, "cfg.seed"),
                             ("--warmup-steps", int, "untimed steps first"), ("--timed-steps", int, "steps timed"),
                             ("--profile-steps", int, "steps profiled after them (0: no trace)"),
                             ("--rounds", int, "paired rounds always measured"),
                             ("--max-rounds", int, "rounds at most, for a close call"),
                             ("--budget", float, "seconds of measuring at most"),
                             ("--threads", int, "torch intra-op threads")):
        dest = flag[2:].replace("-", "_") + ("_s" if flag == "--budget" else "")
        sp.add_argument(flag, dest=dest, type=kind, metavar="N", help=text)
    sp.add_argument("--data-dir", dest="data_dir", metavar="DIR", help="cfg.data_dir")
    sp.add_argument("--param", action="append", type=_param, metavar="KEY=VALUE",
                    help="one more cfg attribute (repeatable): --param hidden=512")
    sp.add_argument("--allow-different-results", action="store_true",
                    help="report values that differ between the versions without failing the gate")
    sp.add_argument("--trace-dir", dest="trace_dir", metavar="DIR",
                    help="where both traces are kept (default runs/gate)")
    sp.add_argument("--measure", choices=("wall_time", "cpu_time"),
                    help="what a step's time is: the clock, or the CPU seconds of the run's processes and "
                         "threads from /proc, steady beside other jobs (default: the lab's, else wall_time)")
    sp.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    sp.add_argument("--json-out", metavar="PATH", help="also write the JSON report to this file")
    sp.add_argument("--junit", metavar="PATH", help="also write a JUnit XML report to this file")
    sp.add_argument("--init-ci", choices=("github", "gitlab"), help="write a CI job that gates every pull "
                    "request against its base branch, then stop")
    sp.add_argument("--kit", metavar="REQUIREMENT", help="with --init-ci: where the job installs the kit from: "
                    "'proflab @ git+https://host/proflab.git@COMMIT', or a wheel's path or URL; never a bare name "
                    "(default: this kit's clone, its origin at the commit checked out)")
    sp.add_argument("--unsandboxed", action="store_true", help="gate even where runs cannot be sandboxed; "
                    "the reports say so")
    device(sp)
    sp.set_defaults(func=cmd_gate)

    sp = sub.add_parser("doctor", help="what this machine gives the kit: whether runs are sandboxed (and why "
                        "not), torch, the device")
    sp.add_argument("--json", action="store_true", help="print it as JSON")
    sp.set_defaults(func=cmd_doctor)

    sp = sub.add_parser("new-lab", help="write a new lab's skeleton (in a checkout of the kit): it runs and passes "
                        "as it is; or an evidence metric's (--metric)")
    sp.add_argument("name", nargs="?", help="the lab's short name, lower case (serving): its folder labs/NN_name")
    sp.add_argument("--title", help="its title, for proflab list and its page")
    sp.add_argument("--number", type=int, help="its number (default: the next free one)")
    sp.add_argument("--metric", metavar="NAME", help="also write an evidence metric's module and its unit test")
    sp.add_argument("--unit", default="calls", help="with --metric: the unit of its figure (default: calls)")
    sp.set_defaults(func=cmd_new_lab)

    sp = sub.add_parser("validate-lab", help="is a lab ready? its manifest, reference, exercise, learner files, "
                        "the generic cheats and its page, each checked and explained")
    sp.add_argument("lab", help="lab number or name")
    sp.add_argument("--times", type=_rounds, default=2, help="checks of the reference and of the exercise (default: 2)")
    sp.add_argument("--quick", action="store_true", help="the reference and the exercise once each; no learner "
                    "files, cheats or site build")
    sp.set_defaults(func=cmd_validate_lab)

    sp = sub.add_parser("quickstart", help="prepare data, then profile and grade lab 1's reference fix")
    device(sp)
    sp.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    sp.add_argument("--rounds", type=int, default=None, help=argparse.SUPPRESS)
    sp.set_defaults(func=cmd_quickstart, file=None)
    return p


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def _pinned_kit(ap: argparse.ArgumentParser) -> None:
    """The options of a bundle that fetches the kit from its repository, pinned, and checks some labs."""
    ap.add_argument("--labs", nargs="+", required=True, metavar="LAB", help="the labs it checks (1 2 3)")
    ap.add_argument("--kit-url", required=True, metavar="URL", help="the git repository the kit is fetched from "
                    "(https://github.com/ORG/proflab)")
    ap.add_argument("--kit-ref", metavar="REF", help="the commit or tag it is pinned at (default: this "
                    "checkout's commit)")


def main(argv: list[str] | None = None) -> int:
    """The command; as the program itself (``proflab``), a signal that arrives once it is done is ignored."""
    if argv is None:
        from .reporting import pipes

        pipes.survive_closed_stdout()
    try:
        code = _main(argv)
    except KeyboardInterrupt:  # a second Ctrl-C while the first was being reported: all is stopped already
        code = 130
    while argv is None:  # the program: its work is done and everything stopped; a late Ctrl-C changes nothing
        try:  # (one held back until now may still be raised here, between two lines: it is the same stop)
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                signal.signal(sig, signal.SIG_IGN)
            break
        except KeyboardInterrupt:
            code = 130
    if argv is None:  # and it ends here, with its exit code: a stop that raced the interpreter's own shutdown
        for stream in (sys.stdout, sys.stderr):  # could otherwise end it by the signal (exit status -2)
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)
    return code


def _main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return USAGE_ERROR
    # A kill, or the terminal closing, stops children as cleanly as Ctrl-C does.
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)
    try:
        return args.func(args)
    except (UsageError, outputs.Refused) as e:  # an output the kit will not write there: nothing was written
        _say(err, f"[red]proflab:[/] {escape(str(e))}")
        return USAGE_ERROR
    except outputs.NotWritten as e:  # it names its file; whatever was said before it stands
        _say(err, f"[red]proflab:[/] {escape(str(e))} (the machine's failure, not your code's)")
        return KIT_ERROR
    except (errors.KitError, checks.NotGraded) as e:
        _say(err, f"[red]proflab:[/] {escape(str(e))} (the kit's or the machine's failure, not your code's)")
        return KIT_ERROR
    except OSError as e:  # the kit's own files: a read-only folder, a full disk
        if e.filename and os.path.realpath(str(e.filename)) == os.path.realpath(sys.executable):
            _say(err, f"[red]proflab:[/] {escape(errors.describe(e, 'run'))}: the Python interpreter the kit runs "
                      f"with ({escape(os.path.realpath(sys.executable))}), or a folder above it, cannot be reached "
                      "by this user. Install the kit in a virtual environment made from a Python this user can "
                      "run; your work is as it was.")
            return KIT_ERROR
        _say(err, f"[red]proflab:[/] {escape(errors.describe(e, 'write' if e.errno in _WRITING else 'read'))}. "
                  "Check that the kit's folder is writable and the disk not full; your work is as it was.")
        return KIT_ERROR
    except KeyboardInterrupt:
        _say(err, "\nInterrupted.")
        return 130


_WRITING = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EISDIR}


if __name__ == "__main__":
    sys.exit(main())
