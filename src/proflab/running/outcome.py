"""What a run leaves, as the checker reads it: its ``Outcome``, its result file and its traces.

Everything here reads what the learner's process wrote as a file it could have replaced: a result file must
be a regular file of the runner's shape, and a trace is fingerprinted and taken out of the run's folder
before anything else of the run is read. Why a process ended without a result is told from outside (the
kernel's count of its out-of-memory kills), never guessed.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import labs, quiet

OUTPUT_TAIL_CHARS = 4000

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


def tail(path: Path, keep: int = OUTPUT_TAIL_CHARS) -> str:
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(0, size - keep))
        text = f.read().decode("utf-8", errors="replace")
    text = quiet.clean(text)
    return ("…\n" + text) if size > keep else text



def move_traces(outcome: Outcome, folder: Path) -> None:
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



def written_ns(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return 0


# What a result file must hold, by key: the runner writes it, but from inside the learner's process.
RESULT_SHAPE = {"status": str, "window_s": (int, float), "device": str, "results": list, "steps_done": int,
                "trace": (str, type(None)), "torch": str, "threads": int}


def read_result(path: Path, returncode: int | None, oom_before: int | None = None) -> dict[str, Any]:
    """The run's result file, read as a file the learner's process could have replaced: a regular file
    (no link, no pipe), at most RESULT_MAX_BYTES, JSON of the runner's shape; otherwise why not."""
    def bad(message: str, kind: str = "crash") -> dict[str, Any]:
        return {"status": "error", "kind": kind, "message": message}

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return bad(crash_message(returncode, oom_before), "missing_result")
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



def take_trace(outcome: Outcome, trace_dir: str | None) -> None:
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


def take_learner_trace(outcome: Outcome, folder: Path) -> None:
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


def oom_kills() -> int | None:
    """How many processes the kernel has killed for want of memory since the machine started."""
    try:
        for line in Path("/proc/vmstat").read_text().splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def crash_message(code: int | None, oom_before: int | None = None) -> str:
    """Why the run's process ended without a result; ``oom_before``: the kernel's count of out-of-memory
    kills when the run started, to tell whether a SIGKILL was the system's."""
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = ""
        if name == "SIGKILL":  # the kernel counts its out-of-memory kills: no guess either way
            now = oom_kills()
            hint = (" (the system ran out of memory during the run and killed a process)"
                    if now is not None and oom_before is not None and now > oom_before else
                    " (by another process, such as one of the run's own: the system killed nothing for want of "
                    "memory during it)" if now is not None and oom_before is not None else "")
        return f"the process was killed by {name}{hint}"
    return f"the process exited with code {code} before reporting a result (sys.exit or os._exit in the lab file?)"


def bytes_under(folder: Path) -> int:
    """The bytes the files under ``folder`` take on disk."""
    total = 0
    for top, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(top, name)).st_blocks * 512
            except OSError:
                pass
    return total
