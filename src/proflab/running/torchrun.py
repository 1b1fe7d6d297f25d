"""Where a distributed lab's run is a torchrun job: every rank is the kit's runner.

A lab with a ``[distributed]`` table runs as a job of PyTorch's own launcher:
the run's first process (forked from the kit's server, as any run's) reads
torchrun's options with ``torch.distributed.run``'s own parser, ``--standalone
--nproc-per-node N --max-restarts 0 --start-method fork``, and starts the job
with ``elastic_launch``, the API the ``torchrun`` command itself calls. Its
elastic agent holds the rendezvous, starts the ranks, gives each its RANK,
WORLD_SIZE and where to meet, and stops them all when one fails. The ranks
are forked from a process that has imported torch already, so a run does not
pay torch's import once per rank; the entry point is ``runner.rank_main``
where the command would name a script.

Each rank runs the lab file as a single run does (``runner``), with
``{rank}`` filled in its spec: its own result file, its own trace (worker
``rank0``, ``rank1``…, so TensorBoard shows the ranks as workers of one run),
and its own marks. They go to a FIFO of its own, made here, which the checker
reads and stamps with its own clock (``marks._read_marks``), rank by rank.
What a rank's marks, result and trace must be is what a single run's must
be; ``merge`` then makes one outcome of the job: it stands or falls with its
slowest (or failed) rank.
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from . import landlock, sandbox, side_channels
from .spec import RunSpec

# Per-run timing fields of a rank's result (marks._from_outside): the job's are its slowest rank's.
TIMING = ("step_times", "all_step_s", "window_s", "outside_window_s", "mean_step_s", "span_s", "compile_s",
          "first_step_s", "counted_steps", "profiled_step_s", "profiled_steps_s", "wall_window", "reported")

# Per-run fields the job takes from whichever rank has the most: the time after its window (every rank's runs
# to the job's end), and the bytes the job's network carried a step (one network for every rank).
LONGEST = ("after_s", "trace_gap_s", "net_bytes_per_step")


def options(nproc: int) -> list[str]:
    """torchrun's options for a job on this machine alone (a rendezvous of its own on a free port)."""
    return ["--standalone", "--nnodes", "1", "--nproc-per-node", str(nproc), "--max-restarts", "0",
            "--monitor-interval", "0.1", "--start-method", "fork"]


def launch(nproc: int, entrypoint: Callable[..., Any], *args: Any) -> None:
    """Run ``entrypoint(*args)`` on every rank of a torchrun job; raises when a rank fails."""
    from torch.distributed.launcher.api import elastic_launch
    from torch.distributed.run import config_from_args, parse_args

    parsed = parse_args([*options(nproc), "proflab-rank"])  # the script name torchrun needs, never run
    parsed.rdzv_backend, parsed.rdzv_endpoint = "c10d", "localhost:0"  # what --standalone means in torchrun's run()
    parsed.rdzv_id = f"proflab-{os.getpid()}"
    config, _, _ = config_from_args(parsed)
    elastic_launch(config, entrypoint=entrypoint)(*args)


def fifos(scratch: Path, nproc: int) -> list[Path]:
    """One FIFO per rank, for its marks, readable and writable by this user alone."""
    made = []
    for rank in range(nproc):
        path = scratch / f"marks-{rank}"
        os.mkfifo(path, 0o600)
        made.append(path)
    return made


def reader(path: Path, read: Callable[[int], None]) -> threading.Thread:
    """A thread that opens ``path`` for reading (once the rank opens it to write) and hands it to ``read``."""
    def follow() -> None:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return
        read(fd)
    return threading.Thread(target=follow, daemon=True)


def release(paths: list[Path]) -> None:
    """Wake every reader still waiting for its rank to open its FIFO (a rank that never started)."""
    for path in paths:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:  # no reader waiting (ENXIO), or gone
            continue
        os.close(fd)


def write_failures(error: BaseException, path: str) -> None:
    """What torchrun's agent saw of a failed job (its ChildFailedError), for the checker: the rank that
    failed first and its exit code, and every failed rank's (a signal as its negative number)."""
    from ..atomic import write_json

    failures = getattr(error, "failures", None)
    if not isinstance(failures, dict) or not failures:
        return
    rank, first = error.get_first_failure()
    write_json(path, {"first_rank": int(rank), "exitcode": int(first.exitcode),
                      "failed": {str(r): int(f.exitcode) for r, f in failures.items()}})


def failures(path: Path) -> dict[str, Any]:
    """``write_failures``'s file, or {} (no rank failed, or the launcher itself was stopped)."""
    import json

    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) and isinstance(found.get("first_rank"), int) else {}


# What a rank says when a peer it talks to has gone: a consequence, not the cause.
_LOST_PEER = ("Connection reset by peer", "Connection closed by peer", "Broken pipe", "communicator was aborted",
              "Socket Timeout", "Timed out waiting", "ProcessGroupGloo")


def lost_a_peer(message: str) -> bool:
    """Whether a rank's failure is that another rank went away (gloo's or NCCL's words for it)."""
    return any(words in message for words in _LOST_PEER)


def ask_where(scratch: Path, nproc: int, alive: set[int]) -> None:
    """Ask every rank still alive (one of ``alive``, the run's processes, as this process sees them) for
    its Python stack. A rank writes its PID as its sandbox numbers it: only a PID that one of ``alive``
    has inside is signalled, and by the number it has here."""
    import signal

    here = {sandbox.inner_pid(pid): pid for pid in alive}
    for rank in range(nproc):
        try:
            pid = here.get(int((scratch / f"pid-{rank}").read_text()))
        except (OSError, ValueError):
            continue
        if pid is not None:
            try:
                os.kill(pid, signal.SIGUSR1)
            except OSError:
                pass


_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<function>\S+)')
_FATAL = re.compile(r"Fatal Python error: (?P<what>[^\n]+)")


def stack_of(scratch: Path, rank: int) -> str:
    try:
        return (scratch / f"stack-{rank}.txt").read_text(errors="replace")
    except OSError:
        return ""


def position(stack: str, lab_file: str, shown: str) -> str:
    """The innermost line of the lab file in a Python stack as faulthandler writes it, in words, and
    whether the rank was inside torch there (waiting in a collective, say); "" when it is not there."""
    frames = [m.groupdict() for m in _FRAME.finditer(stack)]  # innermost first
    mine = next((i for i, f in enumerate(frames) if Path(f["file"]).name == Path(lab_file).name), None)
    if mine is None:
        return ""
    line = int(frames[mine]["line"])
    try:
        code = Path(lab_file).read_text(errors="replace").splitlines()[line - 1].strip()
    except (OSError, IndexError):
        code = ""
    inside = " (inside torch: waiting for another rank?)" if mine > 0 and "torch" in frames[0]["file"] else ""
    return f"{shown} line {line}{f': `{code}`' if code else ''}{inside}"


def where(scratch: Path, nproc: int, lab_file: str, shown: str) -> list[str]:
    """Where each rank was when asked (``ask_where``)."""
    said = []
    for rank in range(nproc):
        at = position(stack_of(scratch, rank), lab_file, shown)
        if at:
            said.append(f"rank {rank} was at {at}")
    return said


def crash(scratch: Path, rank: int, lab_file: str, shown: str) -> str:
    """How a rank that died without a result died, from the stack faulthandler wrote on the fatal
    signal: "a segmentation fault at crashes.py line 51: `…`"; "" when it wrote none (SIGKILL)."""
    stack = stack_of(scratch, rank)
    fatal = _FATAL.search(stack)
    if fatal is None:
        return ""
    at = position(stack[fatal.end():], lab_file, shown)
    return f"it crashed: {fatal.group('what').strip().lower()}" + (f" at {at}" if at else "")


