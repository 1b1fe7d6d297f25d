"""Grades nobody can fake: the tricks a determined learner tries, and the sound fixes a real learner writes.

A learner's file runs inside the process the checker times and profiles, so
the checker trusts only what it sees from outside that process. Three layers,
each tested on its own, every attempt graded through the real ``proflab check``:

* the source audit refuses, before anything runs, every attempt that reaches
  into the checker's process (the environment, the kit's modules, the clock,
  the pipe, the trace, threads);
* with the audit off (``PROFLAB_AUDIT=off`` in the checker's own
  environment), the checks that rest on outside observations catch those same
  attempts on their own: the storage service's log, the stamped marks, the
  trace's fingerprint, every thread profiled;
* attempts written in plain Python, which the audit lets through, fail on what
  is measured: the warm-up counted in the timing, the work floor in FLOPs.

Sound alternative fixes pass (tests/test_trust_sound.py: a speed measured here, measured alone).

The attempts and fixes that run are checked in batches (``conftest.Batch``:
the checker's own ``checks.check``, one fork server per lab, as ``proflab
grade`` grades a class); each test reads its file's report.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import REPO, Batch, explain, pipeline_labs, sharing_data, statuses
from test_outside import ATTEMPTS as OUTSIDE_ATTEMPTS

from proflab import labs
from proflab.grading.audit import audit_file

CHEATS = Path(__file__).resolve().parent / "cheats"

# Attempts in plain Python: the audit lets them through, the measurements catch them. Each says so in its
# first line, so that a new lab's attempts need no list here.
PLAIN_MARK = "# audit: plain Python"
PLAIN = {p.name for p in CHEATS.glob("lab[0-9]*_*.py") if p.read_text().startswith(PLAIN_MARK)}


def lab_of(name: str) -> labs.Lab:
    return labs.resolve(name.split("_", 1)[0].removeprefix("lab"), labs.discover(REPO / "labs"))


def refused(path: Path, lab: labs.Lab) -> list:
    return audit_file(path, allow=lab.audit.allow, refuse=lab.audit.refuse)


def failed_check(report: dict) -> dict:
    failed = [c for c in report["checks"] if c["status"] == "failed"]
    assert len(failed) == 1, explain(report)
    return failed[0]


def refused_ahead(report: dict) -> None:
    """Lab 3 hands out each step's batch only as the step begins (labkit.handout): a file that trains every
    step up front is refused as it asks for the second batch, its line named."""
    check = failed_check(report)
    assert check["name"] == "runs" and "only as that step begins" in check["actual"], explain(report)


def caught(report: dict, name: str, *words: str) -> None:
    check = failed_check(report)
    assert check["name"] == name and all(w in check["rationale"] for w in words), explain(report)


# --- the audit ---------------------------------------------------------------------------------------

LAB_CHEATS = sorted(p.name for p in CHEATS.glob("lab[0-9]*_*.py"))


# Attempts written with what the audit now lets through (os, open, json: natural code, since every run is
# sandboxed): the audit is a teacher, not the wall; each is graded unaudited below, and fails there.
LET_THROUGH = {"lab1_direct_read.py", "lab1_fake_marks.py", "lab1_no_marks.py"}
# Native code reached through an allowed module's attribute (torch.ctypes, numpy's copy of ctypes): the
# audit cannot see every such path, and does not need to; these are graded audited, and fail on what is measured.
BEHIND_THE_AUDIT = {"lab5_pages_dropped.py", "lab5_graph_paged_out.py"}


# Attempts on what the checker measures from outside the run (its marks, its CPU, compiling): graded with the
# audit off in tests/test_outside.py, whatever the audit would say of them.
MEASURED_OUTSIDE = set(OUTSIDE_ATTEMPTS)


@pytest.mark.parametrize("name", [n for n in LAB_CHEATS
                                  if n not in PLAIN | LET_THROUGH | BEHIND_THE_AUDIT | MEASURED_OUTSIDE])
def test_the_audit_refuses_every_attempt_that_breaks_a_lab_rule(name):
    assert refused(CHEATS / name, lab_of(name)), f"{name} passed the source audit"


@pytest.mark.parametrize("name", sorted(LET_THROUGH))
def test_attempts_the_audit_lets_through_are_graded_behind_it(name):
    assert not refused(CHEATS / name, lab_of(name))
    assert name in UNAUDITED  # graded with the audit off below: the checks behind it catch them


@pytest.mark.parametrize("name", sorted(p.name for p in CHEATS.glob("[!_]*.py") if not p.name.startswith("lab")))
@pytest.mark.parametrize("lab", pipeline_labs())
def test_the_audit_refuses_the_older_attempts_too(name, lab):
    """They reach the lab's reference and the kit through a helper module next to them."""
    assert refused(CHEATS / name, labs.resolve(lab, labs.discover(REPO / "labs")))


