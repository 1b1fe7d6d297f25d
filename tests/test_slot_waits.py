"""A turn's wait for the machine is told once: to the first who takes it, never again to a turn inside it.

(A check's whole turn and each of its rounds' turns inside it once counted the same wait twice: validate-lab
said "14 s, 15 s of it waiting".)
"""

from __future__ import annotations

import os
import threading
import time

from conftest import holding_every_slot
from proflab.running import slots


def test_the_wait_of_a_turn_is_taken_once_and_a_turn_inside_claims_none(tmp_path, monkeypatch):
    monkeypatch.setenv(slots.FOLDER_ENV, str(tmp_path / "slots"))
    monkeypatch.setenv(slots.CORES_ENV, str(len(os.sched_getaffinity(0))))  # one slot, on any machine
    holder = holding_every_slot(dict(os.environ))
    threading.Timer(1.5, holder.stdin.close).start()  # it gives the turn back 1.5 s from now
    try:
        started = time.perf_counter()
        with slots.turn() as outer:
            waited = time.perf_counter() - started
            taken = outer.take_wait()
            assert 1.0 <= taken <= waited + 0.01, (taken, waited)
            assert outer.take_wait() == 0.0
            with slots.turn() as inner:  # a round's turn inside the check's: the same slot, no wait of its own
                assert inner.index == outer.index and inner.take_wait() == 0.0
    finally:
        holder.wait(timeout=30)


def test_a_turn_inside_one_whose_wait_nobody_took_claims_it(tmp_path, monkeypatch):
    """A grading's turn around its checks leaves its wait to the first check inside it."""
    monkeypatch.setenv(slots.FOLDER_ENV, str(tmp_path / "slots"))
    with slots.turn() as outer:
        outer.waited_s = 2.5  # as if it had waited
        with slots.turn() as first:
            assert first.take_wait() == 2.5
        with slots.turn() as second:
            assert second.take_wait() == 0.0
