"""What a run's process is told: one typed spec, the same definition on both sides of the process boundary.

The checker (``execute.run``) makes a ``RunSpec`` and writes it as ``spec.json`` in the run's folder; the
run's process (``runner.main``, inside the sandbox) reads it back with ``RunSpec.read``, which refuses a key
it does not know and a value of another kind, rather than guess. It holds what the run needs and nothing
of the checker's own: how the checker reads the run's time (whether compiling is left out, whether CPU
time is the lab's figure) stays in the checker's process.
"""

from __future__ import annotations

import json
import types
import typing
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any


@dataclass
class RunSpec:
    file: str  # the lab file the run imports (the checker's snapshot of it)
    result_path: str  # where the run writes its result (``result.json``)
    device: str = "auto"
    batch_size: int = 1
    seed: int = 0
    threads: int | None = None  # torch's intra-op threads (None: torch's default)
    data_dir: str = ""
    params: dict[str, Any] = field(default_factory=dict)  # more attributes of cfg
    warmup_steps: int = 0
    timed_steps: int = 1
    profile_steps: int = 0
    cfg_steps: int | None = None  # lab 0: cfg.steps, how many steps its own loop takes
    shown_as: str | None = None  # the learner's own file, when ``file`` is the checker's snapshot of it
    trace_dir: str | None = None
    worker_name: str = ""  # the trace's worker: the version ("original", "yours") or "rank0", "rank1"...
    table: bool = False  # print the profiler's table of operators (proflab run)
    row_limit: int = 15
    profile_memory: bool = False
    with_stack: bool = False
    profile_mode: str | None = None  # "timed": the timed steps profiled (the benchmark of the profiler's cost)
    record_shapes: bool = False
    all_threads: bool = False  # profile every thread (the checker's own figures: reads done elsewhere count)
    background_workers: bool = False  # workers may work beside the timed steps (lab 1's DataLoader)
    background_threads: bool = False  # a gate's own project: its threads are its design
    compile_marks: bool = False  # mark torch.compile's compilations (C, c), which the checker corroborates
    handout: bool = False  # each step's batch handed out by the checker as the step begins (labkit.handout)
    learner_profiles: bool = False  # lab 0: the file profiles itself, into trace_dir
    preimport: bool = False  # import what torch.compile and optimizers import before the first step
    sys_path: list[str] = field(default_factory=list)  # put first on sys.path (a gate's baseline at a revision)
    # The mark channel: the descriptor the run writes its marks to, and the marks it stops itself at until
    # the checker has read its CPU time (where CPU time is the lab's figure)
    mark_fd: int | None = None
    pause_marks: str = ""
    # A torchrun job's (``{rank}`` filled in by each rank, ``for_rank``)
    nproc: int = 0
    mark_fifo: str = ""
    stack_path: str = ""
    pid_path: str = ""
    launch_path: str = ""
    # Set by a rank inside the run, as it confines itself (``torchrun.confine_rank``)
    own_folder: str = ""
    handover: dict[str, str] = field(default_factory=dict)
    confined: int = 0
    filtered: int = 0

    @property
    def total_steps(self) -> int:
        return self.warmup_steps + self.timed_steps + self.profile_steps

    def write(self, path: Path) -> None:
        Path(path).write_text(json.dumps(asdict(self)))

    @classmethod
    def read(cls, path: Path | str) -> "RunSpec":
        """The spec written at ``path``; ValueError naming what does not fit."""
        data = json.loads(Path(path).read_text())
        if not isinstance(data, dict):
            raise ValueError(f"a run's spec is an object, not a {type(data).__name__}")
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise ValueError(f"a run's spec has unknown key(s) {', '.join(unknown)}")
        hints = typing.get_type_hints(cls)
        for name, value in data.items():
            if not _fits(value, hints[name]):
                raise ValueError(f"a run's spec has {name} = {value!r}, which is not {hints[name]}")
        return cls(**data)

    def for_rank(self, rank: int) -> "RunSpec":
        """A torchrun rank's spec: ``{rank}`` filled in every text."""
        return replace(self, **{f.name: getattr(self, f.name).replace("{rank}", str(rank))
                                for f in fields(self) if isinstance(getattr(self, f.name), str)})


def _fits(value: Any, kind: Any) -> bool:
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, k) for k in typing.get_args(kind))
    if kind is type(None):
        return value is None
    if kind is Any:
        return True
    if origin is list:
        return isinstance(value, list)
    if origin is dict:
        return isinstance(value, dict)
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)
