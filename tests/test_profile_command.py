"""`proflab profile SCRIPT.py`: scripts the kit did not write, profiled without editing them.

Each script in tests/own_scripts knows nothing of proflab; one bottleneck is planted behind a flag
(see its README). The command must find the steps by itself, write a trace TensorBoard reads, print the
profiler's table, and name the planted bottleneck first; on the same script without it, name nothing.
The figures asserted are computed by the scripts' shapes (a kept tensor's size), never a measured time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

SCRIPTS = Path(__file__).resolve().parent / "own_scripts"
PROFLAB = [sys.executable, "-m", "proflab"]


def profile(tmp_path: Path, *argv: str, timeout: float = 240) -> tuple[int, str, str, dict | None]:
    """Run `proflab profile` in tmp_path as a learner would; (exit code, stdout, stderr, its --json)."""
    report = tmp_path / "profile.json"
    report.unlink(missing_ok=True)
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": str(REPO / "src")}
    done = subprocess.run([*PROFLAB, "profile", "--json", str(report), *argv], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=timeout)
    found = json.loads(report.read_text()) if report.exists() else None
    return done.returncode, done.stdout, done.stderr, found


def keys(found: dict, rank: int = 0) -> list[str]:
    return [f["key"] for f in found["ranks"][rank]["findings"]]


def explain(code: int, stdout: str, stderr: str) -> str:
    return f"exit {code}\n--- stdout\n{stdout[-4000:]}\n--- stderr\n{stderr[-3000:]}"


def test_a_starved_loader_is_named_first_with_the_table_and_a_trace_tensorboard_lists(tmp_path):
    code, stdout, stderr, found = profile(tmp_path, str(SCRIPTS / "classify.py"), "--decode-in-loop")
    assert code == 0, explain(code, stdout, stderr)
    assert "trained 12 steps" in stdout  # the script's own output, and its own arguments
    assert "Self CPU %" in stdout and "aten::convolution_backward" in stdout  # key_averages()'s table
    assert found["paced_by"] == "optimizer" and found["paced_by_what"] == "SGD" and found["steps_run"] == 12
    assert keys(found)[:1] == ["loader"], explain(code, stdout, stderr)
    assert "_SingleProcessDataLoaderIter" in found["ranks"][0]["findings"][0]["where"]
    assert "profiled: 5 to 7" in stdout and "The profiler's own cost: a profiled step took" in stdout
    trace = Path(found["ranks"][0]["trace"])
    assert trace.parent == tmp_path / "runs" / "classify" and trace.is_file()
    assert "proflab tensorboard --logdir runs" in stdout

    # The kit's own tabs list the run and read it as they read a lab's.
    from proflab.measuring import evidence
    from proflab.viewing import dashboard, timeline

    assert timeline.newest_traces(tmp_path / "runs") == {"classify": trace}
    overview = dashboard.overview(evidence.load(trace), own=dashboard.lab_of("classify") is None)
    assert overview["steps"] == 3
    assert any("DataLoader" in f["what"] and f["try"] for f in overview["findings"])


@pytest.mark.parametrize("argv", [
    ["--memory", str(SCRIPTS / "lm.py")],
    [str(SCRIPTS / "classify.py")],
], ids=["lm", "classify"])
def test_a_script_without_a_bottleneck_gets_no_finding(tmp_path, argv):
    code, stdout, stderr, found = profile(tmp_path, *argv)
    assert code == 0, explain(code, stdout, stderr)
    assert keys(found) == [], explain(code, stdout, stderr)
    assert "Nothing stands out beyond the model's own operators" in stdout
    # AdamW reads each parameter's step count with .item(): the optimizer's own, not the script's
    if "lm.py" in argv[-1]:
        assert "MB per step kept" in found["ranks"][0]["memory"]


def test_reads_in_a_metric_are_named_with_the_line_of_code_that_makes_them(tmp_path):
    code, stdout, stderr, found = profile(tmp_path, "--stack", str(SCRIPTS / "lm.py"), "--token-accuracy")
    assert code == 0, explain(code, stdout, stderr)
    assert keys(found)[:1] == ["reads"], explain(code, stdout, stderr)
    first = found["ranks"][0]["findings"][0]
    assert first["what"].startswith("2048 host reads per step (2048 item())"), first["what"]  # 16 x 64 tokens, 2 each
    assert "in your code: lm.py(" in first["where"] and "token_accuracy" in first["where"], first["where"]


def test_memory_kept_from_step_to_step_is_named_with_its_size(tmp_path):
    code, stdout, stderr, found = profile(tmp_path, "--memory", str(SCRIPTS / "lm.py"), "--keep-logits")
    assert code == 0, explain(code, stdout, stderr)
    assert keys(found) == ["memory"], explain(code, stdout, stderr)
    logits_mb = 16 * 64 * 512 * 4 / 2**20  # one step's logits, kept in a list
    kept = float(found["ranks"][0]["findings"][0]["what"].split(" MB per step")[0])
    assert abs(kept - logits_mb) <= 0.1 * logits_mb, found["ranks"][0]["findings"][0]["what"]


def test_a_ddp_job_under_torchrun_writes_a_trace_per_rank_and_names_its_talking(tmp_path):
    code, stdout, stderr, found = profile(tmp_path, "--nproc-per-node", "2", str(SCRIPTS / "ddp.py"),
                                          "--accumulate", "4")
    assert code == 0, explain(code, stdout, stderr)
    assert [r["rank"] for r in found["ranks"]] == [0, 1]
    for rank in (0, 1):
        assert keys(found, rank)[0] == "comm", explain(code, stdout, stderr)
        assert "micro-batch that is not its last" in found["ranks"][rank]["findings"][0]["what"]
        assert Path(found["ranks"][rank]["trace"]).name.startswith(f"rank{rank}.")
    from proflab.viewing import timeline

    assert sorted(timeline.newest_traces(tmp_path / "runs")) == ["ddp/rank0", "ddp/rank1"]


INFERENCE = """\
import sys
import torch
import helper  # a module beside the script: its folder is on sys.path, as under python
assert __name__ == "__main__" and sys.argv[1:] == ["--batches", "9"], (__name__, sys.argv)
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).eval()
with torch.inference_mode():
    for _ in range(int(sys.argv[2])):
        model(torch.randn(32, 64))
