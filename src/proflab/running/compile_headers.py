"""torch.compile's precompiled header, built once by the kit's own code, lent read-only to every sandbox.

On the CPU, Inductor compiles each generated kernel with g++, and every kernel
includes one large header (``torch/csrc/inductor/cpp_prefix.h``). Inductor
precompiles that header once and keeps it (157 MB here) in
``$TMPDIR/torchinductor_$USER/precompiled_headers``. A sandboxed run has an
empty ``/tmp`` of its own, so each run of a compiled fix built the header
again before its first kernel, in every round of its check: 6.4 s of a
29.1 s run of lab 3's compiled fix on the 2-core machine
(``benchmarks/bench_compile_headers.py``).

Here the kit builds it once, in a sandbox like a run's (the same environment,
the same compiler flags, so the same name), from a few lines of its own: no
lab file ever runs while it is written. It is kept outside every sandbox, in
the virtual environment (``var/proflab/compile-headers``; the kit's state
folder where that cannot be written), and bound read-only into each sandbox,
file by file, at the path Inductor looks for it (``sandbox.Box``). A header that does not match (another
torch, another compiler) is simply not used: the run then builds its own, in
its own ``/tmp``, as before. Nothing a run does reaches the kept copy.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from . import sandbox

# A few operators compiled by the kit's own code: enough for Inductor to build its header.
BUILD = "import torch\ntorch.compile(lambda x: (x.sin() * 2).sum())(torch.randn(64))\n"
BUILD_TIMEOUT_S = 300.0


def prepare() -> bool:
    """Build the header once (about 20 s on the 2-core machine, the first time in a virtual environment);
    whether it is there to lend.

    Never raises: without it, a compiled fix still runs, and builds its own header in each run.
    """
    engine = sandbox.in_use()
    if engine is None:  # unsandboxed runs share this user's /tmp, where Inductor keeps its own
        return False
    target = sandbox.headers_folder()
    if sandbox.compile_headers(target):
        return True
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target.parent / f".{target.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # two checks starting at once build it once
            if not sandbox.compile_headers(target):
                _build(engine, target)
    except (OSError, subprocess.SubprocessError):
        return False
    return bool(sandbox.compile_headers(target))


def _build(engine: sandbox.Engine, target: Path) -> None:
    # this Python and the kit lent to it, as to a run's sandbox: a kit and its venv under /tmp would otherwise
    # be hidden behind the sandbox's own /tmp, and the build would never start
    box = sandbox.Box(Path(tempfile.gettempdir()), engine, expose=sandbox.interpreter_folders())
    try:
        env = {**os.environ, **sandbox.RUN_ENV}
        done = subprocess.run(box.command([sys.executable, "-P", "-c", BUILD], cwd=box.root), env=env,
                              stdin=subprocess.DEVNULL, capture_output=True, timeout=BUILD_TIMEOUT_S)
        built = box.root / "tmp" / Path(sandbox.HEADERS_INSIDE).relative_to("/tmp")
        files = sorted(p for p in built.glob("*.h*") if p.is_file()) if done.returncode == 0 else []
        if not files:
            return
        staging = Path(tempfile.mkdtemp(prefix=".building-", dir=target.parent))
        try:
            for f in files:
                shutil.copyfile(f, staging / f.name)
                os.chmod(staging / f.name, 0o644)
            os.replace(staging, target)  # whole or not at all
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        for made in (target, *list(target.parents)[:3]):  # readable by the sandbox's user, whatever the umask
            if made == Path(sys.prefix) or made in Path(sys.prefix).parents:
                break
            os.chmod(made, 0o755)
    finally:
        box.remove()
        sandbox.reap()
