"""The gate on a model that is not a lab: docs/examples/own-model, as a learner's repository holds it.

The example is an ordinary training script (train.py, which knows nothing of
the kit), the few lines that wrap it for the gate (pipeline.py, with
proflab.gatekit) and the gate's settings (pyproject.toml). Here it is copied
into a git repository of its own, its data made by its own make_data.py, and
gated for real with ``proflab gate --against HEAD``, as CI gates a pull
request against its base branch: unchanged, it passes; with a per-sample
``.item()`` loop added to train.py's step (a module the pipeline imports, not
the pipeline file), it fails, and the report names the loop's operators. The
data folder is the working tree's, outside the tree's image the baseline runs
in (and, the project being in a temporary folder, outside what a sandbox shows
of the machine): both versions are given it to read.

The example's own settings are used as they are (the CPU time of the step,
one thread), with the fewest steps the gate allows that still profile (one
warm-up step, two profiled: "what changed" needs a trace) and its fewest
rounds: extra rounds come only while the call is open.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, explain

EXAMPLE = REPO / "docs" / "examples" / "own-model"
# Twenty timed steps a round: a step here is about 4 ms of CPU, and with five a round's mean moved by ±11%
# between identical files on the 2-core machine, enough to leave the gate unable to call them in 30 rounds.
CHEAP = ("--warmup-steps", "1", "--timed-steps", "20", "--profile-steps", "2", "--rounds", "2")
PLANTED = '''    optimizer.step()
    correct = 0  # accuracy for a progress bar, one sample at a time
    for i in range(len(labels)):
        correct += int(logits[i].argmax().item() == labels[i].item())
'''


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True,
                          env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                               "GIT_COMMITTER_EMAIL": "t@t", "HOME": str(root), "PATH": "/usr/bin:/bin"}).stdout


def gate(root: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    proc = subprocess.run([sys.executable, "-m", "proflab", "gate", "--against", "HEAD", *CHEAP, "--json", *args],
                          cwd=root, env={**os.environ, "COLUMNS": "200"}, capture_output=True, text=True,
                          timeout=300)
    assert proc.stdout.strip(), f"no JSON on stdout (exit {proc.returncode}); stderr:\n{proc.stderr}"
    return proc, json.loads(proc.stdout)


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """The example, committed in a repository of its own, with the data its make_data.py writes (not
    committed: .gitignore)."""
    root = tmp_path_factory.mktemp("own-model") / "project"
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns("__pycache__", "data", "runs"))
    subprocess.run([sys.executable, "make_data.py", "data"], cwd=root, check=True, capture_output=True)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", ".")
    git(root, "commit", "-qm", "the model")
    assert "data/" not in git(root, "ls-files")
    return root


def test_the_example_is_an_ordinary_script_and_a_pipeline_of_a_few_lines():
    train = (EXAMPLE / "train.py").read_text()
    assert "proflab" not in train.split('"""', 2)[2], "train.py must not need the kit"
    body = (EXAMPLE / "pipeline.py").read_text().split('"""', 2)[2]
    assert len([line for line in body.splitlines() if line.strip()]) <= 15
    assert "train.train_step(" in body and "yield" in body


def test_the_unchanged_script_is_never_a_regression_against_itself(project):
    """Passed; or, on a busy machine, too close to call (4 ms steps: two runs of 30 rounds of the same code
    read 1.09x apart here, its interval straddling the limit): never a regression."""
    proc, report = gate(project)
    assert proc.returncode in (0, 4), explain(report)
    assert report["verdict"] in ("passed", "inconclusive"), explain(report)
    assert report["slowdown"]["low"] < 1.10, explain(report)
    assert report["figure"] == "cpu_time" and report["settings"]["threads"] == 1  # the example's settings
    assert report["baseline"] == "HEAD:pipeline.py"
    # The same code calls the same operators as often: nothing it lists moved by its calls.
    assert all(c["calls_delta"] == 0 for c in report["changes"]), report["changes"]
    assert "slower" not in report["because"] or "calls" not in report["because"]["slower"], report["because"]


def test_a_per_sample_item_loop_in_the_training_step_fails_the_gate_and_is_named(project):
    train = project / "train.py"
    before = train.read_text()
    assert before.count("    optimizer.step()\n") == 1
    train.write_text(before.replace("    optimizer.step()\n", PLANTED))
    try:
        proc, report = gate(project)
    finally:
        train.write_text(before)
    assert proc.returncode == 1, explain(report)
    checks = {c["name"]: c["status"] for c in report["checks"]}
    assert checks == {"runs": "passed", "same_results": "passed", "no_regression": "failed"}, explain(report)
    assert report["slowdown"]["low"] > 1.10, explain(report)
    # What changed is the loop's work: operators called once or twice more per sample of the batch (256,
    # pyproject.toml) in every profiled step, the host reads among them (two .item() a sample)
    per_sample = {c["name"]: c["calls_delta"] for c in report["changes"] if c["calls_delta"] >= 256}
    reads = [per_sample[n] for n in ("aten::item", "aten::_local_scalar_dense") if n in per_sample]
    assert reads and all(n == 2 * 256 for n in reads), report["changes"]
    assert per_sample.get("aten::argmax", 256) == 256, report["changes"]
    slower = report["because"]["slower"]
    assert any(f"`{name}`" in slower for name in per_sample), (slower, per_sample)
    regression = next(c for c in report["checks"] if c["name"] == "no_regression")
    assert slower in regression["rationale"]
