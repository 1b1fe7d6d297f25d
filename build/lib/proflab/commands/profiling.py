"""``proflab profile SCRIPT.py [ARGS…]``: any training script profiled without editing it, and its diagnosis.

The script runs as ``python SCRIPT.py ARGS`` would (``running.own_script``
runs it, in its own process, with the profiler around it); a window of its
steps is written as a TensorBoard trace under ``runs/``; then this prints the
profiler's own ``key_averages()`` table, where each step's time went, and the
kit's findings (``measuring.diagnosis``), the costliest first, with what the
profiler itself cost. Under ``--nproc-per-node N`` the script runs under
torchrun, and each rank writes its own trace.

It is the learner's own code on their own machine, run as they would run it:
no sandbox, its own files and folders.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
from dataclasses import asdict
from pathlib import Path

from rich.markup import escape

from .. import __version__, outputs, quiet
from ..measuring import diagnosis, evidence
from ..running import processes
from .common import UsageError, err, out

DEFAULT_STEPS = "5:8"
SLOWING = 1.5  # steps after the window this much slower than those before it: said


def _window(text: str) -> tuple[int, int]:
    try:
        start, stop = (int(x) for x in text.split(":"))
    except ValueError:
        raise UsageError(f"--steps {text!r}: give a range of steps as FIRST:END, counted from 0 (5:8 profiles "
                         "steps 5, 6 and 7)") from None
    if start < 0 or stop <= start:
        raise UsageError(f"--steps {text!r}: FIRST must be 0 or more and END after it (5:8 profiles steps 5 to 7)")
    return start, stop


def _forward(stream, to) -> None:
    """The script's output, line by line as it comes, without the profiler library's own log lines."""
    for raw in iter(stream.readline, b""):
        line = raw.decode(errors="replace")
        if not quiet.is_noise(line):
            to.write(line)
            to.flush()
    stream.close()


def _command(args, work: Path, start: int, stop: int, out_dir: Path) -> list[str]:
    child = ["-m", "proflab.running.own_script", "--out", str(out_dir), "--steps", f"{start}:{stop}",
             "--summary", str(work), "--steps-by", args.steps_by]
    child += [flag for flag, on in (("--memory", args.memory), ("--shapes", args.shapes), ("--stack", args.stack))
              if on]
    child += [args.script, *args.args]
    if args.nproc_per_node > 1:
        return [sys.executable, "-m", "torch.distributed.run", "--standalone",
                f"--nproc_per_node={args.nproc_per_node}", *child]
    return [sys.executable, *child]


def _run(cmd: list[str], timeout: float | None) -> tuple[int, bool]:
    """Run the script's process (or torchrun's), its output shown as it comes; (exit code, timed out)."""
    env = {**os.environ, "KINETO_LOG_LEVEL": quiet.QUIET_ENV["KINETO_LOG_LEVEL"], "PYTHONUNBUFFERED": "1"}
    processes.become_subreaper()  # what the script leaves behind (a setsid child) is re-parented here, and found
    before = processes.children_of_mine()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True)
    tree = processes.Tree(proc.pid, others_before=before)
    tree.scan()
    threads = [threading.Thread(target=_forward, args=(proc.stdout, sys.stdout), daemon=True),
               threading.Thread(target=_forward, args=(proc.stderr, sys.stderr), daemon=True)]
    for t in threads:
        t.start()
    timed_out = False
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _stop(proc)
    except KeyboardInterrupt:
        _stop(proc, signal.SIGINT)
        raise
    finally:
        with processes.shielded():  # nothing of the script outlives it: its own session left, or not
            left = [pid for pid in tree.scan() if pid != proc.pid]
            tree.kill()
        if left:
            err.print(f"[yellow]proflab:[/] the script left {len(left)} process{'es' if len(left) > 1 else ''} "
                      "running when it ended (started in a session of its own, or never waited for); the kit "
                      "stopped them.")
        for t in threads:
            t.join(timeout=5)
    code = proc.returncode
    if timed_out:
        return 124, True  # as timeout(1) says it
    return (128 - code if code < 0 else code), False  # killed by a signal: as a shell says it


def _stop(proc: subprocess.Popen, first: int = signal.SIGTERM) -> None:
    """The script and everything it started (DataLoader workers, torchrun's ranks)."""
    for sig, wait in ((first, 5), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def overhead(summary: dict) -> str:
    """What the profiler cost: the profiled steps' median time against steps run without it, those after the
    window where the script ran two or more (a script's first steps are slower: memory is allocated, caches
    filled), else those before it; the first step, the warm-up step and the step that wrote the trace left
    out. A step is timed from when the profiler's own ``step()`` returned (starting and stopping the
    profiler, writing the trace, are not the steps' cost) to the script's next optimizer step."""
    ends, (start, stop) = summary.get("ends") or [], summary["window"]
    begins = summary.get("begins") or ends  # each step from when the profiler's own step() returned
    times = {i: ends[i] - begins[i - 1] for i in range(1, min(len(ends), len(begins) + 1))}
    profiled = [times[i] for i in range(start, stop) if i in times]
    after = [t for i, t in times.items() if i > stop]
    plain = after if len(after) >= 2 else [t for i, t in times.items() if i < start - 1]
    if len(profiled) < 2 or len(plain) < 2:
        return ("not measured: it needs two steps profiled and two not (after the step that writes the trace, "
                "or before the warm-up step); give the script more steps")
    p, q = statistics.median(profiled), statistics.median(plain)
    which = "after" if plain is after else "before"
    said = (f"a profiled step took {p * 1000:.1f} ms (median of {len(profiled)}, by the clock), a step without "
            f"the profiler {q * 1000:.1f} ms (median of {len(plain)}, {which} the window)")
    said += ": no cost the steps' own spread shows" if p <= q else \
        f": the profiler adds {p / q - 1:.0%} to the steps it records"
    before = [t for i, t in times.items() if 1 <= i < start - 1]
    if len(before) >= 2 and len(after) >= 2 and statistics.median(after) > SLOWING * statistics.median(before):
        said += (f". The steps slowed down over the run, from {statistics.median(before) * 1000:.1f} ms before the "
                 f"window to {statistics.median(after) * 1000:.1f} ms after it: something grows step after step "
                 "(memory kept? profile with --memory)")
    return said + _busy()


def _busy() -> str:
    """A note when the machine is busy: other work then moves every figure measured by the clock."""
    try:
        load, cores = os.getloadavg()[0], len(os.sched_getaffinity(0))
    except (OSError, AttributeError):
        return ""
    if load <= cores:
        return ""
    return (f". The machine is busy (load {load:.1f} on {cores} cores): times by the clock vary with other work; "
            "compare profiles made on the same machine, as quiet as you can make it")


def _no_trace(summary: dict | None, code: int, timed_out: bool, args) -> str:
    if timed_out:
        return f"the script was stopped after --timeout {args.timeout:g} s, before its profiled steps ended"
    if summary is not None and summary.get("trace_error"):
        return f"the profiler could not write it ({summary['trace_error']})"
    if summary is None:
        return f"the script's process ended (exit {code}) before the kit's profiler could say anything"
    steps, source = len(summary.get("ends") or []), summary.get("source")
    if summary.get("error") or code:
        return f"the script failed (exit {code}) after {steps} steps, before the profiled ones; see its error above"
    if not source:
        return ("no step was found: the script made no optimizer step and called no model (an nn.Module with "
                "weights); profile a script that trains or runs a model, or time a loop of your own with "
                "torch.profiler directly")
    start, stop = summary["window"]
    return (f"the script ran {steps} steps (each ends at {_paced_by(summary)}), fewer than the window "
            f"--steps {start}:{stop} needs: profile earlier steps (--steps {max(steps - 3, 1)}:{steps}) or "
            "give the script more")


def _paced_by(summary: dict) -> str:
    if summary.get("source") == "optimizer":
        return f"an optimizer step, {summary.get('what') or 'the optimizer'}.step()"
    return f"a call of the model, {summary.get('what') or 'its'}.forward()"


def _print_diagnosis(trace_path: Path, label: str) -> diagnosis.Diagnosis:
    trace = evidence.load(trace_path)
    d = diagnosis.diagnose(trace)
    out.print(f"\n[bold]Where each step's time went[/]{label}: {d.steps} profiled steps, "
              f"{d.step_ms:.1f} ms a step on the host (their mean, in the trace)" + (f", the device busy {d.device_busy:.0%} of it"
                                                           if d.device_busy is not None else ""))
    for name, ms, share in d.parts:
        out.print(f"  {name:<26} {max(ms, 0.0):9.1f} ms  {max(share, 0.0):4.0%}")
    if d.operators:
        out.print("  largest operators (self time per step): " + "; ".join(
            f"{escape(name)} {ms:.1f} ms ({share:.0%}, {calls:.4g} calls)" for name, ms, share, calls in d.operators))
    out.print(f"  memory: {escape(d.memory)}")
    if not d.findings:
        out.print("\n[green]Nothing stands out beyond the model's own operators[/]: no DataLoader wait, host reads, "
                  "Python between operators or communication large enough to name. To go faster, look at the "
                  "largest operators above (their shapes with --shapes, their memory format, the precision).")
        return d
    out.print("\n[bold]Findings[/], the costliest first:")
    for i, f in enumerate(d.findings, 1):
        cost = f" ({f.ms:.1f} ms a step, {f.share:.0%})" if f.ms else ""
        out.print(f"\n {i}. [bold]{escape(f.title)}[/]{cost}: {escape(f.what)}")
        out.print(f"    [dim]seen:[/] {escape(f.where)}")
        out.print(f"    [dim]try:[/] {escape(f.cure)}")
    return d


def cmd_profile(args) -> int:
    script = Path(args.script)
    if not script.is_file():
        raise UsageError(f"no such script: {args.script}")
    if args.nproc_per_node < 1:
        raise UsageError("--nproc-per-node must be 1 or more")
    start, stop = _window(args.steps)
    out_dir = Path(args.out) if args.out else Path("runs") / script.stem
    inputs = [script, *(a for a in args.args if a and Path(a).is_file())]  # the script's own files too
    if args.json:
        outputs.check(args.json, inputs, option="--json")
    outputs.folder(out_dir, inputs, option="--out")
    ranks = f", {args.nproc_per_node} ranks under torchrun" if args.nproc_per_node > 1 else ""
    out.print(f"[dim]proflab: running {escape(' '.join([script.name, *args.args]))}{ranks}; profiling steps "
              f"{start} to {stop - 1} into {escape(str(out_dir))}/[/]")
    with tempfile.TemporaryDirectory(prefix="proflab-profile-") as tmp:
        work = Path(tmp)
        code, timed_out = _run(_command(args, work, start, stop, out_dir.resolve()), args.timeout)
        summaries = sorted((json.loads(p.read_text()) for p in work.glob("rank*.json")),
                           key=lambda s: s.get("rank") or 0)
    first = summaries[0] if summaries else None
    traces = [Path(s["trace"]) for s in summaries if s.get("trace")]
    if not traces:
        err.print(f"[red]proflab:[/] no trace was written: {escape(_no_trace(first, code, timed_out, args))}.")
        _own_profiler(first)
        if timed_out:
            return TIMED_OUT
        return KIT_ERROR if first is not None and first.get("trace_error") else 1
    assert first is not None
    _own_profiler(first)
    if first.get("table"):
        out.print(f"\n[bold]key_averages()[/] of the profiled steps, sorted by {first['sort_by']}"
                  + (" (rank 0)" if len(summaries) > 1 else "") + ":")
        out.print(first["table"].rstrip(), markup=False, highlight=False, soft_wrap=True)
    cost = overhead(first)
    out.print(f"\nSteps: each ends at {escape(_paced_by(first))}; profiled: {start} to {stop - 1}. "
              f"The profiler's own cost: {cost}.")
    found = []
    for s in summaries:
        if s.get("trace"):
            label = f" (rank {s['rank']})" if len(summaries) > 1 else ""
            try:
                d = _print_diagnosis(Path(s["trace"]), label)
            except evidence.TraceError as e:
                err.print(f"[red]proflab:[/] the trace {escape(s['trace'])} cannot be read: {escape(str(e))}")
                return 1
            found.append({"rank": s.get("rank"), "trace": s["trace"], **asdict(d)})
    if args.json:
        outputs.write_text(args.json, json.dumps({
            "proflab": __version__,
            "script": str(script), "args": args.args, "exit_code": code, "window": [start, stop],
            "paced_by": first.get("source"), "paced_by_what": first.get("what"), "steps_run": len(first.get("ends") or []),
            "overhead": cost, "table": first.get("table", ""), "ranks": found}, indent=2))
    logdir = out_dir.parent if out_dir.parent != Path("") else Path(".")
    out.print(f"\nTrace{'s' if len(traces) > 1 else ''}: " + ", ".join(escape(str(t)) for t in traces))
    out.print(f"Look at it: [bold]proflab tensorboard --logdir {escape(str(logdir))}[/] (run "
              f"[bold]{escape(out_dir.name)}[/]: Profile, Trace timeline).")
    if timed_out:
        err.print(f"[yellow]proflab:[/] the script was stopped after --timeout {args.timeout:g} s, "
                  f"{_when(summaries, args.nproc_per_node, stop)} (exit {TIMED_OUT}).")
        return TIMED_OUT
    if code:
        err.print(f"[yellow]proflab:[/] the script itself exited with {code} {_when(summaries, args.nproc_per_node, stop)}; "
                  "see above. proflab exits 1: the script failed, not the kit.")
        return 1
    return 0


TIMED_OUT = 124  # as timeout(1) says it: the script ran past --timeout
KIT_ERROR = 3


def _when(summaries: list[dict], ranks: int, stop: int) -> str:
    """When the script (or one of its ranks) ended: after the profiled steps, or during them."""
    short = [s for s in summaries if len(s.get("ends") or []) < stop]
    missing = max(ranks - len(summaries), 0)
    if not short and not missing:
        return "after the profiled steps"
    said = []
    for s in short:
        who = f"rank {s['rank']}" if ranks > 1 and s.get("rank") is not None else "it"
        said.append(f"{who} ended after {len(s.get('ends') or [])} steps")
    if missing:
        said.append(f"{missing} rank{'s' if missing > 1 else ''} ended without a word (killed?)")
    return "during the profiled steps (" + "; ".join(said) + "): the trace holds the steps run before that"


def _own_profiler(summary: dict | None) -> None:
    """A word when the script runs torch.profiler itself: one profiler records at a time."""
    started = (summary or {}).get("own_profiler") or 0
    if started:
        err.print(f"[yellow]proflab:[/] the script starts torch.profiler itself ({started} time"
                  f"{'s' if started > 1 else ''}): only one profiler records at a time, so its own profile, or "
                  "the kit's window, comes out empty or cut short. Run it here without its own profiler (or "
                  "run it on its own, with python, to read its own table).")
