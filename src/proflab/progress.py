"""The progress file: each lab's status and the hints a learner has seen.

``.proflab/progress.json``, written atomically, so a Ctrl-C never leaves it
half-written. Statuses: not started, failing, passed.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from . import atomic, paths

NOT_STARTED, FAILING, PASSED = "not started", "failing", "passed"


def _path():
    return paths.state_dir() / "progress.json"


def load() -> dict[str, Any]:
    try:
        data = json.loads(_path().read_text())
    except (OSError, json.JSONDecodeError):
        return {"labs": {}}
    return data if isinstance(data.get("labs"), dict) else {"labs": {}}


def _save(data: dict[str, Any]) -> None:
    atomic.write_json(_path(), data)


def entry(name: str) -> dict[str, Any]:
    return load()["labs"].get(name, {})


def status(name: str) -> str:
    return entry(name).get("status", NOT_STARTED)


def record_check(name: str, passed: bool, speedup: float | None, device: str) -> None:
    data = load()
    lab = data["labs"].setdefault(name, {})
    lab.update(status=PASSED if passed else FAILING,
               last_check=datetime.now(timezone.utc).isoformat(timespec="seconds"),
               speedup=speedup, device=device)
    lab["checks"] = lab.get("checks", 0) + 1
    _save(data)


def next_hint(name: str, total: int) -> int:
    """Index of the hint to show now (and remember that it was shown)."""
    data = load()
    lab = data["labs"].setdefault(name, {})
    shown = int(lab.get("hints_shown", 0))
    index = min(shown, total - 1)
    lab["hints_shown"] = min(shown + 1, total)
    _save(data)
    return index


def remember_run(lab_slug: str, run: str) -> None:
    """The run a learner just made: ``proflab tensorboard`` points there first."""
    data = load()
    data["last_run"] = {"lab": lab_slug, "run": run,
                        "at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    _save(data)


def last_run() -> dict[str, str] | None:
    return load().get("last_run")
