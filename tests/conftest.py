"""Shared fixtures: a private copy of the kit's labs, and the real CLI as a subprocess.

Every test runs ``python -m proflab`` for real, against a temporary root folder
holding a copy of ``labs/`` (so resets and edits never touch the checkout) and
its own ``data/``, ``runs/`` and ``.proflab/``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

REPO = Path(__file__).resolve().parents[1]
LEARNER_FILES = Path(__file__).resolve().parent / "learner_files"


CHECK_NAMES = ["runs", "same_results", "evidence", "faster"]


def chain_names(lab) -> list[str]:
    """The names of ``lab``'s checks, in order (``registry.chain_of``): ``CHECK_NAMES`` for a lab the kit times,
    each check's own elsewhere (lab 0's own_profile and overhead, lab 5's leaner, lab 7's gate_*)."""
    from proflab.grading.checks.registry import chain_of

    return list(chain_of(lab).names)


def kit_labs():
    """The kit's labs, as ``proflab list`` finds them in ``labs/``: tests take them from there, never
    from a list of their own, so that a new lab is tested by every test that applies to it."""
    from proflab import labs

    return labs.discover(REPO / "labs")


def pipeline_labs() -> list[str]:
    """The labs graded by the four plain checks (``CHECK_NAMES``): one process runs a pipeline whose
    fix is faster. Not a lab whose learner profiles (lab 0), is graded on memory or overhead, runs as a
    torchrun job or gates another lab's fix: the generic attempts at gaming the checker apply to these."""
    from proflab.authoring.validate import plain  # the rule validate-lab applies its generic cheats by

    return [str(lab.number) for lab in kit_labs() if plain(lab)]


def spare_number() -> int:
    """A lab number no lab of the kit uses: for a test that adds a lab."""
    return max(lab.number for lab in kit_labs()) + 1


def statuses(report: dict) -> dict[str, str]:
    """Each check's status in a ``--json`` report."""
    return {c["name"]: c["status"] for c in report["checks"]}


def as_in_a_terminal() -> None:
    """``preexec_fn`` for a command a test interrupts: Ctrl-C reaches it as it would in a terminal.

    A test suite started in the background (``cmd &``, many CI runners) has
    SIGINT ignored, and a child inherits that; a terminal's foreground job never has.
    """
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def explain(report: dict) -> str:
    """A failed assertion's message: each check, the timings and why measuring stopped, never truncated."""
    lines = [f"verdict {report.get('verdict')} (exit {report.get('exit_code')}) on {report.get('device')}"
             f"{': ' + report['error'] if report.get('error') else ''}"]
    lines += [f"  {c['name']}: {c['status']}: {c.get('rationale', '')}; measured {c.get('actual', '')}"
              for c in report.get("checks", [])]
    if report.get("comparison"):
        lines.append(f"  comparison {report['comparison']}, threshold {report.get('threshold')}, "
                     f"stopped: {report.get('stopped') or '-'}")
    for which, times in report.get("timings", {}).items():
        lines.append(f"  {which} mean step per round (s): {[round(t, 4) for t in times]}")
    if report.get("traceback"):
        lines.append(report["traceback"][-1500:])
    return "\n".join(lines)


def failing(report: dict) -> dict:
    """The check that failed (the chain stops at the first)."""
    return next(c for c in report["checks"] if c["status"] == "failed")


class Kit:
    def __init__(self, root: Path):
        self.root = root

    @property
    def lab1(self) -> Path:
        return self.root / "labs" / "01_dataloader"

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        return {**os.environ, "PROFLAB_ROOT": str(self.root), "COLUMNS": "200", **(extra or {})}

    def run(self, *args: str, timeout: float = 600, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "proflab", *args], cwd=self.root, env=self.env(env),
                              capture_output=True, text=True, timeout=timeout)

    def check_json(self, *args: str, env: dict[str, str] | None = None) -> tuple[int, dict]:
        proc = self.run("check", *args, "--json", env=env)
        assert proc.stdout.strip(), f"no JSON on stdout; stderr:\n{proc.stderr}"
        return proc.returncode, json.loads(proc.stdout)

    def check_decided(self, *args: str) -> tuple[int, dict]:
        """``check_json``, run once more when the machine was too busy to call it (``decided``)."""
        return decided(self.check_json(*args), lambda: self.check_json(*args))


