"""Any training script, profiled without editing it: what ``proflab profile`` runs in the script's process.

    python -m proflab.running.own_script --out DIR --steps 5:8 --summary DIR [--memory] [--shapes]
        [--stack] [--steps-by auto|optimizer|forward] -- SCRIPT.py [ARGS...]

The script runs as ``python SCRIPT.py ARGS`` would run it: as ``__main__``,
with its own ``sys.argv``, its folder first on ``sys.path``, in the working
folder it was started from. Around it:

* **Steps, found without the script's help.** A step ends where the script's
  optimizer steps: torch calls every optimizer's step hooks
  (``register_optimizer_step_post_hook``), whatever the optimizer; with
  several optimizers (a GAN's two), the first one to step sets the pace. A
  script that makes no optimizer step by its ``start``-th call of its model (an
  inference or evaluation script) is paced by the model's calls instead: each
  top-level call of the first ``nn.Module`` it calls ends a step (global
  forward hooks). ``--steps-by`` chooses one of the two outright.
* **A window of steps** (``--steps A:B``: steps A to B-1, counted from 0) is
  profiled by ``torch.profiler`` with a schedule (the step before A warms the
  profiler up) and written by ``tensorboard_trace_handler`` under ``--out``; a
  torchrun job's ranks write one file each (worker ``rank0``, ``rank1``…). A
  script that ends inside the window leaves the steps it ran, and only them.
* **What the parent reads** goes to ``--summary`` (a folder: JSON, ``rank0.json``, one file per rank):
  each step's beginning and end by the clock (the profiler's own moves between
  steps left out), the window, what set the pace, the trace, and
  ``key_averages()`` as a table. The profiler's cost is read from it: the
  profiled steps' time against the steps around them.

This module runs inside the script's own process: it imports torch and the
standard library only, and nothing of the kit.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import runpy
import socket
import sys
import time
import traceback
import types
from pathlib import Path

TABLE_ROWS = 15


class Pace:
    """What ends a step, and each step's end by the clock."""

    def __init__(self, by: str, start: int, on_step) -> None:
        self.by = by  # "auto", "optimizer" or "forward"; what was chosen is ``source``
        self.start = start
        self.on_step = on_step
        self.source: str | None = None
        self.what = ""  # the optimizer's or the module's class, for the report
        self.ends: list[float] = []
        self.begins: list[float] = []  # after each end, once the profiler moved on: step i is begins[i-1]..ends[i]
        self._owner: int | None = None
        self._module: int | None = None
        self._depth = 0
        self._pending: list[float] = []  # the model's calls, before what sets the pace is known
        self._handles: list = []
        self._inside = 0  # calls of the wrapped optimizer.step() under way
        self._deferred = False  # a step that ended inside one of them

    def install(self) -> None:
        from torch.nn.modules import module
        from torch.optim import optimizer

        if self.by in ("auto", "optimizer"):
            self._handles.append(optimizer.register_optimizer_step_post_hook(self._optimizer_stepped))
        if self.by in ("auto", "forward"):
            self._handles.append(module.register_module_forward_pre_hook(self._entering))
            self._handles.append(module.register_module_forward_hook(self._left))

    def remove(self) -> None:
        """At the script's end: the hooks go; a script that ended before its model's calls were known to set
        the pace (fewer calls than the window's first step, no optimizer step) was paced by them."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        if self.source is None and self._pending:
            self.source = "forward"
            self.ends.extend(self._pending)
            self.begins.extend(self._pending)

    def _end_step(self) -> None:
        self.ends.append(time.perf_counter())
        self.on_step()
        self.begins.append(time.perf_counter())  # the next step begins once the profiler's own step is done

    def _optimizer_stepped(self, opt, args, kwargs) -> None:
        if self.source == "forward":
            return
        if self.source is None:  # the first optimizer step: the optimizer sets the pace from now on
            self.source, self.what, self._owner = "optimizer", type(opt).__name__, id(opt)
            if self.by == "auto":  # the model's calls are no longer needed: their hooks cost a call each
                for handle in self._handles[1:]:
                    handle.remove()
                del self._handles[1:]
            self._wrap(opt)
        if id(opt) != self._owner:
            return
        if self._inside:  # the step ends once optimizer.step() has returned: see _wrap
            self._deferred = True
        else:
            self._end_step()

    def _wrap(self, opt) -> None:
        """torch runs the step hooks inside the optimizer's own ``Optimizer.step#…`` range: a step ended
        there (the profiler moving on, and at the window's end writing the trace) would be drawn inside the
        optimizer's step, and that range across two steps. So the optimizer's ``step`` is wrapped, on this
        instance: the hook marks the step ended, and the wrapper ends it once ``step()`` has returned. A
        bound method, as an LR scheduler made later expects to find there; a call that reaches the class's
        step some other way is ended by the hook itself."""
        inner = opt.step
        pace = self

        @functools.wraps(inner)
        def step(_opt, *args, **kwargs):
            pace._inside += 1
            try:
                return inner(*args, **kwargs)
            finally:
                pace._inside -= 1
                if pace._deferred and not pace._inside:
                    pace._deferred = False
                    pace._end_step()

        opt.step = types.MethodType(step, opt)

    def _entering(self, mod, args) -> None:
        # the model: the first module called from outside any other that has weights of its own (a
        # transform of the data set, torchvision's Normalize, is a module too, and has none)
        if self._depth == 0 and self._module is None and next(mod.parameters(), None) is not None:
            self._module = id(mod)
            self.what = type(mod).__name__
        self._depth += 1

    def _left(self, mod, args, output) -> None:
        self._depth = max(0, self._depth - 1)
        if self._depth or id(mod) != self._module or self.source == "optimizer":
            return
        if self.source == "forward":
            self._end_step()
            return
        self._pending.append(time.perf_counter())
        if self.by == "forward" or len(self._pending) >= max(self.start, 1):
            self.source = "forward"  # no optimizer step yet: the model's calls set the pace
            if self.by == "auto":
                self._handles[0].remove()
                del self._handles[0]
            for k, end in enumerate(self._pending):  # the calls made before this was known were steps too
                self.ends.append(end)
                self.on_step()
                self.begins.append(end if k < len(self._pending) - 1 else time.perf_counter())
            self._pending.clear()


def _whole_steps_only(trace: Path, steps: int) -> None:
    """A window the script's end cut short: its last ``ProfilerStep#`` range began after the script's last
    step and ran to its end (what the script did after its loop). That range goes, so that the trace holds
    the steps the script ran and only them; the operators inside it stay, outside any step."""
    data = json.loads(trace.read_text())
    events = data.get("traceEvents", [])
    kept = [e for e in events if not (isinstance(e, dict) and str(e.get("name", "")).startswith("ProfilerStep#")
                                      and _number(e["name"]) >= steps)]
    if len(kept) != len(events):
        data["traceEvents"] = kept
        trace.write_text(json.dumps(data))


def _watch_own_profilers(ours, summary: dict) -> None:
    """Count the profilers the script starts itself (``torch.profiler.profile``, the older
    ``torch.autograd.profiler.profile``): one profiler records at a time, so a script's own leaves its table
    or the kit's window empty; ``own_profiler`` in the summary says how many it started."""
    import torch.autograd.profiler as legacy
    import torch.profiler as modern

    summary["own_profiler"] = 0

    def counted(cls, name: str) -> None:
        inner = getattr(cls, name, None)
        if inner is None:
            return

        @functools.wraps(inner)
        def wrapper(self, *args, **kwargs):
            if self is not ours:
                summary["own_profiler"] += 1
            return inner(self, *args, **kwargs)

        setattr(cls, name, wrapper)

    counted(modern.profile, "start")
    counted(legacy.profile, "__enter__")


def _number(name: str) -> int:
    try:
        return int(name.split("#", 1)[1])
    except (IndexError, ValueError):
        return -1


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="proflab.running.own_script")
    p.add_argument("--out", required=True)
    p.add_argument("--steps", required=True)
    p.add_argument("--summary", required=True)
    p.add_argument("--steps-by", default="auto", choices=("auto", "optimizer", "forward"))
    p.add_argument("--memory", action="store_true")
    p.add_argument("--shapes", action="store_true")
    p.add_argument("--stack", action="store_true")
    p.add_argument("script")
    p.add_argument("args", nargs=argparse.REMAINDER)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    opts = _parse(sys.argv[1:] if argv is None else argv)
    start, stop = (int(x) for x in opts.steps.split(":"))
    rank = os.environ.get("RANK")
    worker = f"rank{rank}" if rank is not None and os.environ.get("WORLD_SIZE", "1") != "1" else None

    import torch
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    summary: dict = {"rank": int(rank) if rank is not None else None, "window": [start, stop],
                     "trace": None, "table": "", "sort_by": None, "error": None}
    write_trace = tensorboard_trace_handler(opts.out, worker_name=worker)
    out = Path(opts.out)

    # tensorboard_trace_handler names its files after the worker: ours, among the other ranks' (being written
    # at the same moment, through a .tmp file of their own)
    mine = f"{worker or f'{socket.gethostname()}_{os.getpid()}'}."

    def trace_ready(prof) -> None:
        """The window's trace written, and its table: never an error raised into the script's step (a
        rank that stopped there would stop the whole job), only one said in the summary."""
        try:
            write_trace(prof)
            made = [p for p in out.glob(mine + "*.pt.trace.json*") if not p.name.endswith(".tmp")]
            summary["trace"] = str(max(made, key=lambda p: p.stat().st_mtime)) if made else None
            averages = prof.key_averages(group_by_input_shape=opts.shapes)  # with shapes: a row per shape
            # on CUDA the device's time ranks the operators (torch names the column self_device_time_total,
            # and self_cuda_time_total before 2.4)
            for key in (("self_device_time_total", "self_cuda_time_total") if torch.cuda.is_available()
                        else ()) + ("self_cpu_time_total",):
                try:
                    summary["table"] = averages.table(sort_by=key, row_limit=TABLE_ROWS)
                except (AttributeError, KeyError, ValueError):
                    continue
                summary["sort_by"] = key
                break
        except Exception as e:  # a full disk, a folder taken away
            summary["trace_error"] = f"{type(e).__name__}: {e}"

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    warmup = 1 if start >= 1 else 0
    prof = profile(activities=activities,
                   schedule=schedule(wait=max(start - 1, 0), warmup=warmup, active=stop - start, repeat=1),
                   on_trace_ready=trace_ready, record_shapes=opts.shapes, profile_memory=opts.memory,
                   with_stack=opts.stack)
    state = {"stopped": False}
    _watch_own_profilers(prof, summary)

    def stepped() -> None:
        if state["stopped"]:
            return
        prof.step()
        if prof.step_num >= stop:  # the window is written: the rest of the script runs unprofiled
            state["stopped"] = True
            prof.stop()

    pace = Pace(opts.steps_by, start, stepped)
    script = Path(opts.script)
    sys.argv = [opts.script, *opts.args]
    sys.path.insert(0, str(script.resolve().parent))
    code = 0
    began = time.perf_counter()
    pace.install()
    prof.start()
    try:
        runpy.run_path(opts.script, run_name="__main__")
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
    except KeyboardInterrupt:
        code = 130
    except BaseException as e:  # the script's own error, shown as python shows it
        traceback.print_exc()
        summary["error"] = f"{type(e).__name__}: {e}"
        code = 1
    finally:
        pace.remove()
        if not state["stopped"]:
            state["stopped"] = True
            prof.stop()  # a window cut short by the script's end keeps the steps it ran
            if summary["trace"]:
                _whole_steps_only(Path(summary["trace"]), len(pace.ends))
        summary.update(began=began, ends=pace.ends, begins=pace.begins, source=pace.source, what=pace.what,
                       ended=time.perf_counter(), exit_code=code)
        Path(opts.summary, f"rank{rank or 0}.json").write_text(json.dumps(summary))
    return code


if __name__ == "__main__":
    sys.exit(main())
