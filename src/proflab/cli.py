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

from rich.markup import escape

from . import __version__, errors, outputs
from .grading import checks
from .viewing import tensorboard
from .commands.common import KIT_ERROR, USAGE_ERROR, UsageError, _say, err
from .commands.autograder import cmd_autograder
from .commands.grading import _param, cmd_gate, cmd_grade
from .commands.running import cmd_run
from .commands.profiling import DEFAULT_STEPS, cmd_profile
from .commands.authoring import cmd_new_lab, cmd_validate_lab
from .commands.learning import (cmd_list, cmd_check, cmd_hint, cmd_debrief, cmd_drill, cmd_reset, cmd_tensorboard, cmd_data, cmd_doctor, cmd_quickstart)


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