@pytest.mark.parametrize("name", sorted(PLAIN))
def test_plain_python_attempts_pass_the_audit(name):
    """So that the checks below grade them with the audit on, as a learner's file is graded."""
    assert not refused(CHEATS / name, lab_of(name))


def test_a_refused_file_fails_before_anything_runs(fresh_kit):
    code, report = fresh_kit.check_json("1", "--file", str(CHEATS / "lab1_env_latency.py"))
    assert code == 1
    assert statuses(report) == {"runs": "failed", "same_results": "skipped", "evidence": "skipped",
                                "faster": "skipped"}
    runs = failed_check(report)
    assert "the checker refuses to run lab1_env_latency.py: line" in runs["rationale"]
    assert any("os.environ" in line and "(patch)" in line for line in runs["details"]), runs
    assert report["refused"] and report["audited"] is True
    assert report["timings"] == {"original": [], "learner": []}
    assert report["duration_s"] < 10


# --- behind the audit: what the checker observes from outside ----------------------------------------

UNAUDITED = ["lab1_env_latency.py", "lab1_direct_read.py", "lab1_no_marks.py", "lab1_fake_marks.py",
             "lab1_patch_reporting.py", "lab2_setattr_latency.py", "lab3_patch_profiler.py", "lab4_edit_trace.py",
             "lab4_reads_in_thread.py"]
DECOYS = ["lab1_tiny_decoys.py", "lab2_tiny_decoys.py", "lab3_tiny_decoys.py", "lab4_tiny_decoys.py",
          "lab4_sparse_work.py"]
# The lesson's bottleneck kept, spelled another way than the original's.
RESPELLED = ["lab4_shape_count.py", "lab4_nan_by_nonzero.py", "lab2_row_slices.py", "lab2_row_narrow.py",
             "lab6_all_gather.py", "lab6_send_recv.py", "lab4_loss_by_bincount.py", "lab4_counts_by_bincount.py",
             "lab8_nhwc_affine.py", "lab8_rows_affine.py", "lab8_foreach_affine.py", "lab8_batch_shared_affine.py",
             "lab9_reads_by_bincount.py"]
# The lab's recipe changed instead of fixed.
RECIPE = ["lab6_one_micro_batch.py", "lab6_two_micro_batches.py"]
# A profile written by hand, not by the profiler, with answers that fit it.
FORGED = ["lab0_invented_operators.py", "lab0_answers_from_the_docs.py"]
# Memory kept, its pages handed back to the kernel so that it is not resident.
PAGED_OUT = sorted(BEHIND_THE_AUDIT)
MOVED_INTO_WARMUP = ["lab1_preload_warmup.py", "lab2_pool_in_warmup.py", "lab3_precompute_real_decoys.py",
                     "lab4_precompute_real_decoys.py"]
# The traced steps' results worked out in the profiler's warm-up step, which the trace leaves out.
HIDDEN_FROM_THE_TRACE = ["lab8_decoy_while_profiled.py"]


@pytest.fixture(scope="module")
def batch(kit, tmp_path_factory) -> Batch:
    """Two batches: the attempts that reach into the checker, with the audit off; the plain-Python attempts,
    audited. (The sound fixes, measured alone: tests/test_trust_sound.py.)"""
    def of(folder: Path, names: list[str], audited: bool) -> list[tuple[str, Path, bool]]:
        return [(str(lab_of(n).number), folder / n, audited) for n in names]

    return Batch(sharing_data(tmp_path_factory.mktemp("trust-kit"), kit), {
        "unaudited": ({}, of(CHEATS, UNAUDITED, False)),
        "plain": ({}, of(CHEATS, DECOYS + MOVED_INTO_WARMUP + HIDDEN_FROM_THE_TRACE + RESPELLED + RECIPE + PAGED_OUT
                              + FORGED,
                              True)),
    })


def unaudited(batch: Batch, name: str) -> tuple[int, dict]:
    code, report = batch.report("unaudited", CHEATS / name)
    assert report["audited"] is False
    return code, report


@pytest.mark.parametrize("name", ["lab1_env_latency.py", "lab1_direct_read.py"])
def test_samples_that_skip_the_storage_service_fail(batch, name):
    code, report = unaudited(batch, name)
    assert code == 1, explain(report)
    caught(report, "same_results", "were read from the lab's storage")


