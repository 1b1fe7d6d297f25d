"""``proflab check 6`` end to end on this machine's CPU: real torchrun jobs of two gloo ranks.

Lab 6 runs as a torchrun job: PyTorch's launcher starts two ranks, each the
kit's runner, which join a gloo process group and train one DDP model. Every
rank's marks, values and trace are the checker's to read, and a rank that
hangs, crashes or never joins the job ends it within the time limit, named,
with nothing left running (the autouse fixture in conftest checks that by
environment mark, process group and session after every test).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from proflab import labs

from conftest import CHECK_NAMES, LEARNER_FILES, as_in_a_terminal, explain, failing, learner_files, statuses

NO_AUDIT = {"PROFLAB_AUDIT": "off"}  # the crash below reaches for ctypes, which the audit refuses


def test_reference_solution_passes_with_every_rank_checked(lab6_solution):
    code, report = lab6_solution
    assert code == 0, explain(report)
    assert statuses(report) == dict.fromkeys(CHECK_NAMES, "passed")
    assert report["comparison"]["ci_low"] >= report["threshold"] == labs.resolve("6").threshold("cpu")
    ev = report["evidence"]
    assert ev["metric"] == "allreduce_traffic" and ev["original"]["details"]["ranks"] == 2
    # The original all-reduces the gradients after each of 8 micro-batches, the fix once per optimizer
    # step: an eighth of the bytes, in a handful of calls where the original made dozens.
    assert ev["learner"]["value"] == pytest.approx(ev["original"]["value"] / 8, rel=0.01)
    assert ev["learner"]["details"]["calls_per_step"] * 8 < ev["original"]["details"]["calls_per_step"]
    assert "rank 0:" in ev["learner"]["summary"] and "rank 1:" in ev["learner"]["summary"]
    # The kernel's count of the job's network (a sandbox of its own) agrees: nothing went outside the
    # collectives, and it carried well under half the original's bytes a step.
    if str(report.get("sandbox", "")).startswith("sandboxed by"):
        assert ev["learner"]["details"]["outside_collectives_mb_per_step"] == 0, explain(report)
        assert ev["learner"]["details"]["network_mb_per_step"] > 0, explain(report)
        assert "the job's network, read by the kernel" in ev["learner"]["summary"], explain(report)
    # Both ranks' traces are published as workers of one TensorBoard run per version.
    for which in ("original", "learner"):
        names = sorted(Path(p).name.split(".")[0] for p in report["rank_traces"][which])
        assert names == ["rank0", "rank1"], report["rank_traces"]
        assert len({Path(p).parent for p in report["rank_traces"][which]}) == 1
        assert all(Path(p).is_file() for p in report["rank_traces"][which])


@pytest.mark.load_free
def test_untouched_exercise_fails_on_the_evidence(fresh_kit):
    code, report = fresh_kit.check_json("distributed")
    assert code == 1, explain(report)
    assert statuses(report) == {"runs": "passed", "same_results": "passed", "evidence": "failed",
                                "faster": "skipped"}
    assert failing(report)["rationale"].startswith("gradient traffic per optimizer step is still")


VARIANTS = ["lab6_no_sync_small_buckets.py", "lab6_by_hand.py", "lab6_per_parameter.py", "lab6_big_buckets_only.py",
            "lab6_apart.py", "lab6_all_data.py"]


@pytest.fixture(scope="module")
def batch(kit, tmp_path_factory):
    """The learner files below, checked in one batch (conftest.Batch): a torchrun job per run, as ever."""
    return learner_files(kit, tmp_path_factory, "6", VARIANTS)


@pytest.mark.parametrize("variant", ["lab6_no_sync_small_buckets.py", "lab6_by_hand.py", "lab6_per_parameter.py"])
def test_sound_alternatives_pass(batch, variant):
    """no_sync with the original's small buckets; and no DDP at all, one all-reduce per step by hand, of
    every gradient flattened or of each parameter's."""
    code, report = batch.decided("6", "6", LEARNER_FILES / variant)
    assert code == 0, explain(report)
    assert statuses(report) == dict.fromkeys(CHECK_NAMES, "passed")


def test_larger_buckets_alone_send_the_same_bytes_and_fail_on_the_evidence(batch):
    """bucket_cap_mb=25 without no_sync: fewer calls, the same gradients sent after every micro-batch."""
    code, report = batch.report("6", LEARNER_FILES / "lab6_big_buckets_only.py")
    assert code == 1, explain(report)
    assert statuses(report)["evidence"] == "failed", explain(report)
    ev = report["evidence"]
    assert ev["learner"]["details"]["calls_per_step"] < ev["original"]["details"]["calls_per_step"] / 2
    assert ev["learner"]["value"] == pytest.approx(ev["original"]["value"], rel=0.01)