def merge(ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """One result for the job, from its ranks' results (each a successful run): rank 0's, with every
    rank's values and traces, and the timings of the rank whose timed span was longest."""
    slowest = max(ranks, key=lambda r: float(r.get("span_s", 0.0)))
    merged = {**ranks[0], **{k: slowest[k] for k in TIMING if k in slowest}}
    merged["ranks"] = len(ranks)
    merged["rank_results"] = [r["results"] for r in ranks]
    merged["rank_traces"] = [r.get("trace") for r in ranks]
    merged["rank_trace_sha256"] = [r.get("trace_sha256") for r in ranks]
    merged["rank_steps_s"] = [float(r.get("mean_step_s", 0.0)) for r in ranks]
    for key in LONGEST:  # what any rank did after its window, what the job's network carried: the most of any
        seen = [float(r[key]) for r in ranks if key in r]
        if seen:
            merged[key] = max(seen)
    return merged


def progress(marks: list[Any]) -> list[int]:
    """The steps each rank finished, by its marks (warm-up, timed and profiled steps)."""
    return [sum(1 for code, _ in m.stamps if code in "WTQ") for m in marks]


def stuck(marks: list[Any]) -> str:
    """Which rank a job that ran out of time stopped at, by its marks, in words."""
    done = progress(marks)
    if not done:
        return ""
    low = min(done)
    behind = [r for r, d in enumerate(done) if d == low]
    said = ", ".join(f"rank {r}: {d} step{'s' if d != 1 else ''}" for r, d in enumerate(done))
    if len(behind) == len(done):
        return (f"every rank stopped after {low} step{'s' if low != 1 else ''} ({said}): one of them is stuck, "
                "and the others wait for it in a collective (an all-reduce waits for every rank)")
    return f"rank {', '.join(map(str, behind))} stopped after {low} step{'s' if low != 1 else ''} ({said})"


def own_folder(spec: RunSpec, rank: int) -> Path:
    """A rank's own folder, beside its result file: its TMPDIR and HOME, and where its trace is written."""
    folder = Path(spec.result_path).parent / f"rank{rank}-own"
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder


def confine_rank(spec: RunSpec, rank: int) -> RunSpec:
    """Make a rank's spec write into its own folder, point its temporary folders there, and confine it
    (``confine``). The spec returned names the folders ``hand_over`` moves the rank's files back to."""
    import tempfile

    own = own_folder(spec, rank)
    spec = replace(spec, own_folder=str(own), handover={"result_path": spec.result_path},
                   result_path=str(own / Path(spec.result_path).name))
    if spec.trace_dir:
        spec.handover["trace_dir"] = spec.trace_dir
        (own / "trace").mkdir(exist_ok=True)
        spec.trace_dir = str(own / "trace")
    for name in ("HOME", "TMPDIR", "XDG_CACHE_HOME", "MPLCONFIGDIR", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
        os.environ[name] = str(own if name in ("HOME", "TMPDIR") else own / name.lower())
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again
    handover = {str(Path(spec.handover["result_path"]).parent),
                *([spec.handover["trace_dir"]] if spec.handover.get("trace_dir") else [])}
    spec.confined = landlock.confine(own, tuple(sorted(handover)))
    spec.filtered = side_channels.install()  # no Unix socket, no shared IPC object between the ranks
    return spec


def hand_over(spec: RunSpec, result: dict[str, Any]) -> dict[str, Any]:
    """A confined rank's trace moved to the run's trace folder (the result names it there); the result
    file is then written by the caller, in its own folder, and moved over by ``hand_over_result``."""
    given = spec.handover
    trace = result.get("trace")
    if trace and given.get("trace_dir"):
        moved = Path(given["trace_dir"]) / Path(trace).name
        try:
            os.rename(trace, moved)
            result = {**result, "trace": str(moved)}
        except OSError:  # left where it is: the checker then says the trace is not where it looks
            pass
    result["confined"] = spec.confined
    message = str(result.get("message", ""))
    if result.get("status") != "ok" and spec.filtered and "Operation not permitted" in message:
        # EPERM: the seccomp filter's refusal (Landlock's is EACCES, "Permission denied")
        result["message"] = (message + " (a rank of the job opens no socket but the network's (no Unix or netlink "
                             "socket) and no shared memory, semaphore or message queue: the ranks share nothing "
                             "but torch.distributed's collectives)")
    elif result.get("status") != "ok" and spec.confined and ("Permission denied" in message
                                                                    or "PermissionError" in message):
        result["message"] = (message + " (each rank of the job writes and reads only files of its own, in its "
                             "TMPDIR: the ranks share nothing but torch.distributed's collectives)")
    return result


def hand_over_result(spec: RunSpec) -> None:
    given = spec.handover
    if given.get("result_path"):
        os.rename(spec.result_path, given["result_path"])
