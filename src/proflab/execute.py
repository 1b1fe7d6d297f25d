"""Where a lab file is run: one fresh subprocess per run, with a time limit.

The subprocess gets its own process group, so a timeout or a Ctrl-C stops it
together with every DataLoader worker it started. Its output is captured in
files (a program that prints a lot cannot block on a full pipe), and only the
tail is kept for the report.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import labs, paths, quiet

OUTPUT_TAIL_CHARS = 4000


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
        **(steps or {}),
    }
    try:
        return _run_in(scratch, spec, file, version, env={**os.environ, **quiet.QUIET_ENV, **w.env,
                                                          "PYTHONUNBUFFERED": "1"},
                       limit=timeout_s if timeout_s is not None else w.timeout_s)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _run_in(scratch: Path, spec: dict[str, Any], file: Path, version: str, env: dict[str, str],
            limit: float) -> Outcome:
    (scratch / "spec.json").write_text(json.dumps(spec))
    result_path = Path(spec["result_path"])
    out_path, err_path = scratch / "stdout.txt", scratch / "stderr.txt"
    started = time.perf_counter()
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "proflab.runner", str(scratch / "spec.json")],
            stdin=subprocess.DEVNULL, stdout=out, stderr=err, cwd=file.resolve().parent, env=env,
            start_new_session=True,
        )
        timed_out = False
        try:
            proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:  # also on Ctrl-C: stop the run and any stray workers or threads it left
            _kill_group(proc)
    outcome = Outcome(version=version, file=file, status="", wall_s=time.perf_counter() - started,
                      returncode=proc.returncode, stdout=_tail(out_path), stderr=_tail(err_path))
    if timed_out:
        outcome.status = "timeout"
        outcome.result = {"kind": "timeout", "message": f"did not finish within {limit:g} s"}
    elif result_path.exists():
        outcome.result = json.loads(result_path.read_text())
        outcome.status = "ok" if outcome.result.get("status") == "ok" else "error"
    else:
        outcome.status = "crash"
        outcome.result = {"kind": "crash", "message": _crash_message(proc.returncode)}
    return outcome


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
