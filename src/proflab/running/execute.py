"""Where a lab file is run: one fresh process per run, with a time limit.

The process is forked from a server that imported torch once (``forkserver``;
a fresh ``python -m proflab.running.runner`` where no server can be used). It gets a
session and process group of its own, and is followed as a tree, so a
timeout, a Ctrl-C or too much memory stops it together with every DataLoader
worker it started. Its output is captured in files (a program that prints a
lot cannot block on a full pipe), and only the tail is kept for the report.

The lab file runs inside the subprocess, so everything in there is the
learner's: its clock, its modules, its pipe. What this module reports rests on
what it sees from outside:

* the runner marks every step through a pipe, and this process stamps each
  mark with its own clock: the step times, the timed window and the profiled
  steps come from these stamps, and a run whose marks are missing or out of
  order is a failed run;
* the CPU time of every thread of the run, and of every process in its group,
  read from ``/proc`` when the timed window opens and closes;
* memory as the machine pays for it (PSS: pages shared by forked DataLoader
  workers counted once);
* for a lab with modelled storage, a storage service in this process that
  applies the latency and logs every read.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import errors, labs, paths, quiet
from ..labkit import handout
from . import cgroups, compile_headers, forkserver, memory, processes, sandbox, slots, storage, torchrun
from .marks import PAUSE_MARKS, Marks, _from_outside, _read_marks

OUTPUT_TAIL_CHARS = 4000
POLL_S = 0.25  # how often a running lab's memory is looked at
# The values a run's steps yield, as its result file holds them: the checker reads no more than this.
RESULT_MAX_BYTES = 64 * 1024 * 1024


@dataclass
class Outcome:
    """What one run of one version produced."""

    version: str
    file: Path
    status: str  # ok | error | timeout | crash
    result: dict[str, Any] = field(default_factory=dict)
    stdout: str = ""
    stderr: str = ""
    wall_s: float = 0.0
    returncode: int | None = None
    trace: Any = field(default=None, repr=False)  # the trace, read and checked once (an evidence.Trace)
    rank_traces: list[Any] = field(default_factory=list, repr=False)  # a torchrun job's: every rank's, in order
    steps_asked: int = 0  # the steps the run was to take: warm-up, timed and profiled
    sandboxed: bool = False  # run inside a sandbox of the engine's (``sandbox``)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def mean_step_s(self) -> float:
        return float(self.result["mean_step_s"])


def _tail(path: Path, keep: int = OUTPUT_TAIL_CHARS) -> str:
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(0, size - keep))
        text = f.read().decode("utf-8", errors="replace")
    text = quiet.clean(text)
    return ("…\n" + text) if size > keep else text


# Runs are forked from a server that has imported torch once (``forkserver``); False: each run is a
# fresh ``python -m proflab.running.runner`` (as it is anyway where the server cannot be used).
FORK = True


def _start(server, scratch: Path, spec: dict[str, Any], env: dict[str, str], workdir: Path, out, err,
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
            spec["mark_fd"] = mark_fd
            (scratch / "spec.json").write_text(json.dumps(spec))
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


def _stop(proc, tree: processes.Tree) -> None:
    """Stop the run and every process it started, wherever they moved; a second Ctrl-C (or a
    SIGTERM, a SIGHUP) arrives once nothing is left running."""
    with processes.shielded():
        tree.kill()
        if isinstance(proc, forkserver.Child):
            proc.wait_or_forget()
        else:
            proc.wait()


def run(
    lab: labs.Lab,
    file: Path,
    version: str,
    device: str = "auto",
    *,
    trace_dir: Path | None = None,
    table: bool = False,
    record_shapes: bool = False,
    profile_memory: bool = False,
    with_stack: bool = False,
    profile_mode: str = "window",
    timeout_s: float | None = None,
    steps: dict[str, int] | None = None,
    checking: bool = False,
    workdir: Path | None = None,
    shown_as: Path | None = None,
    output_chars: int = OUTPUT_TAIL_CHARS,
    preload: tuple[str, ...] | None = None,
    sys_path: list[str] | None = None,
    seed: int | None = None,
    role: str | None = None,
    reads: tuple[Path, ...] = (),
) -> Outcome:
    """Run ``file`` (a version of ``lab``) once in a fresh process, in ``workdir`` (default: the file's folder).

    Where the sandbox engine runs (``sandbox.in_use``), the run is forked from
    a server in a sandbox of its own, one per ``role`` (default: the file's
    path), and writes only in that sandbox's folder, emptied after the run.

    ``seed``: this run's inputs (``cfg.seed``, and the lab kit's data and
    weights, ``labkit.seed_for``); default: the lab's own.

    ``reads``: folders the role's sandbox may read besides the file's own, its
    working folder and the kit (for the original: every check's copy of it).

    ``preload``: what the fork server imports first (default: what ``lab``'s
    original and ``file`` import); a check passes the same for both versions,
    so that all its runs are forked from one server.

    ``shown_as``: the learner's own file, when ``file`` is the checker's
    snapshot of it; the lab module's ``__file__`` is then that path.

    ``sys_path``: folders put first on the run's ``sys.path``, before its working folder (a gate's
    baseline taken at a git revision imports its project's modules from there).

    ``checking``: a run the checker grades; its profiled steps then also
    record shapes (for the work floor) and operators on every thread.
    Raises ``errors.KitError`` when the kit cannot set the run up (a full
    disk, an unwritable ``.proflab/``); an outcome with status "kit" is a run
    that failed while the disk it writes to was full.
    """
    w = lab.workload
    full = errors.low_disk(_scratch_dir_path(), trace_dir, need=errors.RUN_NEEDS_BYTES)
    if full:  # said before the run: a disk that fills during it is the run's doing
        raise errors.KitError(full)
    env = run_env(lab)
    engine = sandbox.in_use()
    preload = preload if preload is not None else preload_for(lab.original, file)
    role = role or str(file.resolve())
    workdir = workdir or file.resolve().parent
    expose = exposed(file, workdir, sys_path) + tuple(reads)
    lend_compile_headers(file)
    server, shared = forkserver.server_for(env, (storage.ENV_VAR,), preload, _scratch_dir(), role, engine,
                                           expose) if FORK else (None, False)
    box = None
    try:
        if engine is not None:  # the run's folder is in its sandbox's box: the only place it may write
            box = server.box if server is not None else sandbox.Box(_scratch_dir(), engine, expose=expose)
            scratch = box.new_folder("run-")
        else:
            scratch = Path(tempfile.mkdtemp(prefix=paths.owned("run-"), dir=_scratch_dir()))
    except OSError as e:
        forkserver.done_with(server, shared)
        if box is not None and server is None:
            box.remove()
        raise errors.KitError(errors.describe(e, "make a scratch folder in")) from None
    result_path = scratch / "result.json"
    wanted_trace_dir = Path(trace_dir) if trace_dir is not None else None
    if box is not None and (trace_dir is not None or lab.kind == "own_profile"):
        trace_dir = box.new_folder("trace-")  # written inside; moved to the caller's folder after the run
    elif lab.kind == "own_profile":  # every run of a file that profiles itself writes a trace: cfg.trace_dir
        trace_dir = Path(trace_dir) if trace_dir is not None else scratch / "trace"
        trace_dir.mkdir(parents=True, exist_ok=True)
    spec = {
        "file": str(file.resolve()),
        "shown_as": str(shown_as.resolve()) if shown_as else None,
        "device": device,
        # the run stops itself at the marks its CPU time is read at, where that time is the lab's figure
        "cpu_figure": lab.figure(_likely_device(device)) == "cpu_time",
        "batch_size": w.batch_size,
        "seed": w.seed if seed is None else seed,
        "threads": w.threads,
        "data_dir": w.data_dir or str(paths.data_dir()),
        "params": w.params,
        "warmup_steps": w.warmup_steps,
        "timed_steps": w.timed_steps,
        "profile_steps": w.profile_steps,
        "trace_dir": str(trace_dir) if trace_dir else None,
        "worker_name": version,
        "table": table,
        # A lab graded on memory: the checker's profile records every allocation, for the evidence.
        "profile_memory": bool(profile_memory or (checking and lab.leaner)),
        "with_stack": with_stack,
        "profile_mode": profile_mode,
        "result_path": str(result_path),
        "background_workers": w.background_workers,
        "background_threads": w.background_threads,
        # The checker's own figures need the shapes (the work floor) and every thread (reads done elsewhere).
        "record_shapes": record_shapes or checking,
        # (With every thread profiled, torch 2.14 records no [memory] events at all: a lab graded on
        # memory profiles the main thread only; its audit allows no threads of the learner's.)
        "all_threads": checking and not lab.leaner,
        "compile_marks": _mentions(file, "compile"),
        # whether the time compiling takes is left out at all ([timing] compile): elsewhere it is work
        "compile_credit": lab.compile_credit,
        # ...and there, each step's inputs are handed out as the step begins (``labkit.handout``), so that
        # no work on a later step can be done while compiling: in a lab whose data is the kit's, whose data
        # class reads the draws (not a gate's own project, whose data is its own)
        "handout": bool(checking and lab.compile_credit and lab.kind != "job" and lab.data),
        # Lab 0: the file profiles itself, into trace_dir; the kit's profiler stays off.
        "learner_profiles": lab.kind == "own_profile",
        "preimport": _mentions(file, "compile", "optim"),
        "sys_path": list(sys_path or []),
        **(steps or {}),
    }
    if lab.kind == "own_profile":  # lab 0's loop takes cfg.steps steps: the timed ones, and any the kit profiles
        spec["cfg_steps"] = spec["warmup_steps"] + spec["timed_steps"] + spec["profile_steps"]
    if lab.kind == "job":  # a torchrun job: each rank fills in its number (runner._for_rank)
        spec.update(nproc=lab.distributed.nproc, mark_fifo=str(scratch / "marks-{rank}"),
                    result_path=str(scratch / "result-{rank}.json"), worker_name="rank{rank}",
                    stack_path=str(scratch / "stack-{rank}.txt"), pid_path=str(scratch / "pid-{rank}"),
                    launch_path=str(scratch / "launch.json"), all_threads=False)
    if box is not None:  # the sandbox's /tmp is its box's: caches and homes go there, fresh every run
        env = {**env, **sandbox.RUN_ENV}
    service = None
    try:
        if lab.storage is not None:
            service = storage.StorageService(paths.data_dir() / lab.storage.folder, lab.storage.latency_ms)
            # a sandboxed run reaches it in its own /tmp, by a short path
            service.start(*((box.folder("tmp"), "/tmp") if box is not None else ()))
            env[storage.ENV_VAR] = service.address
        outcome = _run_in(scratch, spec, file, version, env=env,
                          limit=timeout_s if timeout_s is not None else w.timeout_s, memory_mb=w.memory_mb,
                          background_allowed=w.background_workers, workdir=workdir,
                          output_chars=output_chars, server=server, box=box,
                          # A lab graded on memory: its peak, sampled from here
                          watch=memory.Watch() if lab.leaner else None,
                          reads=service.reads_between if service is not None else None)
        outcome.steps_asked = spec["warmup_steps"] + spec["timed_steps"] + spec["profile_steps"]
        outcome.sandboxed = box is not None
        if service is not None:
            service.close()
            _check_storage(outcome, service.reads, w.batch_size)
        if box is not None and wanted_trace_dir is not None:
            _move_traces(outcome, wanted_trace_dir)
        return outcome
    finally:
        if service is not None:
            service.close()
        if box is not None:
            if server is None:
                box.remove()
            elif shared:
                box.wipe()  # nothing of this run's is left for the next: its folder, /tmp, /dev/shm
        else:
            shutil.rmtree(scratch, ignore_errors=True)
        forkserver.done_with(server, shared)  # a server of this run's own goes, with its box


def _move_traces(outcome: Outcome, folder: Path) -> None:
    """The traces a sandboxed run wrote in its box, moved to ``folder`` (the box is emptied after the run),
    read and prepared here already."""
    folder.mkdir(parents=True, exist_ok=True)
    moved: dict[str, str] = {}

    def move(where: str | None) -> str | None:
        if not where or where in moved:
            return moved.get(where, where) if where else where
        source = Path(where)
        target = folder / source.name
        try:
            shutil.move(str(source), str(target))
        except OSError:
            return where
        moved[where] = str(target)
        return str(target)

    result = outcome.result
    if result.get("trace"):
        result["trace"] = move(result["trace"])
        if outcome.trace is not None:
            outcome.trace.path = Path(result["trace"])
    if result.get("rank_traces"):
        result["rank_traces"] = [move(t) for t in result["rank_traces"]]
        for trace, where in zip(outcome.rank_traces, result["rank_traces"]):
            if trace is not None and where:
                trace.path = Path(where)
        if outcome.rank_traces and outcome.rank_traces[0] is not None:
            outcome.trace = outcome.rank_traces[0]


def exposed(file: Path, workdir: Path, sys_path: list[str] | None = None) -> tuple[Path, ...]:
    """What a sandboxed run of ``file`` reads besides the machine's own folders: the file's folder, its
    working folder, a gate's baseline's project, the kit with its data, and this Python's own folders."""
    return (Path(file).resolve().parent, Path(workdir), *(Path(p) for p in sys_path or []), paths.root(),
            paths.data_dir(), *sandbox.interpreter_folders())


def warm(lab: labs.Lab, preload: tuple[str, ...], role: str, file: Path, workdir: Path,
         sys_path: list[str] | None = None, reads: tuple[Path, ...] = ()) -> None:
    """Inside a ``forkserver.session``: start the server the runs of ``file`` (``role``'s, in ``workdir``)
    will be forked from now, so that its imports overlap what the checker does before the first run."""
    if FORK:
        lend_compile_headers(file)
        server, shared = forkserver.server_for(run_env(lab), (storage.ENV_VAR,), preload, _scratch_dir(), role,
                                               sandbox.in_use(), exposed(file, workdir, sys_path) + tuple(reads))
        forkserver.done_with(server, shared)


def lend_compile_headers(file: Path) -> None:
    """Before a sandbox for ``file`` is made: where it may call torch.compile, the precompiled header its
    kernels include, built once (``compile_headers``), so that no run builds it again in its own /tmp."""
    if sandbox.in_use() is not None and _mentions(file, "compile"):
        compile_headers.prepare()


def run_env(lab: labs.Lab) -> dict[str, str]:
    """The environment of every run of ``lab`` (a run of a lab with storage adds the service's address)."""
    return {**os.environ, **quiet.QUIET_ENV, **lab.workload.env, "PYTHONUNBUFFERED": "1"}


# The packages whose modules a run's process may find imported already (``preload_for``).
PRELOADED_PACKAGES = ("torch", "torchvision")


def preload_for(*files: Path) -> tuple[str, ...]:
    """What the fork server imports before it forks runs of ``files`` (the lab's original and the
    learner's file): every module of torch and torchvision they import, anywhere in them, and in the
    kit's lab modules they use; torch._dynamo where one may build an optimizer or compile (what the
    runner would import before the first step anyway). Only names are read from the files: nothing
    of theirs runs in the server."""
    import ast

    names: set[str] = set()
    todo, seen = [Path(f) for f in files], set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        try:
            tree = ast.parse(path.read_bytes())
        except (OSError, SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            found = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else [])
            for name in found:
                if name.split(".")[0] in PRELOADED_PACKAGES:
                    names.add(name)
                elif name.startswith("proflab.labkit"):
                    names.add(name)
                    module = Path(__file__).resolve().parents[1] / Path(*name.split(".")[1:])
                    todo += [module.with_suffix(".py"), module / "__init__.py"]
    if any(_mentions(Path(f), "compile", "optim") for f in files):
        names.add("torch._dynamo")
    return tuple(sorted(names))


def _mentions(file: Path, *words: str) -> bool:
    """Whether the file's source mentions any of ``words`` (``compile``: it may call torch.compile, whose
    compile time is then marked, to be left out; ``optim``: it may build a torch.optim optimizer)."""
    try:
        source = file.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return any(word in source for word in words)


def _check_storage(outcome: Outcome, reads: list[storage.Read], batch_size: int) -> None:
    """How many samples the lab's storage served the run, as the service logged: every step needs a
    batch of distinct samples. A shortfall is noted in ``result["storage"]["unread"]``, for the checker
    to report once the step's values have been compared (a smaller batch is named as such there)."""
    if not outcome.ok:
        return
    needed = int(outcome.result.get("steps_done", 0)) * batch_size
    distinct = len({r.name for r in reads})
    outcome.result["storage"] = {"reads": len(reads), "distinct": distinct, "needed": needed}
    if distinct < needed:
        outcome.result["storage"]["unread"] = (
            f"only {distinct} of the {needed} samples its steps used were read from the lab's storage "
            "(the checker's storage service logged every read): every sample must come from storage, "
            "through the lab's dataset")


# What the steps' draws are made from (``labkit.handout``): this checking process's own, never in a run.
_SECRET = os.urandom(16)


# One run at a time in a process: two at once would time each other, and each would take the other's
# processes for its own (``processes.Tree`` counts this process's new children as the run's).
_one_run_at_a_time = threading.Lock()


def _run_in(scratch: Path, spec: dict[str, Any], file: Path, version: str, env: dict[str, str],
            limit: float, memory_mb: float = 8192.0, background_allowed: bool = True,
            workdir: Path | None = None, output_chars: int = OUTPUT_TAIL_CHARS,
            server=None, box=None, watch: memory.Watch | None = None, reads=None) -> Outcome:
    with _one_run_at_a_time:
        return _run_alone(scratch, spec, file, version, env, limit, memory_mb, background_allowed, workdir,
                          output_chars, server, box, watch, reads)


def _run_alone(scratch: Path, spec: dict[str, Any], file: Path, version: str, env: dict[str, str],
               limit: float, memory_mb: float, background_allowed: bool, workdir: Path | None,
               output_chars: int, server, box, watch: memory.Watch | None = None, reads=None) -> Outcome:
    workdir = Path(workdir or os.getcwd())
    processes.become_subreaper()  # what the run starts and orphans is re-parented here, not to init
    nproc = int(spec.get("nproc") or 0)  # a torchrun job of nproc ranks, each marking through its FIFO
    if spec.get("handout"):  # the channel runs both ways: marks from the run, each step's draw to it
        ours, theirs = socket.socketpair()
        read_end, write_end = ours.detach(), theirs.detach()
    else:
        read_end, write_end = os.pipe()
    spec["mark_fd"] = forkserver.MARK_FD if server is not None else write_end
    # where the CPU time is the figure, the run stops itself until it is read (not a torchrun job's ranks)
    spec["pause_marks"] = PAUSE_MARKS if spec.get("cpu_figure") and not nproc else ""
    marks = Marks()
    child: dict[str, processes.Tree] = {}
    try:
        fifo_paths = torchrun.fifos(scratch, nproc)
        (scratch / "spec.json").write_text(json.dumps(spec))
        out_file, err_file = open(scratch / "stdout.txt", "wb"), open(scratch / "stderr.txt", "wb")
    except OSError as e:
        os.close(read_end)
        os.close(write_end)
        raise errors.KitError(errors.describe(e, "write")) from None
    result_path = Path(spec["result_path"])
    out_path, err_path = scratch / "stdout.txt", scratch / "stderr.txt"
    child["pause"] = bool(spec["pause_marks"])
    if not nproc:  # the mark channel, as the checker looks for it in the run's /proc (``marks._channel``)
        child["pipe"] = os.readlink(f"/proc/self/fd/{write_end}")
    if spec.get("handout"):
        child["draws"] = handout.draws(_SECRET, int(spec["seed"]),
                                       spec["warmup_steps"] + spec["timed_steps"] + spec["profile_steps"])
    child["profile_steps"] = int(spec.get("profile_steps") or 0)
    readers = [threading.Thread(target=_read_marks, args=(read_end, marks, child), daemon=True)]
    rank_marks = [Marks() for _ in range(nproc)]  # a torchrun job's: every rank's, each from its FIFO
    ranks_read = [torchrun.reader(path, lambda fd, m=m: _read_marks(fd, m, child))
                  for path, m in zip(fifo_paths, rank_marks)]
    others = processes.children_of_mine()
    global _oom_at_start
    _oom_at_start = _oom_kills()
    started = time.perf_counter()
    proc = tree = counter = None
    stopped, peak_mb, reached = "", 0.0, ""
    with out_file as out, err_file as err:
        try:
            try:
                proc, counter = _start(server, scratch, spec, env, workdir, out, err, write_end, box, limit)
            finally:
                os.close(write_end)
            child["cpu"] = counter
            child["mark_fd"] = spec["mark_fd"]  # the number the run was given it at (a fresh process: another)
            started = time.perf_counter()  # the time limit counts from the run's start, not its server's imports
            if isinstance(proc, forkserver.Child) and server.box is not None:  # every process of its sandbox
                tree = sandbox.Tree(proc.pid, server.namespace, {server.init_pid, server.pid})
            else:
                parent = server.pid if isinstance(proc, forkserver.Child) else None
                tree = processes.Tree(proc.pid, others, parent=parent)
            child["tree"] = tree
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
                    child["members"] = members
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
                _stop(proc, tree or processes.Tree(proc.pid, others))
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
                      returncode=proc.returncode, stdout=_tail(out_path, output_chars), stderr=_tail(err_path))
    if stopped == "timeout":
        outcome.status = "timeout"
        outcome.result = {"kind": "timeout", "message": f"did not finish within {limit:g} s"}
        if nproc:  # where each rank stopped, by its marks, and where it was when asked
            said = [torchrun.stuck(rank_marks),
                    *torchrun.where(scratch, nproc, spec["file"], Path(spec.get("shown_as") or file).name)]
            outcome.result["ranks_at"] = "; ".join(s for s in said if s)
            outcome.result["message"] += f": {outcome.result['ranks_at']}"
    elif stopped == "memory":
        outcome.status = "error"
        outcome.result = {"kind": "memory", "message": f"used more than {memory_mb:.0f} MB of memory "
                          f"({peak_mb:.0f} MB, counting every process it started), and was stopped"}
    elif nproc:
        for rank in rank_marks:  # a rank's work after its window holds up the job's end: counted to there
            rank.exited = marks.exited
        _job_outcome(outcome, scratch, spec, rank_marks, background_allowed)
    else:
        outcome.result = _read_result(result_path, proc.returncode)
        outcome.status = "ok" if outcome.result.get("status") == "ok" else "error"
        if outcome.result.get("kind") == "missing_result":
            outcome.status = "crash"
            outcome.result["kind"] = "crash"
        if outcome.ok:
            _from_outside(outcome, marks, spec, background_allowed, reads)
        if outcome.ok and watch is not None:
            reported = outcome.result.pop("device_reserved_mb", None)
            outcome.result["memory"] = watch.figures(
                str(outcome.result.get("device", "cpu")),
                float(reported) if isinstance(reported, (int, float)) and not isinstance(reported, bool) else None)
        if outcome.ok and outcome.result.get("trace"):
            _take_trace(outcome, spec.get("trace_dir"))
        if outcome.ok and spec.get("learner_profiles"):
            _take_learner_trace(outcome, Path(spec["trace_dir"]))
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
    if not outcome.ok and (full := errors.low_disk(scratch, spec.get("trace_dir"))):
        # The disk had room when the run started (run() checks): it filled up during it. By the run only if
        # its own folder (a sandbox's box: the only place it can write) holds a good part of that room.
        wrote = _bytes_under(box.root if box is not None else scratch)
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


