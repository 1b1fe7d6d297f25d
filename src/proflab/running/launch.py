"""Starting one run and watching it from outside, to its end: ``run_in`` takes a ``Launch`` (what the run's
process is told, ``RunSpec``, and what the checker alone knows) and gives its ``Outcome``.

The run's first process is forked by its fork server (``forkserver``), or is a fresh ``python -m
proflab.running.runner``, in its sandbox and its cgroup; this process stamps its marks (``marks``), scans its
processes and their memory, stops it at its limits, and reads what it left (``outcome``). One run at a time
in a process: two at once would time each other.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import errors, quiet
from ..labkit import handout
from . import cgroups, forkserver, memory, processes, sandbox, slots, torchrun
from . import outcome as outcome_
from .marks import PAUSE_MARKS, Marks, Watched, _from_outside, _read_marks
from .outcome import OUTPUT_TAIL_CHARS, Outcome
from .spec import RunSpec

POLL_S = 0.25  # how often a running lab's memory is looked at

def start(server, scratch: Path, spec: RunSpec, env: dict[str, str], workdir: Path, out, err,
           mark_fd: int, box=None, limit: float = forkserver.READY_TIMEOUT_S):
    """The run's first process, and what reads its CPU time from the kernel (None where nothing can):
    forked by ``server`` (its cgroup), or (with no server, or one that fails to fork) a fresh ``python -m
    proflab.running.runner SPEC`` in a cgroup of its own, in a sandbox of its own where ``box`` is given.
    A distributed lab's starts its torchrun job (``torchrun``)."""
    if server is not None:
        try:  # the server is waited for no longer than the run itself may take
            return server.spawn(scratch / "spec.json", workdir, env, out.fileno(), err.fileno(), mark_fd,
                                ready_s=min(forkserver.READY_TIMEOUT_S, limit)), server.run_cpu_s
        except forkserver.EngineFailed as e:
            raise errors.KitError(str(e)) from None
        except forkserver.ServerError:
            spec.mark_fd = mark_fd
            spec.write(scratch / "spec.json")
    argv = [sys.executable, "-m", "proflab.running.runner", str(scratch / "spec.json")]
    if box is not None:
        argv = box.command(argv, cwd=workdir)
    group = cgroups.make("run")
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, cwd=workdir, env=env,
                                start_new_session=True, pass_fds=(mark_fd,), preexec_fn=cgroups.entering(group))
    except BaseException:
        if group is not None:
            group.remove()
        raise
    if group is None or proc.pid not in group.pids():
        if group is not None:
            group.remove()
        return proc, None
    _groups[proc.pid] = group
    return proc, group.usage_s


# The cgroups of runs started as fresh processes, removed once each run is over.
_groups: dict[int, cgroups.Group] = {}


def stop(proc, tree: processes.Tree) -> None:
    """Stop the run and every process it started, wherever they moved; a second Ctrl-C (or a
    SIGTERM, a SIGHUP) arrives once nothing is left running."""
    with processes.shielded():
        tree.kill()
        if isinstance(proc, forkserver.Child):
            proc.wait_or_forget()
        else:
            proc.wait()



# What the steps' draws are made from (``labkit.handout``): this checking process's own, never in a run.
_SECRET = os.urandom(16)


# One run at a time in a process: two at once would time each other, and each would take the other's
# processes for its own (``processes.Tree`` counts this process's new children as the run's).
_one_run_at_a_time = threading.Lock()


@dataclass
class Launch:
    """One run, as the checker starts and watches it: what its process is told (``spec``), and what the
    checker alone knows (its limits, its server and sandbox, how its time is read)."""

    scratch: Path  # the run's folder
    spec: RunSpec
    file: Path
    version: str
    env: dict[str, str]
    limit: float  # seconds
    memory_mb: float = 8192.0
    background_allowed: bool = True
    workdir: Path | None = None
    output_chars: int = OUTPUT_TAIL_CHARS
    server: Any = None  # the fork server it is forked from (``forkserver.Server``), or None: a fresh process
    box: Any = None  # its sandbox's folder (``sandbox.Box``), or None: unsandboxed
    cpu_figure: bool = False  # CPU time is the lab's figure: the run stops at its pausing marks
    compile_credit: bool = False  # the time compiling takes is left out ([timing] compile)
    watch: memory.Watch | None = None  # a lab graded on memory: its peak, sampled from here
    reads: Any = None  # the storage service's reads between two times (lab 1)


