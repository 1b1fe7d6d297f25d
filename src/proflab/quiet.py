"""Noise a learner should never mistake for an error of theirs or of the kit.

The CUDA build of torch logs kineto lines such as ``gpuGetDeviceCount failed
with code 35`` on a machine without a GPU, and stage markers every time the
profiler starts and stops. DataLoader warns about more workers than cores,
which is exactly what an I/O-bound loader wants. These are filtered from what
the kit shows; everything else a program prints is passed through.
"""

from __future__ import annotations

import re
import warnings

_KINETO = re.compile(
    r"^(?:STAGE|USDT):\d{4}-\d\d-\d\d .*\]"  # profiler stage markers
    r"|^(?:ERROR|WARNING):\d{4}-\d\d-\d\d .*(?:gpuGetDeviceCount failed|"
    r"DeviceProperties\.cpp|CUPTI|cuda_runtime|No CUDA|libcupti)"
)

# Environment for every subprocess that runs torch: fewer kineto log lines.
QUIET_ENV = {"KINETO_LOG_LEVEL": "5", "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONWARNINGS": "ignore::DeprecationWarning"}


def is_noise(line: str) -> bool:
    return bool(_KINETO.search(line.strip()))


def clean(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not is_noise(line))


def silence_known_warnings() -> None:
    """Warnings about the kit's own choices, not the learner's code."""
    warnings.filterwarnings("ignore", message=r".*suggested max number of worker.*")
    warnings.filterwarnings("ignore", message=r".*TypedStorage is deprecated.*")
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"torch\.profiler.*")
