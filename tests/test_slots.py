"""Turns at the machine (``running/slots.py``), and the CPU-time figure read from outside a run.

Every test uses a slot folder of its own (``PROFLAB_SLOTS``), so the kit's
other tests and checks on this machine neither wait for it nor count in it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from conftest import Kit, explain

CALIBRATION = Path(__file__).resolve().parent / "calibration"
ONE_SLOT = str(len(os.sched_getaffinity(0)))  # cores per slot = every core: one slot, whatever the machine

HOLD = textwrap.dedent("""
    import sys, time
    from proflab.running import slots
    with slots.turn(lambda message: print(message, flush=True)):
        print("holding", flush=True)
        time.sleep(float(sys.argv[1]))
""")


@pytest.fixture
def own_slots(tmp_path, monkeypatch) -> dict[str, str]:
    env = {"PROFLAB_SLOTS": str(tmp_path / "slots"), "PROFLAB_SLOT_CORES": ONE_SLOT}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env


def hold(seconds: float) -> subprocess.Popen:
    """A process holding a turn (or waiting for one), saying what it does, line by line."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(seconds)], stdout=subprocess.PIPE, text=True)
    return proc


def said(proc: subprocess.Popen, text: str, timeout: float = 30.0) -> list[str]:
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line.strip())
        if text in line:
            return lines
    raise AssertionError(f"never said {text!r}: {lines}")


def test_a_slot_is_given_back_when_its_holder_is_killed(own_slots):
    from proflab.running import slots

    holder = hold(60)
    try:
        said(holder, "holding")
        heard: list[str] = []
        got = threading.Event()

        def wait_for_turn():
            with slots.turn(heard.append):
                got.set()

        waiter = threading.Thread(target=wait_for_turn)
        waiter.start()
        time.sleep(1.0)
        assert not got.is_set() and heard and heard[0].startswith(slots.WAITING), heard
        holder.send_signal(signal.SIGKILL)  # no clean-up of its own: the kernel gives the lock back
        waiter.join(timeout=10)
        assert got.is_set()
    finally:
        holder.kill()
        holder.wait()


def test_turns_are_taken_in_the_order_asked_and_say_their_place(own_slots):
    from proflab.running import slots

    holder = hold(60)
    second = None
    try:
        said(holder, "holding")
        second = hold(60)  # waits first
        said(second, slots.WAITING)
        heard: list[str] = []
        got, done = threading.Event(), threading.Event()

        def third():
            with slots.turn(heard.append):
                got.set()
                done.wait(10)

        thread = threading.Thread(target=third, daemon=True)
        thread.start()
        time.sleep(1.0)
        assert heard and "1 ahead in the queue" in heard[0], heard
        holder.kill()
        said(second, "holding")  # the one that asked first is next
        time.sleep(0.5)
        assert not got.is_set()
        second.kill()
        assert got.wait(10)
        done.set()
        thread.join(timeout=10)
    finally:
        for proc in (holder, second):
            if proc is not None:
                proc.kill()
                proc.wait()


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="pinning needs two cores")
def test_with_several_slots_each_turn_pins_its_run_to_its_own_cores(tmp_path, monkeypatch):
    from proflab.running import slots

    monkeypatch.setenv("PROFLAB_SLOTS", str(tmp_path / "slots"))
    monkeypatch.setenv("PROFLAB_SLOT_CORES", "1")
    cores = slots.layout()
    assert len(cores) == len(os.sched_getaffinity(0)) and all(len(c) == 1 for c in cores)
    other = hold(60)
    run = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        said(other, "holding")  # the first free slot: 0
        with slots.turn() as slot:
            assert slot.index != 0 and slot.cores == cores[slot.index]
            slots.pin([run.pid])
            assert os.sched_getaffinity(run.pid) == set(slot.cores)
            assert sorted(slots.holders()) == [0, slot.index]
    finally:
        for proc in (other, run):
            proc.kill()
            proc.wait()


def test_two_checks_started_together_take_turns_and_both_verdicts_stand(tmp_path, own_slots):
    root = tmp_path / "kit"
    shutil.copytree(CALIBRATION, root / "labs" / "90_calibration")
    kit = Kit(root)
    env = kit.env({**own_slots, "PROFLAB_CAL_SPEEDUPS": "1.5", "PROFLAB_CAL_COUNTER": str(tmp_path / "count"),
                   "PROFLAB_SANDBOX_SHARED": str(tmp_path)})
    scheduled = root / "labs" / "90_calibration" / "scheduled.py"
    command = [sys.executable, "-m", "proflab", "check", "calibration", "--file", str(scheduled), "--json"]
    first = subprocess.Popen(command, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.3)
    second = subprocess.Popen(command, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    outputs = [proc.communicate(timeout=600) for proc in (first, second)]
    import json

    reports = [json.loads(out) for out, _ in outputs]
    for proc, report in zip((first, second), reports):
        assert proc.returncode == 0 and report["verdict"] == "passed", explain(report)
        assert report["comparison"]["speedup"] == pytest.approx(1.5, rel=0.1), explain(report)
    waits = [err for _, err in outputs if "waiting for a turn on this machine" in err]
    assert waits, [err for _, err in outputs]  # one of them waited, and said so
    assert max(r["waited_s"] for r in reports) > 0.5
    faster = next(c for c in reports[1]["checks"] if c["name"] == "faster")
    assert any("not counted" in line for line in faster["details"]) or reports[1]["waited_s"] < 1


# --- the CPU time of a run, read from /proc ----------------------------------------------------

SPIN = textwrap.dedent('''
    import time
    import torch

    def pipeline(cfg):
        step = 0
        while True:
            until = time.process_time() + 0.02
            while time.process_time() < until:
                pass
            yield {"step": torch.ones(4).sum() * step}
            step += 1
''')


def test_the_cpu_time_of_a_run_that_sleeps_is_near_zero_and_of_one_that_spins_near_its_wall_time(tmp_path):
    from proflab import labs
    from proflab.running import execute

    folder = tmp_path / "labs" / "90_calibration"
    shutil.copytree(CALIBRATION, folder)
    lab = labs.load(folder)
    spin = folder / "spin.py"
    spin.write_text(SPIN, encoding="utf-8")
    sleeping = execute.run(lab, lab.original, "sleeps")
    spinning = execute.run(lab, spin, "spins")
    for outcome in (sleeping, spinning):
        assert outcome.ok, (outcome.status, outcome.result)
    s, p = sleeping.result, spinning.result
    timed = lab.workload.timed_steps
    assert s["cpu_window_s"] < 0.2 * s["window_s"], s  # 20 ms asleep a step: a few ms of CPU in all
    assert p["cpu_window_s"] >= 0.9 * timed * 0.02, p  # 20 ms of CPU a step, at least
    assert p["cpu_window_s"] <= p["window_s"] * 1.05 + 0.005, p  # one thread: never more than the clock
    assert p["cpu_span_s"] >= p["cpu_window_s"] and p["first_step_cpu_s"] >= 0
