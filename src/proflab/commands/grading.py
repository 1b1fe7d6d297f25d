"""``proflab grade`` (a class folder) and ``proflab gate`` (a pipeline against its baseline in CI)."""

from __future__ import annotations

import argparse
import signal
import threading
from pathlib import Path

from rich.markup import escape

from .. import atomic, errors, labs, outputs, paths
from ..running import processes
from .common import KIT_ERROR, UsageError, _lab, _refuse_unsandboxed, _say, _status, err, out

def cmd_grade(args) -> int:
    from ..grading import grade
    from ..reporting import grade_formats

    if args.merge:
        if args.folder:
            raise UsageError(f"give a FOLDER to grade or --merge to read results, not both ({args.folder})")
        return _merge(args)
    if not args.folder:
        raise UsageError("name the FOLDER of submissions to grade (or --merge results graded elsewhere)")
    _refuse_unsandboxed(args, "grade")
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
    if not found.submissions:
        nothing = grade.grade(found)
        failed = grade_formats.write(args.format, nothing, args.out, args.json_out)
        _say(err, grade_formats.summary(nothing, *(p if p not in failed else None for p in (args.out, args.json_out))))
        raise UsageError(f"nothing to grade in {args.folder}: no file there names a lab")
    from ..grading.journal import Journal, JournalError, location

    where = location(Path(args.folder), args.out, args.json_out)
    header = {"folder": str(Path(args.folder).resolve()), "lab": only.number if only else None,
              "device": args.device, "rounds": args.rounds, "timeout": args.timeout,
              "labs": {lab.slug: labs.sha256(lab.folder / "lab.toml") for lab in known}}
    try:
        journal = Journal.begin(where, header, resume=args.resume, restart=args.restart)
    except JournalError as e:
        raise UsageError(str(e)) from None
    stop = _StopOnce()
    held = ({sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
            if threading.current_thread() is threading.main_thread() else {})
    try:
        return _grade_with(args, found, journal, where)
    finally:
        journal.close()
        for sig, handler in held.items():
            signal.signal(sig, handler)


class _StopOnce:
    """A grading's Ctrl-C (or SIGTERM, SIGHUP): the first stops it; those after it, while the run in progress
    is stopped and the outputs are written, are the same stop, and change nothing (two Ctrl-C 0.3 s apart
    once left no outputs)."""

    def __init__(self):
        self.stopping = False

    def __call__(self, signum, frame):
        if not self.stopping:
            self.stopping = True
            raise KeyboardInterrupt


def _grade_with(args, found, journal, where: Path) -> int:
    from ..grading import grade
    from ..reporting import grade_formats

    if journal.note:
        err.print(f"[yellow]proflab:[/] {escape(journal.note)}")
    done = sum(journal.done(sub.shown, sub.path) is not None for sub in found.submissions)
    if done:
        err.print(f"Resuming: {done} of {len(found.submissions)} verdicts are taken from "
                  f"{escape(paths.display(where))}; grading the other {len(found.submissions) - done}.")
    else:
        err.print(f"[dim]Each verdict is saved in {escape(paths.display(where))} as it is made; if the grading "
                  "stops, run the same command with --resume.[/]")
    results: list[grade.Result] = []
    try:
        with _status(f"Grading {len(found.submissions) - done} submissions, one at a time…") as update:
            shown = grade_formats.Progress(err, update, verbose=args.verbose)
            results.append(grade.grade(found, device=args.device, rounds=args.rounds, timeout_s=args.timeout,
                                      on_start=shown.start, on_progress=shown.step, on_done=shown.done,
                                      journal=journal))
    except (OSError, ValueError, KeyboardInterrupt):  # the terminal went away as the status line closed
        if not results:
            raise
    result = results[0]
    try:
        with processes.shielded():  # the outputs are written whole, even on a second Ctrl-C
            failed = _verdict_then_files(args, result)
            if journal.unwritable:  # said after the verdicts, which it never takes with it
                err.print(f"[yellow]proflab:[/] {escape(journal.unwritable)}")
            if not result.partial and not failed and not result.not_graded and not any(s.kit for s in result.skipped):
                journal.remove()  # kept while a submission is not graded: --resume grades those again
    except KeyboardInterrupt:
        pass  # a Ctrl-C held back while the outputs were written: they are written, the grading is done
    if result.partial:
        return 130
    if failed:
        return _unwritten(failed)
    if result.not_graded or any(s.kit for s in result.skipped):
        return KIT_ERROR
    return _required(args, result)


def _required(args, result) -> int:
    """``--require-pass``: 1 unless every submission passed (and there was one); else 0, whatever the verdicts."""
    if not args.require_pass:
        return 0
    if result.graded and all(g.report.verdict == "passed" for g in result.graded):
        return 0
    err.print("[red]Not every submission passed[/] (--require-pass).")
    return 1


def _verdict_then_files(args, result) -> dict[str, str]:
    """The class table first, then the files: a file that cannot be written never takes the verdict with it
    (its text goes to stdout instead); the files that could not be written, and why."""
    from ..reporting import grade_formats

    _say(err, grade_formats.summary(result))
    failed = grade_formats.write(args.format, result, args.out, args.json_out)
    for what, where in (("Written", args.out), ("JSON record", args.json_out)):
        if where and where not in failed:
            _say(err, f"[dim]{what}:[/] {escape(paths.display(Path(where)))}")
    return failed


def _unwritten(failed: dict[str, str]) -> int:
    """Exit 3: the verdict above stands, and the files named could not be written (a full disk, a folder
    that went away): the machine's failure, not the learner's."""
    _say(err, f"[red]proflab:[/] the verdict above stands; the kit could not write its files (exit 3): "
              f"{escape('; '.join(failed.values()))}")
    return KIT_ERROR


def _merge(args) -> int:
    from ..grading.engines import merge
    from ..reporting import grade_formats

    for option, path in (("--out", args.out), ("--json-out", args.json_out)):
        if path:
            why = outputs.refusal(path, args.merge, option=option)
            if why:
                raise UsageError(why)
    if args.out and args.json_out and Path(args.out).absolute().resolve() == Path(args.json_out).absolute().resolve():
        raise UsageError("--out and --json-out name the same file: give them two names (or leave --json-out out)")
    try:
        result = merge.merge([Path(p) for p in args.merge])
    except merge.MergeError as e:
        raise UsageError(str(e)) from None
    except labs.ManifestError as e:
        err.print(f"[red]proflab:[/] cannot merge: a lab manifest is broken: {escape(str(e))}")
        return KIT_ERROR
    learners = {g.submission.learner for g in result.graded}
    if args.format == "gradescope" and len(learners) > 1:
        raise UsageError(f"--format gradescope holds one learner's results, and these hold {len(learners)}: "
                         "use --format json, junit or markdown")
    failed = _verdict_then_files(args, result)
    if failed:
        return _unwritten(failed)
    return _required(args, result)


GATE_SETTINGS = ("file", "baseline", "against", "lab", "batch_size", "seed", "data_dir", "warmup_steps",
                 "timed_steps", "profile_steps", "rounds", "max_rounds", "budget_s", "timeout_s", "max_slowdown",
                 "device", "threads", "trace_dir", "measure")


def _param(text: str) -> tuple[str, object]:
    """``--param KEY=VALUE``: VALUE read as TOML reads it (512, 0.1, true, "text"), else as a string."""
    from ..labs import tomllib

    key, sep, value = text.partition("=")
    if not sep or not key.strip().isidentifier():
        raise argparse.ArgumentTypeError(f"'{text}': give KEY=VALUE, like hidden=512")
    try:
        return key.strip(), tomllib.loads(f"v = {value}")["v"]
    except tomllib.TOMLDecodeError:
        return key.strip(), value


def cmd_gate(args) -> int:
    from ..grading import gate, gate_ci, gate_config
    from ..reporting import gate_report
    from ..running import revision

    if not args.init_ci:
        _refuse_unsandboxed(args, "gate")
    if args.init_ci:
        try:  # CI reads its job files at the repository's top, wherever the command is run from
            top = Path(revision._git(["rev-parse", "--show-toplevel"], Path.cwd()))
        except revision.RevisionError:
            top = Path.cwd()
            err.print(f"[yellow]proflab:[/] {escape(paths.display(top))} is not inside a git repository: the job "
                      "files go here, and CI reads them at the top of the repository this folder becomes "
                      "(the gate's --against needs git history too)")
        try:  # the traces the job keeps are where the project's settings put them
            kept = Path(gate_config.settings({}, Path(args.config) if args.config else None).trace_dir)
            trace_dir = kept.resolve().relative_to(top.resolve()).as_posix()
        except (gate_config.GateConfigError, ValueError):
            trace_dir = gate_config.KEYS["trace_dir"].default
        try:
            kit, notes = gate_ci.kit_requirement(args.kit, paths.kit_clone())
        except gate_ci.KitSourceError as e:
            raise UsageError(str(e)) from None
        try:
            written = gate_ci.write(args.init_ci, top, kit=kit, file=args.file, trace_dir=trace_dir)
        except FileExistsError as e:
            raise UsageError(str(e)) from None
        except OSError as e:
            raise UsageError(errors.describe(e, "write")) from None
        for path in written:
            out.print(f"[green]✓[/] wrote {escape(paths.display(top / path))}: it installs {escape(kit)}")
        for note in notes:
            err.print(f"[yellow]note:[/] {escape(note)}")
        if args.init_ci == "gitlab" and gate_ci.GITLAB_MAIN not in written:
            out.print(f"Add to {gate_ci.GITLAB_MAIN}: [bold]{escape(gate_ci.GITLAB_INCLUDE.strip())}[/]")
        out.print(f"The job reads the gate's settings from pyproject.toml's {escape('[tool.proflab.gate]')}; run "
                  "[bold]proflab gate --against main[/] here first to see what it will say.")
        return 0
    given = {name: getattr(args, name, None) for name in GATE_SETTINGS}
    given["device"] = None if args.device == "auto" else args.device
    given["timeout_s"] = args.timeout
    given["allow_different_results"] = True if args.allow_different_results else None
    try:
        s = gate_config.settings(given, Path(args.config) if args.config else None)
        if args.param:
            s = gate_config.Settings({**s.values, "params": {**s.params, **dict(args.param)}},
                                     {**s.source, "params": "command line"}, s.root)
    except gate_config.GateConfigError as e:
        raise UsageError(str(e)) from None
    if not s.file:
        raise UsageError("name the pipeline file to gate: proflab gate FILE --baseline OTHER (or --against main), "
                         "or file = \"...\" under [tool.proflab.gate] in pyproject.toml")
    if not s.baseline and not s.against:
        raise UsageError(f"what should {Path(s.file).name} be measured against? --baseline FILE, or --against REV "
                         "(a git revision: main, HEAD~1); or baseline/against under [tool.proflab.gate]")
    for name in ("file", "baseline"):
        if s.values.get(name) and not Path(s.values[name]).is_file():
            raise UsageError(f"{paths.display(Path(s.values[name]))}: no such file ({name})")
    if s.lab is not None:
        chosen = _lab(str(s.lab))
        kind = {"gate": "its exercise is a gate's settings, not a pipeline",
                "own_profile": "its learner's file profiles itself",
                "job": "it runs as a torchrun job, which the gate does not run yet"}.get(chosen.kind, "")
        if kind:
            able = [str(x.number) for x in labs.discover() if x.kind == "pipeline"]
            raise UsageError(f"lab {chosen.number} cannot be gated: {kind}; --lab takes the workload of a lab "
                             f"whose files are pipelines the kit profiles ({', '.join(able)})")
    gate_inputs = [s.values.get("file"), s.values.get("baseline"), args.config]
    for option, path in (("--junit", args.junit), ("--json-out", args.json_out)):
        why = outputs.refusal(path, gate_inputs, option=option, above=False) if path else ""  # said after the verdict
        if why:
            raise UsageError(why)
    if args.junit and args.json_out and Path(args.junit).absolute().resolve() == Path(args.json_out).absolute().resolve():
        raise UsageError("--junit and --json-out name the same file: give them two names")
    against = paths.display(Path(s.baseline)) if s.baseline else s.against
    try:
        with _status(f"Gating {Path(s.file).name} against {against}…") as update:
            result = gate.run(s, on_progress=update)
    except revision.RevisionError as e:
        raise UsageError(str(e)) from None
    if args.json:
        print(gate_report.to_json(result))
    else:
        gate_report.render(result, out, verbose=args.verbose)
    unwritten = []  # the verdict is said first: a file that cannot be written never hides it
    for path, write in ((args.junit, gate_report.to_junit), (args.json_out, gate_report.to_json)):
        if path:
            try:
                outputs.write_text(path, write(result), gate_inputs)
            except (outputs.NotWritten, outputs.Refused) as e:
                unwritten.append(str(e))
            except OSError as e:
                unwritten.append(errors.describe(e, "write"))
    if unwritten:
        _say(err, f"[red]proflab:[/] the verdict above stands; the kit could not write its record (exit 3): "
                  f"{escape('; '.join(unwritten))}")
        return KIT_ERROR
    return result.exit_code
