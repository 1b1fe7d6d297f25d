"""The kit's Profile tab in TensorBoard (Overview, Operators, Diff, Memory), offline, on runs from real checks.

One real TensorBoard serves the runs that real checks of labs 1-4 wrote (each
lab's original and its reference fix), plus two ``proflab run`` runs: lab 2's
original with the key_averages table it printed, and lab 3's original profiled
with ``profile_memory``. Each view is asserted through the plugin's HTTP API
and, in headless Chromium with every host but this machine unresolvable, on
the page a learner sees.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

import browser
from conftest import explain, sharing_data
from proflab.viewing import tensorboard, timeline
from test_tensorboard import free_port

PLUGIN = "/data/plugin/proflab_profile"
LABS = {1: "01-dataloader", 2: "02-embeddings", 3: "03-fusion", 4: "04-syncs"}
MEMORY_LAB = "05-memory"  # its checks profile with profile_memory: the Memory view's climb and level line
DISTRIBUTED_LAB = "06-distributed"  # a torchrun job's runs: one trace per rank


def first_table_row(printed: str) -> str:
    """The name in the first row of a key_averages table as `proflab run` printed it."""
    lines = printed.splitlines()
    rules = [i for i, line in enumerate(lines) if re.fullmatch(r"-[- ]+-", line.strip())]
    header = next(i for i in rules if i + 2 < len(lines) and "Name" in lines[i + 1])
    return lines[header + 3].split("  ")[0].strip()


@pytest.fixture(scope="module")
def runs(kit, tmp_path_factory, solution_check, lab2_solution, lab3_solution, lab4_solution,
         lab5_solution, lab6_solution) -> dict:
    """A log folder holding each lab's original and reference runs, and the two `proflab run` runs."""
    logdir = tmp_path_factory.mktemp("profile-tab") / "runs"
    for code, report in (solution_check, lab2_solution, lab3_solution, lab4_solution, lab5_solution, lab6_solution):
        assert code == 0, explain(report)
        lab_runs = Path(report["traces"]["original"]).parent.parent
        shutil.copytree(lab_runs, logdir / lab_runs.name, dirs_exist_ok=True)
    own = sharing_data(tmp_path_factory.mktemp("profile-tab-kit"), kit)
    table = own.run("run", "2", "--version", "original", "--device", "cpu")
    assert table.returncode == 0, table.stdout + table.stderr
    shutil.copytree(own.root / "runs" / LABS[2] / "original", logdir / "tables" / "02-original")
    memory = own.run("run", "3", "--version", "original", "--profile-memory", "--device", "cpu")
    assert memory.returncode == 0, memory.stdout + memory.stderr
    shutil.copytree(own.root / "runs" / LABS[3] / "original", logdir / "memory" / "03-original")
    return {"logdir": logdir, "table_printed": table.stdout, "kit": own,
            "reports": {1: solution_check[1], 2: lab2_solution[1], 3: lab3_solution[1], 4: lab4_solution[1]}}


@pytest.fixture(scope="module")
def board(runs):
    port = free_port()
    before = os.environ.get("PROFLAB_ROOT")
    os.environ["PROFLAB_ROOT"] = str(runs["kit"].root)  # the kit whose last run the tabs open first
    try:
        proc = tensorboard.start(runs["logdir"], port=port)
    finally:
        if before is None:
            del os.environ["PROFLAB_ROOT"]
        else:
            os.environ["PROFLAB_ROOT"] = before
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        listed = get(base, "/runs")
        if all(run in listed for run in (f"{LABS[4]}/reference", "memory/03-original", f"{MEMORY_LAB}/reference",
                                          f"{DISTRIBUTED_LAB}/reference/rank1")):
            break
        time.sleep(0.5)
    yield base
    tensorboard.stop(proc)


def get(base: str, path: str, **params):
    url = base + PLUGIN + path + ("?" + urllib.parse.urlencode(params) if params else "")
    with urllib.request.urlopen(url, timeout=60) as response:
        body = response.read()
    return json.loads(body) if response.headers.get_content_type() == "application/json" else body


def share(overview: dict, key: str) -> float:
    return next(p["share"] for p in overview["parts"] if p["key"] == key)


