"""What runs inside each fresh subprocess: one lab file, driven step by step.

The kit starts ``python -m proflab.runner SPEC.json`` once per run. This
module imports the lab file, calls its ``pipeline(cfg)`` generator, and pulls
one training step at a time from it:

    warm-up steps   untimed (start-up, caches, worker spawn)
    timed steps     wall clock between yields, device synchronised at both ends
    profiled steps  ``torch.profiler`` with a ``schedule``, written by
                    ``tensorboard_trace_handler`` (first run of a version only)

Every value the pipeline yields is kept, so results are compared on the very
runs that were timed. The outcome, a success or a short diagnosis of what went
wrong and where, is written as JSON to the path the spec names; the learner's
own prints go to stdout/stderr and can never corrupt it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
import traceback
from pathlib import Path
from types import SimpleNamespace
from typing import Any

_clock = time.perf_counter  # bound before any learner code is imported
_write = os.write


def _marker(fd: int | None):
    """Tell the checker, through a pipe, that the timed window starts (b"S") or ends (b"E").

    The checker stamps each mark with its own clock, in its own process, so a
    lab file that patches the clock in this process cannot shorten the window.
    """
    def mark(code: bytes) -> None:
        if fd is not None:
            try:
                _write(fd, code)
            except OSError:
                pass
    return mark


def _thread_cpu_s() -> dict[int, tuple[str, float]]:
    """CPU seconds used so far by each Python thread but this one (Linux: /proc; elsewhere: empty)."""
    import threading

    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    used = {}
    for thread in threading.enumerate():
        if thread is threading.current_thread() or not thread.native_id:
            continue
        try:
            fields = Path(f"/proc/self/task/{thread.native_id}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        used[thread.native_id] = (thread.name, (int(fields[11]) + int(fields[12])) / tick)
    return used


def _background(before: dict[int, tuple[str, float]], window_s: float, workers_allowed: bool) -> str | None:
    """Work done beside the timed steps: a Python thread busy during them, or a multiprocessing child.

    Idle threads a library leaves behind (torch.compile's pool) do not count;
    a thread that used more than a tenth of the window's time (and 30 ms) does,
    except the DataLoader's pin-memory thread. Worker processes count unless
    the lab allows them (lab 1's fix is DataLoader workers).
    """
    import multiprocessing

    for native_id, (name, cpu) in _thread_cpu_s().items():
        busy = cpu - before.get(native_id, (name, 0.0))[1]
        if busy > max(0.03, 0.1 * window_s) and "pin_memory" not in name:
            return f"thread '{name}' used {busy * 1000:.0f} ms of CPU during the {window_s * 1000:.0f} ms of timed steps"
    children = [] if workers_allowed else multiprocessing.active_children()
    if children:
        return f"process '{children[0].name}' (pid {children[0].pid}) was running during the timed steps"
    return None


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


def _describe(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return text if len(text) <= 400 else text[:400] + " …"


def _import(path: Path):
    spec = importlib.util.spec_from_file_location("proflab_lab_under_test", path)
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
            kept[key] = value.detach().clone()
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


def _sort_key(device_type: str, averages) -> str:
    if device_type != "cuda":
        return "self_cpu_time_total"
    for key in ("self_device_time_total", "self_cuda_time_total"):
        try:
            averages.table(sort_by=key, row_limit=1)
            return key
        except (AttributeError, KeyError, ValueError):
            continue
    return "self_cpu_time_total"


def _resolve_device(requested: str, torch):
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if requested.startswith("cuda") and not torch.cuda.is_available():
        raise _Failure("device", "--device cuda was asked for, but torch.cuda.is_available() is False "
                       "on this machine. Use --device cpu (or auto).")
    return torch.device(requested)


def run(spec: dict[str, Any]) -> dict[str, Any]:
    from . import quiet

    quiet.silence_known_warnings()
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    if spec.get("threads"):
        torch.set_num_threads(spec["threads"])
    path = Path(spec["file"]).resolve()
    device = _resolve_device(spec["device"], torch)
    info = {"device": device.type, "torch": torch.__version__, "threads": torch.get_num_threads(),
            "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"}

    module = _import(path)
    pipeline = getattr(module, "pipeline", None)
    if not callable(pipeline):
        raise _Failure("missing", f"{path.name} defines no function pipeline(cfg); the checker calls "
                       "pipeline(cfg) and takes one training step per value it yields", file=str(path))

    cfg = SimpleNamespace(device=device, batch_size=spec["batch_size"], seed=spec["seed"],
                          data_dir=Path(spec["data_dir"]), **spec.get("params", {}))
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    warmup, timed, profiled = spec["warmup_steps"], spec["timed_steps"], spec["profile_steps"]
    kept: list[dict[str, Any]] = []
    step_times: list[float] = []
    mark = _marker(spec.get("mark_fd"))
    profiled_s = 0.0
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

    try:
        for _ in range(warmup):
            advance()
        if spec.get("profile_mode") == "timed":  # the benchmark's overhead measurement
            with profile(activities=_activities(device, ProfilerActivity)) as prof:
                sync()  # the profiler's start-up is not part of what it costs per step
                start = last = _clock()
                for _ in range(timed):
                    advance()
                    prof.step()
                    now = _clock()
                    step_times.append(now - last)
                    last = now
                sync()
                end = _clock()
        else:
            sync()
            threads_before = _thread_cpu_s()
            start = last = _clock()
            mark(b"S")
            for _ in range(timed):
                advance()
                now = _clock()
                step_times.append(now - last)
                last = now
            sync()
            end = _clock()
            mark(b"E")
            beside = _background(threads_before, end - start, bool(spec.get("background_workers")))
            if beside:
                raise _Failure("background", f"work went on beside the timed steps: {beside}", file=str(path))

        trace_dir = spec.get("trace_dir")
        if trace_dir and profiled >= 2:
            prof = profile(
                activities=_activities(device, ProfilerActivity),
                schedule=schedule(wait=0, warmup=1, active=profiled - 1, repeat=1),
                on_trace_ready=tensorboard_trace_handler(trace_dir, worker_name=spec["worker_name"]),
                record_shapes=spec.get("record_shapes", False),
                profile_memory=spec.get("profile_memory", False),
                with_stack=spec.get("with_stack", False),
            )
            prof.start()
            for _ in range(profiled):
                before = _clock()
                advance()  # the step alone: prof.step() may write the trace, which is not the step's work
                profiled_s += _clock() - before
                prof.step()
            prof.stop()
            sync()
            written = sorted(Path(trace_dir).glob(f"{spec['worker_name']}.*.pt.trace.json*"),
                             key=lambda p: p.stat().st_mtime)
            trace = str(written[-1]) if written else None
            if trace:
                from .traces import fix_for_plugin

                fix_for_plugin(trace)
            if spec.get("table"):
                averages = prof.key_averages()
                key = _sort_key(device.type, averages)
                table = {"sort_by": key, "text": averages.table(sort_by=key, row_limit=spec.get("row_limit", 15))}
        else:
            for _ in range(profiled):
                before = _clock()
                advance()
                profiled_s += _clock() - before
        sync()
    except _Short as short:
        expected = warmup + timed + profiled
        raise _Failure("short", f"pipeline(cfg) stopped after {short.args[0]} steps; the checker needs "
                       f"{expected} steps of batch size {spec['batch_size']}", file=str(path),
                       steps_done=short.args[0]) from None
    finally:
        close = getattr(steps, "close", None)
        if close is not None:
            try:
                close()
            except Exception:  # noqa: BLE001 - shutting down is best effort
                pass

    return {"status": "ok", **info, "steps_done": len(kept), "step_times": step_times,
            "window_s": end - start, "mean_step_s": (end - start) / max(timed, 1),
            "profiled_step_s": profiled_s / max(profiled, 1),
            "results": _encode(kept, torch), "trace": trace, "table": table}


def _activities(device, ProfilerActivity):
    acts = [ProfilerActivity.CPU]
    if device.type == "cuda":
        acts.append(ProfilerActivity.CUDA)
    return acts


def main(argv: list[str]) -> int:
    from .atomic import write_json

    spec = json.loads(Path(argv[0]).read_text())
    try:
        result = run(spec)
    except _Failure as f:
        result = {"status": "error", "kind": f.kind, "message": f.message, **f.where}
    except KeyboardInterrupt:
        return 130
    write_json(spec["result_path"], result)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # no waiting on threads the lab file may have left behind


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