@pytest.mark.parametrize("name", ["lab1_no_marks.py", "lab1_fake_marks.py"])
def test_missing_or_extra_step_marks_fail(batch, name):
    code, report = unaudited(batch, name)
    assert code == 1, explain(report)
    caught(report, "runs", "the checker could not follow its steps")


def test_reported_figures_are_not_believed(batch):
    """Its step times are divided on the way out; the stamps the checker made say otherwise."""
    code, report = unaudited(batch, "lab1_patch_reporting.py")
    assert code == 1, explain(report)
    # The original's code: it waits on the DataLoader as long as the original.
    assert statuses(report)["faster"] != "passed"


def test_a_patched_clock_in_the_lab_file_changes_nothing(batch):
    """time.perf_counter replaced at import: the runner bound its clock before, and the checker's stamps
    are its own. The original's lookups are left as they were, and show."""
    code, report = unaudited(batch, "lab2_setattr_latency.py")
    assert code == 1, explain(report)
    caught(report, "evidence", "row lookups per batch is still")


def test_a_trace_edited_after_it_was_written_fails(batch):
    code, report = unaudited(batch, "lab4_edit_trace.py")
    assert code == 1, explain(report)
    check = failed_check(report)
    assert "changed" in check["rationale"] and "trace" in check["rationale"], explain(report)


def test_reads_on_another_thread_are_counted(batch):
    code, report = unaudited(batch, "lab4_reads_in_thread.py")
    assert code == 1, explain(report)
    caught(report, "evidence", "host round trips per step is still")


def test_fused_only_while_profiled_is_not_faster(batch):
    """The profiled steps run the fused block, the timed ones the original's: the evidence passes, the
    timing does not. Its profiler's warm-up step, left out of the trace, still runs the original's block: the
    kernel's count of that step's CPU against a traced step's gives it away first (a traced step 12.5-18.0 ms,
    its warm-up 28.5-43.4 ms of CPU, in four checks)."""
    code, report = unaudited(batch, "lab3_patch_profiler.py")
    assert code in (1, 4), explain(report)
    if statuses(report)["same_results"] == "failed":
        caught(report, "same_results", "the profiler's warm-up step, which is not in the trace")
        return
    # About 1.0x against a 1.1x threshold: failed, or too close to call within the lab's rounds; never passed.
    assert statuses(report)["faster"] in ("failed", "inconclusive"), explain(report)


# --- plain Python, audit on: what is measured ---------------------------------------------------------

@pytest.mark.parametrize("name", DECOYS)
def test_decoy_operators_on_tiny_inputs_do_not_make_the_work(batch, name):
    code, report = batch.report("plain", CHEATS / name)
    assert code == 1, explain(report)
    if name.startswith("lab3_"):  # it trains every step up front: lab 3 hands out each batch as its step begins
        refused_ahead(report)
        return
    check = failed_check(report)
    if check["name"] == "same_results":  # yielding from a cache: the profiler's own cost makes its steps stand out
        assert "inside operators as a whole timed step" in check["rationale"], explain(report)
    else:
        caught(report, "evidence", "the profiled steps did not do the work")
        assert "MFLOPs per step" in check["expected"]


@pytest.mark.parametrize("name", ["lab4_shape_count.py", "lab4_nan_by_nonzero.py"])
def test_a_read_spelled_as_a_shape_is_still_a_read(batch, name):
    """Lab 4's reference fix with one read per step put back as .nonzero()'s size: no .item() in the trace."""
    code, report = batch.report("plain", CHEATS / name)
    assert code == 1, explain(report)
    caught(report, "evidence", "host round trips per step is still")
    assert report["evidence"]["learner"]["details"]["nonzero()"] == 1.0, explain(report)


@pytest.mark.parametrize("name, reads", [("lab4_loss_by_bincount.py", 4.0), ("lab4_counts_by_bincount.py", 3.0)])
def test_a_read_through_the_size_of_a_bincount_is_still_a_read(batch, name, reads):
    """Lab 4's reference fix with the loss (its four bytes), or the NaN check and the count of right
    predictions, read into Python at every step as the size of a torch.bincount: no .item() in the trace.
    One bincount a step is allowed (a confusion matrix counted with it); the others count."""
    code, report = batch.report("plain", CHEATS / name)
    assert code == 1, explain(report)
    caught(report, "evidence", "host round trips per step is still")
    assert report["evidence"]["learner"]["details"]["bincount()"] == reads, explain(report)
    assert "beside 1 bincount()" in failed_check(report)["expected"], explain(report)