# --- the plugin's API -------------------------------------------------------------

def test_the_tab_is_listed_and_serves_every_run(board):
    with urllib.request.urlopen(board + "/data/plugins_listing", timeout=30) as response:
        listing = json.loads(response.read())
    assert listing["proflab_profile"]["enabled"] and listing["proflab_profile"]["tab_name"] == "Profile"
    listed = get(board, "/runs")
    for slug in LABS.values():
        assert {f"{slug}/original", f"{slug}/reference"} <= set(listed)


def test_the_tabs_open_on_the_learners_last_run(board):
    # The kit's last run was `proflab run 3 --version original`: the run 03-fusion/original.
    assert get(board, "/open")["run"] == f"{LABS[3]}/original"
    with urllib.request.urlopen(board + "/data/plugin/proflab_timeline/open", timeout=30) as response:
        assert json.loads(response.read())["run"] == f"{LABS[3]}/original"


def test_without_a_last_run_the_newest_trace_is_opened(runs, tmp_path, monkeypatch):
    monkeypatch.setenv("PROFLAB_ROOT", str(tmp_path))  # a kit with no progress file
    assert timeline.recommended_run(runs["logdir"]) == "memory/03-original"  # written last


def test_the_run_opened_first_is_named_as_the_tabs_list_it(runs, tmp_path, monkeypatch):
    """A gate's runs are three folders deep, a distributed job's listed per rank: the run opened first is
    one the tabs list, never a folder they do not."""
    from proflab import progress

    logdir = tmp_path / "runs"
    shutil.copytree(runs["logdir"] / DISTRIBUTED_LAB, logdir / DISTRIBUTED_LAB)
    gate = logdir / "07-gate" / "regression" / "candidate"
    gate.mkdir(parents=True)
    shutil.copy(next((runs["logdir"] / LABS[1] / "original").glob("*.pt.trace.json*")), gate)
    monkeypatch.setenv("PROFLAB_ROOT", str(tmp_path))  # a kit with no progress file: the newest trace's run
    assert timeline.recommended_run(logdir) == "07-gate/regression/candidate"
    progress.remember_run(DISTRIBUTED_LAB, "original")  # what `proflab run 6 --version original` records
    assert timeline.recommended_run(logdir) == f"{DISTRIBUTED_LAB}/original/rank0"
    assert timeline.recommended_run(logdir) in timeline.newest_traces(logdir)


def hint(runs, lab: int) -> None:
    """The learner asks a hint of ``lab`` in the kit whose progress the tab reads: its prescriptions show."""
    shown = runs["kit"].run("hint", str(lab))
    assert shown.returncode == 0, shown.stdout + shown.stderr


def test_lab1_overview_names_the_dataloader_and_what_to_try(board, runs):
    hint(runs, 1)
    original = get(board, "/overview", run=f"{LABS[1]}/original")
    reference = get(board, "/overview", run=f"{LABS[1]}/reference")
    assert share(original, "DataLoader wait") >= 0.40, original
    assert share(reference, "DataLoader wait") <= 0.20, reference
    assert any("DataLoader takes" in f["what"] and "num_workers" in f["try"] for f in original["findings"]), original
    assert not any("DataLoader" in f["what"] for f in reference["findings"]), reference["findings"]
    assert sum(p["ms"] for p in original["parts"]) == pytest.approx(original["step_ms"], rel=1e-6)


def test_lab4_overview_names_host_reads(board):
    original = get(board, "/overview", run=f"{LABS[4]}/original")
    reference = get(board, "/overview", run=f"{LABS[4]}/reference")
    assert original["host_reads_per_step"] >= 1 and reference["host_reads_per_step"] < 1
    assert any("host reads per step" in f["what"] and ".item()" in f["what"] for f in original["findings"]), original
    assert [p["label"] for p in original["parts"]] == ["DataLoader wait", "host reads and syncs", "CPU operators",
                                                       "Python between operators"]


