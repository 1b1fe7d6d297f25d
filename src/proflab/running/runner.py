"""What runs inside each fresh process: one lab file, driven step by step.

Each run is ``python -m proflab.running.runner SPEC.json``, or the same forked from
the kit's fork server (``forkserver``), which has imported torch already. This
module imports the lab file, calls its ``pipeline(cfg)`` generator, and pulls
one training step at a time from it:

    warm-up steps   start-up, caches, worker spawn
    timed steps     the profiler off, the device synchronised at both ends
    profiled steps  ``torch.profiler`` with a ``schedule``, written by
                    ``tensorboard_trace_handler`` (first run of a version only)

Every step is marked through a pipe, and the checker times the steps by its
own clock from those marks (see ``_marker``); this process reports only the
timed window's length, for the checker to cross-check.

Every value the pipeline yields is kept, so results are compared on the very
runs that were timed. The outcome, a success or a short diagnosis of what went
wrong and where, is written as JSON to the path the spec names; the learner's
own prints go to stdout/stderr and can never corrupt it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import time
import traceback
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ..labkit import handout
from .marking import background as _background, marker as _marker, preimport as _preimport
from .marking import thread_cpu_s as _thread_cpu_s, watch_compiling as _watch_compiling
from .spec import RunSpec

_clock = time.perf_counter  # bound before any learner code is imported
class _Failure(Exception):
    def __init__(self, kind: str, message: str, **where: Any):
        super().__init__(message)
        self.kind, self.message, self.where = kind, message, where


class _Short(Exception):
    pass


def _location(exc: BaseException, learner_file: Path) -> dict[str, Any]:
    """The innermost frame of the learner's file: that is where to look."""
    frames = traceback.extract_tb(exc.__traceback__)
    mine = [f for f in frames if Path(f.filename).resolve() == learner_file]
    frame = (mine or frames or [None])[-1]
    if frame is None:
        return {}
    return {"file": frame.filename, "line": frame.lineno, "code": (frame.line or "").strip(),
            "function": frame.name, "in_learner_file": bool(mine)}


class TraceFolder(str):
    """``cfg.trace_dir``: the folder's path as a string (what ``tensorboard_trace_handler`` and
    ``export_chrome_trace`` take), which also joins with ``/`` as a ``Path`` does:
    ``prof.export_chrome_trace(cfg.trace_dir / "trace.json")`` writes where the kit reads."""

    def __truediv__(self, other) -> "TraceFolder":
        return TraceFolder(os.path.join(self, os.fspath(other)))


def _end_refused(spec: RunSpec, path: Path):
    """What ends a run whose batch was refused on a thread of its own (``labkit.handout``): its result
    written at once, where in the lab file it asked, and the process gone; the step waiting on that
    thread would otherwise wait out the run's time limit, and the reason be lost."""
    import threading

    def end(error: Exception) -> None:
        from ..atomic import write_json

        frames = traceback.extract_stack()[:-2]  # not this function, nor the lab kit's
        mine = [f for f in frames if Path(f.filename).resolve() == path]
        frame = (mine or frames)[-1]
        write_json(spec.result_path, {
            "status": "error", "kind": "exception",
            "message": f"in its thread {threading.current_thread().name!r}: {_describe(error)}",
            "file": frame.filename, "line": frame.lineno, "code": (frame.line or "").strip(),
            "function": frame.name, "in_learner_file": bool(mine)})
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return end


