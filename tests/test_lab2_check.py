"""``proflab check 2`` end to end on this machine's CPU: real subprocesses, real timings.

As for lab 1, speed is never asserted against a fixed number of milliseconds,
only the checker's verdicts and what it reports. The counts of lookups in the
traces are exact: they depend on the requests, not on the machine's load.
"""

from __future__ import annotations

import pytest

from conftest import CHECK_NAMES, LEARNER_FILES, explain, failing, learner_files, sharing_data, statuses
from proflab import labs
from proflab.labkit.recsys import RequestLog

def lab2_folder(kit):
    return kit.root / "labs" / "02_embeddings"


@pytest.fixture(scope="session")
def lab2_exercise(kit, tmp_path_factory):
    """``proflab check embeddings`` on the untouched exercise, in a kit of its own."""
    k = sharing_data(tmp_path_factory.mktemp("lab2-exercise-kit"), kit)
    return k.check_json("embeddings")


def profiled_ids_per_batch(kit) -> float:
    """How many ids the batches in the trace hold, on average: one lookup each in the original."""
    lab = labs.load(lab2_folder(kit))
    w = lab.workload
    first = w.warmup_steps + w.timed_steps + 1  # the first profiled step is the profiler's warm-up
    batches = list(RequestLog(kit.root / "data").batches(w.batch_size))[first:w.total_steps]
    return sum(len(b.user_ids) + len(b.item_ids) for b in batches) / len(batches)


def test_reference_solution_passes(lab2_solution):
    code, report = lab2_solution
    assert code == 0, explain(report)
    assert report["verdict"] == "passed"
    assert report["device"] == "cpu"
    assert statuses(report) == dict.fromkeys(CHECK_NAMES, "passed")
    cmp = report["comparison"]
    assert cmp["speedup"] >= report["threshold"] == labs.resolve("2").threshold("cpu")
    assert cmp["rounds"] >= 2  # the lab's base rounds
    assert len(report["timings"]["original"]) == len(report["timings"]["learner"]) == cmp["rounds"] >= 2


def test_reference_latency_median_and_p95(lab2_solution):
    _, report = lab2_solution
    lat = report["latency"]
    assert lat["learner"]["median_ms"] <= lat["learner"]["p95_ms"]
    assert lat["original"]["median_ms"] <= lat["original"]["p95_ms"]
    # A batch of the fix is answered faster than most batches of the original, even its slow ones.
    assert lat["learner"]["p95_ms"] < lat["original"]["median_ms"]
    faster = next(c for c in report["checks"] if c["name"] == "faster")
    assert "median" in faster["actual"] and "p95" in faster["actual"] and "→" in faster["actual"]


def test_reference_looks_up_a_batch_in_two_calls(kit, lab2_solution):
    _, report = lab2_solution
    ev = report["evidence"]
    assert ev["metric"] == "indexing_ops"
    # The original runs one aten::select per id: thousands per batch.
    assert ev["original"]["value"] == pytest.approx(profiled_ids_per_batch(kit), abs=0.1)
    assert ev["original"]["details"]["aten::select"] > 1000
    # The reference: one nn.EmbeddingBag call per table and batch, nothing else.
    assert ev["learner"]["value"] == 2
    assert ev["learner"]["details"]["aten::embedding_bag"] == 2
    assert ev["learner"]["details"]["htod_copies_per_step"] == 0  # no CUDA here


def test_untouched_exercise_fails_on_the_evidence(lab2_exercise):
    code, report = lab2_exercise
    assert code == 1
    assert report["verdict"] == "failed"
    assert statuses(report) == {"runs": "passed", "same_results": "passed", "evidence": "failed",
                                "faster": "skipped"}
    evidence = failing(report)
    assert evidence["rationale"].startswith("row lookups per batch is still")
    assert "aten::select" in evidence["help"] and "Profile › Operators" in evidence["help"]
    assert report["comparison"] is None


FILES = ['lab2_sum_pooling.py', 'lab2_per_request.py']


@pytest.fixture(scope="module")
def batch(kit, tmp_path_factory):
    """The learner files below, checked in one batch (conftest.Batch)."""
    return learner_files(kit, tmp_path_factory, "2", FILES)


def grade(batch, name: str) -> tuple[int, dict]:
    return batch.decided("2", "2", LEARNER_FILES / name)