def test_the_operators_table_tops_with_key_averages_first_row(board, runs):
    rows = get(board, "/operators", run="tables/02-original", per="total")
    printed = first_table_row(runs["table_printed"])
    assert rows[0]["name"].startswith(printed.rstrip(".")), (printed, rows[:3])
    assert rows == sorted(rows, key=lambda r: -r["self_cpu_us"])
    per_step = get(board, "/operators", run="tables/02-original", per="step")
    step = next(r for r in per_step if r["name"] == "ProfilerStep*")
    assert step["calls"] == 1  # per step: one ProfilerStep# each
    assert per_step[0]["self_cpu_us"] == pytest.approx(rows[0]["self_cpu_us"] / next(
        r for r in rows if r["name"] == "ProfilerStep*")["calls"])


def test_the_lab2_diff_shows_the_lookups_gone(board):
    d = get(board, "/diff", before=f"{LABS[2]}/original", after=f"{LABS[2]}/reference")
    decreases = [c for c in d["changes"] if c["self_delta_us"] < 0][:5]
    assert any(c["name"] in ("aten::select", "aten::embedding", "aten::index_select", "aten::stack")
               for c in decreases), decreases
    select = next(c for c in d["changes"] if c["name"] == "aten::select")
    assert select["status"] in ("shrunk", "removed") and select["before"]["calls"] > 100
    moves = [abs(c["self_delta_us"]) for c in d["changes"]]
    assert moves == sorted(moves, reverse=True)


def test_memory_over_time_for_a_run_profiled_with_profile_memory(board):
    m = get(board, "/memory", run="memory/03-original")
    assert m["recorded"] and m["devices"]["cpu"]["peak_mb"] > 0
    assert m["top"] and m["top"][0]["allocated_mb"] > 0 and m["top"][0]["name"].startswith("aten::")
    assert get(board, "/memory.svg", run="memory/03-original").startswith(b"<?xml")
    assert not get(board, "/memory", run=f"{LABS[3]}/original")["recorded"]


def test_memory_kept_per_step_climbs_in_the_leak_and_not_in_its_fix(board):
    leak = get(board, "/memory", run=f"{MEMORY_LAB}/original")
    fix = get(board, "/memory", run=f"{MEMORY_LAB}/reference")
    assert leak["devices"]["cpu"]["kept_mb_per_step"] > 5 and fix["devices"]["cpu"]["kept_mb_per_step"] < 0.5
    ends = leak["devices"]["cpu"]["step_end_mb"]
    assert ends[-1] - ends[0] > 100  # two evaluations' graphs, ~90 MB each, in the 8 profiled steps
    assert leak["kept"][0]["name"].startswith("aten::") and not fix["kept"]


def test_each_rank_of_a_distributed_run_is_listed_with_its_communication(board):
    listed = get(board, "/runs")
    for version in ("original", "reference"):
        assert {f"{DISTRIBUTED_LAB}/{version}/rank0", f"{DISTRIBUTED_LAB}/{version}/rank1"} <= set(listed), listed
    for rank in ("rank0", "rank1"):
        slow = get(board, "/overview", run=f"{DISTRIBUTED_LAB}/original/{rank}")
        fast = get(board, "/overview", run=f"{DISTRIBUTED_LAB}/reference/{rank}")
        # The original all-reduces after each of its 8 micro-batches: 8 times the bytes, most of the step.
        assert slow["allreduce_mb_per_step"] == pytest.approx(8 * fast["allreduce_mb_per_step"], rel=0.01)
        assert slow["allreduce_per_step"] > 8 * fast["allreduce_per_step"] / 2
        assert slow["comm_ms"] > 2 * fast["comm_ms"] > 0
        assert any("micro-batch that is not its last" in f["what"] for f in slow["findings"]), slow["findings"]


def test_tensorboard_lists_both_ranks_as_workers_of_one_run(board):
    """TensorBoard's own profiler plugin, through its HTTP API: one run per version, a worker per rank."""
    base = f"{board}/data/plugin/pytorch_profiler"
    deadline = time.monotonic() + 60
    while True:
        with urllib.request.urlopen(f"{base}/runs", timeout=30) as response:
            listed = json.loads(response.read())
        if not listed["loading"] and f"{DISTRIBUTED_LAB}/original" in listed["runs"] or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    for version in ("original", "reference"):
        run = urllib.parse.quote(f"{DISTRIBUTED_LAB}/{version}")
        with urllib.request.urlopen(f"{base}/views?run={run}", timeout=30) as response:
            views = json.loads(response.read())
        with urllib.request.urlopen(f"{base}/workers?run={run}&view={urllib.parse.quote(views[0])}", timeout=30) as r:
            assert sorted(json.loads(r.read())) == ["rank0", "rank1"]
        assert "Distributed" in views, views  # its traces carry distributedInfo: the plugin's (online) view


