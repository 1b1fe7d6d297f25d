"""Where a lab file is run: one fresh subprocess per run, with a time limit.

The subprocess gets its own process group, so a timeout, a Ctrl-C or too much
memory stops it together with every DataLoader worker it started. Its output
is captured in files (a program that prints a lot cannot block on a full
pipe), and only the tail is kept for the report. The runner marks the start
and the end of its timed window through a pipe; this process stamps the marks
with its own clock, so a lab file that tampers with the clock inside the run
is found out.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import labs, paths, quiet

OUTPUT_TAIL_CHARS = 4000
POLL_S = 0.25  # how often a running lab's memory is looked at
# The window the runner reports may be shorter than the one seen from here by
# scheduling jitter only: a quarter, and 20 ms, is far beyond that.
CLOCK_SLACK = 0.75
CLOCK_SLACK_S = 0.02


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

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def mean_step_s(self) -> float:
        return float(self.result["mean_step_s"])


def _tail(path: Path) -> str:
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(0, size - OUTPUT_TAIL_CHARS))
        text = f.read().decode("utf-8", errors="replace")
    text = quiet.clean(text)
    return ("…\n" + text) if size > OUTPUT_TAIL_CHARS else text


def _kill_group(proc: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=3)
            return
        except subprocess.TimeoutExpired:
            continue


def run(
    lab: labs.Lab,
    file: Path,
    version: str,
    device: str = "auto",
    *,
    trace_dir: Path | None = None,
    table: bool = False,
    record_shapes: bool = False,
    profile_memory: bool = False,
    with_stack: bool = False,
    profile_mode: str = "window",
    timeout_s: float | None = None,
    steps: dict[str, int] | None = None,
) -> Outcome:
    """Run ``file`` (a version of ``lab``) once in a fresh subprocess."""
    w = lab.workload
    scratch = Path(tempfile.mkdtemp(prefix="run-", dir=_scratch_dir()))
    result_path = scratch / "result.json"
    spec = {
        "file": str(file.resolve()),
        "device": device,
        "batch_size": w.batch_size,
        "seed": w.seed,
        "threads": w.threads,
        "data_dir": str(paths.data_dir()),
        "params": w.params,
        "warmup_steps": w.warmup_steps,
        "timed_steps": w.timed_steps,
        "profile_steps": w.profile_steps,
        "trace_dir": str(trace_dir) if trace_dir else None,
        "worker_name": version,
        "table": table,
        "record_shapes": record_shapes,
        "profile_memory": profile_memory,
        "with_stack": with_stack,
        "profile_mode": profile_mode,
        "result_path": str(result_path),
        "background_workers": w.background_workers,
        **(steps or {}),
    }
    try:
        return _run_in(scratch, spec, file, version, env={**os.environ, **quiet.QUIET_ENV, **w.env,
                                                          "PYTHONUNBUFFERED": "1"},
                       limit=timeout_s if timeout_s is not None else w.timeout_s, memory_mb=w.memory_mb)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _run_in(scratch: Path, spec: dict[str, Any], file: Path, version: str, env: dict[str, str],
            limit: float, memory_mb: float = 8192.0) -> Outcome:
    read_end, write_end = os.pipe()
    spec["mark_fd"] = write_end
    (scratch / "spec.json").write_text(json.dumps(spec))
    result_path = Path(spec["result_path"])
    out_path, err_path = scratch / "stdout.txt", scratch / "stderr.txt"
    marks: list[tuple[bytes, float]] = []
    reader = threading.Thread(target=_read_marks, args=(read_end, marks), daemon=True)
    started = time.perf_counter()
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "proflab.runner", str(scratch / "spec.json")],
                stdin=subprocess.DEVNULL, stdout=out, stderr=err, cwd=file.resolve().parent, env=env,
                start_new_session=True, pass_fds=(write_end,),
            )
        finally:
            os.close(write_end)
        reader.start()
        stopped, peak_mb = "", 0.0
        try:
            while proc.poll() is None:
                if time.perf_counter() - started > limit:
                    stopped = "timeout"
                    break
                peak_mb = max(peak_mb, _group_rss_mb(proc.pid))
                if peak_mb > memory_mb:
                    stopped = "memory"
                    break
                try:
                    proc.wait(timeout=POLL_S)
                except subprocess.TimeoutExpired:
                    pass
        finally:  # also on Ctrl-C: stop the run and any stray workers or threads it left
            _kill_group(proc)
            reader.join(timeout=5)
    outcome = Outcome(version=version, file=file, status="", wall_s=time.perf_counter() - started,
                      returncode=proc.returncode, stdout=_tail(out_path), stderr=_tail(err_path))
    if stopped == "timeout":
        outcome.status = "timeout"
        outcome.result = {"kind": "timeout", "message": f"did not finish within {limit:g} s"}
    elif stopped == "memory":
        outcome.status = "error"
        outcome.result = {"kind": "memory", "message": f"used more than {memory_mb:.0f} MB of memory "
                          f"({peak_mb:.0f} MB, counting every process it started), and was stopped"}
    elif result_path.exists():
        outcome.result = json.loads(result_path.read_text())
        outcome.status = "ok" if outcome.result.get("status") == "ok" else "error"
        if outcome.ok:
            _check_clock(outcome, marks)
    else:
        outcome.status = "crash"
        outcome.result = {"kind": "crash", "message": _crash_message(proc.returncode)}
    return outcome


def _read_marks(fd: int, marks: list[tuple[bytes, float]]) -> None:
    """Stamp every mark the runner writes with this process's clock, until the pipe closes."""
    with os.fdopen(fd, "rb", buffering=0) as pipe:
        while chunk := pipe.read(1):
            marks.append((chunk, time.perf_counter()))


def _check_clock(outcome: Outcome, marks: list[tuple[bytes, float]]) -> None:
    """The timed window the run reports against the one seen from this process."""
    starts = [t for code, t in marks if code == b"S"]
    ends = [t for code, t in marks if code == b"E"]
    if len(starts) != 1 or len(ends) != 1:
        return  # not a timed run (or one without marks): nothing to compare
    outside = ends[0] - starts[0]
    inside = float(outcome.result.get("window_s", 0.0))
    outcome.result["outside_window_s"] = outside
    if inside < CLOCK_SLACK * outside - CLOCK_SLACK_S:
        outcome.status = "error"
        outcome.result = {"kind": "clock", "message": (
            f"the timed steps took {outside * 1000:.0f} ms by the checker's clock, but "
            f"{inside * 1000:.0f} ms by the clock inside the run: something changed the clock")}


def _group_rss_mb(pgid: int) -> float:
    """Resident memory of every process in a process group, in MB (Linux; 0 elsewhere)."""
    total_kb = 0
    try:
        entries = os.listdir("/proc")
    except OSError:
        return 0.0
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[2]) != pgid:
                continue
            for line in Path(f"/proc/{entry}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total_kb += int(line.split()[1])
                    break
        except (OSError, ValueError, IndexError):
            continue
    return total_kb / 1024


def _crash_message(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = " (out of memory?)" if name == "SIGKILL" else ""
        return f"the process was killed by {name}{hint}"
    return f"the process exited with code {code} before reporting a result (sys.exit or os._exit in the lab file?)"


def _scratch_dir() -> Path:
    folder = paths.state_dir() / "tmp"
    folder.mkdir(parents=True, exist_ok=True)
    return folder