@pytest.mark.parametrize("variant, said", [
    ("lab6_apart.py", "the ranks trained apart"),
    ("lab6_all_data.py", "every rank trained on the same samples"),
])
def test_ranks_that_do_not_share_the_work_fail_on_results_and_are_told_which(batch, variant, said):
    code, report = batch.report("6", LEARNER_FILES / variant)
    assert code == 1, explain(report)
    assert statuses(report)["same_results"] == "failed", explain(report)
    assert said in failing(report)["rationale"], failing(report)


def fault_file(kit, name: str, old: str, new: str) -> Path:
    """The lab's reference fix with one line changed, in the lab's folder."""
    source = (kit.root / "labs" / "06_distributed" / "solution.py").read_text()
    assert old in source
    path = kit.root / "labs" / "06_distributed" / name
    path.write_text(source.replace(old, new, 1))
    return path


STEP = "            optimizer.step()\n"


@pytest.mark.load_free
def test_a_rank_that_hangs_ends_the_job_at_the_time_limit_named(fresh_kit):
    path = fault_file(fresh_kit, "hangs.py", STEP, STEP + "            if dist.get_rank() == 1:\n"
                      "                time.sleep(3600)  # rank 0 then waits for it in its next all-reduce\n")
    path.write_text("import time\n" + path.read_text())
    started = time.monotonic()
    code, report = fresh_kit.check_json("6", "--file", str(path), "--timeout", "12")
    assert time.monotonic() - started < 120
    assert code == 1, explain(report)
    runs = failing(report)
    assert runs["name"] == "runs" and "did not finish within the time limit (12 s)" in runs["rationale"], runs
    assert "rank 1 was at hangs.py line" in runs["rationale"] and "time.sleep(3600)" in runs["rationale"], runs


@pytest.mark.load_free
def test_a_rank_that_crashes_ends_the_job_named(fresh_kit):
    path = fault_file(fresh_kit, "crashes.py", STEP, STEP + "            if dist.get_rank() == 1:\n"
                      "                ctypes.string_at(0)  # a segmentation fault\n")
    path.write_text("import ctypes\n" + path.read_text())
    proc = subprocess.run([sys.executable, "-m", "proflab", "check", "6", "--file", str(path), "--json"],
                          cwd=fresh_kit.root, env={**fresh_kit.env(), **NO_AUDIT}, capture_output=True,
                          text=True, timeout=300)
    import json

    report = json.loads(proc.stdout)
    assert proc.returncode == 1, explain(report)
    runs = failing(report)
    assert runs["name"] == "runs" and "rank 1 of 2: it crashed: segmentation fault at crashes.py line" \
        in runs["rationale"] and "ctypes.string_at(0)" in runs["rationale"], runs
    assert "Traceback" not in proc.stderr


@pytest.mark.load_free
def test_a_rank_that_raises_is_named_not_the_rank_that_lost_it(fresh_kit):
    path = fault_file(fresh_kit, "raises.py", STEP, STEP + "            if dist.get_rank() == 1:\n"
                      "                raise ValueError('rank 1 gives up')\n")
    code, report = fresh_kit.check_json("6", "--file", str(path))
    assert code == 1, explain(report)
    runs = failing(report)
    # Rank 0 fails too, a moment later, on its connection to rank 1: the cause is rank 1's error.
    assert "raised an error on rank 1 at step 0" in runs["rationale"], runs
    assert runs["actual"] == "rank 1 of 2: ValueError: rank 1 gives up", runs


@pytest.mark.load_free
def test_a_file_that_never_joins_the_process_group_is_told_so(fresh_kit):
    path = fault_file(fresh_kit, "alone.py", "    dist.init_process_group(cfg.backend)", "    pass")
    source = path.read_text()
    path.write_text(source.replace("model = DDP(WideMLP().to(cfg.device))", "model = WideMLP().to(cfg.device)")
                    .replace("model.no_sync()", "contextlib.nullcontext()")
                    .replace("        dist.destroy_process_group()", "        pass")
                    .replace("DistributedSampler(dataset, shuffle=True, seed=cfg.seed)",
                             "DistributedSampler(dataset, num_replicas=2, rank=0, shuffle=True, seed=cfg.seed)"))
    code, report = fresh_kit.check_json("6", "--file", str(path))
    assert code == 1, explain(report)
    runs = failing(report)
    assert runs["name"] == "runs" and "had not joined the job's process group" in runs["rationale"], runs
    assert "rank 0 of 2" in runs["rationale"] or "rank 1 of 2" in runs["rationale"]


@pytest.mark.load_free
def test_ctrl_c_during_a_check_stops_every_rank(fresh_kit):
    proc = subprocess.Popen([sys.executable, "-m", "proflab", "check", "6"], cwd=fresh_kit.root,
                            env=fresh_kit.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=as_in_a_terminal)
    try:
        deadline = time.monotonic() + 90
        runs = fresh_kit.root / ".proflab" / "tmp"
        while not any([*runs.glob("run-*/pid-1"), *runs.glob("box-*/run-*/pid-1")]):  # rank 1 has started
            assert time.monotonic() < deadline and proc.poll() is None, "the job never started"
            time.sleep(0.2)
        time.sleep(1)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
        assert proc.returncode == 130, proc.stderr.read()
        assert "Traceback" not in proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()