def decided(first: tuple[int, dict], again: Callable[[], tuple[int, dict]]) -> tuple[int, dict]:
    """A check's outcome, or ``again()``'s when the machine was too busy to call it (exit code 4).

    That is the checker's own advice to a learner who gets "inconclusive".
    A second inconclusive verdict is returned as it is, and fails a test
    that expects a pass; a failed verdict is never run again.
    """
    code, report = first
    if code == 4:
        print(f"inconclusive, checking again:\n{explain(report)}")
        code, report = again()
    return code, report


# --- nothing a test starts outlives it ------------------------------------------

LEAK_MARK = "PROFLAB_TEST_MARK"


def _marked(token: str) -> set[int]:
    """Processes carrying this test's mark in their environment (every process the test started, and
    theirs, whatever session or group they moved to), and every member of their groups and sessions."""
    me, found, ids = os.getpid(), set(), {}
    needle = f"{LEAK_MARK}={token}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            if stat[0] in ("Z", "X"):
                continue
            ids[int(entry)] = (int(stat[2]), int(stat[3]))  # process group, session
            if needle in Path(f"/proc/{entry}/environ").read_bytes().split(b"\0"):
                found.add(int(entry))
        except (OSError, IndexError, ValueError):
            continue
    groups = {g for pid in found for g in ids.get(pid, ()) if g != os.getpgid(me) and g != os.getsid(me)}
    return found | {pid for pid, (pgid, sid) in ids.items() if pgid in groups or sid in groups}


def _pid_namespaces() -> dict[int, str]:
    """Every live process's PID namespace (``pid:[4026531836]``)."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    continue
                found[int(entry)] = os.readlink(f"/proc/{entry}/ns/pid")
            except (OSError, IndexError):
                continue
    return found


def _others_namespaces(found: dict[int, str], token: str) -> set[str]:
    """The PID namespaces made by what this test did not start (a suite or a script run beside it): the
    process that holds one (the parent, outside it, of its first process: the sandbox engine) lacks this
    test's mark. A namespace whose holder is gone (its first process orphaned) is counted as this test's."""
    mine = f"{LEAK_MARK}={token}".encode()
    others = set()
    for pid, ns in found.items():
        try:
            parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            if found.get(parent) == ns or parent <= 1:
                continue
            marks = [v for v in Path(f"/proc/{parent}/environ").read_bytes().split(b"\0")
                     if v.startswith(LEAK_MARK.encode() + b"=")]
        except (OSError, IndexError, ValueError):
            continue
        if mine not in marks:  # held by a process this test did not start (another session, a script)
            others.add(ns)
    return others


@pytest.fixture(autouse=True)
def nothing_left_running():
    """After every test, no process it started is alive (checked by environment mark, process group and
    session, not only by PID); any left are killed, and the test fails."""
    import signal
    import time
    import uuid

    token = uuid.uuid4().hex
    namespaces = set(_pid_namespaces().values())
    os.environ[LEAK_MARK] = token
    try:
        yield
    finally:
        os.environ.pop(LEAK_MARK, None)

    def left_running() -> set[int]:  # by mark, group and session; and any process of a PID namespace (a
        # sandbox's) made during the test, whatever its environment, unless another test session's made it
        found = _pid_namespaces()
        new = {ns for ns in found.values() if ns not in namespaces} - _others_namespaces(found, token)
        return _marked(token) | {pid for pid, ns in found.items() if ns in new}

    deadline = time.monotonic() + 10
    left = left_running()
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = left_running()
    if left:
        shown = []
        for pid in sorted(left):
            try:
                command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                shown.append(f"{pid}: {command[:120]}")
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        pytest.fail("processes started by this test were still running after it:\n" + "\n".join(shown))


def make_kit(root: Path) -> Kit:
    shutil.copytree(REPO / "labs", root / "labs", ignore=shutil.ignore_patterns("__pycache__"))
    return Kit(root)



def copy_of_checkout(where: Path) -> Path:
    """This checkout's kit as it is now (tracked files, and new ones git does not ignore), copied into
    ``where``, for a test that makes a repository of the instructor's kit from it."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, check=True,
                            capture_output=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file() and not source.is_symlink():
            (where / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, where / name)
    return where

