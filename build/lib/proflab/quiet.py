"""Noise a learner should never mistake for an error of theirs or of the kit.

The CUDA build of torch logs kineto lines such as ``gpuGetDeviceCount failed
with code 35`` on a machine without a GPU, and stage markers every time the
profiler starts and stops. DataLoader warns about more workers than cores,
which is exactly what an I/O-bound loader wants. These are filtered from what
the kit shows; everything else a program prints is passed through, as text:
terminal control sequences in it (a learner's ``print("\\x1b[2J")`` would clear
the report off the screen, an OSC retitle the terminal) are removed by
``printable``, which ``clean`` applies to every captured tail.
"""

from __future__ import annotations

import re
import warnings

_KINETO = re.compile(
    r"^(?:STAGE|USDT):\d{4}-\d\d-\d\d .*\]"  # profiler stage markers
    r"|^(?:ERROR|WARNING):\d{4}-\d\d-\d\d .*(?:gpuGetDeviceCount failed|"
    r"DeviceProperties\.cpp|CUPTI|cuda_runtime|No CUDA|libcupti)"
    # profile_memory's note on blocks allocated before profiling began (the kit reads those as it should)
    r"|^\[W\d{4} [\d:.]+ (?:\d+ )?CPUAllocator\.cpp:\d+\] Memory block of unknown size was allocated before"
)

# Environment for every subprocess that runs torch: fewer kineto log lines.
QUIET_ENV = {"KINETO_LOG_LEVEL": "5", "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONWARNINGS": "ignore::DeprecationWarning"}


def is_noise(line: str) -> bool:
    return bool(_KINETO.search(line.strip()))


# What a terminal would act on rather than show, in the order they are matched:
_SEQUENCES = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]"  # CSI: ESC [ (or 8-bit CSI) parameters, intermediates, final byte
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c\n]*(?:\x07|\x1b\\|\x9c)"  # OSC, DCS, SOS, PM, APC strings
    r"|\x1b[ -/]*[0-~]"  # every other escape sequence: ESC, intermediates, a final byte (ESC c, ESC ( B, ESC # 8)
)
# Controls left over: C0 but tab and newline, DEL, C1 (a lone ESC, a string's unterminated opener among them).
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` without what a terminal would act on: escape sequences and control characters.

    Removed: ANSI/VT escape sequences (CSI ``ESC [ ... final``, OSC ``ESC ] ...
    BEL`` or ``ESC \\``, DCS/SOS/PM/APC strings, two-character ``ESC x``), their
    8-bit C1 forms (U+009B for CSI, ...), every other C1 control, and every C0
    control but newline and tab. A carriage return redraws the line in a
    terminal (a progress bar's ``\\r 40%``): a line so redrawn reads as the terminal
    showed it last, each part written over the start of the one before, not as
    every state it went through; ``\\r\\n`` is a newline.
    """
    if text.isprintable():
        return text
    text = _SEQUENCES.sub("", text)
    if "\r" in text:
        text = "\n".join(_redrawn(line) for line in text.replace("\r\n", "\n").split("\n"))
    return _CONTROLS.sub("", text)


def _redrawn(line: str) -> str:
    """A line redrawn with carriage returns, as a terminal shows it at the end: each part written over
    the start of the one before (``10%\\r100%`` reads ``100%``; ``loading 10%\\rdone`` reads ``doneing 10%``)."""
    shown = ""
    for part in line.split("\r"):
        shown = part + shown[len(part):]
    return shown.rstrip()


def clean(text: str) -> str:
    return "\n".join(line for line in printable(text).splitlines() if not is_noise(line))


def silence_known_warnings() -> None:
    """Warnings about the kit's own choices, not the learner's code."""
    warnings.filterwarnings("ignore", message=r".*suggested max number of worker.*")
    warnings.filterwarnings("ignore", message=r".*TypedStorage is deprecated.*")
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"torch\.profiler.*")
