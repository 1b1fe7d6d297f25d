"""Output to a reader that went away: ``proflab check 4 | head -2``.

Once ``head`` has read its lines it closes the pipe, and the next write raises ``BrokenPipeError``. A closed
pipe is not a verdict: the command goes on (the check finishes and is recorded), what it would have
printed goes nowhere, and it exits with the verdict's code, not with the code of a failed check.
"""

from __future__ import annotations

import os
import sys


class _Quiet:
    """A stream whose writes go nowhere once its reader has gone."""

    def __init__(self, stream, fd: int):
        self._stream, self._fd = stream, fd

    def _gone(self) -> None:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, self._fd)  # later writes, and the interpreter's last flush, go to /dev/null
        finally:
            os.close(devnull)

    def write(self, data):
        try:
            return self._stream.write(data)
        except BrokenPipeError:
            self._gone()
            return len(data)

    def flush(self):
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._gone()

    def __getattr__(self, name):
        return getattr(self._stream, name)


class _QuietText(_Quiet):
    @property
    def buffer(self):
        return _Quiet(self._stream.buffer, self._fd)


def survive_closed_stdout() -> None:
    """Make ``sys.stdout`` (and its ``buffer``) drop what a closed pipe would refuse."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return
    sys.stdout = _QuietText(sys.stdout, fd)