@pytest.fixture(scope="session")
def kit(tmp_path_factory) -> Kit:
    """One kit for the whole session; data is generated once, here."""
    k = make_kit(tmp_path_factory.mktemp("kit"))
    proc = k.run("data")
    assert proc.returncode == 0, proc.stderr
    return k


def sharing_data(root: Path, kit: Kit) -> Kit:
    """A kit of its own (labs copied again, own runs/) that shares the session's data."""
    k = make_kit(root)
    (root / "data").symlink_to(kit.root / "data")
    return k


@pytest.fixture
def fresh_kit(tmp_path, kit) -> Kit:
    return sharing_data(tmp_path, kit)


@pytest.fixture(scope="session")
def solution_check(kit) -> tuple[int, dict]:
    """``proflab check 1 --file solution.py --json``, run once for several tests."""
    return kit.check_decided("1", "--file", str(kit.lab1 / "solution.py"))


def _reference_check(kit: Kit, tmp_path_factory, number: int, folder: str) -> tuple[int, dict]:
    """A lab's reference fix, graded once in a kit of its own (its runs never mix with others')."""
    k = sharing_data(tmp_path_factory.mktemp(f"lab{number}-solution-kit"), kit)
    return k.check_decided(str(number), "--file", str(k.root / "labs" / folder / "solution.py"))


@pytest.fixture(scope="session")
def reference_check(kit, tmp_path_factory) -> Callable[[int], tuple[int, dict]]:
    """Any lab's reference fix, graded once in the session the first time a test asks for it, by number:
    a test that applies to every lab needs no fixture per lab."""
    done: dict[int, tuple[int, dict]] = {}

    def graded(number: int) -> tuple[int, dict]:
        if number not in done:
            lab = next(lab for lab in kit_labs() if lab.number == number)
            done[number] = _reference_check(kit, tmp_path_factory, number, lab.folder.name)
        return done[number]
    return graded


@pytest.fixture(scope="session")
def lab2_solution(reference_check) -> tuple[int, dict]:
    return reference_check(2)


@pytest.fixture(scope="session")
def lab3_solution(reference_check) -> tuple[int, dict]:
    return reference_check(3)


@pytest.fixture(scope="session")
def lab4_solution(reference_check) -> tuple[int, dict]:
    return reference_check(4)


@pytest.fixture(scope="session")
def lab5_solution(reference_check) -> tuple[int, dict]:
    return reference_check(5)


@pytest.fixture(scope="session")
def lab6_solution(reference_check) -> tuple[int, dict]:
    return reference_check(6)


@pytest.fixture(scope="session")
def exercise_kit(kit, tmp_path_factory) -> Kit:
    return sharing_data(tmp_path_factory.mktemp("exercise-kit"), kit)


@pytest.fixture(scope="session")
def exercise_check(exercise_kit) -> tuple[int, dict]:
    """``proflab check dataloader --json`` on the untouched exercise, in a kit of its own."""
    return exercise_kit.check_json("dataloader")


# --- many checks in one process -------------------------------------------------------------------

CHECK_EACH = Path(__file__).resolve().parent / "check_each.py"


class Batch:
    """Groups of files, each group checked in one process (``tests/check_each.py``: one fork server
    session, torch imported once per lab, as ``proflab grade`` grades a class) the first time a test
    asks for one of its files; every test then reads its own file's report, as ``--json`` prints it.

    ``groups``: name -> (extra environment, [(lab, file, audited)]).
    """

    def __init__(self, kit: Kit, groups: dict[str, tuple[dict[str, str], list[tuple[str, Path, bool]]]]):
        self.kit, self.groups, self.done = kit, groups, {}

    def report(self, group: str, file: Path) -> tuple[int, dict]:
        if group not in self.done:
            try:
                self.done[group] = self._check(group)
            except (AssertionError, subprocess.TimeoutExpired) as e:
                self.done[group] = f"the batch {group} failed, see the first test that asked for it: {e}"[:4000]
        if isinstance(self.done[group], str):  # a batch that failed is not run again for every test of it
            pytest.fail(self.done[group])
        found = self.done[group][str(Path(file).resolve())]
        return found["exit_code"], found

    def decided(self, group: str, lab: str, file: Path) -> tuple[int, dict]:
        """The report, or the file checked once more on its own (``proflab check``) when the batch's
        check was too noisy to call (``decided``)."""
        return decided(self.report(group, file),
                       lambda: self.kit.check_json(lab, "--file", str(file), env=self.groups[group][0]))

    def _check(self, group: str) -> dict[str, dict]:
        env, items = self.groups[group]
        spec = self.kit.root / f"batch-{group}.json"
        out = self.kit.root / f"batch-{group}.out.json"
        spec.write_text(json.dumps([{"lab": lab, "file": str(Path(f).resolve()), "audited": audited}
                                    for lab, f, audited in sorted(items, key=lambda i: i[0])]))
        proc = subprocess.run([sys.executable, str(CHECK_EACH), str(spec), str(out)], cwd=self.kit.root,
                              env=self.kit.env(env), capture_output=True, text=True, timeout=3600)
        assert proc.returncode == 0 and out.is_file(), f"the batch {group} failed:\n{proc.stdout}\n{proc.stderr}"
        reports = json.loads(out.read_text())
        return {str(Path(r["file"]).resolve()): r for r in reports}