def test_the_diff_puts_the_original_before_and_yours_after(board):
    """The original (or a gate's baseline) is *before*, the version *after*, whichever of the two is chosen:
    lab 6's fix then shows its all-reduces shrunk, not grown."""
    for rank in ("rank0", "rank1"):
        for chosen in ("original", "reference"):
            assert get(board, "/pair", run=f"{DISTRIBUTED_LAB}/{chosen}/{rank}") == {
                "before": f"{DISTRIBUTED_LAB}/original/{rank}", "after": f"{DISTRIBUTED_LAB}/reference/{rank}"}
    for slug in LABS.values():
        assert get(board, "/pair", run=f"{slug}/reference") == {"before": f"{slug}/original",
                                                                "after": f"{slug}/reference"}
    d = get(board, "/diff", before=f"{DISTRIBUTED_LAB}/original/rank0", after=f"{DISTRIBUTED_LAB}/reference/rank0")
    talk = [c for c in d["changes"] if c["name"] in ("c10d::allreduce_", "gloo:all_reduce")]
    assert talk and all(c["status"] in ("shrunk", "removed") and c["self_delta_us"] < 0 for c in talk), talk
    # A name whose time halved is "the same" only as a share of the whole step, or within what it varies
    # from step to step (micro_batch, the ranks' wait for each other), and says which.
    from proflab.measuring import operators

    step_us = next(c for c in d["changes"] if c["name"] == operators.STEP)["before"]["cpu_total_us"]
    for c in d["changes"]:  # (a move under SAME_SHARE of the step is too small to name at all)
        if c["status"] == "same" and c["before"] and abs(c["self_delta_us"]) > max(
                0.5 * c["before"]["self_cpu_us"], operators.SAME_SHARE * step_us):
            assert c["with_step"] or c["within_noise"], c


def test_a_gates_baseline_is_before_its_candidate():
    from proflab.viewing import dashboard

    runs = ["07-gate/regression/baseline", "07-gate/regression/candidate", "07-gate/unchanged/baseline",
            "07-gate/unchanged/candidate", "mine/run-a"]
    for chosen in ("baseline", "candidate"):
        assert dashboard.pair(runs, f"07-gate/regression/{chosen}") == ("07-gate/regression/baseline",
                                                                        "07-gate/regression/candidate")
    assert dashboard.pair(runs, "mine/run-a") == ("mine/run-a", "mine/run-a")  # nothing to pair: itself


def test_a_labs_own_runs_say_what_to_try_only_once_earned(board, runs):
    """The lab is to find its fix from the profile: the findings of its runs say what is large and where;
    what to try comes with a hint asked, or the lab passed. A trace of the learner's own shows everything."""
    from proflab import progress

    held = get(board, "/overview", run=f"{LABS[4]}/original")
    assert held["findings"] and all(f["try"] is None for f in held["findings"]), held["findings"]
    assert "proflab hint 4" in held["held"]
    own = get(board, "/overview", run="tables/02-original")
    assert own["held"] is None and all(f["try"] for f in own["findings"]), own["findings"]
    hint(runs, 4)
    shown = get(board, "/overview", run=f"{LABS[4]}/original")
    assert shown["held"] is None and any("read them once per interval" in f["try"] for f in shown["findings"])
    assert [f["what"] for f in shown["findings"]] == [f["what"] for f in held["findings"]]
    lab2 = get(board, "/overview", run=f"{LABS[2]}/original")
    assert lab2["held"] and all(f["try"] is None for f in lab2["findings"])
    before = os.environ.get("PROFLAB_ROOT")
    os.environ["PROFLAB_ROOT"] = str(runs["kit"].root)
    try:  # what a passing check records
        progress.record_check("embeddings", passed=True, speedup=3.0, device="cpu")
    finally:
        if before is None:
            del os.environ["PROFLAB_ROOT"]
        else:
            os.environ["PROFLAB_ROOT"] = before
    assert get(board, "/overview", run=f"{LABS[2]}/original")["held"] is None