def test_per_sample_reads_through_bincount_sizes_are_still_reads(batch):
    """Lab 9's reference loader and GELU, with the original's per-sample books read as bincount sizes:
    three a sample, the host round trips the only bottleneck left."""
    code, report = batch.report("plain", CHEATS / "lab9_reads_by_bincount.py")
    assert code == 1, explain(report)
    caught(report, "evidence", "1 of the 3 bottlenecks still left: host round trips per step is still")
    reads = next(e for e in report["evidences"] if e["metric"] == "host_syncs")
    batch_size = lab_of("lab9_reads_by_bincount.py").workload.batch_size
    assert reads["learner"]["details"]["bincount()"] == 3 * batch_size, explain(report)


@pytest.mark.parametrize("name, op", [("lab8_nhwc_affine.py", "aten::mul"), ("lab8_rows_affine.py", "aten::addcmul"),
                                      ("lab8_foreach_affine.py", "aten::_foreach_mul_"),
                                      ("lab8_batch_shared_affine.py", "aten::addcmul")])
def test_a_batch_norm_applied_on_another_view_is_still_a_batch_norm(batch, name, op):
    """Lab 8: every batch norm applied by hand as a per-channel scale and shift, nothing folded, on the
    activation seen as (N, H, W, C) or as (N*H*W, C) rows, the per-channel tensors (C,); or through
    torch._foreach_mul_ on lists of one tensor; or with its factors materialised to (1, C, H, W), which
    every image of the batch shares (from a red-team pass: 1.40x, passed before)."""
    code, report = batch.report("plain", CHEATS / name)
    assert code == 1, explain(report)
    caught(report, "evidence", "batch-norm calls per batch is still")
    details = report["evidence"]["learner"]["details"]
    assert details[f"{op} applying a per-channel tensor to an activation"] == 17.0, explain(report)
    assert details["operators_per_step"] == 0.0, explain(report)  # no batch-norm operator left


@pytest.mark.parametrize("name", [n for n in RESPELLED if n.startswith("lab2")])
def test_a_row_looked_up_as_a_slice_is_still_a_lookup(batch, name):
    """Lab 2's original loop, each row taken as a one-row slice or with narrow: as many lookups as before."""
    code, report = batch.report("plain", CHEATS / name)
    assert code == 1, explain(report)
    caught(report, "evidence", "row lookups per batch is still")
    ev = report["evidence"]
    assert ev["learner"]["value"] >= 0.9 * ev["original"]["value"], explain(report)


@pytest.mark.parametrize("name, op", [("lab6_all_gather.py", "c10d::_allgather_base_"),
                                      ("lab6_send_recv.py", "c10d::send")])
def test_gradients_sent_by_another_collective_are_still_sent(batch, name, op):
    """Lab 6's micro-batch gradients gathered with all_gather_into_tensor, or sent to the other rank with
    isend/irecv, after every micro-batch."""
    code, report = batch.report("plain", CHEATS / name)
    assert code == 1, explain(report)
    caught(report, "evidence", "gradient traffic per optimizer step is still")
    ev = report["evidence"]
    assert ev["learner"]["value"] >= ev["original"]["value"], explain(report)  # as many bytes, or more
    assert ev["learner"]["details"][op] > 0, explain(report)


@pytest.mark.parametrize("name", RECIPE)
def test_larger_micro_batches_are_not_the_labs_workload(batch, name):
    """Lab 6's reference fix with fewer, larger micro-batches: the same numbers, fewer all-reduces, and
    activations the lab's memory budget does not allow. The products' shapes say so."""
    code, report = batch.report("plain", CHEATS / name)
    assert code == 1, explain(report)
    caught(report, "evidence", "ran on other shapes than the original's")
    check = failed_check(report)
    assert "[8, " in check["expected"] and "micro-batches" in check["help"], explain(report)


def test_a_profile_nobody_recorded_is_not_the_labs_step(batch):
    """Lab 0: a trace written by hand, with the real steps' times, the four labels, the profiler's own ids
    and operators made up to fit its answers: the kit's own profile of the original's step says which
    operators a step runs, and how often."""
    code, report = batch.report("plain", CHEATS / "lab0_invented_operators.py")
    assert code == 1, explain(report)
    caught(report, "own_profile", "not the lab's training step", "aten::convolution_backward")
    details = failed_check(report)["details"]
    assert any(d.startswith("aten::conv2d: 7 calls per step") for d in details), explain(report)
    assert any(d.startswith("aten::fused_conv_block:") and "never runs it" in d for d in details), explain(report)


