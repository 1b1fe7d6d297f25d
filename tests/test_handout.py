"""Lab 3's batches handed out one step at a time (``labkit.handout``), and the checker's side of it.

Where compiling in the warm-up is left out of a run's figure, a run could
train every later step while "compiling" and replay the results. The checker
hands out which stored batch each step takes only once the step before has
ended, down the mark channel; these tests drive both ends of a real socket
pair, the checker's reader (``marks._read_marks``) on one, the lab kit's
``next_index`` on the other. The whole check, with an attempt that trains
while compiling, is in ``test_outside.py``.
"""

from __future__ import annotations

import os
import socket
import threading

import pytest

from proflab.labkit import handout
from proflab.running import marks


@pytest.fixture(autouse=True)
def no_channel():
    handout.set_channel(None)
    yield
    handout.set_channel(None)


@pytest.fixture
def pair():
    ours, theirs = socket.socketpair()
    fds = ours.detach(), theirs.detach()
    yield fds
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def test_outside_a_check_the_batches_come_in_order():
    assert not handout.active()
    assert [handout.next_index(4, step) for step in range(6)] == [0, 1, 2, 3, 0, 1]


def test_in_a_check_each_batch_is_the_checkers_draw(pair):
    checker, run = pair
    draws = handout.draws(b"k" * 16, seed=7, steps=3)
    handout.set_channel(run)
    for step, draw in enumerate(draws):
        handout.began()
        os.write(checker, draw)
        assert handout.next_index(64, step) == handout.KEY.unpack(draw)[0] % 64


def test_draws_are_the_rounds_and_the_checkers_own():
    a = handout.draws(b"a" * 16, seed=1, steps=46)
    assert a == handout.draws(b"a" * 16, seed=1, steps=46)  # both versions of a round: the same batches
    assert a != handout.draws(b"a" * 16, seed=2, steps=46)
    assert a != handout.draws(b"b" * 16, seed=1, steps=46)  # another checking process: others
    order = [handout.KEY.unpack(d)[0] % 64 for d in a]
    assert order != list(range(46))  # not the stored order a run could assume


def test_a_batch_asked_for_before_its_step_begins_is_refused_at_once(pair):
    _, run = pair
    handout.set_channel(run)
    handout.began()  # step 0 is running
    with pytest.raises(handout.HandoutError, match="only as that step begins"):
        handout.next_index(64, 1)  # list(data.batches()), or a batch fetched ahead


def test_a_draw_that_never_comes_is_reported_not_waited_on_forever(pair, monkeypatch):
    _, run = pair
    monkeypatch.setattr(handout, "WAIT_S", 0.2)
    handout.set_channel(run)
    handout.began()
    with pytest.raises(handout.HandoutError, match="did not hand out batch 1"):
        handout.next_index(64, 0)


def test_the_checker_hands_out_a_draw_after_each_steps_start_and_end(pair):
    """B (the first step), W, T and Q (each step's end) each release the next step's draw, none past the
    last; a run that ends with draws it never read (a socket then reads as reset) ends the reading cleanly."""
    checker, run = pair
    draws = handout.draws(b"k" * 16, seed=3, steps=4)
    got = marks.Marks()
    reader = threading.Thread(target=marks._read_marks, args=(checker, got, marks.Watched(draws=draws)), daemon=True)
    reader.start()
    handout.set_channel(run)
    received = []
    for step, code in enumerate(b"BWST"):
        os.write(run, bytes([code]))
        if code == ord("S"):
            continue
        handout.began()
        received.append(handout.next_index(2**32, len(received)))
    os.write(run, b"T")  # the last step's end: its draw (the fourth) is sent, never read
    os.write(run, b"E")
    os.close(run)
    reader.join(10)
    assert not reader.is_alive()
    assert received == [handout.KEY.unpack(d)[0] % 2**32 for d in draws[:3]]
    assert "".join(code for code, _ in got.stamps) == "BWSTTE"


def test_a_refusal_on_a_thread_of_its_own_ends_the_run_saying_why(pair):
    """A thread fetching ahead is refused; the step waiting on it would wait out the time limit, so the
    runner's callback ends the run at once (on the main thread, the error is raised to the step)."""
    _, run = pair
    ended = []
    handout.set_channel(run, refused=ended.append)
    handout.began()
    with pytest.raises(handout.HandoutError):
        handout.next_index(64, 1)
    assert ended == []  # the main thread: the step raises it, and the runner reports its line

    def ahead():
        try:
            handout.next_index(64, 1)
        except handout.HandoutError:
            pass

    thread = threading.Thread(target=ahead, name="ahead")
    thread.start()
    thread.join(10)
    assert len(ended) == 1 and "only as that step begins" in str(ended[0])


def stamped(*codes_and_times) -> marks.Marks:
    m = marks.Marks()
    m.stamps = list(codes_and_times)
    m.busy = [t for code, t in codes_and_times if code in "Cc"]  # CPU seconds = the clock, for the test
    return m


def test_compiling_is_credited_only_within_one_step():
    """A compile span the compiler opens and closes inside a step is left out; one that holds a step's mark
    was written by the run (torch.compile compiles within the step that calls it), and earns nothing: it
    would otherwise be left out once as compiling and again in the first step's allowance."""
    inside = stamped(("B", 0.0), ("C", 0.1), ("c", 0.6), ("W", 1.0), ("W", 2.0), ("S", 2.0))
    assert marks._compiling_cpu_s(inside, 0.0, 2.0) == pytest.approx(0.5)
    assert marks._compiling_s(inside, 0.0, 2.0) == pytest.approx(0.5)
    across = stamped(("B", 0.0), ("C", 0.1), ("W", 1.0), ("c", 1.6), ("W", 2.0), ("S", 2.0))
    assert marks._compiling_cpu_s(across, 0.0, 2.0) == 0.0
    assert marks._compiling_s(across, 0.0, 2.0) == 0.0


def test_profiled_steps_far_shorter_than_timed_ones_are_not_their_evidence():
    """Placeholders yielded while profiled, their work done once the profiler has stopped: the checker's
    stamps show profiled steps a small fraction of a timed one. Profiling adds to a step, so a sound fix's
    profiled steps are as long or longer, and a fast step's few milliseconds never reach the floor."""
    from pathlib import Path

    from proflab.grading.checks import evidence as evidence_check
    from proflab.grading.verdicts import Check
    from proflab.running.execute import Outcome

    def judged(profiled, timed, figure="cpu_time"):
        same = Check("same_results", "Same results", "")
        run = Outcome("learner", Path("x.py"), "ok", {"profiled_steps_s": profiled, "step_times": timed})
        return evidence_check.profiled_steps_did_the_work(run, same, figure), same

    ok, same = judged([0.0012, 0.0009, 0.0011], [0.030] * 40)
    assert not ok and same.status == "failed" and "did not do the timed steps' work" in same.rationale
    assert judged([0.045, 0.041, 0.043], [0.030] * 40)[0]  # profiled: longer, as profiling makes them
    assert judged([0.0004, 0.0005, 0.0004], [0.003] * 40)[0]  # a fast step: within the floor
    assert judged([], [0.030])[0]
    # on the clock a step may wait on work beside it: lab 1's two workers, 47 ms profiled, 257 ms timed
    assert judged([0.047, 0.050, 0.046], [0.257] * 8, figure="wall_time")[0]