def test_reads_inside_data_loading_are_not_the_steps(tmp_path):
    """A data set that reads tensors into Python in its own code (as a DataLoader's sampler and collate do)
    makes reads inside the DataLoader's __next__: the Overview counts them apart, as data loading, and
    advises nothing of them; reads in the step are counted as the step's."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler
    from torch.utils.data import DataLoader, Dataset

    from proflab.measuring import evidence
    from proflab.viewing import dashboard

    class Reading(Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, i):
            x = torch.full((8,), float(i))
            return x * x.sum().item()  # the data set's own read

    def profiled(folder, read_in_step: bool):
        loader = DataLoader(Reading(), batch_size=4)
        w = torch.randn(8, 8)
        with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=3, repeat=1),
                     on_trace_ready=tensorboard_trace_handler(str(folder))) as prof:
            for step, x in enumerate(loader):
                y = (x @ w).relu().sum()
                if read_in_step:
                    for _ in range(3):
                        y.item()
                prof.step()
                if step == 6:
                    break
        return evidence.load(next(folder.glob("*.pt.trace.json*")))

    loading_only = profiled(tmp_path / "a", read_in_step=False)
    reads = evidence.host_reads(loading_only)
    assert reads.in_step_per_step == 0 and reads.in_loading_per_step >= 4, reads
    o = dashboard.overview(loading_only)
    assert o["host_reads_per_step"] == 0 and o["loading_reads_per_step"] >= 4
    assert not any("host reads" in f["what"] for f in o["findings"]), o["findings"]
    both = evidence.host_reads(profiled(tmp_path / "b", read_in_step=True))
    assert both.in_step == {"item()": 3} and both.in_loading_per_step >= 4, both


@pytest.mark.parametrize("path", ["/overview", "/operators", "/memory", "/memory.svg"])
def test_only_runs_under_the_log_folder_are_read(board, path):
    for run in ("../../etc", "nope/original", "01-dataloader"):
        with pytest.raises(urllib.error.HTTPError) as e:
            get(board, path, run=run)
        assert e.value.code == 404


# --- the page, in a browser with no network ---------------------------------------

# In CI a missing browser fails these tests (tests/run.sh installs it); elsewhere they are skipped.
needs_browser = pytest.mark.skipif(not browser.available() and not os.environ.get("CI"),
                                   reason="needs Debian's chromium and chromium-driver, and selenium")


@pytest.fixture(scope="module")
def driver():
    d = browser.chrome(offline=True)
    yield d
    d.quit()


def page(driver, board: str, view: str, **params) -> str:
    """Open the tab's page on ``view``; the text it shows once it has drawn."""
    query = urllib.parse.urlencode({"view": view, **params})
    driver.get(f"{board}{PLUGIN}/index.html?{query}")
    browser.wait_until(driver, "return document.body.dataset.view === arguments[0]", f"the {view} view", view)
    return driver.execute_script("return document.getElementById('view').innerText")


def left_the_machine(driver, board: str) -> list[str]:
    names = driver.execute_script(browser.RESOURCES)
    return [n for n in names if not n.startswith(board)]


@needs_browser
@pytest.mark.parametrize("lab", sorted(LABS))
def test_each_view_draws_offline(driver, board, lab):
    slug = LABS[lab]
    text = page(driver, board, "overview", run=f"{slug}/original")
    assert "ms per profiled step" in text and "Python between operators" in text
    if lab == 1:
        dataloader = driver.execute_script(
            "return document.querySelector('#parts tr[data-part=\"DataLoader wait\"]').innerText")
        assert int(dataloader.split()[-1].rstrip("%")) >= 40 and "num_workers" in text
        page(driver, board, "overview", run=f"{slug}/reference")
        dataloader = driver.execute_script(
            "return document.querySelector('#parts tr[data-part=\"DataLoader wait\"]').innerText")
        assert int(dataloader.split()[-1].rstrip("%")) <= 20
    if lab == 4:
        assert "host reads per step" in text
    text = page(driver, board, "operators", run=f"{slug}/original")
    top = driver.execute_script("return document.querySelector('#table tbody tr td').innerText")
    assert top == get(board, "/operators", run=f"{slug}/original")[0]["name"]
    text = page(driver, board, "diff", before=f"{slug}/original", after=f"{slug}/reference")
    assert f"{slug}/original → {slug}/reference, per step" in text and "names moved" in text
    assert not left_the_machine(driver, board)


