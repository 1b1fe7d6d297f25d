"""``proflab tensorboard --logdir PATH`` on traces the kit did not write.

A script that knows nothing of the kit (``WRITER``: plain torch.profiler and
``tensorboard_trace_handler``, as a learner profiles their own training)
writes a log folder with nested run folders:

    logs/exp1/              a wait/warm-up/active schedule repeated twice, gzipped: two files of one worker
    logs/exp2/run_a/        record_shapes and profile_memory
    logs/exp2/ddp/          a two-process DistributedDataParallel job (gloo): one file per process, each
                            named after its host and process id, as the handler names them by default;
                            the tabs list each rank's as a run of its own (exp2/ddp/rank0, rank1)

One real TensorBoard serves it, and every view of the kit's tabs is asked for
through its HTTP API (the Profile tab's Overview, Operators, Diff and Memory,
and the Trace timeline): each answers with what the traces hold. A folder
with no trace at all is served too, with a message that says so.
"""

from __future__ import annotations

import gzip
import json
import signal
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request

import pytest

from conftest import as_in_a_terminal
from proflab.viewing import tensorboard
from test_tensorboard import free_port

PROFILE = "/data/plugin/proflab_profile"
TIMELINE = "/data/plugin/proflab_timeline"

WRITER = '''"""Profile a small training loop with plain torch.profiler, as one's own script does."""
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, record_function, schedule, tensorboard_trace_handler
from torch.utils.data import DataLoader, TensorDataset


def train(logdir, wait, warmup, active, repeat=1, ddp=False, use_gzip=False, **options):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))
    if ddp:
        model = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(1024, 64), torch.randint(0, 10, (1024,))), batch_size=32,
                        shuffle=True)
    steps = (wait + warmup + active) * repeat
    with profile(activities=[ProfilerActivity.CPU],
                 schedule=schedule(wait=wait, warmup=warmup, active=active, repeat=repeat),
                 on_trace_ready=tensorboard_trace_handler(logdir, use_gzip=use_gzip), **options) as prof:
        for step, (x, y) in enumerate(loader):
            if step == steps:
                break
            with record_function("my_train_step"):
                loss = F.cross_entropy(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            prof.step()


def ddp_worker(rank, world, logdir, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        train(logdir, wait=1, warmup=1, active=3, ddp=True)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    logs, port = sys.argv[1], int(sys.argv[2])
    train(os.path.join(logs, "exp1"), wait=1, warmup=1, active=3, repeat=2, use_gzip=True)
    train(os.path.join(logs, "exp2", "run_a"), wait=2, warmup=1, active=4, record_shapes=True, profile_memory=True)
    mp.spawn(ddp_worker, args=(2, os.path.join(logs, "exp2", "ddp"), port), nprocs=2)
'''


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("foreign")
    (root / "writer.py").write_text(WRITER)
    logdir = root / "logs"
    proc = subprocess.run([sys.executable, str(root / "writer.py"), str(logdir), str(free_port())], cwd=root,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ddp = sorted((logdir / "exp2" / "ddp").glob("*.pt.trace.json"))
    assert len(ddp) == 2 and len(list((logdir / "exp1").glob("*.pt.trace.json.gz"))) == 2
    # named after the host and process (<host>_<pid>.<ns>.pt.trace.json); the tabs list them by rank
    ranks = {f"rank{json.loads(p.read_text())['distributedInfo']['rank']}": p for p in ddp}
    assert sorted(ranks) == ["rank0", "rank1"]
    return {"logdir": logdir, "ddp": ranks}


@pytest.fixture(scope="module")
def board(logs):
    port = free_port()
    proc = tensorboard.start(logs["logdir"], port=port)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        tensorboard.stop(proc)


def get(base: str, path: str, **params):
    url = base + path + ("?" + urllib.parse.urlencode(params) if params else "")
    with urllib.request.urlopen(url, timeout=60) as response:
        body = response.read()
    return json.loads(body) if response.headers.get_content_type() == "application/json" else body


def ddp_runs(logs) -> list[str]:
    return [f"exp2/ddp/{rank}" for rank in sorted(logs["ddp"])]


def test_every_run_folder_is_listed_however_deep_and_each_process_of_a_job(board, logs):
    expected = ["exp1", "exp2/run_a", *ddp_runs(logs)]
    assert get(board, PROFILE + "/runs") == sorted(expected)
    assert get(board, TIMELINE + "/runs") == sorted(expected)
    with urllib.request.urlopen(board + "/data/plugins_listing", timeout=30) as response:
        listing = json.loads(response.read())
    assert listing["proflab_profile"]["enabled"] and listing["proflab_timeline"]["enabled"]
    assert get(board, PROFILE + "/open")["run"] in expected


def test_the_overview_counts_the_active_steps_of_the_newest_cycle(board):
    for run, steps in (("exp1", 3), ("exp2/run_a", 4)):
        o = get(board, PROFILE + "/overview", run=run)
        assert o["steps"] == steps, (run, o)
        assert o["step_ms"] > 0 and sum(p["ms"] for p in o["parts"]) == pytest.approx(o["step_ms"], rel=1e-6)
        assert o["held"] is None and all(f["try"] for f in o["findings"])  # not a lab's run: nothing held back
        assert o["window"] is None


def test_the_operators_are_named_per_step_and_in_total(board):
    per_step = get(board, PROFILE + "/operators", run="exp1", per="step")
    names = {r["name"] for r in per_step}
    assert {"my_train_step", "aten::addmm", "Optimizer.step#SGD.step"} <= names, sorted(names)[:40]
    step = next(r for r in per_step if r["name"] == "ProfilerStep*")
    assert step["calls"] == 1
    mine = next(r for r in per_step if r["name"] == "my_train_step")
    assert mine["calls"] == 1
    total = get(board, PROFILE + "/operators", run="exp1", per="total")
    assert next(r for r in total if r["name"] == "my_train_step")["calls"] == 3
    assert total == sorted(total, key=lambda r: -r["self_cpu_us"])


def test_the_diff_compares_two_runs_and_two_processes_of_a_job(board, logs):
    d = get(board, PROFILE + "/diff", before="exp1", after="exp2/run_a")
    assert d["before"] == "exp1" and d["after"] == "exp2/run_a"
    mine = next(c for c in d["changes"] if c["name"] == "my_train_step")
    assert mine["before"]["calls"] == mine["after"]["calls"] == 1  # per step
    rank0, rank1 = ddp_runs(logs)
    d = get(board, PROFILE + "/diff", before=rank0, after=rank1)
    names = {c["name"] for c in d["changes"]}
    assert "my_train_step" in names and any("allreduce" in n for n in names), sorted(names)
    assert get(board, PROFILE + "/pair", run="exp1") == {"before": "exp1", "after": "exp1"}  # nothing to pair


def test_memory_over_time_for_the_run_profiled_with_profile_memory(board):
    m = get(board, PROFILE + "/memory", run="exp2/run_a")
    assert m["recorded"] and m["devices"]["cpu"]["peak_mb"] > 0, m
    assert m["top"] and m["top"][0]["name"].startswith("aten::")
    assert get(board, PROFILE + "/memory.svg", run="exp2/run_a").startswith(b"<?xml")
    assert not get(board, PROFILE + "/memory", run="exp1")["recorded"]


def test_each_process_of_the_ddp_job_shows_its_all_reduces(board, logs):
    for run in ddp_runs(logs):
        o = get(board, PROFILE + "/overview", run=run)
        assert o["steps"] == 3 and o["allreduce_per_step"] >= 1 and o["comm_ms"] > 0, (run, o)


def test_the_timeline_serves_each_trace_as_written(board, logs):
    for run, path in (("exp1", max((logs["logdir"] / "exp1").glob("*.gz"), key=lambda p: p.stat().st_mtime)),
                      *zip(ddp_runs(logs), (logs["ddp"][w] for w in sorted(logs["ddp"])))):
        served = get(board, TIMELINE + "/trace", run=run)
        data = path.read_bytes()
        assert served == json.loads(gzip.decompress(data) if path.suffix == ".gz" else data), run
        about = get(board, TIMELINE + "/about", run=run)
        assert about["whole"] and not about["large"]
    ranks = {get(board, TIMELINE + "/trace", run=run)["distributedInfo"]["rank"] for run in ddp_runs(logs)}
    assert ranks == {0, 1}


def test_a_run_that_is_not_there_is_a_404_not_a_crash(board):
    for path in ("/overview", "/operators", "/memory"):
        with pytest.raises(urllib.error.HTTPError) as e:
            get(board, PROFILE + path, run="exp2")  # a folder of runs, not a run
        assert e.value.code == 404


def test_a_folder_with_no_traces_is_served_and_says_so(tmp_path):
    empty = tmp_path / "no-traces"
    (empty / "exp1").mkdir(parents=True)
    (empty / "exp1" / "notes.txt").write_text("not a trace")
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "proflab", "tensorboard", "--logdir", str(empty), "--port",
                             str(port)], cwd=tmp_path, env={**__import__("os").environ, "PYTHONUNBUFFERED": "1",
                                                             "PROFLAB_ROOT": str(tmp_path), "COLUMNS": "200"},
                            preexec_fn=as_in_a_terminal, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        banner = [proc.stdout.readline() for _ in range(2)]
        assert f"http://localhost:{port}/" in banner[0], banner
        assert "no traces under" in banner[1].lower() and "tensorboard_trace_handler" in banner[1], banner
        base = f"http://127.0.0.1:{port}"
        assert get(base, PROFILE + "/runs") == [] and get(base, TIMELINE + "/runs") == []
        assert get(base, PROFILE + "/open") == {"run": None}
        with pytest.raises(urllib.error.HTTPError) as e:
            get(base, PROFILE + "/overview", run="exp1")
        assert e.value.code == 404 and "no run" in json.loads(e.value.read())["error"]
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "TensorBoard stopped" in out


