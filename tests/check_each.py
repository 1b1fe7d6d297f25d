"""Check several files in one process, as ``proflab grade`` grades a class: the tests' batch of checks.

    python tests/check_each.py SPEC.json OUT.json

SPEC.json lists ``{"lab": "1", "file": "/path/to/attempt.py", "audited": false}``; OUT.json gets, in the
same order, each file's report exactly as ``proflab check LAB --file FILE --json`` prints it. Every
check is ``checks.check``, the function behind ``proflab check``, run one after another inside one fork
server session: the original's server imports torch once per lab and environment for the whole batch,
and each file's server imports beside the one before it (``staging.ahead``), as ``proflab grade`` does
for a class. Each run is still a fresh process forked from a server that never ran a lab file. The
command line around a check (its options, its exit code, its terminal report) is tested through
``proflab check`` itself, elsewhere.

Run with ``PROFLAB_ROOT`` naming the kit, like the command. Exit status 0 once every report is written.
With ``PROFLAB_TEST_CHECK_LOG`` naming a file, a line of JSON per check is added to it (the lab, the file,
its seconds, verdict and rounds): where the suite's time goes, check by check.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from proflab import labs
from proflab.commands import common as cli
from proflab.grading import checks, staging
from proflab.reporting import report
from proflab.running import forkserver


def main(spec_path: str, out_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    items = [(labs.resolve(str(item["lab"])), Path(item["file"]).resolve(), item.get("audited", True))
             for item in spec]
    reports = []
    with forkserver.session():
        ahead = None
        try:
            for n, (lab, file, audited) in enumerate(items):
                mine, ahead = ahead, None
                if mine is None and n + 1 < len(items):  # two by two: the next file's server imports now
                    mine = staging.ahead(lab, file)
                    ahead = staging.ahead(*items[n + 1][:2])
                began = time.monotonic()
                result = checks.check(lab, file, label=cli._label(lab, file), audited=audited, staged=mine)
                reports.append(json.loads(report.to_json(result)))
                _log(reports[-1], time.monotonic() - began)
        finally:
            if ahead is not None:
                ahead.close()
    Path(out_path).write_text(json.dumps(reports), encoding="utf-8")
    return 0


def _log(rep: dict, seconds: float) -> None:
    if log := os.environ.get("PROFLAB_TEST_CHECK_LOG"):
        with open(log, "a", encoding="utf-8") as f:
            f.write(json.dumps({"lab": rep.get("lab"), "file": Path(rep.get("file") or "?").name,
                                "seconds": round(seconds, 1), "verdict": rep.get("verdict"),
                                "rounds": (rep.get("comparison") or {}).get("rounds")}) + "\n")


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
