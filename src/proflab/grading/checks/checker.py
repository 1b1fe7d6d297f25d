"""Where a learner's file is graded: a lab's named checks, decided in order over its trial, like check50's.

    1. runs          the file imports, and pipeline(cfg) yields every step
    2. same_results  same samples, same number of steps, same values
    3. evidence      the profiler trace shows the bottleneck is gone
    4. faster        the speed-up clears the lab's threshold for this device

(Lab 0 grades the learner's own profile and its overhead, lab 5 a leaner
peak, lab 7 a gate's settings: ``registry``.) Each check is a module of its
own; the trial measures (``rounds``: the original and the learner's version,
round after round) and the checks judge, each at its moments. The first
check that fails stops the chain: later checks are reported as skipped, each saying which check it
waits on ("can't check until “It runs” passes"). Each check declares the checks it needs (``AFTER``), and a
chain puts them first (``registry``).
"""

from __future__ import annotations

import time
from contextlib import closing
from pathlib import Path
from typing import Any, Sequence

from ... import labs
from ..staging import Stage
from ..trial import Asked, NamedCheck
from ..verdicts import NotGraded, Progress, Report
from .registry import chain_of


def check(
    lab: labs.Lab,
    file: Path,
    label: str = "yours",
    device: str = "auto",
    rounds: int | None = None,
    timeout_s: float | None = None,
    on_progress: Progress = lambda message: None,
    audited: bool = True,
    workdir: Path | None = None,
    staged: Stage | None = None,
) -> Report:
    """Grade ``file`` against ``lab``'s original. Never raises for a learner's mistake.

    The file is graded from a copy taken when the check starts (saving it
    again during the check changes nothing), run in ``workdir`` (default: its
    own folder). Each check's traces are written apart, then published to
    ``runs/<lab>/``. A failure of the kit or the machine (a full disk, lab
    data that cannot be built) gives the verdict "error" ("not graded").

    ``audited=False`` skips the source audit; the kit's own tests use it to
    show that the checks after it catch what it would have refused. The
    report says so. ``staged``: the check, set up ahead of its turn
    (``staging.stage``, for the same ``lab``, ``file`` and ``workdir``,
    inside the same ``forkserver.session``); it is closed with the check.
    """
    started = time.perf_counter()
    chain = chain_of(lab)
    trial = chain.trial(Asked(lab, file, label, device, rounds, timeout_s, on_progress, audited, workdir, staged),
                        chain.checks)
    report = trial.report
    try:
        judge(trial, chain.checks)
    except NotGraded as e:
        report.verdict = "error"
        report.error = f"{e}. This is the kit's or the machine's failure, not {trial.WHOSE}"
    finally:
        report.duration_s = time.perf_counter() - started
    return report


def judge(trial: Any, named: Sequence[NamedCheck]) -> None:
    """The chain ``named`` decided over ``trial``: at each of its moments, every check that decides then, in
    order, until one gives the verdict. A trial that ends without one has said why in its report (an
    original that fails, a file that cannot be read: "error")."""
    report = trial.report
    with closing(trial.moments()) as moments:
        for moment in moments:
            for one in named:
                if moment in one.WHEN:
                    verdict = one.decide(trial, report.check(one.NAME))
                    if verdict is not None:
                        report.verdict = verdict
                        ended = report.check(one.NAME)
                        for later in report.checks[report.checks.index(ended) + 1:]:
                            later.waits_on = ended.title  # check50's "can't check until ..."
                        return
