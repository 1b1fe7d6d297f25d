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

import os
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

from .. import errors, labs, paths, quiet
from . import compile_headers, forkserver, launch, memory, sandbox, storage
from . import outcome as outcome_
from .launch import Launch
from .outcome import OUTPUT_TAIL_CHARS, Outcome
from .spec import RunSpec

# Runs are forked from a server that has imported torch once (``forkserver``); False: each run is a
# fresh ``python -m proflab.running.runner`` (as it is anyway where the server cannot be used).
FORK = True


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
    spec = RunSpec(
        file=str(file.resolve()),
        result_path=str(result_path),
        shown_as=str(shown_as.resolve()) if shown_as else None,
        device=device,
        batch_size=w.batch_size,
        seed=w.seed if seed is None else seed,
        threads=w.threads,
        data_dir=w.data_dir or str(paths.data_dir()),
        params=dict(w.params),
        warmup_steps=w.warmup_steps,
        timed_steps=w.timed_steps,
        profile_steps=w.profile_steps,
        trace_dir=str(trace_dir) if trace_dir else None,
        worker_name=version,
        table=table,
        # A lab graded on memory: the checker's profile records every allocation, for the evidence.
        profile_memory=bool(profile_memory or (checking and lab.leaner)),
        with_stack=with_stack,
        profile_mode=profile_mode,
        background_workers=w.background_workers,
        background_threads=w.background_threads,
        # The checker's own figures need the shapes (the work floor) and every thread (reads done elsewhere).
        record_shapes=record_shapes or checking,
        # (With every thread profiled, torch 2.14 records no [memory] events at all: a lab graded on
        # memory profiles the main thread only; its audit allows no threads of the learner's.)
        all_threads=checking and not lab.leaner,
        compile_marks=_mentions(file, "compile"),
        # Where the time compiling takes is left out ([timing] compile), each step's inputs are handed out as
        # the step begins (``labkit.handout``), so that no work on a later step can be done while compiling:
        # in a lab whose data is the kit's, whose data class reads the draws (not a gate's own project)
        handout=bool(checking and lab.compile_credit and lab.kind != "job" and lab.data),
        # Lab 0: the file profiles itself, into trace_dir; the kit's profiler stays off.
        learner_profiles=lab.kind == "own_profile",
        preimport=_mentions(file, "compile", "optim"),
        sys_path=list(sys_path or []),
    )
    spec = replace(spec, **(steps or {}))
    if lab.kind == "own_profile":  # lab 0's loop takes cfg.steps steps: the timed ones, and any the kit profiles
        spec.cfg_steps = spec.total_steps
    if lab.kind == "job":  # a torchrun job: each rank fills in its number (RunSpec.for_rank)
        spec = replace(spec, nproc=lab.distributed.nproc, mark_fifo=str(scratch / "marks-{rank}"),
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
        outcome = launch.run_in(Launch(
            scratch, spec, file, version, env, limit=timeout_s if timeout_s is not None else w.timeout_s,
            memory_mb=w.memory_mb, background_allowed=w.background_workers, workdir=workdir,
            output_chars=output_chars, server=server, box=box,
            # the run stops itself at the marks its CPU time is read at, where that time is the lab's figure
            cpu_figure=lab.figure(_likely_device(device)) == "cpu_time",
            # whether the time compiling takes is left out at all ([timing] compile): elsewhere it is work
            compile_credit=lab.compile_credit,
            # A lab graded on memory: its peak, sampled from here
            watch=memory.Watch() if lab.leaner else None,
            reads=service.reads_between if service is not None else None))
        outcome.steps_asked = spec.total_steps
        outcome.sandboxed = box is not None
        if service is not None:
            service.close()
            _check_storage(outcome, service.reads, w.batch_size)
        if box is not None and wanted_trace_dir is not None:
            outcome_.move_traces(outcome, wanted_trace_dir)
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


def _likely_device(device: str) -> str:
    """The device a run asked for with ``device`` will use, as far as the checker can tell without torch."""
    if device != "auto":
        return device
    return "cuda" if memory._nvml() is not None or shutil.which("nvidia-smi") else "cpu"


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
