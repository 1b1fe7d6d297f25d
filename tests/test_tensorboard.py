"""A real TensorBoard server on the runs a real check wrote."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from conftest import as_in_a_terminal


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url: str):
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "kill"])
def test_tensorboard_lists_lab1_runs_and_stops_cleanly(kit, solution_check, sig):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "proflab", "tensorboard", "--port", str(port)],
                            cwd=kit.root, env={**kit.env(), "PYTHONUNBUFFERED": "1"}, preexec_fn=as_in_a_terminal,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        banner = [proc.stdout.readline() for _ in range(3)]
        assert f"http://localhost:{port}/" in banner[0], banner
        assert "Open first: the Profile tab (Overview, Operators, Diff, Memory), run 01-dataloader/" in banner[1]
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 90
        runs = {}
        while time.monotonic() < deadline:
            runs = get_json(f"{base}/data/plugin/pytorch_profiler/runs")
            if not runs.get("loading") and {"01-dataloader/original", "01-dataloader/reference"} <= set(runs["runs"]):
                break
            time.sleep(1)
        assert {"01-dataloader/original", "01-dataloader/reference"} <= set(runs["runs"]), runs
        plugins = get_json(f"{base}/data/plugins_listing")
        assert "pytorch_profiler" in plugins
    finally:
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "TensorBoard stopped" in out
    assert "Traceback" not in err
    with socket.socket() as s:  # the server is gone, not orphaned
        assert s.connect_ex(("127.0.0.1", port)) != 0


def test_a_taken_port_is_a_clear_error(kit):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "proflab", "tensorboard", "--port", str(port)],
                              cwd=kit.root, env=kit.env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "--port" in proc.stderr
    assert "Traceback" not in proc.stderr