def _describe(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return text if len(text) <= 400 else text[:400] + " …"


def _import(path: Path, shown_as: str | None = None):
    """The lab file at ``path`` (the checker's snapshot of it), as a module whose ``__file__`` is
    ``shown_as``, the learner's own file, so paths built from ``__file__`` lead where they expect."""
    from importlib.machinery import SourceFileLoader

    name = "proflab_lab_under_test"
    spec = importlib.util.spec_from_file_location(name, shown_as or path, loader=SourceFileLoader(name, str(path)))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:
        raise _Failure("syntax", f"SyntaxError: {e.msg}", file=e.filename or str(path),
                       line=e.lineno, code=(e.text or "").strip(), in_learner_file=True) from None
    except BaseException as e:  # noqa: BLE001 - anything the learner's import does
        if isinstance(e, KeyboardInterrupt):
            raise
        raise _Failure("import", _describe(e), traceback=traceback.format_exc(),
                       **_location(e, path)) from None
    return module


def _keep(out: Any, step: int, torch) -> dict[str, Any]:
    """Hold on to one step's yielded values (device tensors stay on the device)."""
    if isinstance(out, torch.Tensor):
        out = {"value": out}
    if not isinstance(out, dict):
        raise _Failure("bad_yield", f"step {step} yielded a {type(out).__name__}; "
                       "pipeline(cfg) must yield a dict of tensors or numbers once per step")
    kept = {}
    for key, value in out.items():
        if isinstance(value, torch.Tensor):
            if type(value) not in (torch.Tensor, torch.nn.Parameter):  # whose detach() and clone() are its own
                raise _Failure("bad_yield", f"step {step} yielded '{key}' as a {type(value).__name__}, a subclass "
                               "of torch.Tensor; yield plain tensors (torch.Tensor)")
            kept[key] = torch.Tensor.clone(torch.Tensor.detach(value))
        elif isinstance(value, (int, float, bool)):
            kept[key] = value
        else:
            raise _Failure("bad_yield", f"step {step} yielded '{key}' as a {type(value).__name__}; "
                           "yield tensors or numbers")
    return kept


def _encode(kept: list[dict[str, Any]], torch) -> list[dict[str, Any]]:
    encoded = []
    for step in kept:
        row = {}
        for key, value in step.items():
            if isinstance(value, torch.Tensor):
                cpu = value.cpu()
                row[key] = {"shape": list(cpu.shape), "dtype": str(cpu.dtype).replace("torch.", ""),
                            "data": cpu.reshape(-1).tolist()}
            else:
                row[key] = {"shape": [], "dtype": type(value).__name__, "data": [value]}
        encoded.append(row)
    return encoded


def _sort_key(device_type: str, averages, by_memory: bool = False) -> str:
    """The column the printed table is sorted by: self time, or (profiled with profile_memory) self memory."""
    if device_type != "cuda":
        return "self_cpu_memory_usage" if by_memory else "self_cpu_time_total"
    wanted = ("self_device_memory_usage", "self_cuda_memory_usage") if by_memory else ()
    for key in (*wanted, "self_device_time_total", "self_cuda_time_total"):
        try:
            averages.table(sort_by=key, row_limit=1)
            return key
        except (AttributeError, KeyError, ValueError):
            continue
    return "self_cpu_time_total"


def _rank_device(device, torch):
    """A rank's device and the backend its process group should use: with a GPU for every rank of the
    job, rank LOCAL_RANK's GPU and nccl; otherwise gloo (NCCL refuses two ranks on one GPU)."""
    if device.type != "cuda":
        return device, "gloo"
    local, ranks = int(os.environ.get("LOCAL_RANK", "0")), int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    if torch.cuda.device_count() >= ranks:
        torch.cuda.set_device(local)
        return torch.device("cuda", local), "nccl"
    return torch.device("cuda", 0), "gloo"


def _joined(torch, nproc: int, path: Path) -> None:
    """After a rank's first step: it must have joined the job's process group, or it trained alone."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        raise _Failure("no_process_group", "the first step ended and this rank had not joined the job's "
                       "process group: call torch.distributed.init_process_group(cfg.backend) before "
                       "training, or each rank trains alone", file=str(path))
    if dist.get_world_size() != nproc:
        raise _Failure("no_process_group", f"this rank's process group has {dist.get_world_size()} ranks, "
                       f"the job {nproc}: call torch.distributed.init_process_group(cfg.backend) with "
                       "torchrun's settings (its defaults)", file=str(path))


def _resolve_device(requested: str, torch):
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if requested.startswith("cuda") and not torch.cuda.is_available():
        raise _Failure("device", "--device cuda was asked for, but torch.cuda.is_available() is False "
                       "on this machine. Use --device cpu (or auto).")
    return torch.device(requested)


def run(spec: RunSpec) -> dict[str, Any]:
    from .. import quiet

    quiet.silence_known_warnings()
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    if spec.threads:
        torch.set_num_threads(spec.threads)
    path = Path(spec.file).resolve()
    device = _resolve_device(spec.device, torch)
    backend = None
    if spec.nproc:  # a rank of a torchrun job: its own device where there is one per rank
        device, backend = _rank_device(device, torch)
    info = {"device": device.type, "torch": torch.__version__, "threads": torch.get_num_threads(),
            "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"}

    for folder in reversed(spec.sys_path):  # a gate's baseline at a revision: its project's modules
        sys.path.insert(0, folder)
    mark = _marker(spec.mark_fd, spec.pause_marks)
    if spec.compile_marks:
        _watch_compiling(mark)
    if spec.preimport:
        _preimport()
    from .. import labkit

    labkit.set_round(spec.seed)  # this round's inputs: the lab kit's weights are drawn from them
    if spec.handout:  # each step's batch comes from the checker as the step begins (labkit.handout)
        handout.set_channel(spec.mark_fd, refused=_end_refused(spec, path))
    mark(b"B")  # from here on, all is the lab file's: its import counts as part of its first step
    module = _import(path, spec.shown_as)
    pipeline = getattr(module, "pipeline", None)
    if not callable(pipeline):
        raise _Failure("missing", f"{path.name} defines no function pipeline(cfg); the checker calls "
                       "pipeline(cfg) and takes one training step per value it yields", file=str(path))

    cfg = SimpleNamespace(device=device, batch_size=spec.batch_size, seed=spec.seed,
                          data_dir=Path(spec.data_dir), **spec.params)
    if backend is not None:
        cfg.backend = backend
    if spec.learner_profiles:  # lab 0: the file profiles itself, into the folder the checker gives it
        cfg.trace_dir = TraceFolder(spec.trace_dir)
    if spec.cfg_steps is not None:  # lab 0: how many steps the loop is to take (its loader's length)
        cfg.steps = spec.cfg_steps
    answers = _answers(module) if spec.learner_profiles else None
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    warmup, timed, profiled = spec.warmup_steps, spec.timed_steps, spec.profile_steps
    kept: list[dict[str, Any]] = []
    trace = None
    table = None

    try:
        steps = pipeline(cfg)
    except Exception as e:  # noqa: BLE001
        raise _Failure("exception", _describe(e), step=0, traceback=traceback.format_exc(),
                       **_location(e, path)) from None
    if not hasattr(steps, "__next__"):
        raise _Failure("not_generator", "pipeline(cfg) must be a generator that yields once per "
                       f"training step, but it returned {type(steps).__name__}", file=str(path))
    iterator = steps

    def advance() -> None:
        step = len(kept)
        try:
            out = next(iterator)
        except StopIteration:
            raise _Short(step) from None
        except _Failure:
            raise
        except Exception as e:  # noqa: BLE001
            raise _Failure("exception", _describe(e), step=step, traceback=traceback.format_exc(),
                           **_location(e, path)) from None
        kept.append(_keep(out, step, torch))
        if step == 0 and spec.nproc:
            _joined(torch, spec.nproc, path)

    ticks: list[float] = []  # each timed step's end, by this process's clock
    try:
        for _ in range(warmup):
            advance()
            mark(b"W")
        if spec.profile_mode == "timed":  # the benchmark's overhead measurement
            with profile(activities=_activities(device, ProfilerActivity)) as prof:
                sync()  # the profiler's start-up is not part of what it costs per step
                start = _clock()
                mark(b"S")
                for _ in range(timed):
                    advance()
                    prof.step()
                    ticks.append(_clock())
                    mark(b"T")
                sync()
                end = _clock()
                mark(b"E")
        else:
            sync()
            threads_before = _thread_cpu_s()
            start = _clock()
            mark(b"S")
            for _ in range(timed):
                advance()
                ticks.append(_clock())
                mark(b"T")
            sync()
            end = _clock()
            mark(b"E")
            if spec.learner_profiles:  # what follows its last step (its table), after the timed window
                _drain(iterator, len(kept), path)
            beside = None if spec.background_threads else \
                _background(threads_before, end - start, spec.background_workers)
            if beside:
                raise _Failure("background", f"work went on beside the timed steps: {beside}", file=str(path))

        trace_dir = None if spec.learner_profiles else spec.trace_dir
        if trace_dir and profiled >= 2:
            prof = profile(
                activities=_activities(device, ProfilerActivity),
                schedule=schedule(wait=0, warmup=1, active=profiled - 1, repeat=1),
                on_trace_ready=tensorboard_trace_handler(trace_dir, worker_name=spec.worker_name),
                record_shapes=spec.record_shapes,
                profile_memory=spec.profile_memory,
                with_stack=spec.with_stack,
                **_all_threads(spec.all_threads),
            )
            prof.start()
            for i in range(profiled):
                mark(b"P")
                advance()  # the step alone: prof.step() may write the trace, which is not the step's work
                mark(b"Q", last=i == profiled - 1)
                prof.step()
            prof.stop()
            sync()
            written = sorted(Path(trace_dir).glob(f"{spec.worker_name}.*.pt.trace.json*"),
                             key=lambda p: p.stat().st_mtime)
            trace = str(written[-1]) if written else None
            if trace:
                # Before any more of the lab file runs (its generator's finally, below): the
                # checker then knows the trace as the profiler wrote it, and prepares it for
                # TensorBoard itself, outside this process.
                mark(b"H" + hashlib.sha256(Path(trace).read_bytes()).hexdigest().encode())
            if spec.table:
                averages = prof.key_averages()
                key = _sort_key(device.type, averages, spec.profile_memory)
                table = {"sort_by": key, "text": averages.table(sort_by=key, row_limit=spec.row_limit)}
        else:
            for i in range(profiled):
                mark(b"P")
                advance()
                mark(b"Q", last=i == profiled - 1)
        sync()
    except _Short as short:
        expected = warmup + timed + profiled
        raise _Failure("short", f"pipeline(cfg) stopped after {short.args[0]} steps; the checker needs "
                       f"{expected} steps of batch size {spec.batch_size}", file=str(path),
                       steps_done=short.args[0]) from None
    finally:
        close = getattr(steps, "close", None)
        if close is not None:
            try:
                close()
            except Exception:  # noqa: BLE001 - shutting down is best effort
                pass

    # Only the timed window's length and its steps', by this process's clock, are reported: the checker
    # compares them with its own stamps, from which it takes every timing (marks._from_outside).
    if device.type == "cuda":  # a floor for the device's peak only: the checker reads it from the driver too
        info["device_reserved_mb"] = torch.cuda.max_memory_reserved(device) / 2**20
    return {"status": "ok", **info, "steps_done": len(kept), "window_s": end - start,
            "step_s": [b - a for a, b in zip([start, *ticks], ticks)],
            "results": _encode(kept, torch), "trace": trace, "table": table,
            **({"answers": answers} if answers is not None else {})}


def _drain(iterator, done: int, path: Path) -> None:
    """Run the rest of the pipeline after its last step: it must end there, without another step."""
    try:
        next(iterator)
    except StopIteration:
        return
    except Exception as e:  # noqa: BLE001
        raise _Failure("exception", _describe(e), step=done, traceback=traceback.format_exc(),
                       **_location(e, path)) from None
    raise _Failure("bad_yield", f"pipeline(cfg) yielded more than the {done} steps of cfg.steps; take "
                   "one training step per batch of the loader, and stop there", file=str(path))


def _answers(module) -> dict[str, Any]:
    """The file's ANSWERS: names to strings or numbers (anything else is left out, and said so)."""
    given = getattr(module, "ANSWERS", None)
    if not isinstance(given, dict):
        return {}
    return {str(k): v for k, v in given.items()
            if isinstance(v, (str, int, float)) and not isinstance(v, bool) and len(str(v)) < 200}


def _all_threads(wanted: bool) -> dict[str, Any]:
    """Record operators on every thread, not only the one that started the profiler (torch 2.6+)."""
    if not wanted:
        return {}
    try:
        from torch._C._profiler import _ExperimentalConfig

        return {"experimental_config": _ExperimentalConfig(profile_all_threads=True)}
    except (ImportError, TypeError):
        return {}


def _activities(device, ProfilerActivity):
    acts = [ProfilerActivity.CPU]
    if device.type == "cuda":
        acts.append(ProfilerActivity.CUDA)
    return acts


def _for_rank(spec: RunSpec, rank: int) -> RunSpec:
    """The spec of one rank: every ``{rank}`` in its paths and names filled in, and the marks written to
    that rank's FIFO (torchrun starts the ranks with only the standard descriptors)."""
    spec = spec.for_rank(rank)
    try:
        spec.mark_fd = os.open(spec.mark_fifo, os.O_WRONLY) if spec.mark_fifo else None
    except OSError:
        spec.mark_fd = None  # no marks: the checker fails the run
    return spec


def _launch(spec: RunSpec, spec_path: str) -> None:
    """Start the job's ranks with torchrun's launcher (``torchrun``), wait for them, and exit: 0 when
    every rank ran to its end, 1 when one failed (its result file says why, torchrun's summary which)."""
    from .. import quiet
    from . import torchrun

    quiet.silence_known_warnings()
    code = 0
    try:
        torchrun.launch(spec.nproc, rank_main, spec_path)
    except KeyboardInterrupt:
        code = 130
    except BaseException as e:  # noqa: BLE001 - a rank failed, and torchrun stopped the others
        code = 1
        torchrun.write_failures(e, spec.launch_path)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def rank_main(spec_path: str) -> int:
    """One rank of a torchrun job (RANK set by the launcher): the lab file run as a single run is,
    its result written to its own file. A failed rank raises SystemExit(1), so that torchrun stops
    the others at once instead of leaving them waiting for it in a collective."""
    from ..atomic import write_json

    from . import torchrun

    rank = int(os.environ.get("RANK", "0"))
    spec = _for_rank(RunSpec.read(spec_path), rank)
    _stack_on_request(spec)
    spec = torchrun.confine_rank(spec, rank)  # its files its own: no channel to the other ranks but the job's
    try:
        result = run(spec)
    except _Failure as f:
        result = {"status": "error", "kind": f.kind, "message": f.message, **f.where}
    write_json(spec.result_path, torchrun.hand_over(spec, result))
    torchrun.hand_over_result(spec)
    sys.stdout.flush()
    sys.stderr.flush()
    if result.get("status") != "ok":
        raise SystemExit(1)
    return 0


_stack_file = None  # kept open for faulthandler, which writes to its descriptor


def _stack_on_request(spec: RunSpec) -> None:
    """Let the checker know where a rank is: its PID in a file, and its Python stack written to another
    on SIGUSR1 (a job that runs out of time says where each rank was) and on a fatal signal (a rank
    that crashes says where)."""
    import faulthandler
    import signal

    global _stack_file
    try:
        _stack_file = open(spec.stack_path, "w")
        faulthandler.enable(file=_stack_file, all_threads=False)
        faulthandler.register(signal.SIGUSR1, file=_stack_file, all_threads=False)
        Path(spec.pid_path).write_text(str(os.getpid()))
    except (KeyError, OSError, ValueError, AttributeError):
        pass


def main(argv: list[str]) -> int:
    from ..atomic import write_json

    spec = RunSpec.read(argv[0])
    if spec.nproc:  # the first process of a torchrun job: the launcher, whose ranks run the file
        _launch(spec, argv[0])
    try:
        result = run(spec)
    except _Failure as f:
        result = {"status": "error", "kind": f.kind, "message": f.message, **f.where}
    except KeyboardInterrupt:
        return 130
    write_json(spec.result_path, result)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # no waiting on threads the lab file may have left behind


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
