"""Traces as the kit's tabs read them: parsed once, and cut to a window of steps when they are large.

A trace of a model profiled for thousands of steps runs to hundreds of MB (228 MB for 4,800 steps):
parsed whole for every view, it kept the server busy for minutes and held gigabytes. So each trace
is read once (one at a time: two parses of one large file at once would hold it twice), its first
``WINDOW_STEPS`` profiled steps kept with the events inside them, and the rest let go; every view (the
Profile tab's, the Trace timeline's) reads that window, and says so. A trace of the kit's own checks
holds a few steps and is kept whole.

A large file with no more steps than the window (lab 2's original: 62,000 events in 3 steps, 26 MB)
needs no cutting: ``fits_window`` tells so from its bytes, without parsing it, and the Trace timeline
sends such a file as it is (parsing it in the server took 1 to 7 s, while TensorBoard's own plugins
loaded the same runs).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..measuring import evidence

WINDOW_STEPS = 10
CACHED = 3  # traces kept parsed (their windows), newest first
# What the page says of a trace before reading it: beyond this size, how long the first view takes, at the
# rate the kit parses and cuts a trace (measured on the 2-core machine with a 200 MB trace: tests/
# test_tensorboard_faults.py, test_a_200_mb_trace_answers_every_view_within_its_budget).
LARGE_BYTES = 20 * 2**20
MB_PER_S = 25.0


@dataclass
class Loaded:
    raw: dict[str, Any]  # the window: metadata events, and every event inside the steps kept
    steps: int  # profiled steps in the file
    shown: int  # of them, in the window
    size: int  # bytes on disk
    _trace: evidence.Trace | None = field(default=None, repr=False)
    _body: bytes | None = field(default=None, repr=False)

    def trace(self, path: Path) -> evidence.Trace:
        if self._trace is None:
            self._trace = evidence.from_data(path, self.raw)
        return self._trace

    def body(self) -> bytes:
        """The window as JSON, for the trace viewer."""
        if self._body is None:
            from ..measuring.traces import dumps

            self._body = dumps(self.raw).encode("utf-8")
        return self._body

    @property
    def window(self) -> dict[str, int] | None:
        return {"shown": self.shown, "of": self.steps} if self.shown < self.steps else None


_cache: OrderedDict[tuple[str, float, int], Loaded] = OrderedDict()
_counted: OrderedDict[tuple[str, float, int], int] = OrderedDict()  # fits_window's counts, newest last
_cache_lock = threading.Lock()
_loading = threading.Lock()


def load(path: Path) -> Loaded:
    """The trace at ``path``, parsed once and windowed; raises TraceError for one that cannot be read."""
    st = path.stat()
    key = (str(path), st.st_mtime, st.st_size)
    with _cache_lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    with _loading:
        with _cache_lock:
            if key in _cache:  # loaded by the request this one waited for
                return _cache[key]
        loaded = _read(path, st.st_size)
        with _cache_lock:
            _cache[key] = loaded
            while len(_cache) > CACHED:
                _cache.popitem(last=False)
        return loaded


def _read(path: Path, size: int) -> Loaded:
    import zlib

    from ..measuring.traces import read

    try:
        raw = read(path)
    except (OSError, ValueError, EOFError, zlib.error) as e:
        raise evidence.TraceError(f"cannot read trace {path.name}: {e}") from None
    listed = raw.get("traceEvents") if isinstance(raw, dict) else None
    if not isinstance(listed, list):
        raise evidence.TraceError(f"{path.name} is not a profiler trace: its JSON is not an object with a list "
                                  "of traceEvents")
    marks = sorted((e for e in listed if _is_step(e)), key=lambda e: float(e["ts"]))
    if len(marks) <= WINDOW_STEPS:
        return Loaded(raw, len(marks), len(marks), size)
    start = float(marks[0]["ts"])
    end = float(marks[WINDOW_STEPS]["ts"])  # where the first step left out begins
    kept = [e for e in listed if isinstance(e, dict) and (e.get("ph") == "M" or _inside(e, start, end))]
    return Loaded({**raw, "traceEvents": kept}, len(marks), WINDOW_STEPS, size)


STEP_MARK = b'"ProfilerStep#'


def step_marks(path: Path) -> int:
    """How many times the file names a ``ProfilerStep#`` (counted in its bytes, not parsed: fast on a
    file of hundreds of MB). Never fewer than its profiled steps: a CUDA trace names each step twice, on
    the CPU and on the GPU. Raises what reading the file raises (OSError, EOFError, zlib.error)."""
    import gzip

    st = path.stat()
    key = (str(path), st.st_mtime, st.st_size)
    with _cache_lock:
        if key in _counted:
            return _counted[key]
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    count = data.count(STEP_MARK)
    with _cache_lock:
        _counted[key] = count
        while len(_counted) > 64:
            _counted.popitem(last=False)
    return count


def fits_window(path: Path) -> bool:
    """Whether the window of ``path`` would be the whole file (at most ``WINDOW_STEPS`` steps), so that
    a view may take the file as it is, unparsed."""
    return step_marks(path) <= WINDOW_STEPS


def _is_step(e: Any) -> bool:
    return (isinstance(e, dict) and e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")
            and not str(e.get("cat", "")).startswith("gpu_") and isinstance(e.get("ts"), (int, float)))


def _inside(e: dict, start: float, end: float) -> bool:
    ts = e.get("ts")
    if not isinstance(ts, (int, float)):
        return e.get("ph") not in ("X", "i", "I", "B", "E")  # no time: a counter or flow without one is kept
    return start <= ts < end


def about(path: Path) -> dict[str, Any]:
    """What the page says before it reads a trace: its size, and for a large one the window and the wait."""
    size = path.stat().st_size
    mb = size / 2**20
    parsed_mb = mb * (8 if path.suffix == ".gz" else 1)  # a gzipped trace: about 8 times its size once read
    large = parsed_mb * 2**20 > LARGE_BYTES
    with _cache_lock:
        read_already = any(k[0] == str(path) for k in _cache)
    return {"mb": round(mb, 1), "large": large, "window_steps": WINDOW_STEPS,
            "seconds": 0 if read_already or not large else max(1, round(parsed_mb / MB_PER_S))}
