"""The kit's own state under faults: the progress file, terminal control sequences, ``proflab reset``.

* A progress file that is truncated, wrongly shaped or partly invalid is moved
  aside (never deleted) with one warning line, and the kit goes on; commands
  run at once never lose each other's updates; failing to record progress
  never loses a check's verdict.
* What a learner's program prints, and the messages of its exceptions, reach
  the terminal as text: no escape sequence or control character from it does.
* ``proflab reset`` makes a verified backup before it touches the exercise; on
  a full disk, a read-only folder or an exercise that is a folder it changes
  nothing, says why in one line, and exits 3.

The faults are real: a tmpfs filled up, read-only bind mounts (root ignores
file modes, so ``chmod`` would prove nothing here). Those tests need root and
are skipped, saying so, without it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

from conftest import Kit, make_kit

# --- helpers ---------------------------------------------------------------------

# What must never reach the terminal from a learner's program: every C0 control
# but newline and tab (ESC, BEL, BS, CR...), DEL, and every C1 control (U+009B is CSI).
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def controls_in(text: str) -> list[str]:
    return sorted({repr(c) for c in CONTROL.findall(text)})


def no_traceback(proc: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr


def progress_file(kit: Kit) -> Path:
    return kit.root / ".proflab" / "progress.json"


def asides(kit: Kit) -> list[Path]:
    return sorted((kit.root / ".proflab").glob("progress.json.corrupt-*"))


def warnings_in(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("!")]


@pytest.fixture
def bare_kit(tmp_path) -> Kit:
    """A kit of its own (no data: list, hint and reset need none)."""
    return make_kit(tmp_path)


def _mount(*args: str) -> None:
    proc = subprocess.run(["mount", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise OSError(proc.stderr.strip() or f"mount {' '.join(args)} exited {proc.returncode}")


def _umount(path: Path) -> None:
    if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def _need_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a tmpfs or a read-only bind mount: not root here")
    if not shutil.which("mount"):
        pytest.skip("needs root to mount a tmpfs: no mount command here")


@contextmanager
def full_tmpfs(folder: Path, size: str = "256k"):
    """``folder`` on a small tmpfs, filled to the last byte."""
    _need_root()
    folder.mkdir(parents=True, exist_ok=True)
    try:
        _mount("-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder))
    except OSError as e:
        pytest.skip(f"needs root to mount a tmpfs: {e}")
    try:
        with open(folder / "filler", "wb", buffering=0) as f:
            try:
                while True:
                    f.write(b"\0" * 4096)
            except OSError:
                pass
        yield folder
    finally:
        _umount(folder)


@contextmanager
def read_only(folder: Path):
    """``folder`` as a read-only bind mount of itself: even root cannot write there."""
    _need_root()
    try:
        _mount("--bind", str(folder), str(folder))
    except OSError as e:
        pytest.skip(f"needs root to mount a read-only bind mount: {e}")
    try:
        try:
            _mount("-o", "remount,bind,ro", str(folder))
        except OSError as e:
            pytest.skip(f"needs root to remount a bind mount read-only: {e}")
        probe = folder / ".probe"
        try:
            probe.write_text("x")
        except OSError:
            pass
        else:
            probe.unlink()
            pytest.skip("a read-only bind mount is still writable here")
        yield folder
    finally:
        _umount(folder)


# --- A. the progress file ----------------------------------------------------------

BROKEN = {
    "truncated": '{"labs": {"dataloader": {"status": "passed", "hints_sh',
    "a list": "[]",
    "null": "null",
    "a number": "7",
    "not UTF-8": b'{"labs": {"\xff\xfe": 1}}',
    "an entry that is not a record": '{"labs": {"dataloader": "x"}}',
    "labs that are not a table": '{"labs": [1, 2]}',
}


@pytest.mark.parametrize("shape", list(BROKEN))
def test_a_broken_progress_file_is_moved_aside_with_one_warning(bare_kit, shape):
    broken = BROKEN[shape]
    raw = broken if isinstance(broken, bytes) else broken.encode()
    (bare_kit.root / ".proflab").mkdir()
    progress_file(bare_kit).write_bytes(raw)

    listed = bare_kit.run("list")
    assert listed.returncode == 0, listed.stderr
    no_traceback(listed)
    assert "not started" in listed.stdout
    lines = warnings_in(listed.stderr)
    assert len(lines) == 1, listed.stderr
    [aside] = asides(bare_kit)
    assert aside.read_bytes() == raw, "the learner's record is kept, byte for byte"
    assert re.fullmatch(r"progress\.json\.corrupt-\d{8}T\d{6}Z(-\d+)?", aside.name)
    assert ".proflab/progress.json " in lines[0] and f".proflab/{aside.name}" in lines[0], lines[0]

    hint = bare_kit.run("hint", "1")
    assert hint.returncode == 0 and "Hint 1/3" in hint.stdout
    no_traceback(hint)
    assert hint.stderr.strip() == "", "the file was set right once, and is read cleanly after"
    data = json.loads(progress_file(bare_kit).read_text())
    assert data["labs"]["dataloader"]["hints_shown"] == 1
    assert asides(bare_kit) == [aside], "the record moved aside is never overwritten"


def test_hint_on_a_broken_file_moves_it_aside_before_it_writes(bare_kit):
    (bare_kit.root / ".proflab").mkdir()
    progress_file(bare_kit).write_text('{"labs": {"fusion": {"status": "pass')
    hint = bare_kit.run("hint", "2")
    assert hint.returncode == 0 and "Hint 1/3" in hint.stdout
    no_traceback(hint)
    assert len(warnings_in(hint.stderr)) == 1, hint.stderr
    [aside] = asides(bare_kit)
    assert aside.read_text() == '{"labs": {"fusion": {"status": "pass'
    assert json.loads(progress_file(bare_kit).read_text()) == {"labs": {"embeddings": {"hints_shown": 1}}}


def test_invalid_entries_are_dropped_the_rest_kept_and_the_original_moved_aside(bare_kit):
    record = {
        "labs": {
            "dataloader": {"status": 7, "hints_shown": 2, "checks": 1},  # a bad status: the rest of it stays
            "embeddings": {"status": "passed", "hints_shown": "2", "speedup": 31.5},  # hints_shown not an int
            "fusion": "x",  # not a record at all
            "syncs": {"status": "failing", "hints_shown": True, "checks": -1},
        },
        "last_run": {"lab": 3},  # no run
    }
    raw = json.dumps(record).encode()
    (bare_kit.root / ".proflab").mkdir()
    progress_file(bare_kit).write_bytes(raw)

    listed = bare_kit.run("list")
    assert listed.returncode == 0, listed.stderr
    no_traceback(listed)
    rows = {line.split()[1]: line for line in listed.stdout.splitlines() if re.match(r"^\d\s", line)}
    assert rows["embeddings"].rstrip().endswith("passed")
    assert rows["syncs"].rstrip().endswith("failing")
    assert rows["dataloader"].rstrip().endswith("not started")
    [line] = warnings_in(listed.stderr)
    for dropped in ("labs.dataloader.status", "labs.embeddings.hints_shown", "labs.fusion", "last_run"):
        assert dropped in line, line
    [aside] = asides(bare_kit)
    assert aside.read_bytes() == raw, "nothing is lost silently: the whole original is kept"
    assert json.loads(progress_file(bare_kit).read_text()) == {
        "labs": {
            "dataloader": {"hints_shown": 2, "checks": 1},
            "embeddings": {"status": "passed", "speedup": 31.5},
            "syncs": {"status": "failing"},
        },
    }
    hint = bare_kit.run("hint", "1")
    assert "Hint 3/3" in hint.stdout, "the valid hints_shown was kept"
    assert hint.stderr.strip() == ""


def test_a_valid_file_is_left_alone(bare_kit):
    record = {"labs": {"dataloader": {"status": "failing", "hints_shown": 1, "checks": 2, "speedup": None,
                                      "device": "cpu", "last_check": "2026-01-01T00:00:00+00:00",
                                      "from_a_newer_kit": [1]}},
              "last_run": {"lab": "01-dataloader", "run": "yours", "at": "2026-01-01T00:00:00+00:00"}}
    (bare_kit.root / ".proflab").mkdir()
    progress_file(bare_kit).write_text(json.dumps(record))
    listed = bare_kit.run("list")
    assert listed.returncode == 0 and listed.stderr.strip() == "", listed.stderr
    assert asides(bare_kit) == []
    assert json.loads(progress_file(bare_kit).read_text()) == record


def test_list_on_a_fresh_kit_writes_nothing(bare_kit):
    assert bare_kit.run("list").returncode == 0
    assert not (bare_kit.root / ".proflab").exists(), "reading progress never creates the kit's state"


def test_concurrent_commands_never_lose_an_update(bare_kit):
    """4 ``proflab hint`` at once, one per lab, three times over; then 3 at once on one lab."""
    for _ in range(3):
        procs = [subprocess.Popen([sys.executable, "-m", "proflab", "hint", str(n)], cwd=bare_kit.root,
                                  env=bare_kit.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for n in (1, 2, 3, 4)]
        for p in procs:
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0 and "Traceback" not in err, err
    data = json.loads(progress_file(bare_kit).read_text())
    assert {name: lab["hints_shown"] for name, lab in data["labs"].items()} == \
        {"dataloader": 3, "embeddings": 3, "fusion": 3, "syncs": 3}

    (bare_kit.root / ".proflab" / "progress.json").unlink()
    procs = [subprocess.Popen([sys.executable, "-m", "proflab", "hint", "syncs"], cwd=bare_kit.root,
                              env=bare_kit.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(3)]
    shown = sorted(re.search(r"Hint (\d)/3", p.communicate(timeout=120)[0]).group(1) for p in procs)
    assert shown == ["1", "2", "3"], "each of the three saw the others' update"
    assert (bare_kit.root / ".proflab" / "progress.lock").exists()
    assert not list((bare_kit.root / ".proflab").glob(".progress.json.*")), "no temp file is left"


def test_the_last_run_is_validated_before_tensorboard_uses_it(bare_kit, monkeypatch):
    """``_what_to_open`` (``proflab tensorboard``'s pointer) on a last_run of the wrong shape."""
    monkeypatch.setenv("PROFLAB_ROOT", str(bare_kit.root))
    monkeypatch.chdir(bare_kit.root)
    from proflab.commands import learning as cli

    (bare_kit.root / ".proflab").mkdir()
    (bare_kit.root / "runs").mkdir()
    for last in ({"lab": 1, "run": "yours"}, "01-dataloader/yours", {"lab": "../..", "run": "x"}):
        progress_file(bare_kit).write_text(json.dumps({"labs": {}, "last_run": last}))
        assert cli._what_to_open(bare_kit.root / "runs") == ["[dim]No runs yet: `proflab run 1` writes the first one.[/]"]
    assert len(asides(bare_kit)) == 3
    for run in ("yours", "original"):  # two runs of lab 1, each with its trace: the tabs list them
        (bare_kit.root / "runs" / "01-dataloader" / run).mkdir(parents=True)
        (bare_kit.root / "runs" / "01-dataloader" / run / "vm_1.1.pt.trace.json").write_text('{"traceEvents": []}')
    progress_file(bare_kit).write_text(json.dumps({"labs": {}, "last_run": {"lab": "01-dataloader", "run": "yours"}}))
    said = cli._what_to_open(bare_kit.root / "runs")
    assert "01-dataloader/yours" in said[0]
    assert "Diff[/] view: run [bold]01-dataloader/original[/] → 01-dataloader/yours" in said[1], said


# --- B. terminal control sequences: a real lab run -----------------------------------------

# Lab 4 (syncs) starts fastest of the four. At import its file prints escape
# sequences (an OSC that retitles the terminal, a screen clear, colours, the
# 8-bit CSI, a full reset, a bell, a progress bar redrawn with \r); then
# pipeline(cfg) raises, its message full of them too, and the line that raises
# holds raw ESC and BEL bytes (the report shows that line of source).
NASTY_PRINTS = '''
print("\\x1b]0;pwned-title\\x07\\x1b[2J\\x1b[H\\x1b[31mred-marker\\x1b[0m \\x9b2J bell\\x07 \\x1bc after-reset")
print("\\x1bP1$r0m\\x1b\\\\\\x1b_apc\\x1b\\\\\\x1b[1;1Hdcs-marker\\x08\\x00")
print("progress 10%\\rprogress 50%\\rprogress 100%")
'''
NASTY_PIPELINE = '''

_real_pipeline = pipeline


def pipeline(cfg):
    raise RuntimeError("visible-message \\x1b[2J\\x1b]0;t2\\x07\\x9b31m ESC\x1b[2J BEL\x07 end-of-message")
    yield from _real_pipeline(cfg)
'''


@pytest.fixture(scope="module")
def shared_data(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("faults-data")


def _syncs_kit(root: Path, data: Path) -> Kit:
    kit = make_kit(root)
    (root / "data").symlink_to(data)
    return kit


def _nasty(kit: Kit) -> Path:
    source = (kit.root / "labs" / "04_syncs" / "solution.py").read_text()
    file = kit.root / "nasty.py"
    file.write_text(NASTY_PRINTS + source + NASTY_PIPELINE)
    return file


def _assert_clean(proc: subprocess.CompletedProcess) -> None:
    """No control character on either stream; no traceback but the learner's own (--verbose shows it)."""
    for name, text in (("stdout", proc.stdout), ("stderr", proc.stderr)):
        assert controls_in(text) == [], f"control characters on {name}: {controls_in(text)}\n{text}"
    for block in (proc.stdout + proc.stderr).split("Traceback (most recent call last):")[1:]:
        assert "nasty.py" in block and "RuntimeError: visible-message" in block, block


def test_run_shows_a_programs_output_and_errors_without_control_sequences(tmp_path, shared_data):
    kit = _syncs_kit(tmp_path, shared_data)
    file = _nasty(kit)
    proc = kit.run("run", "4", "--file", str(file), "--verbose")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    _assert_clean(proc)
    assert "red-marker" in proc.stdout and "after-reset" in proc.stdout and "dcs-marker" in proc.stdout
    assert "pwned-title" not in proc.stdout + proc.stderr, "the OSC's title is not shown as text"
    assert "progress 100%" in proc.stdout and "progress 10%" not in proc.stdout, "a redrawn line reads as it ended"
    assert "RuntimeError: visible-message" in proc.stderr and "end-of-message" in proc.stderr
    assert "ESC" in proc.stderr and "BEL" in proc.stderr, "the source line that raised is shown"


def test_check_reports_a_programs_errors_without_control_sequences(tmp_path, shared_data):
    kit = _syncs_kit(tmp_path, shared_data)
    file = _nasty(kit)
    for verbose in ((), ("--verbose",)):
        proc = kit.run("check", "4", "--file", str(file), *verbose)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        _assert_clean(proc)
        out = proc.stdout
        assert "FAILED" in out and "your pipeline raised an error" in out
        assert "visible-message" in out and "end-of-message" in out
        assert "red-marker" in out and "progress 100%" in out, "the program's output, as text"
        if verbose:
            assert "Full traceback" in out and "RuntimeError: visible-message" in out
    # --json: any control character left in a message is escaped by JSON, never raw on stdout
    proc = kit.run("check", "4", "--file", str(file), "--json")
    assert controls_in(proc.stdout) == []
    report = json.loads(proc.stdout)
    assert "visible-message" in report["checks"][0]["actual"]


PRINTABLE = [
    ("plain text", "plain text"),
    ("tab\tand\nnewline\n", "tab\tand\nnewline\n"),
    ("é 漢字 🙂 ×", "é 漢字 🙂 ×"),
    ("[bold]markup is rich's business[/]", "[bold]markup is rich's business[/]"),
    ("\x1b[2J\x1b[Hcleared", "cleared"),  # CSI: clear the screen, home the cursor
    ("\x1b[38;5;196mred\x1b[0m", "red"),  # CSI with parameters
    ("\x1b[?1049hfull-screen", "full-screen"),  # CSI private mode
    ("\x1b]0;title\x07text", "text"),  # OSC ended by BEL
    ("\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\", "link"),  # OSC hyperlink, ended by ST
    ("\x1bP1$r0m\x1b\\dcs", "dcs"),  # DCS string
    ("\x1b_apc\x1b\\\x1b^pm\x07\x1bXsos\x1b\\end", "end"),  # APC, PM, SOS
    ("\x1bc\x1b7\x1b8\x1b(B\x1b#8two-char", "two-char"),  # RIS, save/restore, charset, DECALN
    ("\x9b2J8-bit CSI", "8-bit CSI"),
    ("\x9d0;t\x9c8-bit OSC", "8-bit OSC"),
    ("c1\x85\x8d\x9fgone", "c1gone"),
    ("bell\x07 bs\x08 nul\x00 vt\x0b ff\x0c del\x7f esc\x1b", "bell bs nul vt ff del esc"),
    ("\x1b[12", "12"),  # an unfinished CSI: the introducer goes, the text stays
    ("unterminated \x1b]0;title", "unterminated 0;title"),  # an OSC never ended hides nothing
    ("10%\r50%\r100%", "100%"),  # a progress bar: as the terminal shows it at the end
    ("loading 10%\rdone", "doneing 10%"),  # a shorter redraw leaves the tail, as on a terminal
    ("bar 10%\r\x1b[2Kbar 20%\n", "bar 20%\n"),
    ("windows\r\nlines\r\n", "windows\nlines\n"),
    ("trailing\r", "trailing"),
]


@pytest.mark.parametrize("text, shown", PRINTABLE, ids=[repr(t)[:30] for t, _ in PRINTABLE])
def test_printable(text, shown):
    from proflab.quiet import printable

    assert printable(text) == shown
    assert controls_in(printable(text)) == []


def test_clean_applies_printable_and_still_drops_kineto_noise():
    from proflab.quiet import clean

    text = "STAGE:2026-01-01 10:00:00 1:1 ActivityProfilerController.cpp:1] Completed Stage\n\x1b[31mmine\x1b[0m\r\n"
    assert clean(text) == "mine"


def test_terminal_renderers_of_grading_show_no_control_sequences():
    """``grade``'s lines and table (learner names, file names and reasons come from a class folder)."""
    from rich.console import Console

    from proflab.reporting import grade_formats, report

    console = Console(record=True, width=200, force_terminal=False)
    console.print(report.shown("\x1b]0;x\x07name\x9b2J"))
    assert console.export_text().strip() == "name"
    assert grade_formats._shown("al\x1b[2Jice [b]") == "alice \\[b]"


def test_report_and_grading_render_learner_text_without_control_sequences(monkeypatch):
    """report.render, and grade's done_line, Progress and summary, on a report full of escape sequences."""
    import io

    from rich.console import Console

    from conftest import REPO
    from proflab.grading import checks, grade
    from proflab.reporting import grade_formats, report
    from proflab import labs

    monkeypatch.setenv("PROFLAB_ROOT", str(REPO))
    bad = "\x1b]0;pwned-title\x07\x1b[2J\x9b31m\x1bcVISIBLE\x07\x08"
    lab = labs.load(REPO / "labs" / "04_syncs")
    r = checks.Report(lab=lab.name, number=lab.number, title=lab.title, file=f"/tmp/{bad}.py", label="x",
                      device="cpu", verdict=checks.FAILED, checks=[checks.Check(*c) for c in checks.CHECKS],
                      output=f"printed {bad}\nprogress 1%\rprogress 99%", traceback=f"Traceback {bad}")
    r.checks[0].failed(f"rationale {bad}", f"expected {bad}", f"actual {bad}", f"help {bad}", [f"detail {bad}"])
    sub = grade.Submission(learner=f"al{bad}ice", lab=lab, path=Path("x.py"), shown=f"al{bad}ice/4.py")
    g = grade.Graded(submission=sub, report=r, points=[grade.Points(c.name, 0.0, 1.0) for c in r.checks])
    result = grade.Result(folder=Path("/tmp"), graded=[g], skipped=[grade.Skipped(f"f{bad}.py", f"reason {bad}")],
                          learners=[sub.learner], started_at="2026-01-01T00:00:00+00:00", duration_s=1.0)
    stream = io.StringIO()
    console = Console(file=stream, width=200, highlight=False)
    report.render(r, console, verbose=True)
    console.print(grade_formats.done_line(1, 1, g))
    console.print(grade_formats.summary(result))
    updates: list[str] = []
    progress = grade_formats.Progress(console, updates.append)
    progress.start(1, 1, sub)
    progress.step(f"step {bad}")
    console.print("\n".join(updates))
    text = stream.getvalue()
    assert controls_in(text) == [], text
    for word in ("rationale", "expected", "actual", "help", "detail", "printed", "Traceback", "alVISIBLEice",
                 "progress 99%", "reason", "step VISIBLE"):
        assert word in text, word
    assert "pwned-title" not in text and "progress 1%" not in text


# --- A (4). recording progress never loses a verdict --------------------------------------------

FAILS_FAST = '''

def pipeline(cfg):
    raise RuntimeError("not yet")
    yield
'''


def test_check_shows_its_verdict_when_progress_cannot_be_recorded(tmp_path, shared_data):
    kit = _syncs_kit(tmp_path, shared_data)
    exercise = kit.root / "labs" / "04_syncs" / "exercise.py"
    exercise.write_text(exercise.read_text() + FAILS_FAST)
    (kit.root / ".proflab").mkdir(exist_ok=True)
    (kit.root / ".proflab" / "progress.lock").mkdir()  # the lock cannot be opened: nothing can be recorded
    proc = kit.run("check", "4")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    no_traceback(proc)
    assert "FAILED · lab 4 (syncs)" in proc.stdout, "the verdict is shown"
    [line] = warnings_in(proc.stderr)
    assert "your progress was not recorded" in line and "progress.lock" in line, line
    assert not progress_file(kit).exists()


def test_check_records_its_verdict_over_a_broken_progress_file(tmp_path, shared_data):
    kit = _syncs_kit(tmp_path, shared_data)
    exercise = kit.root / "labs" / "04_syncs" / "exercise.py"
    exercise.write_text(exercise.read_text() + FAILS_FAST)
    (kit.root / ".proflab").mkdir(exist_ok=True)
    progress_file(kit).write_text('{"labs": {"syncs": "x", "fusion": {"status": "passed"}}}')
    proc = kit.run("check", "4")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    no_traceback(proc)
    assert "FAILED · lab 4 (syncs)" in proc.stdout
    assert len(warnings_in(proc.stderr)) == 1, proc.stderr
    assert len(asides(kit)) == 1
    labs = json.loads(progress_file(kit).read_text())["labs"]
    assert labs["syncs"]["status"] == "failing" and labs["syncs"]["checks"] == 1
    assert labs["fusion"] == {"status": "passed"}


# --- C. proflab reset never leaves a broken backup -------------------------------------------------

MINE = "\n# the learner's edit: num_workers=3\n"


def _edited(kit: Kit) -> tuple[Path, bytes]:
    exercise = kit.lab1 / "exercise.py"
    exercise.write_text(exercise.read_text() + MINE)
    return exercise, exercise.read_bytes()


def test_reset_on_a_full_disk_changes_nothing_and_says_why(bare_kit):
    exercise, mine = _edited(bare_kit)
    state = bare_kit.root / ".proflab"
    with full_tmpfs(state):
        proc = bare_kit.run("reset", "1")
        backups = [p for p in state.rglob("*") if p.is_file() and p.name != "filler"]
    assert proc.returncode == 3, proc.stdout + proc.stderr
    no_traceback(proc)
    assert exercise.read_bytes() == mine, "the learner's work is untouched"
    assert backups == [], f"no backup, not even an empty one, is left: {backups}"
    message = proc.stderr.strip()
    assert len(message.splitlines()) == 1, message
    assert "No space left on device" in message
    assert "labs/01_dataloader/exercise.py" in message and ".proflab/backups/01-dataloader/exercise-" in message
    assert "Restored" not in proc.stdout


def test_reset_when_the_backup_folder_fills_up_midway(bare_kit):
    """Space for a few bytes but not the whole file: the short write is never renamed into a backup."""
    exercise, _ = _edited(bare_kit)
    exercise.write_text(exercise.read_text() + "# " + "x" * 200_000 + "\n")  # bigger than the tmpfs
    mine = exercise.read_bytes()
    backups = bare_kit.root / ".proflab" / "backups" / "01-dataloader"
    with full_tmpfs(backups, size="128k") as folder:
        (folder / "filler").unlink()  # room again, but less than the exercise needs
        proc = bare_kit.run("reset", "1")
        left = sorted(p.name for p in folder.iterdir())
    assert proc.returncode == 3, proc.stdout + proc.stderr
    no_traceback(proc)
    assert "No space left on device" in proc.stderr
    assert exercise.read_bytes() == mine
    assert left == [], f"no partial backup or temp file is left: {left}"


def test_reset_into_a_read_only_lab_folder(bare_kit):
    exercise, mine = _edited(bare_kit)
    with read_only(bare_kit.lab1):
        proc = bare_kit.run("reset", "1")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    no_traceback(proc)
    assert exercise.read_bytes() == mine
    message = proc.stderr.strip()
    assert len(message.splitlines()) == 1 and "Read-only file system" in message, message
    assert "labs/01_dataloader" in message
    assert not list((bare_kit.root / ".proflab").rglob("exercise-*.py")), "no backup is made for nothing"


def test_reset_with_a_read_only_state_folder(bare_kit):
    exercise, mine = _edited(bare_kit)
    state = bare_kit.root / ".proflab"
    state.mkdir()
    with read_only(state):
        proc = bare_kit.run("reset", "1")
        hint = bare_kit.run("hint", "1")
        listed = bare_kit.run("list")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    no_traceback(proc)
    assert exercise.read_bytes() == mine
    assert "Read-only file system" in proc.stderr and ".proflab/backups" in proc.stderr
    # a hint is shown even when it cannot be remembered; list reads what it can
    assert hint.returncode == 0 and "Hint 1/3" in hint.stdout
    no_traceback(hint)
    assert len(warnings_in(hint.stderr)) == 1 and "Read-only file system" in hint.stderr
    assert listed.returncode == 0 and listed.stderr.strip() == ""


def test_an_exercise_that_is_a_folder(bare_kit):
    exercise = bare_kit.lab1 / "exercise.py"
    exercise.unlink()
    exercise.mkdir()
    (exercise / "notes.txt").write_text("the learner's")

    proc = bare_kit.run("reset", "1")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    no_traceback(proc)
    assert "is a folder, not a file" in proc.stderr and "labs/01_dataloader/exercise.py" in proc.stderr
    assert (exercise / "notes.txt").read_text() == "the learner's", "the folder is left as it is"

    proc = bare_kit.run("check", "1")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    no_traceback(proc)
    assert "is a folder, not a file" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert (exercise / "notes.txt").exists()


def test_a_reset_backup_is_a_verified_copy(bare_kit):
    exercise, mine = _edited(bare_kit)
    os.chmod(exercise, 0o640)
    proc = bare_kit.run("reset", "1")
    assert proc.returncode == 0, proc.stderr
    [backup] = (bare_kit.root / ".proflab" / "backups" / "01-dataloader").iterdir()
    assert backup.read_bytes() == mine and backup.name in proc.stdout
    assert backup.stat().st_mode & 0o777 == 0o640, "the copy keeps the exercise's permissions"
    assert exercise.read_bytes() == (bare_kit.lab1 / "original.py").read_bytes()