def _job_outcome(outcome: Outcome, scratch: Path, spec: dict[str, Any], rank_marks: list[Marks],
                 background_allowed: bool) -> None:
    """A torchrun job's outcome from its ranks': each read and timed as a single run is, then merged
    (``torchrun.merge``); a failed rank fails the job, named. The rank blamed is one that died of a
    fatal signal (its stack says so), else the first to report a failure of its own (not a lost
    connection to a peer that failed), else one that died without a result (the first torchrun's
    agent saw fail): the others were stopped because of it."""
    ranks: list[Outcome] = []
    for rank, marks in enumerate(rank_marks):
        one = Outcome(version=outcome.version, file=outcome.file, status="")
        one.result = _read_result(scratch / f"result-{rank}.json", None)
        one.status = "ok" if one.result.get("status") == "ok" else "error"
        if one.result.get("kind") == "missing_result":
            one.status, one.result["kind"] = "crash", "crash"
        if one.ok:
            _from_outside(one, marks, spec, background_allowed)
        if one.ok and one.result.get("trace"):
            _take_trace(one, spec.get("trace_dir"))
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
    shown = Path(spec.get("shown_as") or spec["file"]).name
    died = {r: torchrun.crash(scratch, r, spec["file"], shown) for r in crashed}  # "" without a fatal signal
    fatal = [r for r in crashed if died[r]]
    if fatal:  # a fatal signal (its stack says so) is a cause: its peers then fail on their connection to it,
        rank = fatal[0]  # in whatever words their backend has for it
    elif own:  # the first to fail of its own: a rank whose peer died fails on its connection a moment later
        rank = min(own, key=lambda r: _written_ns(scratch / f"result-{r}.json"))
    elif crashed:  # died without a word (a signal, os._exit): the ranks that lost it are not the cause
        rank = seen["first_rank"] if seen.get("first_rank") in crashed else crashed[0]
    else:
        rank = min(said, key=lambda r: _written_ns(scratch / f"result-{r}.json"))
    if ranks[rank].status == "error":
        outcome.status, outcome.result = "error", dict(ranks[rank].result)
    else:
        code = seen.get("failed", {}).get(str(rank))
        outcome.status = "crash"
        outcome.result = {"kind": "crash", "message": died[rank] or (
            _crash_message(code) if isinstance(code, int) and code < 0 else
            "the process died before reporting a result (killed by a signal, out of memory, or os._exit "
            "in the lab file?)")}
    outcome.result["rank"] = rank
    outcome.result["message"] = f"rank {rank} of {len(ranks)}: {outcome.result.get('message', '')}"