def run_in(launch: Launch) -> Outcome:
    with _one_run_at_a_time:
        return _run_alone(launch)


def _run_alone(launch: Launch) -> Outcome:
    scratch, spec, file, version, env = launch.scratch, launch.spec, launch.file, launch.version, launch.env
    limit, memory_mb, background_allowed = launch.limit, launch.memory_mb, launch.background_allowed
    server, box, watch, reads = launch.server, launch.box, launch.watch, launch.reads
    workdir = launch.workdir
    workdir = Path(workdir or os.getcwd())
    processes.become_subreaper()  # what the run starts and orphans is re-parented here, not to init
    nproc = spec.nproc  # a torchrun job of nproc ranks, each marking through its FIFO
    if spec.handout:  # the channel runs both ways: marks from the run, each step's draw to it
        ours, theirs = socket.socketpair()
        read_end, write_end = ours.detach(), theirs.detach()
    else:
        read_end, write_end = os.pipe()
    spec.mark_fd = forkserver.MARK_FD if server is not None else write_end
    # where the CPU time is the figure, the run stops itself until it is read (not a torchrun job's ranks)
    spec.pause_marks = PAUSE_MARKS if launch.cpu_figure and not nproc else ""
    marks = Marks()
    child = Watched(pause=bool(spec.pause_marks), profile_steps=spec.profile_steps)
    try:
        fifo_paths = torchrun.fifos(scratch, nproc)
        spec.write(scratch / "spec.json")
        out_file, err_file = open(scratch / "stdout.txt", "wb"), open(scratch / "stderr.txt", "wb")
    except OSError as e:
        os.close(read_end)
        os.close(write_end)
        raise errors.KitError(errors.describe(e, "write")) from None
    result_path = Path(spec.result_path)
    out_path, err_path = scratch / "stdout.txt", scratch / "stderr.txt"
    if not nproc:  # the mark channel, as the checker looks for it in the run's /proc (``marks._channel``)
        child.pipe = os.readlink(f"/proc/self/fd/{write_end}")
    if spec.handout:
        child.draws = handout.draws(_SECRET, spec.seed, spec.total_steps)
    readers = [threading.Thread(target=_read_marks, args=(read_end, marks, child), daemon=True)]
    rank_marks = [Marks() for _ in range(nproc)]  # a torchrun job's: every rank's, each from its FIFO
    ranks_read = [torchrun.reader(path, lambda fd, m=m: _read_marks(fd, m, child))
                  for path, m in zip(fifo_paths, rank_marks)]
    others = processes.children_of_mine()
    oom_before = outcome_.oom_kills()  # the kernel's count of its out-of-memory kills, to tell a SIGKILL's cause
    started = time.perf_counter()
    proc = tree = counter = None
    stopped, peak_mb, reached = "", 0.0, ""
    with out_file as out, err_file as err:
        try:
            try:
                proc, counter = start(server, scratch, spec, env, workdir, out, err, write_end, box, limit)
            finally:
                os.close(write_end)
            child.cpu = counter
            child.mark_fd = spec.mark_fd  # the number the run was given it at (a fresh process: another)
            started = time.perf_counter()  # the time limit counts from the run's start, not its server's imports
            if isinstance(proc, forkserver.Child) and server.box is not None:  # every process of its sandbox
                tree = sandbox.Tree(proc.pid, server.namespace, {server.init_pid, server.pid})
            else:
                parent = server.pid if isinstance(proc, forkserver.Child) else None
                tree = processes.Tree(proc.pid, others, parent=parent)
            child.tree = tree
            for reader in readers + ranks_read:
                reader.start()
            if watch is not None:
                watch.members = [proc.pid]
                watch.start_device()
            next_scan = 0.0
            while proc.poll() is None:
                now = time.perf_counter()
                if now - started > limit:
                    stopped = "timeout"
                    break
                if now >= next_scan:  # scanning every process on the machine costs: less often
                    members = tree.scan()
                    child.members = members
                    slots.pin(members)
                    next_scan = now + POLL_S
                    if watch is not None:
                        watch.members = members
                    peak_mb = max(peak_mb, memory.pss_mb(members, memory_mb))
                    if peak_mb > memory_mb:
                        stopped = "memory"
                        break
                if watch is not None:
                    watch.sample()
                try:
                    proc.wait(timeout=memory.SAMPLE_S if watch is not None else POLL_S)
                except subprocess.TimeoutExpired:
                    pass
            if not stopped:
                marks.exited = time.perf_counter()  # the run's own process ended: what it did after its steps ends
        finally:  # also on Ctrl-C: stop the run and every process it started, wherever it moved
            if watch is not None:
                watch.stop()
            if stopped == "timeout" and nproc and tree is not None:  # where was each rank? (said below)
                torchrun.ask_where(scratch, nproc, set(tree.scan()))
                time.sleep(0.5)
            # What the run did to its server, seen before the run is stopped (a server that never reports
            # the run's end is killed then)
            reached = server.tampered() if server is not None and server.box is not None else ""
            if proc is not None:
                stop(proc, tree or processes.Tree(proc.pid, others))
                # Everything the run ever started is gone now: the kernel's count holds all of its CPU
                marks.final_cpu = counter() if counter is not None else None
                group = _groups.pop(proc.pid, None)
                if group is not None:
                    group.remove()
            if readers[0].ident is None:  # the run never started: its end of the pipe is this process's to close
                os.close(read_end)
            torchrun.release(fifo_paths)  # a reader still waiting for a rank that never opened its FIFO
            for reader in readers + ranks_read:
                if reader.ident is not None:
                    reader.join(timeout=5)
    reached = reached or (server.tampered() if server is not None and server.box is not None else "")
    if reached:
        server.kill()  # its later runs would be forked slower: the next run gets a new server (and sandbox)
    outcome = Outcome(version=version, file=file, status="", wall_s=time.perf_counter() - started,
                      returncode=proc.returncode, stdout=outcome_.tail(out_path, launch.output_chars), stderr=outcome_.tail(err_path))
    if stopped == "timeout":
        outcome.status = "timeout"
        outcome.result = {"kind": "timeout", "message": f"did not finish within {limit:g} s"}
        if nproc:  # where each rank stopped, by its marks, and where it was when asked
            said = [torchrun.stuck(rank_marks),
                    *torchrun.where(scratch, nproc, spec.file, Path(spec.shown_as or file).name)]
            outcome.result["ranks_at"] = "; ".join(s for s in said if s)
            outcome.result["message"] += f": {outcome.result['ranks_at']}"
    elif stopped == "memory":
        outcome.status = "error"
        outcome.result = {"kind": "memory", "message": f"used more than {memory_mb:.0f} MB of memory "
                          f"({peak_mb:.0f} MB, counting every process it started), and was stopped"}
    elif nproc:
        for rank in rank_marks:  # a rank's work after its window holds up the job's end: counted to there
            rank.exited = marks.exited
        _job_outcome(outcome, launch, rank_marks, oom_before)
    else:
        outcome.result = outcome_.read_result(result_path, proc.returncode, oom_before)
        outcome.status = "ok" if outcome.result.get("status") == "ok" else "error"
        if outcome.result.get("kind") == "missing_result":
            outcome.status = "crash"
            outcome.result["kind"] = "crash"
        if outcome.ok:
            _from_outside(outcome, marks, spec, background_allowed, reads, launch.compile_credit)
        if outcome.ok and watch is not None:
            reported = outcome.result.pop("device_reserved_mb", None)
            outcome.result["memory"] = watch.figures(
                str(outcome.result.get("device", "cpu")),
                float(reported) if isinstance(reported, (int, float)) and not isinstance(reported, bool) else None)
        if outcome.ok and outcome.result.get("trace"):
            outcome_.take_trace(outcome, spec.trace_dir)
        if outcome.ok and spec.learner_profiles:
            outcome_.take_learner_trace(outcome, Path(spec.trace_dir))
    if reached:
        outcome.status = "error"
        outcome.result = {"kind": "tampered", "message": (
            f"it reached outside its run: {reached}. A run may not signal, renice or reschedule the "
            "checker's processes")}
    if tree.survivors:
        outcome.status = "error"
        outcome.result = {"kind": "left_running", "message": (
            f"{len(tree.survivors)} process(es) it started could not be stopped (PIDs "
            f"{', '.join(map(str, tree.survivors[:5]))}): they are stuck; look for a process waiting on a device")}
    if not outcome.ok and (full := errors.low_disk(scratch, spec.trace_dir)):
        # The disk had room when the run started (run() checks): it filled up during it. By the run only if
        # its own folder (a sandbox's box: the only place it can write) holds a good part of that room.
        wrote = outcome_.bytes_under(box.root if box is not None else scratch)
        if wrote >= errors.RUN_NEEDS_BYTES // 2:
            outcome.status = "error"
            outcome.result = {"kind": "disk", "message": f"the disk filled up during its run, which wrote "
                              f"{wrote / 1e6:.0f} MB: {full}"}
        else:
            outcome.status = "kit"
            outcome.result = {"kind": "disk", "message": f"the disk filled up during the run, and not by it (it "
                              f"wrote {wrote / 1e6:.1f} MB): another process filled it. {full}"}
    for key in ("message", "traceback", "code", "file"):  # shown to the learner: no terminal escapes
        if isinstance(outcome.result.get(key), str):
            outcome.result[key] = quiet.printable(outcome.result[key])
    return outcome


