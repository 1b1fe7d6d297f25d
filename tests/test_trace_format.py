"""The kit's traces open in the field's viewers: Chrome trace JSON as Perfetto reads it (docs/next.md).

Perfetto reads the JSON trace format on a best-effort basis, and does not support complete events ("X") on
one thread that overlap without nesting (perfetto.dev/docs/faq). A trace the kit writes, for a real run of
the calibration lab, is checked for what that needs: an object with a list of ``traceEvents``; each complete
event with a name, a start and a length in microseconds, a process and a thread; on each thread the events
nested, never overlapping part-way; the process and thread names as metadata events.
"""

from __future__ import annotations

import json
from pathlib import Path

from test_grade import make_kit


def nesting_broken(events: list[dict]) -> list[str]:
    """The complete events of each thread that end inside another they began after, without nesting."""
    threads: dict[tuple, list[tuple[float, float, str]]] = {}
    for e in events:
        if e.get("ph") == "X":
            threads.setdefault((e["pid"], e["tid"]), []).append((float(e["ts"]), float(e["ts"]) + float(e["dur"]),
                                                                 e["name"]))
    broken = []
    for thread, spans in threads.items():
        open_: list[tuple[float, float, str]] = []
        for start, end, name in sorted(spans, key=lambda s: (s[0], -s[1])):
            while open_ and open_[-1][1] <= start:
                open_.pop()
            if open_ and end > open_[-1][1] + 1e-3:  # a nanosecond of rounding allowed
                broken.append(f"{name} ends after {open_[-1][2]}, which it began inside (thread {thread})")
            open_.append((start, end, name))
    return broken


def test_a_kit_trace_is_chrome_trace_json_as_perfetto_reads_it(tmp_path):
    kit = make_kit(tmp_path / "kit")
    proc = kit.run("run", "90")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    traces = sorted((kit.root / "runs").rglob("*.pt.trace.json"))
    assert traces, proc.stdout
    data = json.loads(traces[-1].read_text(encoding="utf-8"))
    assert isinstance(data, dict) and isinstance(data["traceEvents"], list)
    complete = [e for e in data["traceEvents"] if e.get("ph") == "X"]
    assert complete
    for e in complete:
        assert isinstance(e.get("name"), str) and e["name"], e
        assert isinstance(e.get("ts"), (int, float)) and isinstance(e.get("dur"), (int, float)) and e["dur"] >= 0, e
        assert "pid" in e and "tid" in e, e
    assert not nesting_broken(data["traceEvents"])
    assert any(e["name"].startswith("ProfilerStep#") for e in complete)
    names = {e["name"] for e in data["traceEvents"] if e.get("ph") == "M"}
    assert {"process_name", "thread_name"} <= names, names


def test_overlap_without_nesting_is_found():
    """The check itself can fail: two events on one thread that overlap part-way."""
    events = [{"ph": "X", "name": "a", "ts": 0, "dur": 10, "pid": 1, "tid": 1},
              {"ph": "X", "name": "b", "ts": 5, "dur": 10, "pid": 1, "tid": 1},
              {"ph": "X", "name": "c", "ts": 1, "dur": 2, "pid": 1, "tid": 1},
              {"ph": "X", "name": "d", "ts": 5, "dur": 10, "pid": 1, "tid": 2}]
    assert nesting_broken(events) == ["b ends after a, which it began inside (thread (1, 1))"]