@needs_browser
def test_the_diff_page_opens_on_the_original_before_the_fix(driver, board):
    text = page(driver, board, "diff", run=f"{DISTRIBUTED_LAB}/reference/rank0")
    assert text.startswith(f"{DISTRIBUTED_LAB}/original/rank0 → {DISTRIBUTED_LAB}/reference/rank0, per step"), text
    assert f"Before: {DISTRIBUTED_LAB}/original/rank0. After: {DISTRIBUTED_LAB}/reference/rank0." in text


@needs_browser
def test_the_operators_table_sorts_and_searches(driver, board):
    page(driver, board, "operators", run=f"{LABS[2]}/original")
    driver.execute_script("document.querySelector('th[data-key=\"calls\"]').click()")
    calls = driver.execute_script(
        "return [...document.querySelectorAll('#table tbody tr')].map((r) => +r.children[1].innerText)")
    assert calls == sorted(calls, reverse=True) and len(calls) > 5
    driver.execute_script("const i = document.querySelector('#table input');"
                          "i.value = 'select'; i.dispatchEvent(new Event('input'))")
    names = driver.execute_script(
        "return [...document.querySelectorAll('#table tbody tr')].map((r) => r.children[0].innerText)")
    assert names and all("select" in n for n in names)


@needs_browser
def test_the_memory_view_draws_its_curve_offline(driver, board):
    text = page(driver, board, "memory", run="memory/03-original")
    assert "peak" in text and "Operators that allocate the most" in text
    width = browser.wait_until(driver, "const i = document.querySelector('#memory-chart img');"
                                       "return i && i.complete && i.naturalWidth", "the memory chart")
    assert width > 100
    text = page(driver, board, "memory", run=f"{LABS[3]}/original")
    assert "no memory recorded" in text and "proflab run 3 --profile-memory" in text
    assert not left_the_machine(driver, board)


@needs_browser
def test_the_memory_view_shows_the_climb_and_the_level_line_offline(driver, board):
    text = page(driver, board, "memory", run=f"{MEMORY_LAB}/original")
    assert "cpu: climbs:" in text and "MB per step kept, never freed" in text
    kept = driver.execute_script("return document.querySelector('#kept tbody tr td').innerText")
    assert kept.startswith("aten::")
    text = page(driver, board, "memory", run=f"{MEMORY_LAB}/reference")
    assert "cpu: stays level: 0.0 MB per step kept" in text
    assert "None: every allocation of these steps was freed" in text
    assert not left_the_machine(driver, board)


@needs_browser
def test_the_overview_shows_each_ranks_communication_offline(driver, board, runs):
    hint(runs, 6)
    for version, most in (("original", True), ("reference", False)):
        for rank in ("rank0", "rank1"):
            text = page(driver, board, "overview", run=f"{DISTRIBUTED_LAB}/{version}/{rank}")
            row = driver.execute_script("return document.querySelector('#parts tr#comm').innerText")
            assert row.startswith("communication between ranks (") and "all-reduce calls" in row, row
            shown = int(row.split()[-1].rstrip("%"))
            expected = get(board, "/overview", run=f"{DISTRIBUTED_LAB}/{version}/{rank}")["comm_share"]
            assert abs(shown - 100 * expected) <= 1, (row, expected)
            assert ("no_sync" in text) == most, text
    assert not left_the_machine(driver, board)


@needs_browser
def test_the_tab_opens_inside_tensorboard(driver, board):
    driver.get(f"{board}/#proflab_profile")
    driver.switch_to.frame(browser.plugin_frame(driver, "proflab_profile"))
    try:
        view = browser.wait_until(driver, "return document.body && document.body.dataset.view", "the Profile tab")
    finally:
        driver.switch_to.default_content()
    assert view == "overview"
