"""The traces a check writes: where they are, what is in them, and the evidence read from them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import REPO
from proflab.measuring import evidence
from proflab import labs


def test_both_traces_are_written_under_names_that_say_which_is_which(kit, solution_check):
    _, report = solution_check
    runs = kit.root / "runs" / "01-dataloader"
    original = Path(report["traces"]["original"])
    reference = Path(report["traces"]["learner"])
    assert original.parent == runs / "original"
    assert reference.parent == runs / "reference"
    for trace in (original, reference):
        assert trace.name.endswith(".pt.trace.json")
        assert trace.stat().st_size < 5_000_000, "lean defaults: no stacks, shapes or memory"


def test_traces_load_as_json_with_steps_and_dataloader_events(solution_check):
    _, report = solution_check
    for which, iterator in (("original", "_SingleProcessDataLoaderIter"), ("learner", "_MultiProcessingDataLoaderIter")):
        data = json.loads(Path(report["traces"][which]).read_text())
        names = [e.get("name", "") for e in data["traceEvents"]]
        steps = [n for n in names if n.startswith("ProfilerStep#")]
        profiled = labs.load(REPO / "labs" / "01_dataloader").workload.profile_steps
        assert len(steps) == profiled - 1, "the first profiled step warms the profiler up; the others are active"
        assert any(n == f"enumerate(DataLoader)#{iterator}.__next__" for n in names)


def test_evidence_is_derived_from_the_trace_files(solution_check):
    _, report = solution_check
    for which in ("original", "learner"):
        measured = evidence.measure("dataloader_wait", report["traces"][which])
        assert measured.value == pytest.approx(report["evidence"][which]["value"])
        data = json.loads(Path(report["traces"][which]).read_text())
        events = data["traceEvents"]
        steps = [e for e in events if e.get("name", "").startswith("ProfilerStep#")]
        waits = [e for e in events if e.get("name", "").startswith("enumerate(DataLoader)#")]
        by_hand = sum(max(0.0, min(w["ts"] + w["dur"], s["ts"] + s["dur"]) - max(w["ts"], s["ts"]))
                      for w in waits for s in steps)  # DataLoader waits do not nest: a plain sum is their union
        assert measured.value == pytest.approx(by_hand / len(steps) / 1000.0, rel=1e-9)


def test_union_of_nested_intervals():
    assert evidence._union_length([(0, 10), (2, 5), (8, 12), (20, 21)]) == 13


def test_a_trace_without_steps_is_refused(tmp_path):
    path = tmp_path / "x.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "aten::add", "ts": 1, "dur": 2}]}))
    with pytest.raises(evidence.TraceError, match="ProfilerStep"):
        evidence.load(path)