# --- the pieces, on their own ---------------------------------------------------------------------

def values(loss: float, weights: list[float]) -> dict:
    return {"loss": {"shape": [], "dtype": "float32", "data": [loss]},
            "weights": {"shape": [len(weights)], "dtype": "float32", "data": weights}}


def test_ranks_are_compared_with_each_other_before_the_original():
    from proflab import labs
    from proflab.grading import compare

    lab = labs.resolve("6")
    original = [[values(2.30, [0.1, 0.2])], [values(2.31, [0.1, 0.2])]]
    assert compare.compare_ranks(original, original, lab.results, lab.distributed) is None
    apart = compare.compare_ranks(original, [[values(2.30, [0.1, 0.2])], [values(2.31, [0.1, 0.25])]],
                                  lab.results, lab.distributed)
    assert apart.key == "weights" and "rank 1's" in apart.message and "trained apart" in apart.message
    same = compare.compare_ranks(original, [[values(2.30, [0.1, 0.2])], [values(2.30, [0.1, 0.2])]],
                                 lab.results, lab.distributed)
    assert same.key == "loss" and "the same samples" in same.message
    other = compare.compare_ranks(original, [[values(2.30, [0.1, 0.2])], [values(2.40, [0.1, 0.2])]],
                                  lab.results, lab.distributed)
    assert other.message.startswith("rank 1, step 0:")
    assert "4 ranks reported" in compare.compare_ranks(original, original * 2, lab.results, lab.distributed).message
    assert "not in the form" in compare.compare_ranks(original, "nonsense", lab.results, lab.distributed).message


def test_a_run_folder_of_ranks_is_listed_once_per_rank(tmp_path):
    from proflab.viewing.timeline import newest_traces

    for run, workers in (("06-distributed/original", ["rank0", "rank1"]), ("01-dataloader/original", ["original"])):
        folder = tmp_path / run
        folder.mkdir(parents=True)
        for worker in workers:
            (folder / f"{worker}.123.pt.trace.json").write_text("{}")
    assert list(newest_traces(tmp_path)) == ["01-dataloader/original", "06-distributed/original/rank0",
                                             "06-distributed/original/rank1"]


def test_a_lost_connection_is_told_from_a_failure_of_its_own():
    from proflab.running import torchrun

    assert torchrun.lost_a_peer("RuntimeError: [../gloo/transport/tcp/pair.cc:545] Read error: Connection reset by peer")
    assert not torchrun.lost_a_peer("ValueError: rank 1 gives up")


# --- the lab from the other doors: running the file, grading a class -------------------------------

@pytest.mark.load_free
def test_python_exercise_py_runs_the_job_and_torchrun_is_told_the_kit_starts_it(fresh_kit):
    exercise = fresh_kit.root / "labs" / "06_distributed" / "exercise.py"
    proc = subprocess.run([sys.executable, str(exercise)], cwd=fresh_kit.root, env=fresh_kit.env(),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Rank 0, per profiled step: 64 all-reduce calls per step" in proc.stdout
    assert "Rank 1, per profiled step:" in proc.stdout and "Traceback" not in proc.stderr
    traces = sorted(p.name.split(".")[0] for p in (fresh_kit.root / "runs" / "06-distributed" / "yours").glob("*.pt.trace.json"))
    assert traces == ["rank0", "rank1"]
    under = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                            str(exercise)], cwd=fresh_kit.root, env=fresh_kit.env(), capture_output=True, text=True,
                           timeout=300)
    assert under.returncode != 0
    assert "starts its own torchrun job: run it as `python" in under.stderr


def test_grade_grades_the_lab_like_the_others(fresh_kit):
    folder = fresh_kit.root / "class"
    for learner, source in (("ana", fresh_kit.root / "labs" / "06_distributed" / "solution.py"),
                            ("ben", LEARNER_FILES / "lab6_apart.py")):
        (folder / learner).mkdir(parents=True)
        (folder / learner / "6.py").write_text(source.read_text())
    proc = subprocess.run([sys.executable, "-m", "proflab", "grade", "class", "--json-out", "grades.json"],
                          cwd=fresh_kit.root, env=fresh_kit.env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    import json

    record = json.loads((fresh_kit.root / "grades.json").read_text())
    got = {s["learner"]: s for s in record["submissions"]}
    assert got["ana"]["lab"] == "distributed" and got["ana"]["verdict"] in ("passed", "inconclusive"), got["ana"]
    assert got["ben"]["verdict"] == "failed"
    same = next(c for c in got["ben"]["checks"] if c["name"] == "same_results")
    assert same["passed"] is False and "the ranks trained apart" in same["rationale"]