def _written_ns(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return 0


# What a result file must hold, by key: the runner writes it, but from inside the learner's process.
RESULT_SHAPE = {"status": str, "window_s": (int, float), "device": str, "results": list, "steps_done": int,
                "trace": (str, type(None)), "torch": str, "threads": int}


def _read_result(path: Path, returncode: int | None) -> dict[str, Any]:
    """The run's result file, read as a file the learner's process could have replaced: a regular file
    (no link, no pipe), at most RESULT_MAX_BYTES, JSON of the runner's shape; otherwise why not."""
    def bad(message: str, kind: str = "crash") -> dict[str, Any]:
        return {"status": "error", "kind": kind, "message": message}

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return bad(_crash_message(returncode), "missing_result")
    except OSError:
        return bad("its result file is not a file the runner wrote")
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return bad("its result file is not a file the runner wrote")
        raw = f.read(RESULT_MAX_BYTES + 1)
    if len(raw) > RESULT_MAX_BYTES:
        return bad(f"its steps yielded more than the {RESULT_MAX_BYTES / 1e6:.0f} MB of values the checker "
                   "compares: yield what the original yields", "too_much")
    try:
        result = json.loads(raw)
    except (ValueError, RecursionError):
        return bad("its result file is not valid JSON")
    if not isinstance(result, dict) or not isinstance(result.get("status"), str):
        return bad("its result file is not a result")
    if result["status"] == "ok":
        wrong = [key for key, kind in RESULT_SHAPE.items()
                 if not isinstance(result.get(key), kind) or (isinstance(result.get(key), bool) and kind is not str)]
        if wrong:
            return bad(f"its result file is not the runner's (wrong or missing: {', '.join(wrong)})")
    elif not all(isinstance(result.get(k, ""), str) for k in ("message", "kind", "traceback", "code", "file")):
        return bad("its result file is not a result")
    return result


def _likely_device(device: str) -> str:
    """The device a run asked for with ``device`` will use, as far as the checker can tell without torch."""
    if device != "auto":
        return device
    return "cuda" if memory._nvml() is not None or shutil.which("nvidia-smi") else "cpu"


def _take_trace(outcome: Outcome, trace_dir: str | None) -> None:
    """The trace as the profiler wrote it (its fingerprint sent at once), then prepared for TensorBoard here.

    Preparing it (``traces.fix_for_plugin``) happens in this process, so no code
    of the lab file's touches the trace between the check of its fingerprint
    and the evidence read from it; the fingerprint of the prepared file is
    kept for the checker to compare once more when it reads the evidence.
    """
    import gzip
    import hashlib

    from ..measuring import evidence
    from ..measuring.traces import fix_for_plugin, parse

    path = Path(outcome.result["trace"])
    raw = None
    inside = trace_dir is not None and path.parent.resolve() == Path(trace_dir).resolve()
    if inside and not path.is_symlink() and path.is_file():  # only a file in the run's own trace folder
        try:
            raw = path.read_bytes()
        except OSError:
            pass
    if raw is None or hashlib.sha256(raw).hexdigest() != outcome.result.get("trace_sha256"):
        outcome.status = "error"
        outcome.result = {"kind": "trace", "message": "its trace was changed (or removed) after the profiler "
                          "wrote it, before the checker could read it"}
        return
    outcome.result["trace_bytes"] = len(raw)  # as the profiler wrote it: what its writing took time for
    try:  # read once: prepared for TensorBoard, then kept for the evidence
        data = parse(gzip.decompress(raw) if path.suffix == ".gz" else raw)
    except (OSError, ValueError, EOFError, RecursionError):
        return  # not a trace: the checker says so when it reads the evidence
    fix_for_plugin(path, data)
    outcome.result["trace_sha256"] = labs.sha256(path)  # a trace of tens of MB: a few tens of ms
    try:
        outcome.trace = evidence.from_data(path, data)
    except evidence.TraceError:
        pass  # the checker reads it again, and says what is wrong with it


NO_STEPS = "no steps"  # a trace without ProfilerStep# events: profiled without a schedule


def _take_learner_trace(outcome: Outcome, folder: Path) -> None:
    """Lab 0: the trace the file's own profiler wrote into ``folder``, read once its run has ended.

    A trace is a ``*.pt.trace.json[.gz]`` file (``tensorboard_trace_handler``'s), or where there is none,
    a file of any other name ending in ``.json`` or ``.json.gz`` (``export_chrome_trace``'s).
    ``result["trace"]`` is the one trace found (None when there is none, or
    several: ``traces_found`` says how many), prepared for TensorBoard here;
    ``outcome.trace`` is it, parsed, or ``result["trace_error"]`` says why not.
    """
    import gzip

    from ..measuring import evidence
    from ..measuring.traces import fix_for_plugin, parse

    files = sorted(p for p in folder.iterdir() if p.is_file() and not p.is_symlink()) if folder.is_dir() else []
    # tensorboard_trace_handler's traces (<worker>.<time>.pt.trace.json[.gz]); else a trace written under any
    # name ending in .json or .json.gz (prof.export_chrome_trace(".../trace.json")).
    found = [p for p in files if ".pt.trace.json" in p.name and not p.name.endswith(".tmp")] or \
        [p for p in files if p.name.endswith((".json", ".json.gz"))]
    outcome.result["traces_found"] = len(found)
    if not found:  # what it wrote instead, named in the check's verdict
        outcome.result["trace_dir_files"] = [p.name for p in files[:5]]
    outcome.result["trace"] = str(found[0]) if len(found) == 1 else None
    if len(found) != 1:
        return
    path = found[0]
    outcome.result["trace_mb"] = path.stat().st_size / 1e6
    try:
        raw = path.read_bytes()
        data = parse(gzip.decompress(raw) if path.suffix == ".gz" else raw)
        if not isinstance(data, dict):
            raise ValueError("not a trace")
        outcome.result["trace_written_as"] = str(data.get("traceName", ""))
        outcome.result["trace_base_ns"] = data.get("baseTimeNanoseconds")
        fix_for_plugin(path, data)
        outcome.trace = evidence.from_data(path, data)
    except evidence.TraceError:
        outcome.result["trace_error"] = NO_STEPS
    except (OSError, ValueError, RecursionError, KeyError, TypeError) as e:
        outcome.result["trace_error"] = str(e)[:300] or type(e).__name__
    outcome.result["trace_sha256"] = labs.sha256(path)


def _oom_kills() -> int | None:
    """How many processes the kernel has killed for want of memory since the machine started."""
    try:
        for line in Path("/proc/vmstat").read_text().splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


_oom_at_start: int | None = None  # _oom_kills() when the run in progress started


def _crash_message(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = ""
        if name == "SIGKILL":  # the kernel counts its out-of-memory kills: no guess either way
            now = _oom_kills()
            hint = (" (the system ran out of memory during the run and killed a process)"
                    if now is not None and _oom_at_start is not None and now > _oom_at_start else
                    " (by another process, such as one of the run's own: the system killed nothing for want of "
                    "memory during it)" if now is not None and _oom_at_start is not None else "")
        return f"the process was killed by {name}{hint}"
    return f"the process exited with code {code} before reporting a result (sys.exit or os._exit in the lab file?)"


def _bytes_under(folder: Path) -> int:
    """The bytes the files under ``folder`` take on disk."""
    total = 0
    for top, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(top, name)).st_blocks * 512
            except OSError:
                pass
    return total


def _scratch_dir_path() -> Path:
    return paths.state_dir() / "tmp"


def _scratch_dir() -> Path:
    """``.proflab/tmp``, made if missing; the first time in a process, what checkers that died left there
    (a SIGKILL gives them no time to clean up) is removed."""
    global _swept
    folder = _scratch_dir_path()
    folder.mkdir(parents=True, exist_ok=True)
    if not _swept:
        _swept = True
        paths.sweep_scratch(folder)
    return folder


_swept = False
