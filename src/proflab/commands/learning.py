"""The learner's commands: list, check, hint, debrief, drill, reset, tensorboard, data, doctor, quickstart
(``proflab run``, ``profile``, ``grade``, ``gate`` and the authors' commands have modules of their own)."""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .. import __version__, labs, paths, progress
from ..grading import checks
from ..running import cgroups, sandbox, side_channels, slots
from ..reporting import report, summaries
from ..viewing import tensorboard
from .common import (KIT_ERROR, UsageError, _audited, _lab, _lab_and_file, _label, _say_unsandboxed, _status,
                     _summaries, err, out)


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

    from ..reporting import debrief

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

    from ..authoring import drills

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

    from .. import atomic

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
    from ..viewing import timeline

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
        from ..viewing import dashboard

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
    from ..labkit import DataError, prepare_all

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
