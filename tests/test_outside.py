"""Measurement the run cannot touch: time and CPU read by the operating system, never taken on the run's word.

Each attempt here would pass if the checker believed what the run reports or
can reach: the marks of its steps (written by the file itself, with the
runner's silenced), the CPU of its live processes only (a child left
unreaped), the time it says it spent compiling. The checker reads the CPU of
every process a run ever started from the kernel (a cgroup per run server),
counts what a run does after its timed window beyond the original, watches
the mark channel from /proc, and leaves compiling out only where a lab's
lesson allows a compiled fix. Every attempt is graded through the checker's
own ``checks.check`` (``conftest.Batch``), with the audit off: these files
reach into the run's process, which the audit would refuse at once, and the
measurements must hold on their own.
"""

from __future__ import annotations

import os
import subprocess
from shutil import which as shutil_which
import sys
import time
from pathlib import Path

import pytest

from conftest import Batch, explain, sharing_data, statuses

from proflab.running import cgroups, processes, readings

CHEATS = Path(__file__).resolve().parent / "cheats"
ATTEMPTS = ["lab1_forged_window.py", "lab2_forged_marks.py", "lab2_forged_marks_paused.py",
            "lab2_zombie_helper.py", "lab2_forged_compile_marks.py", "lab2_compile_constant.py",
            "lab2_init_helper.py", "lab8_init_helper.py", "lab3_train_while_compiling.py",
            "lab3_compile_span_across_steps.py"]

needs_cgroups = pytest.mark.skipif(not cgroups.available()[0],
                                   reason=f"no cgroup accounting here: {cgroups.available()[1]}")


@pytest.fixture(scope="module")
def batch(kit, tmp_path_factory) -> Batch:
    k = sharing_data(tmp_path_factory.mktemp("outside-kit"), kit)
    return Batch(k, {"attempts": ({}, [(name[3], CHEATS / name, False) for name in ATTEMPTS])})


def report_of(batch: Batch, name: str) -> tuple[int, dict]:
    code, report = batch.report("attempts", CHEATS / name)
    assert report["audited"] is False
    return code, report


def test_marks_written_through_a_second_handle_fail_it_runs(batch):
    """The channel kept with os.dup, /dev/null in its place, the marks written by the file: seen in /proc."""
    code, report = report_of(batch, "lab2_forged_marks.py")
    assert code == 1, explain(report)
    check = next(c for c in report["checks"] if c["status"] == "failed")
    assert check["name"] == "runs", explain(report)
    assert "second handle on the checker's mark channel" in check["rationale"], explain(report)


def test_forged_marks_that_keep_every_pause_cannot_pay(batch):
    """The runner's writer replaced in-process, its pauses kept: nothing to see in /proc. The original's
    work after the fake window is counted where it went, and the version is no faster."""
    code, report = report_of(batch, "lab2_forged_marks_paused.py")
    assert code in (1, 4), explain(report)
    assert statuses(report)["faster"] in ("failed", "inconclusive"), explain(report)
    after = report["after"]
    assert after["counted_s"] and min(after["counted_s"]) > 0, explain(report)
    faster = next(c for c in report["checks"] if c["name"] == "faster")
    assert any(line.startswith("after the timed steps:") for line in faster.get("details") or []), faster


def test_a_window_of_sleeps_marked_by_the_file_cannot_pay_on_the_clock(batch):
    """Lab 1, timed on the clock and never paused: the runner's writer replaced, a window of sleeps marked,
    the original's loading after it. The time after the window counts."""
    code, report = report_of(batch, "lab1_forged_window.py")
    assert code in (1, 4), explain(report)
    if statuses(report)["same_results"] == "failed":
        # caught before any timing counts: its profiled steps (the loading, recorded) took many times its
        # "timed" steps (the sleeps), which happens when the machine slows the loading enough
        check = next(c for c in report["checks"] if c["name"] == "same_results")
        assert "a profiled step spent" in check["rationale"], explain(report)
        return
    assert statuses(report)["faster"] in ("failed", "inconclusive"), explain(report)
    assert min(report["after"]["counted_s"]) > 1.0, explain(report)  # seconds of loading, not noise


def test_a_child_left_unreaped_is_counted(batch):
    """Every batch's lookups in a forked child that exits a zombie: the cgroup holds its CPU."""
    code, report = report_of(batch, "lab2_zombie_helper.py")
    assert code in (1, 4), explain(report)
    assert statuses(report)["faster"] in ("failed", "inconclusive"), explain(report)


@pytest.mark.parametrize("name", ["lab2_forged_compile_marks.py", "lab2_compile_constant.py"])
def test_compiling_earns_nothing_outside_a_lab_that_allows_it(batch, name):
    """Forged compile marks around the original's lookups; the lookups run by torch.compile itself
    (assume_constant_result) while it compiles. Lab 2 leaves no compiling out: both count."""
    code, report = report_of(batch, name)
    assert code in (1, 4), explain(report)
    assert statuses(report)["faster"] in ("failed", "inconclusive"), explain(report)
    first = report["first_step"]
    assert first["learner_s"] > first["allowance_s"], explain(report)


