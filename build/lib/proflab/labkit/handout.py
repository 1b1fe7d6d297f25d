"""Inputs handed out one step at a time, by the checker, as each step begins.

In a lab where time spent compiling is left out of a run's figure (lab 3:
``[timing] compile = true``), a run could otherwise do the later steps' work
while "compiling" in its warm-up, where it is not counted, and replay it in
the timed steps. So there the checker draws, for every step, which stored
batch it takes, and sends that choice down the run's mark channel only once
the step before it has ended (``running.marks``): no code in the run can know
a later step's inputs before that step begins, compiling or not. Outside a
check (``proflab run``, ``python exercise.py``) the batches come in order.

A pipeline takes its batches from the lab's data class, one per step, as the
lab files do; one that asks for a batch before its step has begun (a list of
them all, a batch fetched ahead) is told so at once: the kit's runner counts
the steps it has begun (``began``). That count is this process's own and
proves nothing; what keeps a later step's inputs hidden is that the checker
has not sent them.
"""

from __future__ import annotations

import os
import select
import struct
import threading
from typing import Callable

KEY = struct.Struct("<Q")  # one step's draw: 8 bytes
WAIT_S = 20.0  # the checker sends a step's draw within milliseconds of the mark before it

_fd: int | None = None
_begun = 0  # steps begun, as the kit's runner marks them
_refused: Callable[[HandoutError], None] | None = None


class HandoutError(RuntimeError):
    """A batch was asked for that the checker cannot hand out yet."""


def set_channel(fd: int | None, refused: Callable[[HandoutError], None] | None = None) -> None:
    """Called by the kit's runner in a check of such a lab, before the lab file is imported. ``refused``
    ends the run, saying why, when a batch is refused on a thread other than the main one: the step that
    waits for that thread would otherwise wait until the run's time limit."""
    global _fd, _begun, _refused
    _fd, _begun, _refused = fd, 0, refused


def _refuse(message: str) -> HandoutError:
    error = HandoutError(message)
    if _refused is not None and threading.current_thread() is not threading.main_thread():
        _refused(error)
    return error


def began() -> None:
    """Called by the kit's runner as it marks a step's start (the first step's, then each step's end)."""
    global _begun
    _begun += 1


def active() -> bool:
    return _fd is not None


def next_index(count: int, step: int) -> int:
    """Which of ``count`` stored batches the pipeline's ``step``-th batch is: ``step`` outside a check,
    the checker's draw for it in one."""
    if _fd is None:
        return step % count
    if step >= _begun:
        raise _refuse(
            f"batch {step + 1} was asked for while step {_begun} was running: in a check of this lab, the "
            "checker hands out each step's batch only as that step begins (so that no work on a later step "
            "can hide in compiling). Take one batch per step from data.batches(), as the lab file does, "
            "not a list of them or one fetched ahead")
    raw = b""
    while len(raw) < KEY.size:
        ready, _, _ = select.select([_fd], [], [], WAIT_S)
        if not ready:
            raise _refuse(f"the checker did not hand out batch {step + 1} within {WAIT_S:.0f} s of its "
                               "step's start (a machine too busy, or the run's channel changed)")
        more = os.read(_fd, KEY.size - len(raw))
        if not more:
            raise _refuse("the checker's channel closed before the pipeline's last batch was handed out")
        raw += more
    return KEY.unpack(raw)[0] % count


def draws(secret: bytes, seed: int, steps: int) -> list[bytes]:
    """The checker's side: the draw for each step of a run, from a secret of the checking process and
    the round's seed (both versions of a round get the same batches; nothing in the run can predict
    them)."""
    import hashlib

    return [hashlib.blake2b(f"{seed}:{i}".encode(), key=secret, digest_size=KEY.size).digest()
            for i in range(steps)]