open("wrote-here.txt", "w").write(helper.WORD)  # the working folder is the caller's
"""


def test_a_script_without_an_optimizer_is_paced_by_its_models_calls(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "infer.py").write_text(INFERENCE)
    (folder / "helper.py").write_text("WORD = 'here'\n")
    code, stdout, stderr, found = profile(tmp_path, "--steps", "2:5", str(folder / "infer.py"), "--batches", "9")
    assert code == 0, explain(code, stdout, stderr)
    assert found["paced_by"] == "forward" and found["paced_by_what"] == "Sequential" and found["steps_run"] == 9
    assert (tmp_path / "wrote-here.txt").read_text() == "here"
    assert "each ends at a call of the model, Sequential.forward()" in stdout
    # a window the script ends inside keeps the steps it ran
    code, stdout, stderr, found = profile(tmp_path, "--steps", "7:12", str(folder / "infer.py"), "--batches", "9")
    assert code == 0, explain(code, stdout, stderr)
    assert found["ranks"][0]["steps"] == 2 and "profiled: 7 to 11" in stdout
    assert "(median of 2, by the clock)" in found["overhead"] and "before the window" in found["overhead"], \
        found["overhead"]


def test_bad_input_gets_a_clear_message_and_the_right_exit_code(tmp_path):
    code, stdout, stderr, found = profile(tmp_path, str(tmp_path / "nowhere.py"))
    assert code == 2 and "no such script" in stderr and found is None
    short = tmp_path / "short.py"
    short.write_text(INFERENCE.replace("import helper  #", "#").replace("helper.WORD", "'x'"))
    code, stdout, stderr, found = profile(tmp_path, "--steps", "0", str(short))
    assert code == 2 and "--steps '0'" in stderr and "FIRST:END" in stderr
    # too few steps for the window: what ran, and which window would fit
    code, stdout, stderr, found = profile(tmp_path, "--steps", "20:23", str(short), "--batches", "9")
    assert code == 1 and "the script ran 9 steps" in stderr and "--steps 6:9" in stderr, explain(code, stdout, stderr)
    assert "Traceback" not in stderr
    # the script's own error: shown as python shows it, then what it means for the profile
    broken = tmp_path / "broken.py"
    broken.write_text(INFERENCE.replace("import helper  #", "#").replace("model(torch.randn(32, 64))",
                                                                         "model(torch.randn(32, 65))"))
    code, stdout, stderr, found = profile(tmp_path, str(broken), "--batches", "9")
    assert code == 1, explain(code, stdout, stderr)
    assert "RuntimeError" in stderr and "broken.py" in stderr
    assert "no trace was written: the script failed (exit 1) after 0 steps" in stderr


SCHEDULED = """\
import torch
model = torch.nn.Linear(8, 2)
optimizer = torch.optim.AdamW(model.parameters())
for i in range(12):
    loss = model(torch.randn(4, 8)).sum()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if i == 2:  # a scheduler made after the first steps wraps optimizer.step too
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 3)
    if i > 2:
        scheduler.step()
print("lr", optimizer.param_groups[0]["lr"])
"""


def test_each_optimizer_step_is_drawn_inside_its_own_step(tmp_path):
    """torch runs the step hooks inside Optimizer.step#…: the step must end after it, not inside it (the
    profiler's own work at the window's end was drawn as the optimizer's)."""
    script = tmp_path / "scheduled.py"
    script.write_text(SCHEDULED)
    code, stdout, stderr, found = profile(tmp_path, "--shapes", str(script))
    assert code == 0 and "lr 1.0000000000000002e-06" in stdout, explain(code, stdout, stderr)
    assert "Input Shapes" in stdout  # --shapes: the table has a row per operator and shape
    events = json.loads(Path(found["ranks"][0]["trace"]).read_text())["traceEvents"]
    steps = [e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")]
    stepped = [e for e in events if str(e.get("name", "")).startswith("Optimizer.step#AdamW")]
    assert len(steps) == 3 and len(stepped) == 3
    for e in stepped:
        assert any(s["ts"] <= e["ts"] and e["ts"] + e["dur"] <= s["ts"] + s["dur"] for s in steps), e


def test_a_script_that_hangs_is_stopped_at_its_timeout_and_said_so(tmp_path):
    script = tmp_path / "hangs.py"
    script.write_text(INFERENCE.replace("import helper  #", "#").replace("helper.WORD", "'x'")
                      + "import time\ntime.sleep(600)\n")
    code, stdout, stderr, found = profile(tmp_path, "--timeout", "10", "--steps", "20:23", str(script),
                                          "--batches", "9", timeout=120)
    assert code == 124, explain(code, stdout, stderr)
    assert "stopped after --timeout 10 s" in stderr and "Traceback" not in stderr, stderr
