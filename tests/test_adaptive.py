"""Extra rounds and the "inconclusive" verdict, driven by exact, known speed-ups.

The calibration lab (tests/calibration) sleeps a fixed time per step; its
scheduled version runs faster by a factor taken from a list, one per run, so
every paired round's ratio is known in advance. Sleeping is timed to a small
fraction of a millisecond, far below the gaps between these schedules.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import Kit, explain

CALIBRATION = Path(__file__).resolve().parent / "calibration"


@pytest.fixture
def cal_kit(tmp_path) -> Kit:
    root = tmp_path / "kit"
    shutil.copytree(CALIBRATION, root / "labs" / "90_calibration")
    return Kit(root)


def check_with(kit: Kit, tmp_path: Path, speedups: str, monkeypatch) -> tuple[int, dict]:
    monkeypatch.setenv("PROFLAB_CAL_SPEEDUPS", speedups)
    monkeypatch.setenv("PROFLAB_CAL_COUNTER", str(tmp_path / "runs-so-far"))
    monkeypatch.setenv("PROFLAB_SANDBOX_SHARED", str(tmp_path))  # the count crosses runs: a test instrument
    return kit.check_json("calibration", "--file", str(kit.root / "labs" / "90_calibration" / "scheduled.py"))


def test_a_clear_speedup_is_called_after_the_base_rounds(cal_kit, tmp_path, monkeypatch):
    code, report = check_with(cal_kit, tmp_path, "1.5", monkeypatch)
    assert code == 0, explain(report)
    cmp = report["comparison"]
    assert cmp["rounds"] == 3, explain(report)
    assert report["stopped"] == "decided"
    assert cmp["speedup"] == pytest.approx(1.5, rel=0.05)
    assert cmp["ci_low"] >= 1.2 and cmp["ci_high"] >= cmp["speedup"]


def test_a_close_call_gets_extra_rounds_until_it_is_clear(cal_kit, tmp_path, monkeypatch):
    # Rounds 1.75, 1.15, 2.0 leave the interval across 1.2, and a fourth of 2.0 still
    # does (its low end is 1.11); the fifth lifts it to 1.30 (t-interval on the logs
    # of the ratios). Both sides are 7-8% from 1.2, far beyond a busy machine's
    # jitter on these sleeps.
    code, report = check_with(cal_kit, tmp_path, "1.75,1.15,2.0,2.0,2.0,2.0", monkeypatch)
    assert code == 0, explain(report)
    cmp = report["comparison"]
    assert cmp["rounds"] == 5
    assert cmp["ci_low"] >= 1.2


def test_a_coin_flip_is_inconclusive_not_a_verdict(cal_kit, tmp_path, monkeypatch):
    # Rounds alternate 1.45x and 1.0x: their mean sits on the 1.2x threshold.
    code, report = check_with(cal_kit, tmp_path, "1.45,1.0", monkeypatch)
    assert code == 4, explain(report)
    assert report["verdict"] == "inconclusive"
    faster = next(c for c in report["checks"] if c["name"] == "faster")
    assert faster["status"] == "inconclusive"
    assert "too noisy" in faster["rationale"] and "straddles" in faster["rationale"]
    assert report["comparison"]["rounds"] == 6  # the lab's max_rounds
    assert report["stopped"] == "round limit"
    assert "(the lab's limit of 6 rounds)" in faster["rationale"]
    assert report["comparison"]["ci_low"] < 1.2 < report["comparison"]["ci_high"]


def test_the_time_budget_stops_extra_rounds(cal_kit, tmp_path, monkeypatch):
    # The same coin flip, with a budget that the first three rounds already use up
    # (each run starts a Python process and imports torch: well over a second).
    toml = cal_kit.root / "labs" / "90_calibration" / "lab.toml"
    toml.write_text(toml.read_text().replace("budget_s = 300", "budget_s = 1"))
    code, report = check_with(cal_kit, tmp_path, "1.45,1.0", monkeypatch)
    assert code == 4, explain(report)
    assert report["comparison"]["rounds"] == 3
    assert report["stopped"] == "time budget"
    faster = next(c for c in report["checks"] if c["name"] == "faster")
    assert "(the lab's 1 s time budget)" in faster["rationale"]


def test_a_clear_slowdown_fails_after_the_base_rounds(cal_kit, tmp_path, monkeypatch):
    code, report = check_with(cal_kit, tmp_path, "1.0", monkeypatch)
    assert code == 1, explain(report)
    assert report["comparison"]["rounds"] == 3
    assert report["comparison"]["ci_high"] < 1.2


def test_the_terminal_report_says_inconclusive(cal_kit, tmp_path, monkeypatch):
    monkeypatch.setenv("PROFLAB_CAL_SPEEDUPS", "1.45,1.0")
    monkeypatch.setenv("PROFLAB_CAL_COUNTER", str(tmp_path / "runs-so-far"))
    monkeypatch.setenv("PROFLAB_SANDBOX_SHARED", str(tmp_path))  # the count crosses runs: a test instrument
    proc = cal_kit.run("check", "calibration", "--file", str(cal_kit.root / "labs" / "90_calibration" / "scheduled.py"),
                       "--rounds", "2")
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "INCONCLUSIVE" in proc.stdout and "too noisy" in proc.stdout
    # The learner's runs alternate between two speeds: the report says the machine looked busy.
    assert "The machine was busy: runs of the same version disagreed by" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr
