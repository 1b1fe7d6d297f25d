"""`proflab profile`: nothing of the script outlives it, and its exit is said as the script's.

A script's own exit code is not proflab's (a script's 3 is not "the kit could not do its work": proflab
exits 1 and names the script's code); a script that ends inside the window is said to have ended during
the profiled steps, not after them; a script that starts torch.profiler itself is told why its profile and
the kit's cannot both be whole; what the script left running (a `setsid` child, a `start_new_session`
process) is stopped before proflab exits.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from conftest import REPO

TRAIN = """
import sys, torch
model = torch.nn.Linear(8, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(12):
    {inside}
    loss = model(torch.randn(4, 8)).sum()
    opt.zero_grad(); loss.backward(); opt.step()
{after}
"""


def profile(tmp_path: Path, script: str, *argv: str) -> subprocess.CompletedProcess:
    (tmp_path / "train.py").write_text(script, encoding="utf-8")
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": os.pathsep.join(
        p for p in (os.environ.get("PYTHONPATH"), str(REPO / "src")) if p)}
    return subprocess.run([sys.executable, "-m", "proflab", "profile", *argv, "train.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)


def said(proc: subprocess.CompletedProcess) -> str:
    return f"exit {proc.returncode}\n--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}"


def test_a_scripts_exit_3_after_its_window_is_the_scripts_failure_and_its_own_profiler_is_named(tmp_path):
    script = TRAIN.format(inside="""if step == 9:
        with torch.profiler.profile() as own:
            torch.ones(3).sum()
        print("own rows", len(own.key_averages()))""", after="sys.exit(3)")
    proc = profile(tmp_path, script, "--steps", "2:5")
    text = proc.stderr.replace("\n", " ")
    assert proc.returncode == 1, said(proc)  # not 3, the kit's own "could not do its work"
    assert "exited with 3 after the profiled steps" in text, said(proc)
    assert "starts torch.profiler itself (1 time)" in text, said(proc)


def test_a_script_that_dies_inside_the_window_is_said_to_end_during_it(tmp_path):
    script = TRAIN.format(inside="""if step == 4:
        raise SystemExit(5)""", after="")
    proc = profile(tmp_path, script, "--steps", "2:8")
    text = proc.stderr.replace("\n", " ")
    assert proc.returncode == 1, said(proc)
    assert "during the profiled steps" in text and "after the profiled steps" not in text, said(proc)
    assert "starts torch.profiler itself" not in text


LEAVES = """
import os, subprocess, sys, time
away = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
pid = os.fork()
if pid == 0:  # a double fork under setsid: a daemon whose parent is gone at once
    os.setsid()
    if os.fork() == 0:
        open("setsid.pid", "w").write(str(os.getpid()))
        time.sleep(300)
    os._exit(0)
os.waitpid(pid, 0)
open("session.pid", "w").write(str(away.pid))
while not os.path.exists("setsid.pid"):
    time.sleep(0.05)
print("left two behind")
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def test_nothing_the_script_started_outlives_proflab(tmp_path):
    proc = profile(tmp_path, LEAVES)
    assert "left two behind" in proc.stdout, said(proc)
    pids = [int((tmp_path / name).read_text()) for name in ("session.pid", "setsid.pid")]
    time.sleep(0.5)
    alive = [pid for pid in pids if _alive(pid)]
    for pid in alive:
        os.kill(pid, 9)
    assert not alive, f"still running after proflab exited: {alive}\n{said(proc)}"
    assert "left 2 processes running" in proc.stderr.replace("\n", " "), said(proc)
