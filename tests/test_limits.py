"""Limits on a learner's run: memory, a flood of output, stray files in the runs folder.

All on the calibration lab (tests/calibration), whose steps sleep a known
time, so each check costs little but the start of its processes.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import Kit, explain

CALIBRATION = Path(__file__).resolve().parent / "calibration"
FAST = "import time\nimport torch\n\n\ndef pipeline(cfg):\n    step = 0\n    while True:\n" \
       "        time.sleep(cfg.step_ms / 1000 / 1.5)\n        yield {'step': torch.ones(4).sum() * step}\n" \
       "        step += 1\n"


@pytest.fixture
def cal_kit(tmp_path) -> Kit:
    root = tmp_path / "kit"
    shutil.copytree(CALIBRATION, root / "labs" / "90_calibration")
    return Kit(root)


def write(kit: Kit, name: str, source: str) -> Path:
    path = kit.root / name
    path.write_text(source)
    return path


def test_a_run_that_takes_too_much_memory_is_stopped(cal_kit):
    manifest = cal_kit.root / "labs" / "90_calibration" / "lab.toml"
    manifest.write_text(manifest.read_text().replace("[workload]\n", "[workload]\nmemory_mb = 1500\n", 1))
    hog = write(cal_kit, "hog.py", FAST.replace("def pipeline(cfg):\n", "def pipeline(cfg):\n"
                                                "    kept = [torch.ones(256, 1024, 1024) for _ in range(3)]  # 3 GB\n"))
    code, report = cal_kit.check_json("calibration", "--file", str(hog))
    assert code == 1, explain(report)
    runs = next(c for c in report["checks"] if c["name"] == "runs")
    assert runs["status"] == "failed"
    assert "used more than 1500 MB of memory" in runs["rationale"]
    assert "growing list" in runs["help"]


def test_a_flood_of_output_keeps_the_report_whole(cal_kit):
    # three times as fast as the original (1.5x would be a close call beside another check): the verdict is
    # not what this test is about
    loud = write(cal_kit, "loud.py", FAST.replace("1.5", "3").replace("        step += 1\n",
                                                  "        step += 1\n        print('x' * 200 + '\\n', end='' ) ; "
                                                  "print('line\\n' * 20000, end='')\n"))
    proc = cal_kit.run("check", "calibration", "--file", str(loud), "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)  # stdout is the report alone, whatever the file printed
    assert report["verdict"] == "passed"
    assert len(report["output"]) <= 4100


def test_files_written_into_the_runs_folder_do_not_change_the_verdict(cal_kit):
    """Junk in the published traces' folder (left there by anyone) is never read as a run's; and a run
    cannot write there at all: the folder is hidden from its sandbox behind a read-only one."""
    runs = cal_kit.root / "runs" / "90-calibration"
    for run in ("original", "file-sneaky"):
        (runs / run).mkdir(parents=True, exist_ok=True)
        (runs / run / f"{run}.fake.pt.trace.json").write_text("not a trace")
        (runs / run / "report.json").write_text('{"verdict": "passed"}')
    junk = ("from pathlib import Path\n"
            "try:\n"
            f"    (Path({str(runs)!r}) / 'file-sneaky' / 'report.json').write_text('{{\"verdict\": \"passed\"}}')\n"
            "except OSError:\n"
            "    pass\n")
    sneaky = write(cal_kit, "sneaky.py", junk + FAST.replace("1.5", "1.0"))
    code, report = cal_kit.check_decided("calibration", "--file", str(sneaky))
    assert code == 1, report  # no faster than the original: a fail, read from real traces
    assert report["verdict"] == "failed"
    assert next(c for c in report["checks"] if c["name"] == "faster")["status"] == "failed"
    assert not list(runs.glob("*/*.fake.pt.trace.json")), "the published traces are the check's own"
    assert next(c for c in report["checks"] if c["name"] == "faster")["status"] == "failed"