def test_training_done_while_compiling_cannot_know_the_steps_batches(batch):
    """Lab 3 leaves compiling in the warm-up out: every step's training run by torch.compile itself
    (assume_constant_result) in the first step, over the stored batches in order, then replayed. The
    checker hands out each step's batch only as the step begins, so the training was on other batches."""
    code, report = report_of(batch, "lab3_train_while_compiling.py")
    assert code == 1, explain(report)
    assert statuses(report)["same_results"] == "failed", explain(report)


def test_a_compile_span_written_across_steps_earns_nothing(batch):
    """Lab 3: the compiler's callbacks called by hand around the warm-up's step marks, the first timed step
    done before the window and the last ones after it, the profiled steps' work moved past the profiler's
    stop (a red-team pass: 1.07-1.14x, inconclusive, before compile spans had to lie within one step and the
    profiled steps as long as the timed ones). Its profiled steps, a few ms against 30, are not the timed
    steps' evidence; and without that check, its speed-up fails (0.51x)."""
    code, report = report_of(batch, "lab3_compile_span_across_steps.py")
    assert code == 1, explain(report)
    check = next(c for c in report["checks"] if c["status"] == "failed")
    assert check["name"] == "same_results" and "did not do the timed steps' work" in check["rationale"], \
        explain(report)


@pytest.mark.parametrize("name", ["lab2_init_helper.py", "lab8_init_helper.py"])
def test_the_sandboxs_first_process_made_to_work_for_the_run_is_found(batch, name):
    """The sandbox's first process (bubblewrap's, same user, dumpable) traced and made to exec a helper that
    does the original's work, out of every run's process tree (17.9x on lab 2 and 30x on lab 8 when its CPU
    was left out). Its CPU now counts as the run's, and the checker finds it changed."""
    code, report = report_of(batch, name)
    assert code == 1, explain(report)
    check = next(c for c in report["checks"] if c["status"] == "failed")
    assert check["name"] == "runs" and "the sandbox's first process" in check["rationale"], explain(report)


def _burn_and_leave_a_zombie(group) -> subprocess.Popen:
    """A process in ``group`` that forks a child which burns 0.4 s of CPU and exits unreaped."""
    code = ("import os, time, sys\n"
            "if os.fork() == 0:\n"
            "    t = time.process_time()\n"
            "    while time.process_time() - t < 0.4: pass\n"
            "    os._exit(0)\n"
            "sys.stdout.write('forked\\n'); sys.stdout.flush(); time.sleep(60)\n")
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            preexec_fn=cgroups.entering(group), start_new_session=True)


@needs_cgroups
def test_the_kernel_counts_a_zombie_a_scan_of_live_processes_misses():
    group = cgroups.make("test")
    assert group is not None
    proc = _burn_and_leave_a_zombie(group)
    try:
        assert proc.stdout.readline().strip() == "forked"
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:  # the child is a zombie once it is done
            kids = [p for p, info in processes._all().items() if info[0] == proc.pid]
            if kids and all(processes.stat(k)[4] == "Z" for k in kids):
                break
            time.sleep(0.05)
        else:
            pytest.fail("the child never ended")
        tree = processes.Tree(proc.pid, set())
        scanned = readings.run_cpu_s(tree)
        counted = group.usage_s()
        assert counted is not None and counted >= 0.35, counted
        assert scanned < 0.2, scanned  # the zombie's 0.4 s is in no live process's figure
    finally:
        os.killpg(proc.pid, 9)
        proc.wait()
        group.remove()
    assert not group.path.exists()


def test_without_cgroups_the_kit_says_what_is_not_seen(kit):
    out = kit.run("doctor", env={"PROFLAB_CGROUPS": "off"})
    assert "CPU" in out.stdout and "not a child it leaves unreaped" in out.stdout, out.stdout


@pytest.fixture
def open_tmp():
    """A folder that another user can reach (pytest's own are the running user's alone), removed after."""
    import shutil
    import tempfile

    top = Path(tempfile.mkdtemp(prefix="proflab-user-", dir="/tmp"))
    top.chmod(0o755)
    yield top
    shutil.rmtree(top, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0 or not shutil_which("setpriv"), reason="needs root, to act as another user")
def test_a_box_is_emptied_whatever_modes_a_run_left_as_an_ordinary_user(open_tmp):
    """Run as an ordinary user (a laptop: the sandbox writes as the learner's own user), a run can leave
    folders it made unreadable in its box; the next run must find the box empty. Made and emptied here as
    ``nobody``, the sandbox's user outside when the kit runs as root, with no rights but its own."""
    tmp_path = open_tmp
    box = tmp_path / "box"
    box.mkdir()
    (box / "tmp").mkdir()
    os.chown(box, 65534, 65534)
    os.chown(box / "tmp", 65534, 65534)
    tmp_path.chmod(0o755)
    as_nobody = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", sys.executable, "-c"]
    left = ("import os\n"
            f"os.makedirs({str(box / 'tmp' / 'a' / 'b')!r})\n"
            f"open({str(box / 'tmp' / 'a' / 'b' / 'f')!r}, 'w').write('x')\n"
            f"os.chmod({str(box / 'tmp' / 'a' / 'b')!r}, 0)\n"
            f"os.chmod({str(box / 'tmp' / 'a')!r}, 0)\n"
            f"os.makedirs({str(box / 'run-1' / 'c')!r}); os.chmod({str(box / 'run-1')!r}, 0o500)\n")
    subprocess.run([*as_nobody, left], check=True, env={"PATH": os.environ["PATH"]})
    src = str(Path(__file__).resolve().parents[1] / "src")
    wipe = (f"import sys; sys.path.insert(0, {src!r})\n"
            "from pathlib import Path\n"
            "from proflab.running import sandbox\n"
            f"sandbox._empty(Path({str(box / 'tmp')!r})); sandbox._remove(Path({str(box / 'run-1')!r}))\n")
    done = subprocess.run([*as_nobody, wipe], capture_output=True, text=True, env={"PATH": os.environ["PATH"]})
    assert done.returncode == 0, done.stderr
    assert list((box / "tmp").iterdir()) == [] and not (box / "run-1").exists()


NOBODY = 65534


@pytest.fixture
def python_for_anyone():
    """The interpreter the tests run with, made reachable by another user for the test's length: a folder
    above it that others cannot pass through (a Python built under root's home, 0700) gets its ``o+x`` bit
    (passing through, not listing), and its mode back afterwards."""
    import stat

    changed: list[tuple[Path, int]] = []
    try:
        for target in {Path(os.path.realpath(sys.executable)), Path(os.path.realpath(sys.base_prefix)),
                       Path(os.path.realpath(sys.prefix))}:
            for folder in reversed(target.parents):
                mode = stat.S_IMODE(folder.stat().st_mode)
                if not mode & stat.S_IXOTH:
                    folder.chmod(mode | stat.S_IXOTH)
                    changed.append((folder, mode))
        yield
    finally:
        for folder, mode in reversed(changed):
            folder.chmod(mode)


@pytest.mark.skipif(os.geteuid() != 0 or not shutil_which("setpriv"), reason="needs root, to act as another user")
def test_a_sandboxed_check_runs_as_an_ordinary_user(kit, open_tmp, python_for_anyone):
    """A laptop's case: the kit run by its learner, not root. The sandbox then writes as that same user, and
    no cgroup is the kit's to make unless one is delegated: the check still runs every run sandboxed, grades
    the reference fix as it does for root, and writes what it writes as that user. Run here as ``nobody``,
    with a kit of its own (lab 4's data copied in) that only it owns."""
    import json
    import shutil

    from conftest import LEAK_MARK, decided, make_kit

    root = open_tmp / "kit"
    make_kit(root)
    shutil.copytree(kit.root / "data" / "features", root / "data" / "features")
    for path in [root, *root.rglob("*")]:
        os.chown(path, NOBODY, NOBODY, follow_symlinks=False)
    env = {"PATH": os.environ["PATH"], "HOME": str(root), "PROFLAB_ROOT": str(root), "COLUMNS": "200",
           **{k: os.environ[k] for k in (LEAK_MARK, "PYTHONPATH") if k in os.environ}}
    as_nobody = ["setpriv", "--reuid", str(NOBODY), "--regid", str(NOBODY), "--clear-groups"]

    def check() -> tuple[int, dict]:
        proc = subprocess.run([*as_nobody, sys.executable, "-m", "proflab", "check", "4", "--file",
                               str(root / "labs" / "04_syncs" / "solution.py"), "--json"],
                              cwd=root, env=env, capture_output=True, text=True, timeout=600)
        assert proc.stdout.strip(), proc.stderr
        return proc.returncode, json.loads(proc.stdout)

    code, report = decided(check(), check)
    assert code == 0, explain(report)
    assert report["sandboxed"] is True, report["sandbox"]
    assert os.stat(root / "runs").st_uid == NOBODY  # what it wrote, it wrote as itself
    doctor = subprocess.run([*as_nobody, sys.executable, "-m", "proflab", "doctor"], cwd=root, env=env,
                            capture_output=True, text=True, timeout=300)
    said = " ".join(doctor.stdout.split())
    assert "sandboxed by bubblewrap" in said and "CPU read from" in said, doctor.stdout + doctor.stderr