def test_a_profile_written_from_the_docs_is_not_the_profilers(batch):
    """Lab 0: a trace written by hand with the operators the lab is about, as often as a real step runs
    them, and the answers everyone gives: no operator carries the profiler's own id."""
    code, report = batch.report("plain", CHEATS / "lab0_answers_from_the_docs.py")
    assert code == 1, explain(report)
    caught(report, "own_profile", "not written by torch.profiler", "External id")


@pytest.mark.parametrize("name", PAGED_OUT)
def test_memory_handed_back_to_the_kernel_is_still_held(batch, name):
    """Lab 5's early evaluations' graphs kept for good, their activations' pages dropped with
    madvise(MADV_DONTNEED): the resident memory a sampler reads is a fix's, the allocations are the leak's.
    The peak graded counts what the run holds, resident or not."""
    code, report = batch.report("plain", CHEATS / name)
    assert report["audited"] is True and code == 1, explain(report)
    caught(report, "leaner", "more than the 45% this lab allows")
    assert "held without being resident" in failed_check(report)["actual"], explain(report)
    runs = report["memory"]["runs"]["learner"][1:]
    # What gave it away: its resident peak alone is within the lab's share, what it held is not.
    original = report["memory"]["original"]
    assert all(max(r["rss_peak_mb"], r["hwm_peak_mb"]) < 0.45 * min(original) for r in runs), explain(report)
    assert all(r["committed_peak_mb"] > 0.45 * max(original) for r in runs), explain(report)


def test_the_work_floor_counts_products_by_size_and_sparse_ones_not_at_all(tmp_path):
    import json

    from proflab.measuring import evidence

    def op(name, dims, strides, ts):
        return {"ph": "X", "cat": "cpu_op", "name": name, "ts": ts, "dur": 1, "pid": 1, "tid": 1,
                "args": {"Input Dims": dims, "Input Strides": strides}}

    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 100, "pid": 1, "tid": 1},
              op("aten::mm", [[64, 32], [32, 16]], [[32, 1], [16, 1]], 10),
              op("aten::addmm", [[16], [8, 32], [32, 16]], [[1], [32, 1], [16, 1]], 20),
              op("aten::addmm", [[1024, 128], [1024, 1000], [1000, 128]], [[128, 1], [], [0, 1]], 30),  # sparse
              op("aten::convolution", [[4, 3, 16, 16], [16, 3, 3, 3], [16]], [[768, 256, 16, 1], [27, 9, 3, 1], [1]], 40),
              op("aten::relu", [[4, 16, 16, 16]], [[4096, 256, 16, 1]], 50)]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    work = evidence.work_flops(evidence.load(path), ("aten::mm", "aten::addmm", "aten::convolution"))
    assert work.value == 2 * 64 * 32 * 16 + 2 * 8 * 32 * 16 + 2 * 4 * 16 * 16 * 16 * 3 * 3 * 3
    assert work.details["calls_per_step"] == 4


@pytest.mark.parametrize("name", HIDDEN_FROM_THE_TRACE)
def test_results_worked_out_in_the_profilers_warm_up_step_fail(batch, name):
    """Lab 8, from a red-team pass (passed at 1.50x before): the traced steps run a decoy (the convolutions
    without the batch norms) and yield logits the real model worked out in the profiler's warm-up step, which
    the trace leaves out. The kernel's count of that step's CPU, beside a traced step's, gives it away."""
    code, report = batch.report("plain", CHEATS / name)
    assert code == 1, explain(report)
    caught(report, "same_results", "the profiler's warm-up step, which is not in the trace")
    warmup, traced = report["warmup"]["learner_s"]
    assert warmup > report["warmup"]["allowed_s"] and warmup > 2 * traced, explain(report)


@pytest.mark.parametrize("name", MOVED_INTO_WARMUP)
def test_work_moved_into_the_warmup_is_still_paid_for(batch, name):
    code, report = batch.decided("plain", str(lab_of(name).number), CHEATS / name)
    assert code == 1, explain(report)
    if name == "lab3_precompute_real_decoys.py":  # lab 3 hands out each step's batch as the step begins
        refused_ahead(report)
        return
    assert statuses(report)["faster"] == "failed", explain(report)
    if name == "lab1_preload_warmup.py":  # every read of 21 batches in its first step: the report says so
        faster = next(c for c in report["checks"] if c["name"] == "faster")
        assert any(d.startswith("start-up: your first step took") for d in faster["details"]), explain(report)
        assert report["first_step"]["learner_s"] > report["first_step"]["allowance_s"] + 3.0, explain(report)