def test_processes_are_told_apart_by_rank_whatever_their_host_is_called(logs, tmp_path):
    """No server: the listing's rules. A host name with dots names no other worker than its own; a job's
    ranks are listed by the rank their traces say, each rank's newest; one script run twice into a
    folder (two processes of no job) is one run, its newest trace."""
    import os
    import shutil

    from proflab.viewing.timeline import newest_traces, worker_of

    assert worker_of("ip-10-0-0-5.ec2.internal_4242.1796444564087227099.pt.trace.json") == \
        "ip-10-0-0-5.ec2.internal_4242"
    assert worker_of("vm_17.1796444564087227099.pt.trace.json.gz") == "vm_17"
    assert worker_of("rank1.123.pt.trace.json") == "rank1" and worker_of("host.bad.pt.trace.json") == "host"
    job = tmp_path / "logs" / "job"
    job.mkdir(parents=True)
    for n, (rank, path) in enumerate(sorted(logs["ddp"].items())):
        shutil.copy(path, job / f"ip-10-0-0-5.ec2.internal_{4242 + n}.17964445640872270{n}.pt.trace.json")
    stale = job / "ip-10-0-0-5.ec2.internal_9.1700000000000000000.pt.trace.json"  # an earlier job's rank 0
    shutil.copy(logs["ddp"]["rank0"], stale)
    os.utime(stale, (1, 1))
    again = tmp_path / "logs" / "again"
    again.mkdir()
    single = next((logs["logdir"] / "exp2" / "run_a").glob("*.pt.trace.json"))
    for n in range(2):
        copy = again / f"vm_{100 + n}.{n}.pt.trace.json"
        shutil.copy(single, copy)
        os.utime(copy, (1000 + n, 1000 + n))
    found = newest_traces(tmp_path / "logs")
    assert sorted(found) == ["again", "job/rank0", "job/rank1"], found
    assert found["again"].name.startswith("vm_101.") and found["job/rank0"] != stale