def learner_files(kit: Kit, tmp_path_factory, lab: str, names: list[str]) -> Batch:
    """One lab's files of ``tests/learner_files``, audited, as one batch named after the lab, in a kit of
    its own that shares the session's data."""
    return Batch(sharing_data(tmp_path_factory.mktemp(f"lab{lab}-kit"), kit),
                 {lab: ({}, [(lab, LEARNER_FILES / name, True) for name in names])})


def holding_every_slot(env: dict[str, str]) -> subprocess.Popen:
    """Another process that holds a turn at the machine (every slot of the folder ``env``'s PROFLAB_SLOTS
    names, where PROFLAB_SLOT_CORES makes one), returned once it holds it, until its stdin is closed."""
    holder = subprocess.Popen([sys.executable, "-c", "import sys\nfrom proflab.running import slots\n"
                               "with slots.turn():\n    print('holding', flush=True)\n    sys.stdin.read()\n"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    assert holder.stdout.readline().strip() == "holding"
    return holder


def waiting_in(folder: Path, timeout: float = 120) -> None:
    """Returns once a turn waits in the slot folder ``folder``'s queue (a ticket there)."""
    import time

    deadline = time.monotonic() + timeout
    while not any(not p.name.startswith(".") for p in (folder / "queue").glob("*")):
        assert time.monotonic() < deadline, f"no turn waited in {folder} within {timeout} s"
        time.sleep(0.05)


# --- the quick tier ------------------------------------------------------------------------------------
# `bash tests/run.sh --quick` (pytest -m quick): every test that needs no lab's data and starts no browser,
# TensorBoard server, container, torchrun job or check of a real lab: the kit's logic on recorded traces,
# small runs of the calibration lab (steps that sleep 20 ms) and the command line. A minute or two here,
# after every change; the full suite runs it first (tests/run.sh), so a broken change fails in minutes.
# The rule is by what a test needs, not a list of tests: a new test is in the tier or not by its fixtures
# (a test that waits out a limit of its own says so with @pytest.mark.slow).
SLOW_FIXTURES = frozenset({"kit", "batch"})
SLOW_MODULES = frozenset({
    "test_browser", "test_site_browser", "test_autograder_gradescope", "test_autograder_classroom",
    "test_own_model_gate", "test_profile_command", "test_profile_tab", "test_foreign_traces", "test_tensorboard",
    "test_tensorboard_views", "test_tensorboard_faults", "test_timeline_speed", "test_docs_commands",
    "test_gate",
    # real sandboxes, servers and faults, run after run: seconds each
    "test_isolation", "test_faults_second", "test_data_verify", "test_forkserver", "test_adaptive", "test_limits",
    "test_profile_exits", "test_slots",
    # a wheel built and installed in a fresh environment, then used from a project of its own
    "test_installed", "test_autograder_classroom50",
})


# --- measured alone ----------------------------------------------------------------------------------------
# The modules whose tests assert a speed measured here, where a sound fix must pass by a margin a busy machine
# can narrow: each lab's own checks (its sound fixes, some within a third of their threshold), the trust
# corpus's sound alternatives, the gate's improvements, views timed against a budget. tests/run.sh runs them
# one at a time after the rest of the slow tier, which runs on two workers (pytest -n 2): every other slow test
# asserts what load does not move (a cheat failing, a fault named, a page served), or a speed-up many times
# its threshold (the autograders' passing submissions are labs 2 and 4's reference fixes, 27x and 2.1x against
# 3x and 1.5x, timed in CPU time). The kit's verdicts under load are measured in benchmarks/, not here.
# A test of such a module that asserts nothing load moves (a file that fails on its results or its evidence,
# a hang stopped at its limit, a crash named) says so with @pytest.mark.load_free and runs with the others.
MEASURED_MODULES = frozenset({
    *(f"test_lab{n}_check" for n in range(10)), "test_trust_sound", "test_gate", "test_own_model_gate",
    "test_adaptive", "test_evidence_spellings", "test_timeline_speed",
    # and the modules that read the runs of the labs' reference checks (session fixtures: solution_check,
    # labN_solution), which the lab modules above measure: in the same process, each is made once
    "test_profile_tab", "test_tensorboard_views", "test_browser", "test_tensorboard", "test_traces",
    "test_drills_sound",
})


# Phase A of tests/run.sh asserts nothing a busy machine moves, so its two workers do not take turns at the
# machine with each other: each worker's checks queue in a slot folder of its own (PROFLAB_TEST_OWN_SLOTS=1).
# Turns themselves are tested in test_slots.py and test_faults_runs.py, with folders of their own.
if os.environ.get("PROFLAB_TEST_OWN_SLOTS") == "1" and os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["PROFLAB_SLOTS"] = str(Path("/tmp") / f"proflab-test-slots-{os.getpid()}-{os.environ['PYTEST_XDIST_WORKER']}")


def pytest_collection_modifyitems(config, items):
    for item in items:
        module = item.module.__name__.rsplit(".", 1)[-1] if getattr(item, "module", None) else ""
        if module not in SLOW_MODULES and not SLOW_FIXTURES & set(getattr(item, "fixturenames", ())) \
                and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.quick)
        elif module in MEASURED_MODULES and item.get_closest_marker("load_free") is None:
            item.add_marker(pytest.mark.measured)


# --- diagnosis drills ---------------------------------------------------------------------------------------

EMPTY_ANSWERS = 'ANSWERS = {"where": "", "ms_per_step": 0.0}'


def who_draws(key: str) -> str:
    """The first name of the form learner<N> whose drill (``authoring.drills``) is bottleneck ``key``."""
    from proflab.authoring import drills

    return next(f"learner{n}" for n in range(10_000) if drills.draw(f"learner{n}").bottleneck.key == key)


def answered(source: str, answer: tuple[str, float]) -> str:
    assert EMPTY_ANSWERS in source
    return source.replace(EMPTY_ANSWERS, f'ANSWERS = {{"where": {answer[0]!r}, "ms_per_step": {answer[1]:.2f}}}')


def profiled_answer(kit: Kit, lab) -> tuple[str, float]:
    """What a learner reads from ``proflab run``'s profile of the original: the bottleneck's part of the step,
    or its costliest operator, with its ms per step."""
    from proflab.grading.checks import diagnosis
    from proflab.measuring import evidence
    from proflab.viewing import timeline

    done = kit.run("run", lab.name, "--version", "original")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    traces = timeline.newest_traces(kit.root / "runs")
    (path,) = [p for run, p in traces.items() if run == f"{lab.number:02d}-{lab.name}/original"]
    trace = evidence.load(path)
    for name, ms, _ in diagnosis.places(lab, trace):
        return name, ms
    raise AssertionError(f"{lab.name}: the profile shows none of the bottleneck's places: "
                         f"{diagnosis.what_it_shows(trace)}")


@pytest.fixture(scope="session")
def drill_kit(kit, tmp_path_factory) -> tuple[Kit, dict]:
    """A kit with a drill of every bottleneck, each original profiled as a learner would, its answer read; its
    reference fix, so answered, in the drill's folder (solution.py, which the attempts at gaming start from)."""
    from proflab import labs
    from proflab.authoring import drills
    from proflab.authoring.drill_catalogue import CATALOGUE

    k = sharing_data(tmp_path_factory.mktemp("drill-kit"), kit)
    found = {}
    for key in [b.key for b in CATALOGUE]:
        lab = labs.load(drills.write(who_draws(key), k.root))
        found[key] = (lab, profiled_answer(k, lab))
        (lab.folder / "solution.py").write_text(answered(drills.reference_fix(drills.draw(who_draws(key))),
                                                         found[key][1]))
    return k, found