def test_sum_pooling_fails_on_results(batch):
    code, report = grade(batch, "lab2_sum_pooling.py")
    assert code == 1
    assert statuses(report) == {"runs": "passed", "same_results": "failed", "evidence": "skipped",
                                "faster": "skipped"}
    same = failing(report)
    assert same["rationale"].startswith("step 0: the click score of each request ('scores') differs")
    assert "mean" in same["help"]


def test_one_lookup_per_request_fails_on_the_evidence(batch):
    code, report = grade(batch, "lab2_per_request.py")
    assert code == 1
    assert statuses(report)["same_results"] == "passed"
    assert failing(report)["name"] == "evidence"
    batch_size = labs.load(lab2_folder(batch.kit)).workload.batch_size
    learner = report["evidence"]["learner"]
    assert learner["value"] == 2 * batch_size  # one aten::index per bag, two bags per request
    assert learner["details"]["aten::index"] == 2 * batch_size


def test_the_metric_counts_outermost_lookups_and_host_to_device_copies(tmp_path):
    """A hand-made CUDA trace: nested lookups count once, HtoD copies count, DtoH ones do not."""
    import json

    from proflab.measuring import evidence

    def op(name, ts, dur, cat="cpu_op", tid=1):
        return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": 1, "tid": tid}

    events = [
        op("ProfilerStep#1", 0, 100, cat="user_annotation"),
        op("aten::embedding", 10, 10), op("aten::index_select", 12, 5),  # one lookup, not two
        op("aten::select", 30, 1), op("aten::select", 32, 1),
        op("aten::slice", 40, 1),  # a row taken as a slice: a lookup too
        op("aten::mean", 45, 4), op("aten::slice", 46, 1),  # inside another operator: not the program's
        op("Memcpy HtoD (Pageable -> Device)", 50, 2, cat="gpu_memcpy", tid=7),
        op("Memcpy DtoH (Device -> Pageable)", 60, 2, cat="gpu_memcpy", tid=7),
        op("ProfilerStep#2", 100, 100, cat="user_annotation"),
        op("aten::embedding_bag", 110, 10), op("aten::_embedding_bag", 111, 8),
        op("Memcpy HtoD (Pageable -> Device)", 150, 2, cat="gpu_memcpy", tid=7),
        op("aten::select", 250, 1),  # after the last step: not counted
    ]
    path = tmp_path / "t.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    m = evidence.measure("indexing_ops", path)
    assert m.details["indexing_ops_per_step"] == 2.5  # (4 + 1) / 2
    assert m.details["htod_copies_per_step"] == 1.0
    assert m.value == 3.5
    assert m.details["aten::select"] == 1.0 and m.details["aten::embedding_bag"] == 0.5
    assert m.details["aten::slice"] == 0.5
    assert "host-to-device copies" in m.summary


# Ten rows looked up one at a time, each spelling of it, and the whole batch looked up at once.
ROW_BY_ROW = ["[t[i] for i in ids]", "[t[i:i + 1] for i in ids]", "[t.narrow(0, i, 1) for i in ids]",
              "[t.select(0, i) for i in ids]", "[t[torch.tensor([i])] for i in ids]",
              "[t.view(-1)[i * 8:(i + 1) * 8] for i in ids]", "[list(t)[i] for i in ids[:1]]",
              "[t.unbind(0)[i] for i in ids[:1]]", "[t.split(1)[i] for i in ids[:1]]"]
AT_ONCE = ["torch.nn.functional.embedding_bag(batch, t, offsets)", "t[batch]", "t.index_select(0, batch)",
           "torch.nn.functional.embedding(batch, t)"]


@pytest.mark.parametrize("code", ROW_BY_ROW + AT_ONCE)
def test_row_lookups_are_counted_however_they_are_spelled(tmp_path, code):
    """Under the real profiler: a row taken by an index, a slice, narrow, or a table cut into rows is one
    lookup each; a batch looked up in one call is one."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    from proflab.measuring import evidence

    t = torch.randn(32, 8)
    ids = list(range(3, 13))
    batch, offsets = torch.tensor(ids), torch.tensor([0, 5])
    path = tmp_path / "trace.json"
    with torch.inference_mode(), profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                                         schedule=schedule(wait=0, warmup=1, active=2),
                                         on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
        for _ in range(3):
            eval(code, {"torch": torch, "t": t, "ids": ids, "batch": batch, "offsets": offsets})  # noqa: S307
            prof.step()
    m = evidence.measure("indexing_ops", path)
    if code in AT_ONCE:
        assert m.value == 1, m.summary
    else:  # ten rows, or the whole table of 32 cut into rows
        assert m.value >= 10, m.summary