def _job_outcome(outcome: Outcome, launch: Launch, rank_marks: list[Marks], oom_before: int | None) -> None:
    """A torchrun job's outcome from its ranks': each read and timed as a single run is, then merged
    (``torchrun.merge``); a failed rank fails the job, named. The rank blamed is one that died of a
    fatal signal (its stack says so), else the first to report a failure of its own (not a lost
    connection to a peer that failed), else one that died without a result (the first torchrun's
    agent saw fail): the others were stopped because of it."""
    scratch, spec = launch.scratch, launch.spec
    ranks: list[Outcome] = []
    for rank, marks in enumerate(rank_marks):
        one = Outcome(version=outcome.version, file=outcome.file, status="")
        one.result = outcome_.read_result(scratch / f"result-{rank}.json", None, oom_before)
        one.status = "ok" if one.result.get("status") == "ok" else "error"
        if one.result.get("kind") == "missing_result":
            one.status, one.result["kind"] = "crash", "crash"
        if one.ok:
            _from_outside(one, marks, spec.for_rank(rank), launch.background_allowed,
                          compile_credit=launch.compile_credit)
        if one.ok and one.result.get("trace"):
            outcome_.take_trace(one, spec.trace_dir)
        ranks.append(one)
    failed = [r for r, one in enumerate(ranks) if not one.ok]
    if not failed:
        outcome.status, outcome.result = "ok", torchrun.merge([one.result for one in ranks])
        outcome.rank_traces = [one.trace for one in ranks]
        outcome.trace = outcome.rank_traces[0]
        return
    seen = torchrun.failures(scratch / "launch.json")  # what torchrun's agent saw fail first
    said = [r for r in failed if ranks[r].status == "error"]
    own = [r for r in said if not torchrun.lost_a_peer(ranks[r].result.get("message", ""))]
    crashed = [r for r in failed if ranks[r].status == "crash"]
    shown = Path(spec.shown_as or spec.file).name
    died = {r: torchrun.crash(scratch, r, spec.file, shown) for r in crashed}  # "" without a fatal signal
    fatal = [r for r in crashed if died[r]]
    if fatal:  # a fatal signal (its stack says so) is a cause: its peers then fail on their connection to it,
        rank = fatal[0]  # in whatever words their backend has for it
    elif own:  # the first to fail of its own: a rank whose peer died fails on its connection a moment later
        rank = min(own, key=lambda r: outcome_.written_ns(scratch / f"result-{r}.json"))
    elif crashed:  # died without a word (a signal, os._exit): the ranks that lost it are not the cause
        rank = seen["first_rank"] if seen.get("first_rank") in crashed else crashed[0]
    else:
        rank = min(said, key=lambda r: outcome_.written_ns(scratch / f"result-{r}.json"))
    if ranks[rank].status == "error":
        outcome.status, outcome.result = "error", dict(ranks[rank].result)
    else:
        code = seen.get("failed", {}).get(str(rank))
        outcome.status = "crash"
        outcome.result = {"kind": "crash", "message": died[rank] or (
            outcome_.crash_message(code, oom_before) if isinstance(code, int) and code < 0 else
            "the process died before reporting a result (killed by a signal, out of memory, or os._exit "
            "in the lab file?)")}
    outcome.result["rank"] = rank
    outcome.result["message"] = f"rank {rank} of {len(ranks)}: {outcome.result.get('message', '')}"
